"""Where eapo forms TRL's loss (Clip-Cov, KL-Cov, a control TRL lacks such as EntroPIC), ``EAPOTrainer``
refuses, when it is built, every TRL option that only TRL's own loss applies (issue 48): each is named
with its value, none is dropped silently, and the defaults still build."""

from __future__ import annotations

import pytest

from eapo.engines.trl.entropy_control import LOSS_ONLY_OPTIONS, options_eapo_loss_drops

CPU = {"use_cpu": True}

#: one non-default value per option TRL's loss applies and eapo's does not
DROPPED = {
    "entropy_coef": 0.01,
    "use_adaptive_entropy": True,
    "delta": 1.5,
    "off_policy_mask_threshold": 0.5,
    "importance_sampling_level": "sequence",
}


def _args(tmp_path=None, **kwargs):
    from eapo import EAPOConfig

    output = "unused" if tmp_path is None else str(tmp_path / "out")
    return EAPOConfig(output_dir=output, **CPU, **kwargs)


def test_every_option_trls_loss_alone_applies_is_listed():
    assert set(DROPPED) == set(LOSS_ONLY_OPTIONS)


@pytest.mark.parametrize(("option", "value"), sorted(DROPPED.items()))
def test_each_option_is_named_with_its_value(option, value):
    (dropped,) = options_eapo_loss_drops(_args(**{option: value}))
    assert dropped.startswith(f"{option}={value!r} (") and LOSS_ONLY_OPTIONS[option] in dropped


def test_loss_type_and_the_routers_loss_are_named_and_the_defaults_drop_nothing():
    assert options_eapo_loss_drops(_args()) == []
    assert options_eapo_loss_drops(_args(loss_type="bnpo")) == []
    (loss_type,) = options_eapo_loss_drops(_args(loss_type="dapo"))
    assert loss_type.startswith("loss_type='dapo' (eapo's loss aggregates like loss_type 'grpo'")
    (router,) = options_eapo_loss_drops(_args(), router_aux_loss=True)
    assert router.startswith("router_aux_loss_coef=None (the mixture-of-experts router's load-balancing loss")


def _trainer(tmp_path, args):
    from test_trl_config import _dataset, _length_reward

    from eapo import EAPOTrainer
    from eapo.runtime.models import resolve_model

    return EAPOTrainer(
        model=resolve_model("tiny"),
        reward_funcs=_length_reward,
        args=args,
        train_dataset=_dataset(),
    )


def _options(**kwargs):
    return {"per_device_train_batch_size": 8, "max_completion_length": 8, "report_to": "none", **kwargs}


@pytest.mark.parametrize(
    "control",
    [{"loss_mode": "clip_cov"}, {"loss_mode": "kl_cov"}, {"entropic": True}],
    ids=["clip_cov", "kl_cov", "entropic"],
)
def test_eapo_trainer_refuses_at_construction_each_option_its_loss_would_drop(control, tmp_path):
    """A TRL script (not eapo train, whose config refuses the bonus earlier): Clip-Cov's or KL-Cov's loss, or
    EntroPIC's
    weights in eapo's loss, with three options only TRL's loss applies: one error names all three."""
    args = _args(
        tmp_path, **control, **_options(entropy_coef=0.01, delta=1.5, importance_sampling_level="sequence")
    )
    with pytest.raises(ValueError, match="EAPOTrainer forms the policy loss itself here") as refused:
        _trainer(tmp_path, args)
    message = str(refused.value)
    for named in (
        "entropy_coef=0.01 (TRL's entropy bonus",
        "delta=1.5 (",
        "importance_sampling_level='sequence'",
    ):
        assert named in message
    assert "Set each to TRL's default" in message


def test_the_defaults_build_and_trls_own_loss_keeps_its_options(tmp_path):
    """Clip-Cov with EAPOConfig's defaults builds; the entropy bonus and delta without a loss eapo forms
    build too (TRL's loss applies them)."""
    clip_cov = _trainer(tmp_path, _args(tmp_path, loss_mode="clip_cov", **_options()))
    assert clip_cov._eapo_runs_the_loss()
    assert _trainer(
        tmp_path, _args(tmp_path, method="clip_cov", **_options())
    )._eapo_runs_the_loss()  # preset
    trls = _trainer(tmp_path, _args(tmp_path, **_options(entropy_coef=0.01, delta=1.5)))
    assert not trls._eapo_runs_the_loss() and trls.args.delta == 1.5
