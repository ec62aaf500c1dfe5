"""EntroPIC (eapo.core.controls.entropic): the PI controller on hand-derived numbers (α, the integral,
the clip at ±1, the H_0 anchor, the timing through core's step, resume), the token weights by hand and
against a transcription of the reference's ``compute_policy_loss_entropic``, and its settings' rules."""

from __future__ import annotations

import math

import pytest
import torch

from eapo.core import EAPOStep, make_weighting
from eapo.core.controls import (
    ENTROPY_CONTROLS,
    TokenInputs,
    applied_by_eapo,
    control_states,
    resolve_controls,
)
from eapo.core.controls.entropic import ENTROPIC, EntroPICController, entropic_token_weights


def test_controller_by_hand_with_both_clips():
    """kp = 1, ki = 0.1, target 0.8 × H_0 = 1.6. Each observe: e = H − 1.6, α ← clip(e + 0.1 · I), I ← I + e.
    H = 2.0: e = 0.4, α = 0.4, I = 0.4;  H = 1.0: e = −0.6, α = −0.6 + 0.04 = −0.56, I = −0.2;
    H = 1.3: e = −0.3, α = −0.3 − 0.02 = −0.32, I = −0.5;  H = 3.5: e = 1.9, α = clip(1.85) = 1, I = 1.4;
    H = 0.0: e = −1.6, α = clip(−1.46) = −1, I = −0.2. Core's step observes H_t first, so the update of
    step t applies the α of step t's own error (the reference's α_k = clip(Kp · e_k + Ki · I_{k−1}))."""
    controller = EntroPICController(kp=1.0, ki=0.1, target_ratio=0.8)
    assert controller.observe_first
    with pytest.raises(ValueError, match="anchor"):
        controller.observe(1.0)
    controller.anchor(2.0)
    assert controller.target == pytest.approx(1.6)
    controller.anchor(5.0)  # anchored once
    assert controller.target == pytest.approx(1.6)
    applied, integrals, errors = [], [], []
    for entropy in (2.0, 1.0, 1.3, 3.5, 0.0):
        controller.observe(entropy)  # core's order for this control: observe H_t, then the update's inputs
        applied.append(controller.loss_inputs()["entropic_alpha"])
        metrics = controller.metrics()
        assert metrics["entropic/alpha"] == applied[-1]  # the α this step's update applies
        integrals.append(metrics["entropic/integral"])
        errors.append(metrics["entropic/error"])
    assert errors == pytest.approx([0.4, -0.6, -0.3, 1.9, -1.6])
    assert applied == pytest.approx([0.4, -0.56, -0.32, 1.0, -1.0])
    assert integrals == pytest.approx([0.4, -0.2, -0.5, 1.4, -0.2])


def test_a_fixed_target_is_not_anchored_and_gains_zero_keep_alpha_zero():
    fixed = EntroPICController(target=0.5)
    fixed.anchor(3.0)
    assert fixed.target == 0.5
    fixed.observe(0.7)  # e = 0.2: α = 1 · 0.2 + 0.01 · 0
    assert (fixed.alpha, fixed.integral, fixed.error) == pytest.approx((0.2, 0.2, 0.2))
    fixed.observe(0.7)  # α = 0.2 + 0.01 · 0.2
    assert fixed.alpha == pytest.approx(0.202)
    inert = EntroPICController(kp=0.0, ki=0.0, target=0.5)
    for entropy in (0.1, 9.0, 3.0):
        inert.observe(entropy)
        assert inert.alpha == 0.0
    assert inert.integral == pytest.approx(-0.4 + 8.5 + 2.5)


def test_the_controller_refuses_bad_settings_and_entropies():
    with pytest.raises(ValueError, match="kp must be >= 0"):
        EntroPICController(kp=-1.0)
    with pytest.raises(ValueError, match=r"threshold must lie in \[0, 1\)"):
        EntroPICController(threshold=1.0)
    with pytest.raises(ValueError, match="target_ratio must be > 0"):
        EntroPICController(target_ratio=0.0)
    with pytest.raises(ValueError, match="target must be >= 0"):
        EntroPICController(target=-0.1)
    with pytest.raises(ValueError, match="entropy must be finite"):
        EntroPICController(target=1.0).observe(math.nan)


def test_resume_keeps_the_integral_and_refuses_other_settings():
    controller = EntroPICController(kp=0.5, ki=0.2, threshold=0.9, target_ratio=1.0)
    controller.anchor(1.5)
    for entropy in (1.5, 1.2, 1.9):
        controller.observe(entropy)
    state = controller.state_dict()
    # e = 0, −0.3, 0.4; α after the third = 0.5 · 0.4 + 0.2 · (−0.3) = 0.14; I = 0.1
    assert state == {
        "integral": pytest.approx(0.1),
        "error": pytest.approx(0.4),
        "alpha": pytest.approx(0.14),
        "target": 1.5,
        "settings": {"kp": 0.5, "ki": 0.2, "threshold": 0.9, "target_ratio": 1.0},
    }
    restored = EntroPICController(kp=0.5, ki=0.2, threshold=0.9, target_ratio=1.0)
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    for entropy in (1.1, 2.0):  # both continue identically
        assert restored.loss_inputs() == controller.loss_inputs()
        restored.observe(entropy)
        controller.observe(entropy)
        assert restored.state_dict() == controller.state_dict()
    with pytest.raises(ValueError, match="checkpointed EntroPIC ki=0.2 differs from the configured ki=0.01"):
        EntroPICController(kp=0.5, threshold=0.9).load_state_dict(state)
    with pytest.raises(ValueError, match="checkpointed EntroPIC threshold=0.9 differs"):
        EntroPICController(kp=0.5, ki=0.2).load_state_dict(state)
    with pytest.raises(
        ValueError, match="checkpointed EntroPIC target=1.5 differs from the configured target=1.0"
    ):
        EntroPICController(kp=0.5, ki=0.2, threshold=0.9, target=1.0).load_state_dict(state)


def test_core_step_moves_the_controller_then_applies_this_steps_alpha():
    """Through EAPOStep (both engines' path): anchored at H_0 by the step, α of step t from H up to t (the
    controller observes H_t before the update's inputs are taken), the metrics logged after observe, and the
    state saved under controls.entropic."""
    values = resolve_controls("entropic", {})
    states = control_states(values)
    assert set(states) == {"entropic"}
    controller = states["entropic"]
    assert (controller.kp, controller.ki, controller.threshold, controller.target) == (1.0, 0.01, 0.95, None)
    step = EAPOStep(make_weighting("grpo"), method="entropic", controls=states)
    scores, index = torch.tensor([1.0, 0.0, 0.5, 0.2]), [0, 0, 1, 1]
    inputs, logged = [], []
    for entropy in (2.0, 2.5, 1.5):
        step.step(scores, index, entropy)
        inputs.append(step.control_inputs(entropy))
        logged.append(step.control_metrics)
    # target = H_0 = 2: e = 0, 0.5, −0.5; α = e + 0.01 · I_{t−1} = 0, 0.5, −0.5 + 0.01 · 0.5 = −0.495;
    # I = 0, 0.5, 0. Each step's update applies its own α (one step earlier than before issue 48).
    assert [i["entropic"]["entropic_alpha"] for i in inputs] == pytest.approx([0.0, 0.5, -0.495])
    assert logged == [
        {"entropic/alpha": 0.0, "entropic/integral": 0.0, "entropic/error": 0.0},
        {"entropic/alpha": 0.5, "entropic/integral": 0.5, "entropic/error": 0.5},
        {
            "entropic/alpha": pytest.approx(-0.495),
            "entropic/integral": pytest.approx(0.0),
            "entropic/error": -0.5,
        },
    ]
    assert step.state_dict()["controls"]["entropic"]["alpha"] == pytest.approx(-0.495)
    resumed = EAPOStep(make_weighting("grpo"), method="entropic", controls=control_states(values))
    assert resumed.load_state_dict(step.state_dict()) == []
    assert resumed.controls["entropic"].state_dict() == controller.state_dict()


# --- the token weights ----------------------------------------------------------------------------

#: Three sequences of three positions (A = 2, −1, 0); the last position of row 1 is padding.
PROBS = torch.tensor([[0.99, 0.5, 0.96], [0.97, 0.2, 0.999], [0.98, 0.3, 0.6]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
ADV = torch.tensor([2.0, -1.0, 0.0])[:, None].expand(3, 3)


def test_token_weights_by_hand():
    """τ = 0.95: tokens 0.99, 0.96 (A > 0) get 1 + α = 1.3; 0.97 (A < 0) gets 1 − α = 0.7; 0.98 has A = 0
    (weight 1); the low-probability tokens 1; padding 0 (its 0.999 is not a response token)."""
    weights = entropic_token_weights(PROBS.log(), ADV, MASK, alpha=0.3, threshold=0.95)
    torch.testing.assert_close(
        weights, torch.tensor([[1.3, 1.0, 1.3], [0.7, 1.0, 0.0], [1.0, 1.0, 1.0]]), rtol=0, atol=1e-7
    )
    # α < 0 (entropy below target): the positives are weakened, the negatives strengthened
    weights = entropic_token_weights(PROBS.log(), ADV, MASK, alpha=-0.5, threshold=0.95)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 0.5], [1.5, 1.0, 0.0], [1.0, 1.0, 1.0]]))
    # threshold 0: every response token is reweighted
    weights = entropic_token_weights(PROBS.log(), ADV, MASK, alpha=0.3, threshold=0.0)
    torch.testing.assert_close(weights, torch.tensor([[1.3, 1.3, 1.3], [0.7, 0.7, 0.0], [1.0, 1.0, 1.0]]))
    # the registry's entry reads α from the run state's inputs and τ from the settings
    inputs = TokenInputs(
        logp=PROBS.log(),
        old_logp=PROBS.log(),
        advantages=ADV,
        mask=MASK,
        entropy=None,
        settings={"entropic_threshold": 0.95},
        step={"entropic_alpha": 0.3},
    )
    torch.testing.assert_close(
        ENTROPIC.token_weights(inputs),
        entropic_token_weights(PROBS.log(), ADV, MASK, alpha=0.3, threshold=0.95),
    )
    without = TokenInputs(PROBS.log(), PROBS.log(), ADV, MASK, None, {"entropic_threshold": 0.95})
    with pytest.raises(ValueError, match="need the controller's α"):
        ENTROPIC.token_weights(without)


def _reference_policy_loss(old_log_prob, log_prob, advantages, response_mask, control_alpha):
    """A transcription of the reference's ``compute_policy_loss_entropic`` (yk7333/EntroPIC
    ``core_algos.py``), in its own names, with its ``agg_loss`` in token-mean, ``clip_ratio`` 0.2,
    ``clip_ratio_c`` 3 and ``high_prob_thresh`` 0.95; returns the loss and its per-token pieces."""

    def masked_mean(values, mask):
        return (values * mask).sum() / mask.sum()

    high_prob_thresh, cliprange_low, cliprange_high, clip_ratio_c = 0.95, 0.2, 0.2, 3.0
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    pg_loss = masked_mean(pg_losses, response_mask)
    prob_high = log_prob > torch.log(torch.tensor(high_prob_thresh))
    prob_mask = response_mask * prob_high
    adjust_losses = -ratio * advantages.abs()
    pg_loss_adjust = control_alpha * masked_mean(adjust_losses, prob_mask)
    return pg_loss + pg_loss_adjust, pg_losses, adjust_losses, prob_mask


def _ours(old_log_prob, log_prob, advantages, response_mask, alpha):
    """The same PPO-clip surrogate (dual clip) times eapo's weights, token-mean."""
    ratio = torch.exp(log_prob - old_log_prob)
    clipped = torch.maximum(-advantages * ratio, -advantages * torch.clamp(ratio, 0.8, 1.2))
    per_token = torch.where(advantages < 0, torch.minimum(-advantages * 3.0, clipped), clipped)
    weights = entropic_token_weights(log_prob, advantages, response_mask, alpha=alpha, threshold=0.95)
    return (per_token * weights * response_mask).sum() / response_mask.sum(), per_token * weights


def _batch(seed):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 9, (6,), generator=generator)
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()  # [B, T]
    probs = 0.8 + 0.2 * torch.rand(6, 8, generator=generator)  # about a quarter above 0.95
    advantages = torch.randn(6, 1, generator=generator).expand(6, 8) * mask
    return probs.log(), advantages, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [0.35, -0.6])
def test_token_weights_equal_the_references_added_term(seed, alpha):
    """Per token, on ratios inside the clip: (1 + α · sign(A) · [p > τ]) · ℓ = ℓ + α · (−ρ · |A|) · [p > τ].
    Aggregated (token-mean, on-policy), the reference normalises its term over the N_high high-probability
    tokens: its loss and gradient at α equal eapo's at α · N / N_high."""
    logp, advantages, mask = _batch(seed)
    theirs_logp = logp.clone().requires_grad_(True)
    theirs, pg_losses, adjust_losses, prob_mask = _reference_policy_loss(
        theirs_logp.detach(), theirs_logp, advantages, mask, alpha
    )
    theirs.backward()
    n_high, n = prob_mask.sum().item(), mask.sum().item()
    assert 0 < n_high < n, "the batch needs tokens on both sides of the threshold"
    ours_logp = logp.clone().requires_grad_(True)
    ours, _ = _ours(ours_logp.detach(), ours_logp, advantages, mask, alpha * n / n_high)
    ours.backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad, rtol=1e-5, atol=1e-7)
    # per token, at eapo's own α
    _, per_token = _ours(logp, logp, advantages, mask, alpha)
    torch.testing.assert_close(
        per_token * mask, (pg_losses.detach() + alpha * adjust_losses.detach() * prob_mask) * mask
    )
    # with the policy moved, the per-token identity holds where the clip does not act
    moved = logp + 0.3 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(seed))
    _, pg_losses, adjust_losses, prob_mask = _reference_policy_loss(logp, moved, advantages, mask, alpha)
    _, per_token = _ours(logp, moved, advantages, mask, alpha)
    ratio = torch.exp(moved - logp)
    unclipped = (mask > 0) & (ratio > 0.8) & (ratio < 1.2)
    assert 0 < unclipped.sum() < (mask > 0).sum()
    torch.testing.assert_close(
        per_token[unclipped], (pg_losses + alpha * adjust_losses * prob_mask)[unclipped]
    )


# --- the registration and the settings' rules -------------------------------------------------------


def test_registration_and_the_generic_path():
    assert list(ENTROPY_CONTROLS)[-1] == "entropic" and ENTROPY_CONTROLS["entropic"] is ENTROPIC
    values = resolve_controls("entropic", {})
    assert {key: values[key] for key in ENTROPIC.preset} == {
        "entropic": True,
        "entropic_kp": 1.0,
        "entropic_ki": 0.01,
        "entropic_threshold": 0.95,
        "entropic_target_ratio": 1.0,
    }
    assert values["entropic_target"] is None  # anchored at 1.0 × H_0
    # neither engine has it: both run it through eapo's generic path, without per-token entropies
    assert ENTROPIC in applied_by_eapo("trl", values) and ENTROPIC in applied_by_eapo("verl", values)
    assert not ENTROPIC.needs_entropy and not ENTROPIC.trl_fields and not ENTROPIC.verl_options
    off = resolve_controls("grpo", {})
    assert ENTROPIC not in applied_by_eapo("trl", off) and "entropic" not in control_states(off)
    composed = resolve_controls("eapo", {"entropic": True, "entropic_target": 0.8})
    assert control_states(composed)["entropic"].target == 0.8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.entropic_kp=2"],
            r"algorithm.entropic_kp applies only to EntroPIC: set algorithm.entropic=true \(or method=entropic\)",
        ),
        (
            ["algorithm.method=eapo", "algorithm.entropic_target=0.5"],
            "algorithm.entropic_target applies only",
        ),
        (
            [
                "algorithm.method=entropic",
                "algorithm.entropic_target=1.0",
                "algorithm.entropic_target_ratio=0.5",
            ],
            r"algorithm.entropic_target_ratio applies only with algorithm.entropic_target null",
        ),
        (
            ["algorithm.method=entropic", "algorithm.entropic_threshold=1"],
            r"algorithm.entropic_threshold=1(\.0)? is invalid; valid: a number in \[0, 1\)",
        ),
        (
            ["algorithm.method=entropic", "algorithm.entropic_ki=-0.1"],
            r"entropic_ki=-0.1 is invalid; valid: a number >= 0",
        ),
        (
            ["algorithm.method=entropic", "algorithm.entropic_target_ratio=0"],
            r"entropic_target_ratio=0(\.0)? is invalid; valid: a number > 0",
        ),
    ],
)
def test_bad_settings_are_refused_with_the_reason(overrides, message):
    from eapo.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_the_preset_and_composition_load():
    from eapo.config import load_config

    config = load_config(None, ["algorithm.method=entropic"]).algorithm
    assert (config.entropic, config.entropic_kp, config.entropic_ki, config.entropic_threshold) == (
        True,
        1.0,
        0.01,
        0.95,
    )
    assert (config.entropic_target, config.entropic_target_ratio) == (None, 1.0)
    composed = load_config(
        None, ["algorithm.method=eapo", "algorithm.entropic=true", "algorithm.entropic_ki=0.05"]
    )
    assert (composed.algorithm.weighting_method(), composed.algorithm.entropic_ki) == ("eapo", 0.05)


def _closed_loop_with_eapo(w0: float, start: float, *, ki: float = 0.01, steps: int = 1500) -> list[float]:
    """A stand-in for training: the rollout entropy responds to EAPO's positive weight and to EntroPIC's α
    as H_{t+1} = H_t · exp(η (w* − w+_t) − κ α_t), η = 0.05, κ = 0.3, w* = 0.5 (it rises while w+ is below
    the balancing weight w*, and α > 0 sharpens it). EntroPIC (target H_0) runs through core's step on
    EAPO's weights: each update gets the α of the entropies up to its own. H_0 = 2 is anchored at step 1, then
    the entropy starts at ``start`` × H_0. Returns every step's H / H_0."""
    controller = EntroPICController(ki=ki)
    step = EAPOStep(make_weighting("eapo", w0=w0), controls={"entropic": controller})
    h0, entropy, ratios = 2.0, 2.0, []
    for t in range(steps):
        _, metrics = step.step(torch.tensor([1.0, 0.0]), [0, 0], entropy)
        alpha = step.control_inputs(entropy)["entropic"]["entropic_alpha"]
        entropy *= math.exp(0.05 * (0.5 - metrics["eapo/w_pos"]) - 0.3 * alpha)
        if t == 0:
            entropy = start * h0
        ratios.append(entropy / h0)
    return ratios


@pytest.mark.parametrize("start", [1.3, 0.7], ids=["from_above", "from_below"])
@pytest.mark.parametrize("w0", [0.05, 0.2, 0.5, 1.0])
def test_closed_loop_entropic_settles_at_its_target_whatever_eapos_w0(w0, start):
    """EntroPIC holds H_0 on EAPO's weights for every w0, from above and from below (EAPO alone would rest at
    w*/w0 · H_0); its integral is what removes the offset: with Ki = 0 a w0 ≠ w* leaves one."""
    ratios = _closed_loop_with_eapo(w0, start)
    assert max(abs(ratio - 1.0) for ratio in ratios[-50:]) < 0.01
    if w0 != 0.5:
        proportional_only = _closed_loop_with_eapo(w0, start, ki=0.0)
        assert abs(proportional_only[-1] - 1.0) > 0.02
