"""eapo.core.controls: hand-derived values for Clip-Cov, KL-Cov, the top-entropy mask and the
adaptive entropy coefficient, and the presets registry against the typed config."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from eapo.config import AlgorithmConfig, load_config
from eapo.core import (
    ENTROPY_CONTROLS,
    AdaptiveEntropyCoef,
    EAPOStep,
    clip_cov_mask,
    clip_cov_policy_loss,
    kl_cov_mask,
    kl_cov_policy_loss,
    make_weighting,
    method_scheme,
    methods,
    resolve_controls,
    top_entropy_mask,
)

# Two sequences of three positions; the last position of row 1 is padding.
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.5, -9.0]])
ADV = torch.tensor([2.0, -1.0])  # per sequence


def test_clip_cov_selects_the_candidates_between_the_bounds_by_hand():
    # mean A over the 5 tokens = (3·2 − 2)/5 = 0.8; mean log p = (−1 −2 −0.5 −3 −1.5)/5 = −1.6
    # cov = (A − 0.8)(log p + 1.6): row 0: 1.2·[0.6, −0.4, 1.1] = [0.72, −0.48, 1.32]
    #                                row 1: −1.8·[−1.4, 0.1] = [2.52, −0.18]
    # bounds (0.5, 2): candidates (0,0) 0.72 and (0,2) 1.32; ratio 1 → every candidate is selected
    selected = clip_cov_mask(LOGP, LOGP, ADV, MASK, clip_cov_ratio=1.0, clip_cov_lb=0.5, clip_cov_ub=2.0)
    assert selected.tolist() == [[True, False, True], [False, False, False]]
    # with verl's default bounds (1, 5): (0,2) 1.32 and (1,0) 2.52
    selected = clip_cov_mask(LOGP, LOGP, ADV, MASK, clip_cov_ratio=1.0)
    assert selected.tolist() == [[False, False, True], [True, False, False]]


def test_clip_cov_draws_ratio_times_tokens_and_never_a_clipped_token():
    # ratio 0.2 of 5 tokens → max(1, 1) = 1 token, drawn among the two candidates (1, 5)
    generator = torch.Generator().manual_seed(0)
    draws = {
        tuple(map(tuple, torch.nonzero(clip_cov_mask(LOGP, LOGP, ADV, MASK, generator=generator)).tolist()))
        for _ in range(30)
    }
    assert draws == {((0, 2),), ((1, 0),)}
    # token (1, 0) has A < 0 and ratio e^{-1} < 1 − 0.2: PPO's clip already acts on it, so it is excluded
    old = LOGP.clone()
    old[1, 0] = LOGP[1, 0] + 1.0
    selected = clip_cov_mask(LOGP, old, ADV, MASK, clip_cov_ratio=1.0)
    assert selected.tolist() == [[False, False, True], [False, False, False]]


def test_clip_cov_loss_and_gradient_by_hand():
    logp = LOGP.clone().requires_grad_(True)
    old = LOGP - torch.tensor(
        [[0.1, 0.0, -0.1], [0.0, 0.05, 0.0]]
    )  # ratios e^{0.1}, 1, e^{-0.1}, 1, e^{-0.05}
    loss, selected = clip_cov_policy_loss(logp, old, ADV, MASK, clip_cov_ratio=1.0, clip_cov_lb=1.0)
    assert selected.tolist() == [[False, False, True], [True, False, False]]
    ratio = torch.exp(LOGP - old)
    expected = -ADV[:, None] * ratio  # no ratio leaves [0.8, 1.2]: the clip is inactive everywhere
    expected[0, 2] = 0.0
    expected[1, 0] = 0.0
    torch.testing.assert_close(loss.detach() * MASK, expected * MASK)
    (loss * MASK).sum().backward()
    grad = -ADV[:, None] * ratio  # d(−A ρ)/d log p = −A ρ
    grad[0, 2] = 0.0
    grad[1, 0] = 0.0
    torch.testing.assert_close(logp.grad * MASK, grad * MASK)


def test_kl_cov_penalises_the_top_covariance_tokens_by_hand():
    # covariances (see above): [0.72, −0.48, 1.32], [2.52, −0.18]; ratio 0.4 of 5 → 2 tokens: (1,0), (0,2)
    selected = kl_cov_mask(LOGP, ADV, MASK, kl_cov_ratio=0.4)
    assert selected.tolist() == [[False, False, True], [True, False, False]]
    logp = LOGP.clone().requires_grad_(True)
    delta = torch.tensor([[0.0, 0.0, 0.3], [-0.2, 0.0, 0.0]])  # log ρ on the selected tokens
    loss, _ = kl_cov_policy_loss(logp, LOGP - delta, ADV, MASK, kl_cov_ratio=0.4, ppo_kl_coef=0.1)
    expected = -ADV[:, None] * torch.exp(delta) + 0.1 * delta.abs() * selected
    torch.testing.assert_close(loss.detach() * MASK, expected * MASK)
    (loss * MASK).sum().backward()
    grad = -ADV[:, None] * torch.exp(delta) + 0.1 * torch.sign(delta) * selected
    torch.testing.assert_close(logp.grad * MASK, grad * MASK)


def test_kl_cov_is_plain_reinforce_at_ratio_one():
    """On-policy (ρ ≡ 1) the |log ρ| penalty and its gradient are 0: KL-Cov needs several updates."""
    logp = LOGP.clone().requires_grad_(True)
    loss, selected = kl_cov_policy_loss(logp, LOGP, ADV, MASK, kl_cov_ratio=0.4)
    assert selected.sum() == 2
    (loss * MASK).sum().backward()
    torch.testing.assert_close(logp.grad * MASK, -ADV[:, None].expand(2, 3) * MASK)


def test_top_entropy_mask_keeps_the_top_quantile_by_hand():
    entropies = torch.tensor([[0.5, 2.0, 1.0], [3.0, 0.1, 9.0]])  # 9.0 is padding
    # response entropies sorted: 0.1, 0.5, 1.0, 2.0, 3.0; q = 0.4 keeps those at or above the 0.6
    # quantile, interpolated at position 0.6·4 = 2.4: 1.0 + 0.4·(2.0 − 1.0) = 1.4 → keep 2.0 and 3.0
    assert top_entropy_mask(entropies, MASK, 0.4).tolist() == [[False, True, False], [True, False, False]]
    assert top_entropy_mask(entropies, MASK, 1.0).tolist() == MASK.bool().tolist()
    assert top_entropy_mask(entropies, MASK, 0.0).tolist() == [[False, False, False], [True, False, False]]
    gathered = top_entropy_mask(
        entropies, MASK, 0.4, gather=lambda v: torch.cat([v, torch.tensor([10.0] * 5)])
    )
    # with five more tokens at 10 from other processes, the threshold rises above every local token
    assert not gathered.any()
    with pytest.raises(ValueError, match="top_entropy_quantile"):
        top_entropy_mask(entropies, MASK, 1.5)


def test_adaptive_coefficient_follows_skywork_or1_by_hand():
    coef = AdaptiveEntropyCoef(coef=0.0, delta=0.005, coef_min=0.0, coef_max=0.012, target_ratio=0.9)
    assert coef.applied() == 0.0  # no target yet
    coef.anchor(2.0)
    assert coef.target == pytest.approx(1.8)
    coef.anchor(5.0)  # anchored once
    assert coef.target == pytest.approx(1.8)
    assert coef.applied() == 0.0  # nothing measured yet
    values = [coef.update(h) for h in (1.5, 1.7, 1.6, 2.5, 1.0)]
    # below, below, below (capped at 0.012), above (−0.005), below
    assert values == pytest.approx([0.005, 0.010, 0.012, 0.007, 0.012])
    assert coef.applied() == pytest.approx(0.012)  # last entropy 1.0 ≤ 1.8
    coef.update(3.0)
    assert coef.applied() == 0.0  # above the target: not applied
    restored = AdaptiveEntropyCoef(coef_max=0.012, target_ratio=0.9)
    restored.load_state_dict(coef.state_dict())
    assert (restored.coef, restored.target, restored.last_entropy) == (coef.coef, coef.target, 3.0)
    with pytest.raises(ValueError, match="coef_max=0.012 differs from the configured coef_max=1.0"):
        AdaptiveEntropyCoef(target_ratio=0.9).load_state_dict(coef.state_dict())
    with pytest.raises(ValueError, match="coef_min"):
        AdaptiveEntropyCoef(coef_min=1.0, coef_max=0.5)
    with pytest.raises(ValueError, match="anchor"):
        AdaptiveEntropyCoef().update(1.0)


def test_every_preset_is_a_method_whose_settings_are_config_fields():
    fields = {f.name for f in dataclasses.fields(AlgorithmConfig)}
    assert set(ENTROPY_CONTROLS) == {
        "entropy_bonus",
        "adaptive_entropy",
        "clip_higher",
        "clip_cov",
        "kl_cov",
        "top_entropy",
        "entropic",
    }
    for name, control in ENTROPY_CONTROLS.items():
        assert name in methods() and method_scheme(name) == "grpo"
        assert set(control.preset) <= fields, name
        config = load_config(None, [f"algorithm.method={name}"]).algorithm
        for key, value in control.preset.items():
            assert getattr(config, key) == value, (name, key)
        assert "arXiv" in control.source, name


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.top_entropy_quantile=1.5"],
            r"top_entropy_quantile=1.5 is invalid; valid: a number in \[0, 1\]",
        ),
        (["algorithm.clip_cov_ratio=0"], r"clip_cov_ratio=0(\.0)? is invalid; valid: a number in \(0, 1\]"),
        (["algorithm.method=clip_cov", "algorithm.clip_cov_lb=6"], "clip_cov_lb .* must be < clip_cov_ub"),
        (["algorithm.entropy_coef=-0.1"], "entropy_coef=-0.1 is invalid"),
        (
            ["algorithm.method=adaptive_entropy", "algorithm.entropy_coef_min=2"],
            "entropy_coef_min .* must be <=",
        ),
        # each control's "applies only with" rule, declared in its module (verl reads the same rules)
        (
            ["algorithm.clip_cov_lb=6"],
            r"algorithm.clip_cov_lb applies only with algorithm.loss_mode=clip_cov",
        ),
        (["algorithm.entropy_coef_min=2"], "algorithm.entropy_coef_min applies only to the adaptive entropy"),
        (
            ["algorithm.method=kl_cov", "algorithm.epsilon_high=0.28"],
            "cannot be combined with loss_mode=kl_cov",
        ),
        (["algorithm.loss_mode=foo"], "loss_mode='foo' is invalid"),
        (["algorithm.method=clip_cov", "algorithm.entropy_coef=0.01"], "cannot run on TRL"),
        # eapo forms TRL's loss for a control TRL lacks that weights it: no bonus beside it, grpo/bnpo only
        (
            ["algorithm.method=entropic", "algorithm.entropy_coef=0.01"],
            r"method or keys of entropic with an entropy",
        ),
        (["algorithm.method=entropic", "algorithm.loss_type=dapo"], r"entropic: eapo's loss aggregates as"),
        (["algorithm.method=kl_cov", "algorithm.loss_type=dapo"], "loss_type grpo"),
    ],
)
def test_bad_control_settings_are_refused_with_the_reason(overrides, message):
    from eapo.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_controls_compose_with_any_scheme_and_say_when_they_cannot_act():
    config = load_config(None, ["algorithm.method=eapo", "algorithm.epsilon_high=0.28"]).algorithm
    assert (config.method, config.weighting_method(), config.epsilon_high) == ("eapo", "eapo", 0.28)
    assert any("clip-higher changes nothing" in note for note in config.inert_controls())
    config = load_config(None, ["algorithm.method=clip_higher", "algorithm.num_iterations=2"]).algorithm
    assert config.inert_controls() == [] and config.epsilon_high == 0.28
    user = load_config(None, ["algorithm.method=clip_higher", "algorithm.epsilon_high=0.3"]).algorithm
    assert user.epsilon_high == 0.3  # the user's value wins over the preset's
    assert math.isclose(load_config(None, ["algorithm.method=psr"]).algorithm.entropy_coef, 0.0)


def test_each_control_is_one_module_that_registers_everything_about_it():
    """Every registered control comes from its own module of eapo.core.controls, declares the settings its
    preset and its engine mappings use, and every view of the settings is derived from the declarations."""
    import dataclasses
    import importlib

    from eapo.config.algorithm import AlgorithmConfig
    from eapo.core.controls import CONTROL_METRICS, CONTROL_SETTINGS, trl_control_args

    declared_by = {}
    for name, control in ENTROPY_CONTROLS.items():
        assert importlib.import_module(f"eapo.core.controls.{name}").__dict__.get(name.upper()) is control
        for setting in control.declares:
            declared_by[setting.name] = name
        assert set(control.preset) <= set(CONTROL_SETTINGS), name
        assert set(control.trl_fields) | set(control.verl_options) <= set(CONTROL_SETTINGS), name
        # the shared entropy_control/* keys, or keys in the control's own namespace (entropic/alpha)
        own = {key for key in control.metrics if key.startswith(f"{name}/")}
        assert control.metrics and set(control.metrics) - own <= set(CONTROL_METRICS.values()), name
    assert list(declared_by) == list(CONTROL_SETTINGS)  # each setting declared by exactly one control
    fields = {f.name: f for f in dataclasses.fields(AlgorithmConfig)}
    for key, setting in CONTROL_SETTINGS.items():
        assert fields[key].metadata["help"] == setting.doc and fields[key].metadata["valid"] is setting.valid
    # the generic TRL path: every control's TRL fields, with the declared defaults (controls off)
    args = trl_control_args({key: setting.default for key, setting in CONTROL_SETTINGS.items()})
    assert args == {
        "entropy_coef": 0.0,
        "use_adaptive_entropy": False,
        "entropy_target": 0.0,  # null: anchored at ratio × H_0 by the trainer; 0 until then
        "entropy_coef_delta": 0.005,
        "entropy_coef_min": 0.0,
        "entropy_coef_max": 1.0,
        "epsilon_high": None,
        "top_entropy_quantile": 1.0,
    }


def test_a_control_registered_from_one_place_reaches_the_generic_paths():
    """A new control needs only its registration: its settings, TRL fields, verl options, policy loss and
    run state are found by the generic readers (and it is refused twice, or with undeclared mappings)."""
    import dataclasses

    from eapo.core.controls import (
        CONTROL_SETTINGS,
        EntropyControl,
        control_states,
        policy_loss_of,
        register_entropy_control,
        trl_control_args,
        verl_control_options,
    )
    from eapo.core.settings import Setting, at_least

    class Integral:
        def __init__(self, gain):
            self.gain, self.target = gain, None

        def anchor(self, h0):
            self.target = h0

    def loss(logp, old_logp, advantages, mask, values, *, clip_low, clip_high):
        return -advantages * values["toy_gain"], mask.bool()

    toy = EntropyControl(
        "toy",
        "a test",
        {"toy_gain": 0.5},
        "scales the loss",
        declares=(Setting("toy_gain", float, "gain", at_least(0), default=0.0),),
        trl_fields={"toy_gain": ("toy_trl_gain", lambda value: 2 * value)},
        verl_options={"toy_gain": "policy_loss.toy_gain"},
        policy_loss=loss,
        make_state=lambda values: Integral(values["toy_gain"]) if values.get("toy_gain") else None,
        metrics=("entropy_control/coef",),
    )
    try:
        register_entropy_control(toy)
        values = {**resolve_controls("toy", {}), "loss_mode": "vanilla"}
        assert values["toy_gain"] == 0.5 and "toy_gain" in CONTROL_SETTINGS
        assert trl_control_args(values)["toy_trl_gain"] == 1.0
        assert verl_control_options(values)["policy_loss.toy_gain"] == ("toy_gain", 0.5)
        state = control_states(values)["toy"]
        step = EAPOStep(make_weighting("grpo"), controls={"toy": state})
        step.step(torch.tensor([1.0, 0.0]), [0, 0], 2.5)
        assert state.target == 2.5
        assert policy_loss_of("toy") is loss
        # both engines have it (TRL field, verl option), so neither runs it through eapo's generic path
        from eapo.core.controls import applied_by_eapo, is_on

        assert is_on(toy, values) and not is_on(toy, {"toy_gain": 0.0})
        assert toy not in applied_by_eapo("trl", values) and toy not in applied_by_eapo("verl", values)
        lacking = dataclasses.replace(toy, name="toy_lacking", trl_fields={}, verl_options={})
        ENTROPY_CONTROLS["toy_lacking"] = lacking
        assert lacking in applied_by_eapo("trl", values) and lacking in applied_by_eapo("verl", values)
        with pytest.raises(ValueError, match="registered twice"):
            register_entropy_control(toy)
        with pytest.raises(ValueError, match="maps undeclared settings"):
            register_entropy_control(
                dataclasses.replace(toy, name="toy2", declares=(), trl_fields={"nope": "x"})
            )
    finally:
        ENTROPY_CONTROLS.pop("toy", None)
        ENTROPY_CONTROLS.pop("toy_lacking", None)
        CONTROL_SETTINGS.pop("toy_gain", None)
