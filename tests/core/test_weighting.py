"""Hand-derived values for EntropyAdaptiveWeighting (Eq. dynamic_weight) and the weighting registry."""

from __future__ import annotations

import json
import math

import pytest
import torch

from eapo.core import (
    WEIGHTING_SCHEMES,
    EAPOStep,
    EntropyAdaptiveWeighting,
    FixedWeighting,
    make_weighting,
)

# ---------------------------------------------------------------------------------------------
# EntropyAdaptiveWeighting
# ---------------------------------------------------------------------------------------------


def test_paper_defaults_follow_entropy_ratio_to_first_step():
    weight = EntropyAdaptiveWeighting()
    # H_0 = 2.0; w = 0.2 · H_t / 2.0, clipped to [0, 2].
    got = [weight.update(h) for h in (2.0, 3.0, 1.0, 0.5, 20.0, 40.0)]
    expected = [0.2, 0.3, 0.1, 0.05, 2.0, 2.0]
    assert got == pytest.approx(expected, rel=1e-15, abs=0)
    assert weight.h0 == 2.0


def test_h0_is_fixed_by_the_first_step_only():
    weight = EntropyAdaptiveWeighting(w0=0.5, w_max=10.0)
    weight.update(4.0)
    weight.update(1.0)
    weight.update(8.0)
    assert weight.h0 == 4.0
    assert weight.update(6.0) == pytest.approx(0.5 * 6.0 / 4.0, rel=1e-15)


def test_closed_form_equals_the_paper_recursion_while_unclipped():
    # Appendix "Formula Derivation": w_t = w_{t-1} · H_t / H_{t-1}  <=>  w_t = w0 · H_t / H_0.
    entropies = [1.3, 1.1, 0.9, 1.4, 0.7, 0.8]
    weight = EntropyAdaptiveWeighting(w0=0.2, w_max=100.0)
    recursive = 0.2
    for step, entropy in enumerate(entropies):
        if step > 0:
            recursive *= entropy / entropies[step - 1]
        assert weight.update(entropy) == pytest.approx(recursive, rel=1e-12)


def test_clipping_at_w_min_and_w_max():
    weight = EntropyAdaptiveWeighting(w0=0.4, w_min=0.1, w_max=0.6)
    assert weight.update(1.0) == 0.4
    assert weight.update(1.4) == pytest.approx(0.56, rel=1e-15)  # inside
    assert weight.update(2.0) == 0.6  # 0.8 clipped to w_max
    assert weight.update(0.2) == 0.1  # 0.08 clipped to w_min
    assert weight.update(0.25) == pytest.approx(0.1, rel=1e-15)  # exactly w_min
    assert weight.update(1.0) == 0.4  # clipping keeps no memory


@pytest.mark.parametrize(("w0", "w_min", "w_max", "expected"), [(0.5, 0.0, 0.3, 0.3), (0.2, 0.5, 2.0, 0.5)])
def test_w0_is_clipped_during_anchor_steps(w0, w_min, w_max, expected):
    weight = EntropyAdaptiveWeighting(w0=w0, w_min=w_min, w_max=w_max, anchor_steps=2)
    assert weight.update(1.0) == expected
    assert weight.update(5.0) == expected


def test_anchor_steps_average_the_first_entropies():
    weight = EntropyAdaptiveWeighting(w0=0.2, anchor_steps=3)
    # H_0 = mean(1, 2, 3) = 2; the three anchor steps return w0 whatever the entropy.
    assert [weight.update(h) for h in (1.0, 2.0, 3.0)] == [0.2, 0.2, 0.2]
    assert weight.h0 == 2.0
    assert weight.update(4.0) == pytest.approx(0.4, rel=1e-15)
    assert weight.update(6.0) == pytest.approx(0.6, rel=1e-15)
    assert weight.update(1.0) == pytest.approx(0.1, rel=1e-15)


def test_h0_is_none_until_anchor_steps_are_seen():
    weight = EntropyAdaptiveWeighting(anchor_steps=2)
    assert weight.h0 is None
    weight.update(1.0)
    assert weight.h0 is None
    weight.update(2.0)
    assert weight.h0 == 1.5


@pytest.mark.parametrize("bad", [0.0, -1.0, -0.0, float("nan"), float("inf"), float("-inf")])
def test_non_finite_or_non_positive_entropy_is_rejected_and_changes_nothing(bad):
    weight = EntropyAdaptiveWeighting(anchor_steps=2)
    weight.update(1.0)
    before = weight.state_dict()
    with pytest.raises(ValueError, match=r"rollout entropy must be finite and > 0, got"):
        weight.update(bad)
    assert weight.state_dict() == before
    assert weight.update(3.0) == 0.2
    assert weight.h0 == 2.0


def test_entropy_may_be_a_tensor_scalar():
    weight = EntropyAdaptiveWeighting()
    weight.update(torch.tensor(2.0))
    assert weight.update(torch.tensor(3.0)) == pytest.approx(0.3, rel=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"w0": -0.1}, r"^w0=-0.1 is invalid; valid: a number >= 0, or null$"),
        ({"w0": float("nan")}, r"^w0=nan is invalid; valid: a number >= 0, or null$"),
        (
            {"w_min": 1.0, "w_max": 0.5},
            r"^w_min=1.0 must be <= w_max=0.5 \(w\+ is clipped to \[w_min, w_max\]\)$",
        ),
        ({"w_min": -0.5}, r"^w_min=-0.5 is invalid; valid: a number >= 0, or null$"),
        ({"anchor_steps": 0}, r"^anchor_steps=0 is invalid; valid: an integer >= 1, or null$"),
        ({"anchor_steps": 1.5}, r"^anchor_steps=1.5 is invalid; valid: an integer >= 1, or null$"),
    ],
)
def test_invalid_settings_are_rejected(kwargs, message):
    """The one validation of a scheme's settings: make_weighting (the constructor trusts its arguments)."""
    with pytest.raises(ValueError, match=message):
        make_weighting("eapo", **kwargs)


@pytest.mark.parametrize(("anchor_steps", "seen"), [(1, 1), (1, 4), (3, 1), (3, 2), (3, 3), (3, 5)])
def test_state_round_trip_continues_with_the_same_h0(anchor_steps, seen):
    entropies = [1.2, 0.8, 1.9, 1.1, 0.6, 1.4, 2.5, 0.9]
    original = EntropyAdaptiveWeighting(w0=0.2, w_max=2.0, anchor_steps=anchor_steps)
    for entropy in entropies[:seen]:
        original.update(entropy)
    state = json.loads(json.dumps(original.state_dict()))  # checkpoints store plain data
    resumed = EntropyAdaptiveWeighting(w0=0.2, w_max=2.0, anchor_steps=anchor_steps)
    resumed.load_state_dict(state)
    assert resumed.h0 == original.h0
    for entropy in entropies[seen:]:
        assert resumed.update(entropy) == original.update(entropy)


def test_load_state_dict_rejects_different_settings_and_missing_keys():
    state = EntropyAdaptiveWeighting(w0=0.2).state_dict()
    with pytest.raises(ValueError, match=r"checkpointed w0=0.2 differs from the configured w0=0.3"):
        EntropyAdaptiveWeighting(w0=0.3).load_state_dict(state)
    with pytest.raises(ValueError, match=r"checkpointed anchor_steps=1 differs"):
        EntropyAdaptiveWeighting(anchor_steps=2).load_state_dict(state)
    with pytest.raises(KeyError, match=r"missing \['anchor_count', 'anchor_sum'\]"):
        EntropyAdaptiveWeighting().load_state_dict({"w0": 0.2})


# ---------------------------------------------------------------------------------------------
# make_weighting and the registry
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("grpo", (1.0, 1.0)), ("psr", (1.0, 0.0)), ("nsr", (0.0, 1.0)), ("w_reinforce", (0.1, 1.0))],
)
def test_fixed_schemes_have_the_paper_weights(name, expected):
    scheme = make_weighting(name)
    assert isinstance(scheme, FixedWeighting)
    assert scheme.name == name
    assert scheme.needs_entropy is False
    assert scheme.weights(None) == expected
    assert scheme.weights(0.7) == expected  # entropy is ignored


def test_eapo_scheme_has_the_paper_defaults():
    scheme = make_weighting("eapo")
    assert isinstance(scheme, EntropyAdaptiveWeighting)
    assert scheme.needs_entropy is True
    a = scheme
    assert (a.w0, a.w_min, a.w_max, a.anchor_steps, scheme.w_neg) == (0.2, 0.0, 2.0, 1, 1.0)
    assert scheme.weights(2.0) == (0.2, 1.0)
    w_pos, w_neg = scheme.weights(3.0)
    assert w_pos == pytest.approx(0.3, rel=1e-15)
    assert w_neg == 1.0
    assert scheme.weights(100.0) == (2.0, 1.0)
    assert scheme.h0 == 2.0


def test_registry_lists_exactly_the_seven_schemes():
    assert list(WEIGHTING_SCHEMES) == ["grpo", "psr", "nsr", "w_reinforce", "qae", "eapo", "eapo_pi"]


@pytest.mark.parametrize(
    ("name", "overrides", "expected"),
    [
        ("grpo", {"w_pos": 0.5}, (0.5, 1.0)),
        ("psr", {"w_neg": 0.3}, (1.0, 0.3)),
        ("nsr", {"w_pos": 0.25, "w_neg": 2.0}, (0.25, 2.0)),
        ("w_reinforce", {"w_pos": 0.05}, (0.05, 1.0)),
        ("w_reinforce", {"w_pos": None, "w_neg": None}, (0.1, 1.0)),  # None means "default"
    ],
)
def test_fixed_weights_are_overridable(name, overrides, expected):
    assert make_weighting(name, **overrides).weights(None) == expected


def test_eapo_overrides():
    scheme = make_weighting("eapo", w0=0.5, w_min=0.1, w_max=1.0, w_neg=0.5, anchor_steps=2, w_pos=None)
    assert [scheme.weights(h) for h in (1.0, 3.0)] == [(0.5, 0.5), (0.5, 0.5)]  # anchor: H_0 = 2
    assert scheme.weights(3.0) == (0.75, 0.5)
    assert scheme.weights(8.0) == (1.0, 0.5)
    assert scheme.weights(0.2) == (0.1, 0.5)


def test_eapo_needs_an_entropy():
    with pytest.raises(ValueError, match=r"'eapo' weighting needs this step's rollout entropy, got None"):
        make_weighting("eapo").weights(None)


def test_unknown_scheme_lists_the_known_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown weighting scheme 'ppo'; known: grpo, psr, nsr, w_reinforce, qae, eapo, eapo_pi",
    ):
        make_weighting("ppo")


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("grpo", {"w0": 0.3}, r"^w0 does not apply to method 'grpo'; it accepts w_pos, w_neg$"),
        (
            "eapo",
            {"w_pos": 1.0},
            r"^w_pos does not apply to method 'eapo'; it accepts w0, w_min, w_max, w_neg, anchor_steps, integral_gain$",
        ),
        ("psr", {"alpha": 1, "beta": 2}, r"^alpha is not a setting here; known: w_pos, w_neg, w0"),
    ],
)
def test_unknown_override_is_rejected(name, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_weighting(name, **overrides)


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("grpo", {"w_pos": -1.0}, r"^w_pos=-1.0 is invalid; valid: a number >= 0, or null$"),
        ("nsr", {"w_neg": float("inf")}, r"^w_neg=inf is invalid; valid: a number >= 0, or null$"),
        ("eapo", {"w_neg": -0.5}, r"^w_neg=-0.5 is invalid; valid: a number >= 0, or null$"),
        ("eapo", {"w_min": 3.0}, r"^w_min=3.0 must be <= w_max=2.0 \(default\)"),
    ],
)
def test_invalid_override_values_are_rejected(name, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_weighting(name, **overrides)


@pytest.mark.parametrize("name", list(WEIGHTING_SCHEMES))
def test_every_scheme_state_round_trips(name):
    entropies = [1.5, 1.2, 2.1, 0.9, 1.3]
    original = make_weighting(name)
    for entropy in entropies[:2]:
        original.weights(entropy)
    resumed = make_weighting(name)
    resumed.load_state_dict(json.loads(json.dumps(original.state_dict())))
    for entropy in entropies[2:]:
        assert resumed.weights(entropy) == original.weights(entropy)


def test_load_state_dict_rejects_a_different_configuration():
    with pytest.raises(
        ValueError, match=r"checkpointed weights \(w_pos=1.0, w_neg=1.0\) differ from the configured"
    ):
        make_weighting("psr").load_state_dict(make_weighting("grpo").state_dict())
    with pytest.raises(ValueError, match=r"checkpointed w_neg=1.0 differs from the configured w_neg=0.5"):
        make_weighting("eapo", w_neg=0.5).load_state_dict(make_weighting("eapo").state_dict())
    with pytest.raises(ValueError, match=r"checkpointed w0=0.2 differs"):
        make_weighting("eapo", w0=0.4).load_state_dict(make_weighting("eapo").state_dict())


def test_reprs_name_the_settings():
    assert repr(make_weighting("psr")) == "FixedWeighting(name='psr', w_pos=1.0, w_neg=0.0)"
    assert repr(make_weighting("eapo")) == (
        "EntropyAdaptiveWeighting(w0=0.2, w_min=0.0, w_max=2.0, w_neg=1.0, anchor_steps=1, integral_gain=0.0)"
    )


def test_unclipped_weight_is_linear_in_entropy():
    # A sanity check of Eq. dynamic_weight's shape: doubling H_t doubles w+ while unclipped.
    weight = EntropyAdaptiveWeighting(w0=0.2, w_max=math.inf)
    weight.update(1.0)  # H_0 = 1
    assert weight.update(2.0) == pytest.approx(2 * weight.update(1.0), rel=1e-15)


# --- EAPO's integral term (algorithm.integral_gain) --------------------------------------------


def test_integral_term_by_hand():
    """w0 = 0.2, k_I = 0.5, H_0 = 2. H = 1: e = −0.5, I would be −0.5 and w+ = 0.2 · 0.5 − 0.25 < 0 = w_min
    with the error pushing further down, so I stays 0 (conditional integration) and w+ = 0.1. H = 3:
    e = 0.5, I = 0.5, w+ = 0.2 · 1.5 + 0.25 = 0.55. H = 2: e = 0, I = 0.5, w+ = 0.2 + 0.25 = 0.45."""
    scheme = make_weighting("eapo", w0=0.2, integral_gain=0.5)
    assert scheme.weights(2.0) == (0.2, 1.0)  # the anchor step
    assert scheme.weights(1.0)[0] == pytest.approx(0.1) and scheme.integral == 0.0
    assert scheme.weights(3.0)[0] == pytest.approx(0.55) and scheme.integral == pytest.approx(0.5)
    assert scheme.weights(2.0)[0] == pytest.approx(0.45) and scheme.integral == pytest.approx(0.5)
    assert scheme.metrics() == {"eapo/integral": pytest.approx(0.5)}


def test_integral_gain_zero_is_the_papers_eapo_exactly():
    generator = torch.Generator().manual_seed(0)
    entropies = (1.0 + 2.0 * torch.rand(50, generator=generator)).tolist()
    paper, with_term = make_weighting("eapo"), make_weighting("eapo", integral_gain=0.0)
    for entropy in entropies:
        assert with_term.weights(entropy) == paper.weights(entropy)  # bit for bit
    assert with_term.metrics() == {} and "eapo/integral" not in EAPOStep(with_term).weight_metrics(
        1.0, 0.2, 1.0
    )


def test_integral_state_resumes_identically_and_refuses_another_gain():
    entropies = [2.0, 1.5, 1.2, 1.8, 2.6, 2.1, 1.9]
    uninterrupted = make_weighting("eapo_pi")
    expected = [uninterrupted.weights(h)[0] for h in entropies]
    first = make_weighting("eapo_pi")
    got = [first.weights(h)[0] for h in entropies[:4]]
    resumed = make_weighting("eapo_pi")
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += [resumed.weights(h)[0] for h in entropies[4:]]
    assert got == expected and resumed.integral == uninterrupted.integral != 0.0
    with pytest.raises(
        ValueError, match="checkpointed integral_gain=0.2 differs from the configured integral_gain=0.5"
    ):
        make_weighting("eapo", integral_gain=0.5).load_state_dict(first.state_dict())
    older = {
        k: v for k, v in make_weighting("eapo").state_dict().items() if k not in ("integral_gain", "integral")
    }
    make_weighting("eapo").load_state_dict(older)  # a state written before the term: the paper's EAPO


def _closed_loop(w0: float, gain: float, start: float, *, steps: int, w_star: float = 0.5, eta: float = 0.5):
    """A stand-in for training: the rollout entropy responds to the positive weight as
    H_{t+1} = H_t · exp(η (w* − w+_t)): it rises while w+ is below the weight w* at which the positives'
    pull on entropy cancels the negatives', and falls above it. H_0 = 2 is anchored at step 1, then the
    entropy starts at ``start`` × H_0. Returns the last 50 steps' H / H_0."""
    scheme = make_weighting("eapo", w0=w0, integral_gain=gain)
    h0 = 2.0
    scheme.weights(h0)
    entropy, ratios = start * h0, []
    for _ in range(steps):
        w_pos, _ = scheme.weights(entropy)
        entropy *= math.exp(eta * (w_star - w_pos))
        ratios.append(entropy / h0)
    return ratios[-50:]


@pytest.mark.parametrize("start", [1.3, 0.7], ids=["from_above", "from_below"])
@pytest.mark.parametrize("w0", [0.05, 0.2, 0.5, 1.0])
def test_closed_loop_integral_term_settles_at_h0_and_the_papers_eapo_where_its_algebra_predicts(w0, start):
    """With the integral term the entropy settles at H_0 for every w0, from above and from below; without
    it, at H*/H_0 = w*/w0 (w0 · H*/H_0 = w*: the proportional rule's equilibrium, set by w0)."""
    with_term = _closed_loop(w0, 0.2, start, steps=1500)
    assert max(abs(ratio - 1.0) for ratio in with_term) < 0.01
    paper = _closed_loop(w0, 0.0, start, steps=400)
    assert max(abs(ratio - 0.5 / w0) for ratio in paper) < 0.01 * (0.5 / w0)
