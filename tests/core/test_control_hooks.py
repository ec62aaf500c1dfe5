"""The hooks a control registers for what an engine does by its own means (``trl_applied_coef``,
``trl_token_mask``, ``trl_placeholders``, ``verl_selected``), read by the engines generically, and the
adaptive coefficient's strict state (no reader of older files)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from eapo.core.controls import (
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    AdaptiveEntropyCoef,
    TokenInputs,
    clips_ratio,
    control_defaults,
    kl_cov_mask,
    register_entropy_control,
    trl_control_args,
    trl_placeholder_fields,
)

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def inputs(settings: dict, logp=None, advantages=None) -> TokenInputs:
    logp = torch.tensor([[-0.5, -1.0, -2.0], [-0.2, -3.0, -0.7]]) if logp is None else logp
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]) if advantages is None else advantages
    return TokenInputs(
        logp=logp, old_logp=logp, advantages=advantages, mask=MASK.bool(), entropy=None, settings=settings
    )


def test_a_state_without_one_of_its_keys_is_refused_naming_the_key_and_the_file():
    coef = AdaptiveEntropyCoef(target=1.0)
    coef.update(0.5)
    for key in ("coef", "target", "last_entropy"):
        state = {k: v for k, v in coef.state_dict().items() if k != key}
        with pytest.raises(
            ValueError, match=rf"controls\.adaptive_entropy\.{key} of the checkpoint's eapo_state\.json"
        ):
            AdaptiveEntropyCoef(target=1.0).load_state_dict(state)
    restored = AdaptiveEntropyCoef(target=1.0)
    restored.load_state_dict(coef.state_dict())
    assert (restored.coef, restored.last_entropy) == (0.005, 0.5)


def test_trl_applied_coef_gates_trls_coefficient_as_the_adaptive_rule():
    hook = ENTROPY_CONTROLS["adaptive_entropy"].trl_applied_coef
    trainer = SimpleNamespace(
        use_adaptive_entropy=True,
        entropy_coef=0.03,
        _last_world_entropy=1.0,
        args=SimpleNamespace(entropy_target=1.0),
    )
    assert hook(trainer) == 0.03  # at the target: applied
    trainer._last_world_entropy = 1.2
    assert hook(trainer) == 0.0  # above: not applied
    trainer._last_world_entropy = float("inf")
    assert hook(trainer) == 0.0  # nothing measured yet
    trainer.use_adaptive_entropy = False
    assert hook(trainer) is None  # TRL's controller off: the plain coefficient applies
    assert [name for name, c in ENTROPY_CONTROLS.items() if c.trl_applied_coef is not None] == [
        "adaptive_entropy"
    ]


def test_trl_token_mask_is_trls_own_mask_while_its_quantile_is_below_one():
    control = ENTROPY_CONTROLS["top_entropy"]
    calls = []

    def get_high_entropy_mask(entropies, mask, threshold):
        calls.append(threshold)
        return mask.bool()

    trainer = SimpleNamespace(top_entropy_quantile=1.0, get_high_entropy_mask=get_high_entropy_mask)
    entropies = torch.ones(2, 3)
    assert control.trl_token_mask(trainer, entropies, MASK) is None and calls == []
    trainer.top_entropy_quantile = 0.2
    assert control.trl_token_mask(trainer, entropies, MASK).tolist() == MASK.bool().tolist()
    assert calls == [pytest.approx(0.8)]  # TRL's threshold is the 1 − quantile quantile
    assert control.weight_metric == "entropy_control/top_entropy_frac"


def test_trl_placeholders_fill_an_unset_field_for_trl_and_leave_it_none_for_eapoconfig():
    assert trl_placeholder_fields() == {
        "entropy_target": (ENTROPY_CONTROLS["adaptive_entropy"], "entropy_target", 0.0)
    }
    values = control_defaults()
    assert trl_control_args(values)["entropy_target"] == 0.0
    assert trl_control_args(values, placeholders=False)["entropy_target"] is None
    assert trl_control_args({**values, "entropy_target": 0.7}, placeholders=False)["entropy_target"] == 0.7
    toy = dataclasses.replace(
        ENTROPY_CONTROLS["entropy_bonus"], name="toy", trl_placeholders={"entropy_coef": 0.0}
    )
    toy = dataclasses.replace(toy, trl_fields={})
    with pytest.raises(ValueError, match="trl_placeholders names a setting without a TRL field"):
        register_entropy_control(toy)
    assert "toy" not in ENTROPY_CONTROLS and set(CONTROL_SETTINGS) == set(control_defaults())


def test_verl_selected_shares_by_hand():
    clip_cov, kl_cov = ENTROPY_CONTROLS["clip_cov"].verl_selected, ENTROPY_CONTROLS["kl_cov"].verl_selected
    metrics = {"actor/pg_clipfrac": 0.25}
    assert clip_cov(inputs({}), metrics.get) == 0.25  # verl's Clip-Cov reports it as pg_clipfrac
    assert clip_cov(inputs({}), {}.get) is None
    # KL-Cov selects max(1, ⌊ratio · 5⌋) of the 5 response tokens: 2 at ratio 0.4, 1 at 2e-4
    assert kl_cov(inputs({"kl_cov_ratio": 0.4}), {}.get) == pytest.approx(2 / 5)
    assert kl_cov(inputs({"kl_cov_ratio": 2e-4}), {}.get) == pytest.approx(1 / 5)
    given = inputs({"kl_cov_ratio": 0.4})
    selected = kl_cov_mask(given.logp, given.advantages, given.mask, kl_cov_ratio=0.4)
    assert kl_cov(given, {}.get) == selected.sum().item() / 5


def test_clips_ratio_follows_the_loss_modes_declared_metrics():
    assert clips_ratio("vanilla") and clips_ratio("clip_cov") and clips_ratio("gspo")
    assert not clips_ratio("kl_cov")  # KL-Cov's loss does not clip the ratio


def test_trl_loss_only_names_the_trl_field_each_control_maps():
    loss_only = {name: dict(c.trl_loss_only) for name, c in ENTROPY_CONTROLS.items() if c.trl_loss_only}
    assert set(loss_only) == {"entropy_bonus", "adaptive_entropy"}
    for name, fields in loss_only.items():
        assert set(fields) <= set(ENTROPY_CONTROLS[name].trl_fields.values()) and all(fields.values()), name
