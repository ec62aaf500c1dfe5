"""eapo.core.step: the per-step decision both engines delegate to."""

from __future__ import annotations

import math

import pytest
import torch

from eapo.core import (
    WEIGHTING_SCHEMES,
    AdaptiveEntropyCoef,
    Algorithm,
    EAPOStep,
    group_advantages,
    make_weighting,
    positive_mask,
    register_weighting,
    weight_advantages,
)
from eapo.core.step import (
    contiguous_index,
    grouped_polarity_advantages,
    polarity_split,
    split_metrics,
)

NAN = math.nan


def test_uneven_groups_with_unscored_rows_match_the_contiguous_maths_on_the_scored_rows():
    # group "x": five rows, one unscored; group "y": three rows, one unscored; rows interleaved
    index = ["x", "y", "x", "x", "y", "x", "y", "x"]
    scores = torch.tensor([0.9, 0.2, NAN, 0.1, 0.7, 0.4, NAN, 0.6])
    advantages, positive, scored = grouped_polarity_advantages(scores, index, 0.5, 2.0, eps=1e-6)
    assert scored.tolist() == [True, True, False, True, True, True, False, True]
    x, y = [0, 3, 5, 7], [1, 4]
    for rows in (x, y):
        pos = positive_mask(scores[rows], len(rows))  # the contiguous maths, one group
        weighted = weight_advantages(group_advantages(scores[rows], len(rows), eps=1e-6), pos, 0.5, 2.0)
        torch.testing.assert_close(advantages[rows], weighted)
        assert positive[rows].tolist() == pos.tolist()
    assert advantages[2] == 0.0 and advantages[6] == 0.0  # unscored: advantage 0 ...
    assert positive[2] and positive[6]  # ... and positive
    # frac_positive over the six scored rows: x [0.9, 0.1, 0.4, 0.6] mean 0.5 -> 2; y [0.2, 0.7] -> 1
    assert split_metrics(positive, scored) == {"eapo/frac_positive": 0.5, "eapo/num_unscored": 2.0}


def test_a_group_with_fewer_than_two_scored_rows_gets_zero_and_is_positive():
    scores = torch.tensor([NAN, 0.3, 0.1, 0.9, NAN, NAN])
    advantages, positive, _ = grouped_polarity_advantages(scores, [0, 0, 1, 1, 2, 2], 1.0, 1.0)
    assert advantages[[0, 1, 4, 5]].tolist() == [0.0] * 4
    assert positive.tolist() == [True, True, False, True, True, True]


def test_without_unscored_rows_the_split_is_positive_mask_on_contiguous_groups():
    torch.manual_seed(0)
    scores = torch.rand(12)
    for by in ("mean", "median"):
        positive, scored = polarity_split(scores, contiguous_index(12, 4), by=by)
        from eapo.core import positive_mask

        assert positive.tolist() == positive_mask(scores, 4, by=by).tolist() and bool(scored.all())
    advantages, _, _ = grouped_polarity_advantages(scores, contiguous_index(12, 4), 1.0, 1.0)
    torch.testing.assert_close(advantages, group_advantages(scores, 4))


def test_step_weights_h0_metrics_and_state_round_trip():
    step = EAPOStep(make_weighting("eapo"))
    index = contiguous_index(4, 2)
    scores = torch.tensor([1.0, 0.0, NAN, 0.5])
    _, metrics = step.step(scores, index, 2.0)
    assert metrics == {
        "entropy/rollout": 2.0,
        "eapo/H0": 2.0,
        "eapo/w_pos": pytest.approx(0.2),
        "eapo/w_neg": 1.0,
        "eapo/frac_positive": pytest.approx(2 / 3),  # 1.0; and 0.5, alone in its group: positive
        "eapo/num_unscored": 1.0,
    }
    state = step.state_dict()
    assert state["method"] == "eapo" and state["first_entropy"] == 2.0 and state["controls"] == {}
    resumed = EAPOStep(make_weighting("eapo"))
    assert resumed.load_state_dict(state) == []
    _, after = resumed.step(scores, index, 3.0)
    _, straight = step.step(scores, index, 3.0)
    assert after == straight and after["eapo/w_pos"] == pytest.approx(0.3)
    for key in ("method", "controls"):  # every key of state_dict is required
        with pytest.raises(ValueError, match=f"the state has no {key}: it was not written by EAPOStep"):
            EAPOStep(make_weighting("eapo")).load_state_dict({k: v for k, v in state.items() if k != key})
    with pytest.raises(ValueError, match="written by method eapo"):
        EAPOStep(make_weighting("grpo")).load_state_dict(state)


def test_fixed_scheme_anchors_h0_on_the_first_entropy_and_runs_without_one():
    step = EAPOStep(make_weighting("psr"))
    assert step.weights(None) == (1.0, 0.0)
    assert step.weight_metrics(None, 1.0, 0.0) == {"eapo/w_pos": 1.0, "eapo/w_neg": 0.0}
    step.weights(1.5)
    step.weights(2.5)
    assert step.h0 == 1.5


def test_registry_entries_carry_what_other_code_needs():
    assert list(WEIGHTING_SCHEMES) == ["grpo", "psr", "nsr", "w_reinforce", "qae", "eapo", "eapo_pi"]
    psr = WEIGHTING_SCHEMES["psr"]
    assert psr.accepts == ("w_pos", "w_neg") and psr.build("psr").weights(None) == (1.0, 0.0)
    assert (psr.label, psr.defaults, psr.needs_entropy, psr.verl_estimator) == (
        "PSR",
        {"w_pos": 1.0, "w_neg": 0.0},
        False,
        "psr",
    )
    assert WEIGHTING_SCHEMES["grpo"].verl_estimator == "eapo_grpo"  # verl has its own grpo
    assert WEIGHTING_SCHEMES["qae"].split_by == "quantile"
    assert WEIGHTING_SCHEMES["eapo"].needs_entropy and WEIGHTING_SCHEMES["eapo"].shown == ("w0",)
    with pytest.raises(ValueError, match="already registered"):
        register_weighting("psr", ("w_pos",))(lambda name: None)
    try:

        @register_weighting("half", ("w_neg",))
        def half(name, *, w_neg=0.5):
            from eapo.core import FixedWeighting

            return FixedWeighting(name, 0.5, w_neg)

        assert make_weighting("half", w_neg=0.25).weights(None) == (0.5, 0.25)
    finally:
        WEIGHTING_SCHEMES.pop("half", None)


def test_controls_state_is_anchored_saved_and_restored_in_one_schema():
    """A control's run state (here the adaptive entropy coefficient) is anchored on the first step's H,
    saved under ``controls`` by core, restored by core."""
    from eapo.core import AdaptiveEntropyCoef

    adaptive = AdaptiveEntropyCoef(coef=0.01, target_ratio=0.5)
    step = EAPOStep(make_weighting("grpo"), controls={"adaptive_entropy": adaptive})
    index = contiguous_index(4, 2)
    scores = torch.tensor([1.0, 0.0, 0.5, 0.25])
    step.step(scores, index, 3.0)
    assert adaptive.target == pytest.approx(1.5)  # 0.5 × H_0
    adaptive.update(1.0)  # at or below the target: the coefficient rises
    state = step.state_dict()
    assert state["controls"] == {
        "adaptive_entropy": {
            "coef": pytest.approx(0.015),
            "target": pytest.approx(1.5),
            "last_entropy": 1.0,
            "settings": {"delta": 0.005, "coef_min": 0.0, "coef_max": 1.0, "target_ratio": 0.5},
        }
    }
    fresh = AdaptiveEntropyCoef(coef=0.01, target_ratio=0.5)
    resumed = EAPOStep(make_weighting("grpo"), controls={"adaptive_entropy": fresh})
    assert resumed.load_state_dict(state) == []
    assert (fresh.coef, fresh.target, fresh.last_entropy) == (pytest.approx(0.015), pytest.approx(1.5), 1.0)
    # a control the state has none of starts afresh (and is anchored on the saved H); one it has but this
    # run lacks, or changed settings, are refused
    afresh = AdaptiveEntropyCoef(target_ratio=0.5)
    assert EAPOStep(make_weighting("grpo"), controls={"adaptive_entropy": afresh}).load_state_dict(
        {**state, "controls": {}}
    ) == ["adaptive_entropy"]
    assert afresh.target == pytest.approx(1.5)
    with pytest.raises(ValueError, match="written with the entropy control adaptive_entropy"):
        EAPOStep(make_weighting("grpo")).load_state_dict(state)
    changed = AdaptiveEntropyCoef(target_ratio=0.8)
    with pytest.raises(ValueError, match="target_ratio=0.5 differs from the configured target_ratio=0.8"):
        EAPOStep(make_weighting("grpo"), controls={"adaptive_entropy": changed}).load_state_dict(state)


def test_combined_rewards_sum_the_functions_that_scored_and_leave_unscored_rows_nan():
    from eapo.core.step import combined_rewards

    nan = float("nan")
    per_func = torch.tensor([[1.0, 0.5], [nan, 0.5], [nan, nan], [0.0, 0.0]])  # [B=4, F=2]
    total = combined_rewards(per_func, torch.tensor([2.0, 0.5]))
    assert total.dtype == torch.float64
    assert total[[0, 1, 3]].tolist() == [2.25, 0.25, 0.0]  # 2·1 + 0.5·0.5; only the scoring function
    assert torch.isnan(total[2])  # no function scored it
    with pytest.raises(ValueError, match=r"\(B, F\) with \(F,\) weights"):
        combined_rewards(per_func, torch.tensor([1.0]))


def test_control_inputs_give_each_update_its_input_then_move_the_state_with_h_t():
    """The adaptive coefficient through core's step (where an engine lacks it): target 1.0 × H_0 = 1.2,
    δ = 0.01. Step 1's update gets 0 (nothing measured yet), then H = 1.2 ≤ 1.2 raises it to 0.01; step 2
    gets 0.01 and H = 1.5 lowers it to 0; a control the engine moves itself is left alone."""
    adaptive = AdaptiveEntropyCoef(delta=0.01)
    step = EAPOStep(make_weighting("grpo"), controls={"adaptive_entropy": adaptive})
    inputs = []
    for entropy in (1.2, 1.5):
        step.step(torch.tensor([1.0, 0.0]), [0, 0], entropy)
        inputs.append(step.control_inputs(entropy))
    assert inputs == [
        {"adaptive_entropy": {"entropy_coef": 0.0}},
        {"adaptive_entropy": {"entropy_coef": 0.01}},
    ]
    assert adaptive.coef == 0.0 and adaptive.target == pytest.approx(1.2)
    assert step.control_metrics == {}  # the adaptive state reports none (the engines log its coefficient)

    class Reporting:
        def anchor(self, h0):
            pass

        def loss_inputs(self):
            return {}

        def observe(self, entropy):
            self.last = entropy

        def metrics(self):
            return {"toy/last": self.last}

    step.controls["toy"] = Reporting()
    step.control_inputs(0.7, moved_by_engine={"adaptive_entropy"})
    assert step.control_metrics == {"toy/last": 0.7}
    del step.controls["toy"]
    assert step.control_inputs(1.0, moved_by_engine={"adaptive_entropy"}) == {}
    assert adaptive.last_entropy == 1.5
    with pytest.raises(ValueError, match="adaptive_entropy moves with the rollout entropy H_t"):
        step.control_inputs(None)


# --- QAE: split_by=quantile -------------------------------------------------------------------


def test_group_quantile_is_the_inverse_empirical_cdf_by_hand():
    """inverse_cdf, G = 5, K = 0.4: position ceil(2) − 1 = 1, the 2nd smallest (F(x) = 2/5 >= 0.4 first
    there). K = 0.5: ceil(2.5) − 1 = 2. K = 0 is the minimum, K = 1 the maximum; ties share the value."""
    from eapo.core.advantages import group_quantile

    rows = torch.tensor([[0.9, 0.1, 0.5, 0.3, 0.7], [1.0, 0.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    assert group_quantile(rows, 0.4, "inverse_cdf").flatten().tolist() == [0.3, 0.0]
    assert group_quantile(rows, 0.5, "inverse_cdf").flatten().tolist() == [0.5, 1.0]
    assert group_quantile(rows, 0.0, "inverse_cdf").flatten().tolist() == [0.1, 0.0]
    assert group_quantile(rows, 1.0, "inverse_cdf").flatten().tolist() == [0.9, 1.0]
    with pytest.raises(ValueError, match=r"quantile_k must lie in \[0, 1\]"):
        group_quantile(rows, 1.5)
    with pytest.raises(ValueError, match="unknown quantile_method 'nearest'; known: linear, inverse_cdf"):
        group_quantile(rows, 0.4, "nearest")


def test_group_quantile_linear_interpolates_as_the_reference_by_hand():
    """linear (the default; QAE's code, torch.quantile), G = 5: position K·(G − 1). K = 0.4: 1.6, between
    the sorted 0.3 and 0.5: 0.3 + 0.6 · 0.2 = 0.42, and between 0 and 1 for the binary row: 0.6. K = 0.5:
    position 2, a reward itself (0.5 and 1). K = 0 and 1: the minimum and the maximum."""
    from eapo.core.advantages import group_quantile

    rows = torch.tensor([[0.9, 0.1, 0.5, 0.3, 0.7], [1.0, 0.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    assert group_quantile(rows, 0.4).flatten().tolist() == pytest.approx([0.42, 0.6], abs=1e-12)
    assert group_quantile(rows, 0.4, "linear").flatten().tolist() == pytest.approx([0.42, 0.6], abs=1e-12)
    assert group_quantile(rows, 0.5).flatten().tolist() == pytest.approx([0.5, 1.0], abs=1e-12)
    assert group_quantile(rows, 0.0).flatten().tolist() == [0.1, 0.0]
    assert group_quantile(rows, 1.0).flatten().tolist() == [0.9, 1.0]


@pytest.mark.parametrize(
    ("method", "baseline", "positive"), [("linear", 0.2, [1, 0, 0, 1]), ("inverse_cdf", 0.0, [1, 1, 1, 1])]
)
def test_the_two_quantile_methods_at_the_papers_group_size(method, baseline, positive):
    """The paper's N = 4, binary rewards with p = 0.5, QAE's K = 0.4 (issue 48): linear reads position
    0.4 · 3 = 1.2 of [0, 0, 1, 1], 0 + 0.2 · (1 − 0) = 0.2, so the failures move too (−0.2/σ) and are D−;
    inverse_cdf reads position ceil(1.6) − 1 = 1, the reward 0, so the failures sit at the baseline
    (advantage 0, D+) and only the successes move. σ = std([1, 0, 0, 1]) = sqrt(1/3) (unbiased), + 1e-6."""
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    step = EAPOStep(make_weighting("qae"), quantile_method=method)
    assert (step.split_by, step.quantile_k, step.quantile_method) == ("quantile", 0.4, method)
    advantages, metrics = step.step(scores, [0] * 4, None)
    sigma = math.sqrt(1 / 3) + 1e-6
    expected = [(r - baseline) / sigma for r in scores.tolist()]
    assert advantages.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert step.last_split[0].int().tolist() == positive
    assert metrics["eapo/frac_positive"] == sum(positive) / 4
    assert EAPOStep(make_weighting("qae")).quantile_method == "linear"  # the qae preset's: the reference's


def test_quantile_method_applies_only_with_the_quantile_split():
    with pytest.raises(ValueError, match="quantile_method=inverse_cdf applies only with split_by=quantile"):
        Algorithm.resolve("grpo", {"quantile_method": "inverse_cdf"})
    Algorithm.resolve("grpo", {"quantile_method": "linear"})  # the default, written out: fine
    with pytest.raises(ValueError, match="quantile_method='mode' is invalid; valid: linear, inverse_cdf"):
        Algorithm.resolve("grpo", {"split_by": "quantile", "quantile_method": "mode"})
    from eapo.config import load_config

    config = load_config(None, ["algorithm.method=qae", "algorithm.quantile_method=inverse_cdf"])
    assert config.algorithm.quantile_method == "inverse_cdf"
    assert load_config(None, []).algorithm.quantile_method == "linear"


def test_quantile_split_is_qaes_two_regimes_on_binary_rewards():
    """K = 0.4, G = 5 (QAE's rule: baseline 0 when the success rate p <= 1 − K = 0.6, else 1). Hard prompt,
    p = 0.4: baseline 0, failures get advantage 0, successes (1 − 0)/σ. Easy prompt, p = 0.8: baseline 1,
    successes 0, the failure (0 − 1)/σ. σ: the group's unbiased std, as GRPO."""
    hard, easy = [1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0, 1.0]
    scores = torch.tensor(hard + easy)
    step = EAPOStep(make_weighting("grpo"), split_by="quantile")
    advantages, metrics = step.step(scores, contiguous_index(10, 5), None)
    sigma_hard, sigma_easy = (torch.tensor(rows).std().item() + 1e-6 for rows in (hard, easy))
    expected = [1 / sigma_hard if r else 0.0 for r in hard] + [0.0 if r else -1 / sigma_easy for r in easy]
    assert advantages.tolist() == pytest.approx(expected, rel=1e-5)
    # every reward at or above the quantile is D+: the hard prompt's all, the easy prompt's successes
    assert metrics["eapo/frac_positive"] == pytest.approx(9 / 10)
    assert (advantages == 0).sum().item() == 7  # sparse credit: 7 of 10 rollouts carry no gradient


def test_quantile_split_with_continuous_rewards_ties_unscored_rows_and_eapo_weights():
    """Continuous rewards [0.2, 0.5, 0.5, 0.9, NaN] (one unscored), K = 0.4 over the 4 scored: position
    ceil(1.6) − 1 = 1, baseline 0.5; both 0.5s (a tie at the quantile) get 0, 0.9 is D+ and 0.2 D−.
    With EAPO's weights (w0 = 0.2 at the anchor step, w− = 1) the D+ advantage is scaled by 0.2."""
    scores = torch.tensor([0.2, 0.5, 0.5, 0.9, float("nan")], dtype=torch.float64)
    step = EAPOStep(make_weighting("eapo"), split_by="quantile")
    advantages, metrics = step.step(scores, [0] * 5, 1.5)
    sigma = torch.tensor([0.2, 0.5, 0.5, 0.9], dtype=torch.float64).std().item() + 1e-6  # + ADVANTAGE_EPS
    assert advantages.tolist() == pytest.approx([-0.3 / sigma, 0.0, 0.0, 0.2 * 0.4 / sigma, 0.0], rel=1e-6)
    assert metrics["eapo/num_unscored"] == 1.0 and metrics["eapo/frac_positive"] == pytest.approx(3 / 4)
    assert (
        EAPOStep(make_weighting("grpo"), split_by="quantile", quantile_k=0.0)
        .step(scores, [0] * 5, None)[0]
        .tolist()[0]
        == 0.0
    )  # K = 0: the minimum is the baseline, nothing below it


def test_quantile_k_applies_only_with_the_quantile_split():
    with pytest.raises(ValueError, match="quantile_k=0.3 applies only with split_by=quantile"):
        Algorithm.resolve("grpo", {"quantile_k": 0.3})
    Algorithm.resolve("grpo", {"quantile_k": 0.4})  # the default, written out: fine
    from eapo.config import ConfigError, load_config

    with pytest.raises(
        ConfigError, match="algorithm.quantile_k=0.3 applies only with algorithm.split_by=quantile"
    ):
        load_config(None, ["algorithm.quantile_k=0.3"])
    assert (
        load_config(None, ["algorithm.split_by=quantile", "algorithm.quantile_k=0.3"]).algorithm.quantile_k
        == 0.3
    )


def test_the_qae_method_is_grpos_weights_with_the_quantile_split():
    """method=qae: the quantile split of GRPO's weights, on both engines through core's step; another split
    beside it is refused, K is its own setting."""
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.2, 0.7, 0.7, 0.9, 0.1])
    index = contiguous_index(10, 5)
    qae = EAPOStep(make_weighting("qae"), split_by="mean")  # the YAML's default split reads as unset
    assert qae.split_by == "quantile" and qae.quantile_k == 0.4
    by_setting = EAPOStep(make_weighting("grpo"), split_by="quantile")
    assert qae.step(scores, index, None)[0].tolist() == by_setting.step(scores, index, None)[0].tolist()
    assert Algorithm.resolve("qae", {"split_by": "mean"}).make_step().split_by == "quantile"
    with pytest.raises(
        ValueError, match="split_by=median contradicts method qae, which splits at the quantile"
    ):
        Algorithm.resolve("qae", {"split_by": "median"})
    from eapo.config import load_config

    assert load_config(None, ["algorithm.method=qae", "algorithm.quantile_k=0.3"]).algorithm.quantile_k == 0.3
