"""Entropy controls on verl: eapo.core's Clip-Cov / KL-Cov equal verl's own; eapo's keys reach verl's
actor config; the top-entropy mask and the adaptive coefficient reach the actor's loss; every preset
trains through the plugin on the CPU (a tiny per-position policy stands in for the actor workers)
with the loss eapo.core's functions give, and resume restores the adaptive coefficient.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import NonTensorStack, TensorDict  # noqa: E402
from verl.trainer.ppo.core_algos import (  # noqa: E402
    POLICY_LOSS_REGISTRY,
    agg_loss,
    compute_policy_loss_clip_cov,
    compute_policy_loss_kl_cov,
)
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.metric import Metric  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from eapo.core import Algorithm, make_weighting, ppo_clip_per_token  # noqa: E402
from eapo.core.controls import (  # noqa: E402
    ENTROPY_CONTROLS,
    clip_cov_policy_loss,
    kl_cov_policy_loss,
    top_entropy_mask,
)
from eapo.core.step import grouped_polarity_advantages  # noqa: E402
from eapo.engines.verl import EAPOVerlTrainer  # noqa: E402
from eapo.engines.verl.entropy_control import (  # noqa: E402
    CONTROL_INPUTS_KEY,
    WEIGHTED_LOSS_MODE,
    compute_policy_loss_token_weights,
    controls_active,
    entropy_control_loss,
)
from eapo.engines.verl.launch import NO_DUAL_CLIP  # noqa: E402
from eapo.engines.verl.settings import algorithm_for_estimator, algorithm_for_trainer  # noqa: E402

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]


def actor_config(**overrides) -> ActorConfig:
    policy_loss = PolicyLossConfig(**overrides.pop("policy_loss", {}))
    return ActorConfig(
        strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=2, policy_loss=policy_loss, **overrides
    )


def random_batch(seed: int, batch: int = 6, length: int = 40):
    """Fixed tensors spread wide enough that Clip-Cov's window (1, 5) holds many candidates."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]  # [B, T]
    old_logp = -4 * torch.rand(batch, length, generator=generator)  # [B, T]
    logp = old_logp + 0.4 * torch.randn(batch, length, generator=generator)  # the policy has moved
    advantages = (3 * torch.randn(batch, 1, generator=generator)).expand(batch, length) * mask  # [B, T]
    return logp, old_logp, advantages, mask


# --- (a) eapo.core's Clip-Cov and KL-Cov equal verl's own ----------------------------------------


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clip_cov_equals_verls_loss_and_gradient(agg, seed):
    logp, old_logp, advantages, mask = random_batch(seed)
    settings = {"clip_cov_ratio": 0.05, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    config = actor_config(
        clip_ratio_low=0.2, clip_ratio_high=0.28, policy_loss={"loss_mode": "clip_cov", **settings}
    )

    theirs_logp = logp.clone().requires_grad_(True)
    torch.manual_seed(100 + seed)  # Clip-Cov draws its tokens with torch.randperm
    theirs, metrics = compute_policy_loss_clip_cov(old_logp, theirs_logp, advantages, mask, agg, config)
    theirs.backward()

    ours_logp = logp.clone().requires_grad_(True)
    torch.manual_seed(100 + seed)
    per_token, selected = clip_cov_policy_loss(
        ours_logp, old_logp, advantages, mask, clip_low=0.2, clip_high=0.28, **settings
    )
    ours = agg_loss(per_token, mask, agg)
    ours.backward()

    # a real draw: more candidates than the max(1, ⌊0.05 · #tokens⌋) it keeps
    assert selected.sum().item() == max(1, int(0.05 * mask.sum().item())) > 1
    assert metrics["actor/pg_clipfrac"] == pytest.approx(selected.sum().item() / mask.sum().item())
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad, rtol=1e-6, atol=1e-7)
    assert torch.all(ours_logp.grad[selected] == 0) and ours_logp.grad.abs().sum() > 0


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kl_cov_equals_verls_loss_and_gradient(agg, seed):
    logp, old_logp, advantages, mask = random_batch(seed)
    config = actor_config(policy_loss={"loss_mode": "kl_cov", "kl_cov_ratio": 0.05, "ppo_kl_coef": 0.1})

    theirs_logp = logp.clone().requires_grad_(True)
    theirs, _ = compute_policy_loss_kl_cov(old_logp, theirs_logp, advantages, mask, agg, config)
    theirs.backward()

    ours_logp = logp.clone().requires_grad_(True)
    per_token, selected = kl_cov_policy_loss(
        ours_logp, old_logp, advantages, mask, kl_cov_ratio=0.05, ppo_kl_coef=0.1
    )
    ours = agg_loss(per_token, mask, agg)
    ours.backward()

    assert selected.sum().item() == max(1, int(0.05 * mask.sum().item())) > 1
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad, rtol=1e-6, atol=1e-7)


# --- (b) eapo's keys reach verl's actor config ----------------------------------------------------

#: preset -> the verl options (under actor_rollout_ref.actor) it must arrive at.
PRESET_OPTIONS = {
    "entropy_bonus": {"entropy_coeff": 0.01, "calculate_entropy": False},
    "adaptive_entropy": {"entropy_coeff": 0, "calculate_entropy": True},
    "clip_higher": {"clip_ratio_high": 0.28, "clip_ratio_low": 0.2},
    "clip_cov": {
        "policy_loss.loss_mode": "clip_cov",
        "policy_loss.clip_cov_ratio": 2e-4,
        "policy_loss.clip_cov_lb": 1.0,
        "policy_loss.clip_cov_ub": 5.0,
    },
    "kl_cov": {
        "policy_loss.loss_mode": "kl_cov",
        "policy_loss.kl_cov_ratio": 2e-4,
        "policy_loss.ppo_kl_coef": 0.1,
    },
    "top_entropy": {"calculate_entropy": True, "policy_loss.loss_mode": "vanilla"},
    "entropic": {"calculate_entropy": False, "policy_loss.loss_mode": "vanilla"},
}


def preset_config(verl_config, method, **keys):
    verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2  # as a runnable config has
    verl_config.algorithm.adv_estimator = "eapo_grpo"
    verl_config.algorithm.eapo = {"method": method, **keys}
    return verl_config


#: The keys users write under ``algorithm.eapo`` (a contract: configs and scripts name them), flat.
ACCEPTED_KEYS = (
    "method",
    "w_pos",
    "w_neg",
    "w0",
    "w_min",
    "w_max",
    "integral_gain",
    "anchor_steps",
    "split_by",
    "quantile_k",
    "quantile_method",
    "entropy_agg",
    "entropy_coef",
    "adaptive_entropy",
    "entropy_target",
    "entropy_target_ratio",
    "entropy_coef_delta",
    "entropy_coef_min",
    "entropy_coef_max",
    "epsilon_high",
    "loss_mode",
    "clip_cov_ratio",
    "clip_cov_lb",
    "clip_cov_ub",
    "kl_cov_ratio",
    "ppo_kl_coef",
    "top_entropy_quantile",
    "entropic",
    "entropic_kp",
    "entropic_ki",
    "entropic_threshold",
    "entropic_target",
    "entropic_target_ratio",
)


def test_every_preset_is_covered():
    import dataclasses

    from eapo.core import CONTROL_SETTINGS
    from eapo.engines.verl.settings import setting_keys

    assert set(PRESET_OPTIONS) == set(ENTROPY_CONTROLS)
    assert setting_keys() == ACCEPTED_KEYS
    # the controls are declared once (eapo.core); the one resolved value holds them
    assert tuple(Algorithm.resolve("eapo", objective=False).controls) == tuple(CONTROL_SETTINGS)
    fields = tuple(f.name for f in dataclasses.fields(Algorithm))
    assert fields == (
        "method",
        "scheme",
        "weights",
        "split_by",
        "quantile_k",
        "quantile_method",
        "entropy_agg",
        "controls",
        "objective",
    )
    assert sum(len(row) for row in TOKENS) == N_TOKENS


@pytest.mark.parametrize("method", sorted(PRESET_OPTIONS))
def test_preset_reaches_verls_actor_config(method, verl_config):
    trainer = EAPOVerlTrainer(preset_config(verl_config, method))
    assert (trainer.algorithm.scheme, trainer.estimator) == ("grpo", "eapo_grpo")
    assert trainer.weighting.weights(None) == (1.0, 1.0)
    actor = trainer.config.actor_rollout_ref.actor
    for option, value in PRESET_OPTIONS[method].items():
        assert OmegaConf.select(actor, option) == pytest.approx(value), option
    # the workers' own dataclass of that config, bound into the loss the trainer hands them
    loss_fn = trainer.actor_loss_fn()
    assert loss_fn.func is entropy_control_loss
    bound = loss_fn.keywords["config"]
    for option, value in PRESET_OPTIONS[method].items():
        node = bound
        for part in option.split("."):
            node = getattr(node, part)
        assert node == pytest.approx(value), option
    # the controls verl lacks, which eapo runs in that loss (generically: their token weights, run state)
    expected = {
        "top_entropy": ("top_entropy",),
        "adaptive_entropy": ("adaptive_entropy",),
        "entropic": ("entropic",),
    }.get(method, ())
    assert loss_fn.keywords["controls"] == expected
    assert loss_fn.keywords["settings"] == trainer.algorithm.control_values()


def test_keys_set_beside_a_preset_win_and_are_mapped(verl_config):
    trainer = EAPOVerlTrainer(preset_config(verl_config, "clip_cov", clip_cov_ratio=1e-3, epsilon_high=0.3))
    actor = trainer.config.actor_rollout_ref.actor
    assert (actor.policy_loss.loss_mode, actor.policy_loss.clip_cov_ratio, actor.clip_ratio_high) == (
        "clip_cov",
        1e-3,
        0.3,
    )
    from eapo.engines.verl.entropy_control import verl_overrides

    assert verl_overrides(trainer.algorithm) == [
        "actor_rollout_ref.actor.clip_ratio_high=0.3",
        "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.001",
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb=1.0",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ub=5.0",
    ]


def test_plain_eapo_leaves_verls_options_and_loss_alone(verl_config):
    before = OmegaConf.to_container(verl_config.actor_rollout_ref.actor)
    trainer = EAPOVerlTrainer(verl_config)
    assert not controls_active(trainer.algorithm) and trainer.verl_options == {}
    assert OmegaConf.to_container(trainer.config.actor_rollout_ref.actor) == before


def test_verls_option_set_to_the_same_value_is_accepted(verl_config):
    verl_config.actor_rollout_ref.actor.clip_ratio_high = 0.28
    trainer = EAPOVerlTrainer(preset_config(verl_config, "clip_higher"))
    assert trainer.config.actor_rollout_ref.actor.clip_ratio_high == 0.28


@pytest.mark.parametrize(
    ("method", "keys", "verl_options", "message"),
    [
        (
            "clip_higher",
            {},
            {"clip_ratio_high": 0.3},
            r"algorithm.eapo.epsilon_high sets actor_rollout_ref.actor.clip_ratio_high=0.28, but it is set to 0.3",
        ),
        (
            "entropy_bonus",
            {},
            {"entropy_coeff": 0.05},
            r"algorithm.eapo.entropy_coef sets actor_rollout_ref.actor.entropy_coeff=0.01, but it is set to 0.05",
        ),
        (
            "clip_cov",
            {},
            {"policy_loss.loss_mode": "gspo"},
            r"algorithm.eapo.loss_mode sets actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov, but it is set to gspo",
        ),
        (
            "adaptive_entropy",
            {},
            {"entropy_coeff": 0.01},
            r"adaptive_entropy sets the entropy_coef each step \(as actor_rollout_ref.actor.entropy_coeff\), but "
            r"actor_rollout_ref.actor.entropy_coeff=0.01",
        ),
        (
            "top_entropy",
            {},
            {"policy_loss.loss_mode": "gspo"},
            r"top_entropy weights the per-token policy loss of vanilla, clip_cov, kl_cov; .*loss_mode=gspo",
        ),
        (
            "kl_cov",
            {"epsilon_high": 0.28},
            {},
            r"epsilon_high cannot be combined with loss_mode=kl_cov: KL-Cov does not clip the ratio",
        ),
        (
            "clip_higher",
            {"clip_cov_ratio": 0.01},
            {},
            r"algorithm.eapo.clip_cov_ratio applies only with .*loss_mode=clip_cov",
        ),
        (
            "entropy_bonus",
            {"entropy_target": 1.0},
            {},
            r"algorithm.eapo.entropy_target applies only to the adaptive",
        ),
        (
            "clip_cov",
            {"loss_mode": "gspo"},
            {},
            r"algorithm.eapo.loss_mode='gspo' is invalid; valid: vanilla, clip_cov, kl_cov",
        ),
        (
            "top_entropy",
            {"top_entropy_quantile": 1.5},
            {},
            r"top_entropy_quantile=1.5 is invalid; valid: a number in \[0, 1\]",
        ),
        (
            "adaptive_entropy",
            {"entropy_coef_min": 0.5, "entropy_coef_max": 0.1},
            {},
            r"algorithm.eapo.entropy_coef_min \(0.5\) must be <= entropy_coef_max \(0.1\)",
        ),
        (
            "clip_higher",
            {"epsilon_high": -0.1},
            {},
            r"algorithm.eapo.epsilon_high=-0.1 is invalid; valid: a number > 0",
        ),
        (
            "entropic",
            {},
            {"policy_loss.loss_mode": "gspo"},
            r"entropic weights the per-token policy loss of vanilla, clip_cov, kl_cov; .*loss_mode=gspo",
        ),
        (
            "grpo",
            {"entropic_ki": 0.1},
            {},
            r"algorithm.eapo.entropic_ki applies only to EntroPIC: set algorithm.eapo.entropic=true",
        ),
        (
            "entropic",
            {"entropic_threshold": 1.0},
            {},
            r"algorithm.eapo.entropic_threshold=1.0 is invalid; valid: a number in \[0, 1\)",
        ),
    ],
)
def test_combinations_that_cannot_work_are_refused(verl_config, method, keys, verl_options, message):
    for option, value in verl_options.items():
        OmegaConf.update(verl_config.actor_rollout_ref.actor, option, value)
    with pytest.raises(ValueError, match=message):
        EAPOVerlTrainer(preset_config(verl_config, method, **keys))


def test_estimator_and_method_must_agree(verl_config):
    verl_config.algorithm.eapo = {"method": "clip_cov"}  # adv_estimator=eapo
    with pytest.raises(
        ValueError,
        match=r"method=clip_cov is a preset on GRPO's weights \(1, 1\), run by algorithm.adv_estimator=eapo_grpo, "
        r"but algorithm.adv_estimator=eapo: .*method=eapo loss_mode=clip_cov",
    ):
        EAPOVerlTrainer(verl_config)
    verl_config.algorithm.eapo = {"method": "grpo"}
    with pytest.raises(ValueError, match=r"the grpo scheme's estimator is eapo_grpo"):
        EAPOVerlTrainer(verl_config)
    verl_config.algorithm.eapo = {"method": "dapo"}
    with pytest.raises(
        ValueError, match=r"algorithm.eapo.method='dapo' is unknown; valid: weighting schemes"
    ):
        EAPOVerlTrainer(verl_config)


def test_refused_where_verl_cannot_run_them(verl_config):
    bypass = preset_config(verl_config.copy(), "adaptive_entropy")
    bypass.algorithm.rollout_correction.bypass_mode = True
    with pytest.raises(
        ValueError, match=r"the entropy control adaptive_entropy needs this step's rollout entropy"
    ):
        EAPOVerlTrainer(bypass)
    distilled = preset_config(verl_config.copy(), "clip_cov")
    distilled.distillation.enabled = True
    with pytest.raises(ValueError, match=r"distillation \(distillation.enabled=True\) replaces that loss"):
        EAPOVerlTrainer(distilled)
    # outside the eapo trainer the estimator cannot apply a control
    with pytest.raises(
        ValueError, match=r"entropy control \(clip_cov\), which only the eapo trainer applies"
    ):
        algorithm_for_estimator("eapo_grpo", {"eapo": {"method": "clip_cov"}})
    with pytest.raises(ValueError, match=r"entropy control \(\['epsilon_high'\]\)"):
        algorithm_for_estimator("psr", {"eapo": {"epsilon_high": 0.28}})
    assert algorithm_for_estimator("eapo_grpo", {}).make_weighting().weights(None) == (1.0, 1.0)


def test_eapo_token_weights_is_not_selected_by_hand():
    assert POLICY_LOSS_REGISTRY[WEIGHTED_LOSS_MODE] is compute_policy_loss_token_weights
    logp, old_logp, advantages, mask = random_batch(0)
    with pytest.raises(RuntimeError, match=r"set a control verl lacks .*trainer_mode=eapo"):
        compute_policy_loss_token_weights(old_logp, logp, advantages, mask, "token-mean", actor_config())


# --- (c) the top-entropy mask and the per-step coefficient reach verl's loss ---------------------


def micro_batch(logp_rows, entropy_rows, advantages, *, extra=None, old_shift=0.0):
    """A micro-batch as verl's engine hands it to the loss (jagged fields, one prompt token per row)
    and the model output (log-probs and entropies over prompt + response, as no_padding_2_padding reads)."""
    lengths = [len(row) for row in logp_rows]
    flat_logp = torch.tensor([v for row in logp_rows for v in (*row, 0.0)], requires_grad=True)
    flat_entropy = torch.tensor([v for row in entropy_rows for v in (*row, 0.0)])
    offsets = torch.tensor([0] + [sum(n + 1 for n in lengths[: i + 1]) for i in range(len(lengths))])
    model_output = {
        "log_probs": torch.nested.nested_tensor_from_jagged(flat_logp, offsets),
        "entropy": torch.nested.nested_tensor_from_jagged(flat_entropy, offsets),
    }

    def jagged(rows):
        return torch.nested.as_nested_tensor(
            [torch.tensor(row, dtype=torch.float32) for row in rows], layout=torch.jagged
        )

    data = TensorDict(
        {
            "prompts": jagged([[0.0] for _ in lengths]),
            "responses": jagged([[1.0] * n for n in lengths]),
            "response_mask": jagged([[1.0] * n for n in lengths]),
            "old_log_probs": jagged([[v - old_shift for v in row] for row in logp_rows]),
            "advantages": jagged([[a] * n for a, n in zip(advantages, lengths, strict=True)]),
        },
        batch_size=len(lengths),
    )
    tu.assign_non_tensor(
        data, dp_size=1, batch_num_tokens=sum(lengths), global_batch_size=len(lengths), **(extra or {})
    )
    return model_output, data, flat_logp


def metric(value):
    return value.aggregate() if isinstance(value, Metric) else value


def test_top_entropy_mask_and_step_coefficient_in_the_loss_by_hand():
    """Entropies [0.1, 0.9, 0.5] and [0.7, 0.3]; quantile 0.4 keeps tokens at or above the 0.6 quantile
    of the five (0.5 + 0.4 · 0.2 = 0.58): 0.9 and 0.7. At ρ = 1 each kept token's loss is −A, so with
    A = (1, −2) the token-mean policy loss is (−1 + 2) / 5 = 0.2, and the bonus 0.1 · mean entropy 0.5
    (from the step's coefficient, not the config's 0) makes the loss 0.15. d loss / d log π is −A / 5
    on the kept tokens, 0 elsewhere."""
    model_output, data, flat_logp = micro_batch(
        [[-1.0, -2.0, -0.5], [-1.5, -0.3]],
        [[0.1, 0.9, 0.5], [0.7, 0.3]],
        [1.0, -2.0],
        extra={CONTROL_INPUTS_KEY: json.dumps({"adaptive_entropy": {"entropy_coef": 0.1}})},
    )
    config = actor_config(calculate_entropy=True)
    settings = Algorithm.resolve(
        "eapo", {"adaptive_entropy": True, "top_entropy_quantile": 0.4}
    ).control_values()
    loss, metrics = entropy_control_loss(
        config, model_output, data, controls=("adaptive_entropy", "top_entropy"), settings=settings
    )
    loss.backward()
    assert loss.item() == pytest.approx(0.15, abs=1e-6)
    assert metric(metrics["actor/pg_loss"]) == pytest.approx(0.2, abs=1e-6)
    assert metric(metrics["actor/entropy_loss"]) == pytest.approx(0.5, abs=1e-6)
    assert metric(metrics["entropy_control/top_entropy_frac"]) == pytest.approx(0.4)
    assert metric(metrics["entropy_control/clip_low_frac"]) == 0.0
    assert metric(metrics["entropy_control/clip_high_frac"]) == 0.0
    # row 0: positions 0..2 then its dummy; row 1: 4..5 then its dummy
    torch.testing.assert_close(flat_logp.grad, torch.tensor([0.0, -0.2, 0.0, 0.0, 0.4, 0.0, 0.0]))
    assert config.entropy_coeff == 0  # the step's value was used, the config left alone
    assert config.policy_loss.loss_mode == "vanilla"
    # the mask is eapo.core's
    entropies = torch.tensor([[0.1, 0.9, 0.5], [0.7, 0.3, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert top_entropy_mask(entropies, mask, 0.4).tolist() == [[False, True, False], [True, False, False]]


def test_a_control_verl_lacks_runs_through_the_generic_path_by_hand():
    """A toy control registered in core alone (verl has no option for it) weights positive-advantage
    tokens by its run state's per-step input ``toy_scale`` = 3. At ρ = 1 each token's loss is −A·w:
    rows A = (1, −2) of 3 and 2 tokens give (3 · 3 · (−1) + 2 · 2) / 5 = −1 (token-mean), the weight's
    share is (3 · 3 + 2) / 5 = 2.2, and d loss / d log π is −A·w / 5."""
    from eapo.core.controls import ENTROPY_CONTROLS, EntropyControl, register_entropy_control

    def weights(inputs):
        return torch.where(inputs.advantages > 0, inputs.step["toy_scale"], 1.0) * inputs.mask

    register_entropy_control(
        EntropyControl("toy", "a test", token_weights=weights, weight_metric="entropy_control/toy_weight")
    )
    try:
        model_output, data, flat_logp = micro_batch(
            [[-1.0, -2.0, -0.5], [-1.5, -0.3]],
            [[0.1, 0.9, 0.5], [0.7, 0.3]],
            [1.0, -2.0],
            extra={CONTROL_INPUTS_KEY: json.dumps({"toy": {"toy_scale": 3.0}})},
        )
        loss, metrics = entropy_control_loss(
            actor_config(), model_output, data, controls=("toy",), settings={}
        )
        loss.backward()
    finally:
        ENTROPY_CONTROLS.pop("toy")
    assert loss.item() == pytest.approx(-1.0, abs=1e-6)
    assert metric(metrics["entropy_control/toy_weight"]) == pytest.approx(2.2)
    torch.testing.assert_close(flat_logp.grad, torch.tensor([-0.6, -0.6, -0.6, 0.0, 0.4, 0.4, 0.0]))


def test_entropic_weights_in_the_loss_by_hand():
    """EntroPIC through verl's loss: α = 0.5 from the step's controller input, threshold 0.5. π of the tokens
    is e^(−1, −2, −0.5) = (0.37, 0.14, 0.61) and e^(−1.5, −0.3) = (0.22, 0.74): 0.61 (A = 1) is weighted
    1 + α = 1.5 and 0.74 (A = −2) 1 − α = 0.5. At ρ = 1 each token's loss is −A·w: (−1 − 1 − 1.5 + 2 + 1) / 5
    = −0.1 (token-mean); d loss / d log π is −A·w / 5; the KL-free loss leaves entropies unread."""
    model_output, data, flat_logp = micro_batch(
        [[-1.0, -2.0, -0.5], [-1.5, -0.3]],
        [[0.1, 0.9, 0.5], [0.7, 0.3]],
        [1.0, -2.0],
        extra={CONTROL_INPUTS_KEY: json.dumps({"entropic": {"entropic_alpha": 0.5}})},
    )
    del model_output["entropy"]  # EntroPIC needs none (calculate_entropy stays False)
    settings = Algorithm.resolve("eapo", {"entropic": True, "entropic_threshold": 0.5}).control_values()
    config = actor_config()
    loss, metrics = entropy_control_loss(
        config, model_output, data, controls=("entropic",), settings=settings
    )
    loss.backward()
    assert loss.item() == pytest.approx(-0.1, abs=1e-6)
    assert metric(metrics["actor/pg_loss"]) == pytest.approx(-0.1, abs=1e-6)
    torch.testing.assert_close(flat_logp.grad, torch.tensor([-0.2, -0.2, -0.3, 0.0, 0.4, 0.2, 0.0]))
    assert config.policy_loss.loss_mode == "vanilla"  # the weights went through eapo_token_weights
    # without the step's α the weights cannot be formed
    model_output, data, _ = micro_batch([[-1.0]], [[0.1]], [1.0])
    with pytest.raises(ValueError, match="need the controller's α"):
        entropy_control_loss(config, model_output, data, controls=("entropic",), settings=settings)


def test_clip_shares_by_hand():
    """ρ = exp(0.5) = 1.65 on every token (old log π shifted by −0.5): A > 0 tokens are above 1 + 0.28,
    A < 0 ones are not below 0.8. Three of five tokens have A > 0."""
    model_output, data, _ = micro_batch(
        [[-1.0, -2.0, -0.5], [-1.5, -0.3]], [[0.1] * 3, [0.1] * 2], [1.0, -2.0], old_shift=0.5
    )
    config = actor_config(clip_ratio_high=0.28)
    _, metrics = entropy_control_loss(config, model_output, data)
    assert metric(metrics["entropy_control/clip_high_frac"]) == pytest.approx(0.6)
    assert metric(metrics["entropy_control/clip_low_frac"]) == 0.0
    assert "entropy_control/top_entropy_frac" not in metrics


def test_adaptive_coefficient_by_hand(verl_config, in_memory_tq):
    """target = 1.0 × H_0 = 1.2, δ = 0.01. Step 1 applies 0 (nothing measured yet), then H = 1.2 ≤ 1.2
    raises the coefficient to 0.01; step 2 applies 0.01, H = 1.0 raises it to 0.02; step 3 applies 0.02,
    H = 1.5 > 1.2 lowers it to 0.01; step 4 applies 0 (the last entropy was above the target)."""
    from test_verl_trainer import run_step

    trainer = EAPOVerlTrainer(preset_config(verl_config, "adaptive_entropy", entropy_coef_delta=0.01))
    applied = []
    for step, entropy in enumerate([1.2, 1.0, 1.5, 1.1], start=1):
        _, metrics = run_step(trainer, in_memory_tq, step, entropy=entropy)
        applied.append(metrics["entropy_control/coef"])
    assert applied == pytest.approx([0.0, 0.01, 0.02, 0.0])
    assert trainer.eapo_step.controls["adaptive_entropy"].target == pytest.approx(1.2)
    assert trainer.eapo_step.controls["adaptive_entropy"].coef == pytest.approx(0.02)
    assert metrics["eapo/w_pos"] == metrics["eapo/w_neg"] == 1.0

    fixed = EAPOVerlTrainer(preset_config(verl_config.copy(), "adaptive_entropy", entropy_target=0.5))
    run_step(fixed, in_memory_tq, 11, entropy=1.2)
    assert fixed.eapo_step.controls["adaptive_entropy"].target == 0.5  # nats, not anchored


def test_settings_equality_and_defaults(verl_config):
    algorithm = algorithm_for_trainer(preset_config(verl_config, "top_entropy").algorithm)
    assert algorithm == Algorithm.resolve("top_entropy", objective=False)
    assert algorithm.set_controls() == {"top_entropy_quantile": 0.2}  # the preset's, nothing else set
    composed = algorithm_for_trainer(
        {"adv_estimator": "eapo", "eapo": {"epsilon_high": 0.28, "top_entropy_quantile": 0.5}}
    )
    assert composed == Algorithm.resolve(
        "eapo", {"epsilon_high": 0.28, "top_entropy_quantile": 0.5}, objective=False
    )
    assert composed.set_controls() == {"epsilon_high": 0.28, "top_entropy_quantile": 0.5}


# --- (d, e) a short CPU training per preset, and composed with eapo's weighting -------------------

VOCAB = 3
UIDS = ["a", "b", "a", "b", "a", "b", "a", "b"]
SCORES = [0.9, 0.1, 0.4, 0.6, 0.2, 0.2, 0.8, 0.5]
TOKENS = [[0, 1, 2], [2], [1, 1, 0, 2], [0, 2], [2, 2], [1, 0, 1, 2, 0], [0], [2, 1, 0]]
N_TOKENS = 21


class TinyPolicy:
    """A per-position categorical policy (logits ``[T, V]``): what the actor workers' model is here."""

    def __init__(self, seed: int = 0) -> None:
        self.logits = torch.randn(5, VOCAB, generator=torch.Generator().manual_seed(seed)).requires_grad_(
            True
        )

    def forward(self, tokens):
        """Per row: log π of its tokens and the per-position entropies, each ``(L,)``."""
        logp = torch.log_softmax(self.logits, dim=-1)  # [T, V]
        entropy = -(logp.exp() * logp).sum(-1)  # [T]
        rows = [logp[torch.arange(len(row)), torch.tensor(row)] for row in tokens]
        return rows, [entropy[: len(row)] for row in tokens]


class TinyActorWorkerGroup:
    """The actor worker group's ``set_loss_fn`` and ``update_actor``, in process: reads the batch from
    the TransferQueue stand-in with verl's ``extra_info`` as non-tensor fields (as
    ``verl.utils.transferqueue_utils`` does), runs ``epochs`` passes of the installed loss on the whole
    batch (one micro-batch) and an SGD step after each, and records what each loss call saw."""

    def __init__(self, queue, policy: TinyPolicy, lr: float = 5.0) -> None:
        self.queue, self.policy, self.lr = queue, policy, lr
        self.loss_fn = None
        self.calls: list[dict] = []

    def set_loss_fn(self, loss_fn):
        self.loss_fn = loss_fn

    def update_actor(self, batch):
        fields = ["response_mask", "old_log_probs", "advantages", "tokens"]
        stored = self.queue.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        tokens = [row.long().tolist() for row in stored["tokens"].unbind(0)]
        metrics: dict[str, list[float]] = {}
        for _ in range(batch.extra_info["epochs"]):
            logp_rows, entropy_rows = self.policy.forward(tokens)
            model_output, data = self._micro_batch(stored, tokens, logp_rows, entropy_rows, batch.extra_info)
            rng = torch.get_rng_state()
            loss, step_metrics = self.loss_fn(model_output=model_output, data=data, dp_group=None)
            self.calls.append(
                {
                    "rng": rng,
                    "logp": torch.nn.utils.rnn.pad_sequence(
                        [r.detach() for r in logp_rows], batch_first=True
                    ),
                    "entropy": torch.nn.utils.rnn.pad_sequence(
                        [r.detach() for r in entropy_rows], batch_first=True
                    ),
                    "loss": loss.item(),
                    "extra_info": dict(batch.extra_info),
                }
            )
            self.policy.logits.grad = None
            loss.backward()
            with torch.no_grad():
                self.policy.logits -= self.lr * self.policy.logits.grad
            for key, value in step_metrics.items():
                metrics.setdefault(key, []).append(float(metric(value)))
        return {"metrics": {**metrics, "mfu": [0.0]}}

    @staticmethod
    def _micro_batch(stored, tokens, logp_rows, entropy_rows, extra_info):
        lengths = [len(row) for row in tokens]
        pad = torch.zeros(1)
        offsets = torch.tensor([0] + [sum(n + 1 for n in lengths[: i + 1]) for i in range(len(lengths))])
        model_output = {
            "log_probs": torch.nested.nested_tensor_from_jagged(
                torch.cat([t for r in logp_rows for t in (r, pad)]), offsets
            )
        }
        if extra_info["calculate_entropy"]:  # the engine computes entropies only when asked
            model_output["entropy"] = torch.nested.nested_tensor_from_jagged(
                torch.cat([t for r in entropy_rows for t in (r, pad)]), offsets
            )
        data = TensorDict(
            {
                "prompts": torch.nested.as_nested_tensor(
                    [torch.zeros(1) for _ in lengths], layout=torch.jagged
                ),
                "responses": torch.nested.as_nested_tensor(
                    [torch.ones(n) for n in lengths], layout=torch.jagged
                ),
                "response_mask": stored["response_mask"],
                "old_log_probs": stored["old_log_probs"],
                "advantages": stored["advantages"],
            },
            batch_size=len(lengths),
        )
        # extra_info's global_batch_size is the mini-batch's; the engine's own counts take its place
        engine = {"dp_size": 1, "batch_num_tokens": sum(lengths), "global_batch_size": len(lengths)}
        tu.assign_non_tensor(data, **{**extra_info, **engine})
        return model_output, data


def put_policy_rollouts(queue, policy: TinyPolicy, step: int):
    """One step's rollouts as verl leaves them before the advantage step: rewards on the last token,
    and the old-log-prob pass's log π and per-token entropies under the current policy."""
    with torch.no_grad():
        logp_rows, entropy_rows = policy.forward(TOKENS)
    keys = [f"{uid}{step}_{session}_0" for session, uid in enumerate(UIDS)]
    rm_scores = []
    for score, row in zip(SCORES, TOKENS, strict=True):
        scores = torch.zeros(len(row))
        scores[-1] = score
        rm_scores.append(scores)

    def jagged(rows):
        return torch.nested.as_nested_tensor(
            [torch.as_tensor(r, dtype=torch.float32) for r in rows], layout=torch.jagged
        )

    fields = TensorDict(
        {
            "uid": NonTensorStack(*[f"{uid}{step}" for uid in UIDS]),
            "tokens": jagged(TOKENS),
            "response_mask": jagged([[1.0] * len(row) for row in TOKENS]),
            "rm_scores": jagged(rm_scores),
            "old_log_probs": jagged(logp_rows),
            "entropy": jagged(entropy_rows),
        },
        batch_size=len(keys),
    )
    return queue.kv_batch_put(keys=keys, partition_id="train", fields=fields)


def padded(rows):
    return torch.nn.utils.rnn.pad_sequence(
        [torch.as_tensor(r, dtype=torch.float32) for r in rows], batch_first=True
    )


def expected_loss(call, trainer, w_pos, w_neg, *, clip_high=None, quantile_k=None) -> float:
    """The loss of one recorded call from eapo.core's functions alone (and verl's agg_loss); ``quantile_k``:
    QAE's split (the group's K-quantile as baseline and split) instead of the mean."""
    mask = padded([[1.0] * len(row) for row in TOKENS]).bool()  # [B, T]
    split = {} if quantile_k is None else {"by": "quantile", "quantile_k": quantile_k}
    advantages, _, _ = grouped_polarity_advantages(torch.tensor(SCORES), UIDS, w_pos, w_neg, **split)
    advantages = advantages[:, None] * mask  # [B, T]
    logp, old_logp = call["logp"], call["old_logp"]
    actor = trainer.config.actor_rollout_ref.actor
    low, high = actor.clip_ratio_low, actor.clip_ratio_high if clip_high is None else clip_high
    controls = SimpleNamespace(**trainer.algorithm.controls)  # None: unset
    torch.set_rng_state(call["rng"])
    if controls.loss_mode == "clip_cov":
        per_token, _ = clip_cov_policy_loss(
            logp,
            old_logp,
            advantages,
            mask,
            clip_low=low,
            clip_high=high,
            clip_cov_ratio=controls.clip_cov_ratio,
            clip_cov_lb=controls.clip_cov_lb,
            clip_cov_ub=controls.clip_cov_ub,
        )
    elif controls.loss_mode == "kl_cov":
        per_token, _ = kl_cov_policy_loss(
            logp,
            old_logp,
            advantages,
            mask,
            kl_cov_ratio=controls.kl_cov_ratio,
            ppo_kl_coef=controls.ppo_kl_coef,
        )
    else:  # vanilla: the paper's PPO-clip surrogate (dual clip off, as eapo's launch sets it)
        per_token = ppo_clip_per_token(logp, old_logp, advantages, clip_low=low, clip_high=high)
    if controls.top_entropy_quantile is not None:
        per_token = per_token * top_entropy_mask(call["entropy"], mask, controls.top_entropy_quantile)
    if controls.entropic:  # EntroPIC: 1 ± α on tokens with π > threshold, α from the step's controller input
        alpha = json.loads(call["extra_info"][CONTROL_INPUTS_KEY])["entropic"]["entropic_alpha"]
        high = logp.exp() > controls.entropic_threshold
        per_token = per_token * torch.where(high, 1.0 + alpha * torch.sign(advantages), 1.0)
    loss = agg_loss(per_token, mask, actor.loss_agg_mode)
    if call["extra_info"]["calculate_entropy"]:
        inputs = json.loads(call["extra_info"].get(CONTROL_INPUTS_KEY, "{}"))
        coef = inputs.get("adaptive_entropy", {}).get("entropy_coef", actor.entropy_coeff)
        loss = loss - coef * agg_loss(call["entropy"], mask, actor.loss_agg_mode)
    return loss.item()


def train(trainer, queue, steps: int, policy: TinyPolicy):
    """``steps`` of: rollouts → advantage step → actor update (two epochs: ρ ≠ 1 on the second), with
    verl's dual clip off as ``eapo train --engine verl`` sets it."""
    trainer.config.actor_rollout_ref.actor.clip_ratio_c = NO_DUAL_CLIP
    trainer.config.actor_rollout_ref.actor.ppo_epochs = 2
    trainer.config.actor_rollout_ref.actor.ppo_mini_batch_size = 2  # × n = 4: the whole batch, one update
    trainer.actor_rollout_wg = TinyActorWorkerGroup(queue, policy)
    trainer.actor_rollout_wg.set_loss_fn(trainer.actor_loss_fn())  # what init() does
    history = []
    for step in range(1, steps + 1):
        batch = put_policy_rollouts(queue, policy, step)
        old = queue.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["old_log_probs"])
        metrics: dict = {}
        batch = trainer._compute_advantage(batch, metrics=metrics)
        first_call = len(trainer.actor_rollout_wg.calls)
        trainer._update_actor(batch, metrics)
        for call in trainer.actor_rollout_wg.calls[first_call:]:
            call["old_logp"] = padded([r.tolist() for r in old["old_log_probs"].unbind(0)])
        history.append((metrics, trainer.actor_rollout_wg.calls[first_call:]))
    return history


@pytest.mark.parametrize("method", sorted(PRESET_OPTIONS))
def test_each_preset_trains_with_eapo_cores_loss(method, verl_config, in_memory_tq):
    trainer = EAPOVerlTrainer(preset_config(verl_config, method))
    policy = TinyPolicy()
    start = policy.logits.detach().clone()
    history = train(trainer, in_memory_tq, 3, policy)
    assert not torch.equal(policy.logits, start)
    for metrics, calls in history:
        assert len(calls) == 2
        for call in calls:
            assert call["loss"] == pytest.approx(expected_loss(call, trainer, 1.0, 1.0), abs=1e-6)
        assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == (1.0, 1.0)
        assert "actor/pg_loss" in metrics
        if method not in ("clip_cov", "kl_cov"):  # verl's pg_clipfrac counts both sides (vanilla loss)
            shares = metrics["entropy_control/clip_low_frac"] + metrics["entropy_control/clip_high_frac"]
            assert shares == pytest.approx(metrics["actor/pg_clipfrac"])
    if method != "kl_cov":  # the second epoch's ratios are clipped (lr 5), on both sides
        assert max(m["entropy_control/clip_high_frac"] for m, _ in history) > 0
        assert max(m["entropy_control/clip_low_frac"] for m, _ in history) > 0 or method == "top_entropy"
    if method == "clip_higher":  # ε_high = 0.28 arrived and mattered: with 0.2 the losses differ
        second_epochs = [calls[1] for _, calls in history]
        assert any(
            abs(call["loss"] - expected_loss(call, trainer, 1.0, 1.0, clip_high=0.2)) > 1e-4
            for call in second_epochs
        )
    coefs = [metrics["entropy_control/coef"] for metrics, _ in history]
    if method == "entropy_bonus":
        assert coefs == [0.01] * 3
    elif method == "adaptive_entropy":
        # step 1 applies 0; entropy falls under SGD on these advantages or not, the rule decides:
        expected, coef, last, target = [], 0.0, None, history[0][0]["entropy/rollout"]
        for metrics, calls in history:
            expected.append(coef if last is not None and last <= target else 0.0)
            inputs = json.loads(calls[0]["extra_info"][CONTROL_INPUTS_KEY])
            assert inputs == {"adaptive_entropy": {"entropy_coef": expected[-1]}}
            h = metrics["entropy/rollout"]
            coef = min(coef + 0.005, 1.0) if h <= target else max(coef - 0.005, 0.0)
            last = h
        assert coefs == pytest.approx(expected)
        assert trainer.eapo_step.controls["adaptive_entropy"].coef == pytest.approx(coef)
    else:
        assert coefs == [0.0] * 3
    if method == "entropic":
        assert replayed_entropic(history, kp=1.0, ki=0.01) == [m["entropic/alpha"] for m, _ in history]
    if method in ("clip_cov", "kl_cov"):
        # 2e-4 of 21 tokens rounds to the minimum of one token per call
        assert [m["entropy_control/cov_frac"] for m, _ in history] == pytest.approx([1 / N_TOKENS] * 3)
    if method == "top_entropy":
        # per position entropies are shared by the rows: the top 20% by the 0.8 quantile
        for metrics, calls in history:
            mask = padded([[1.0] * len(row) for row in TOKENS]).bool()
            kept = [top_entropy_mask(c["entropy"], mask, 0.2).sum().item() / N_TOKENS for c in calls]
            assert metrics["entropy_control/top_entropy_frac"] == pytest.approx(sum(kept) / 2)
            assert 0 < metrics["entropy_control/top_entropy_frac"] < 1


def replayed_entropic(history, *, kp, ki, target_ratio=1.0):
    """EntroPIC's α at each step, replayed by hand from the logged rollout entropies, checked against the
    input each update received; returns the α each step applied. H_t is known before the update, so step
    t applies α_t = clip(Kp·e_t + Ki·I_{t−1}) from its own error (the reference's order)."""
    applied, integral = [], 0.0
    target = target_ratio * history[0][0]["entropy/rollout"]
    for metrics, calls in history:
        error = metrics["entropy/rollout"] - target
        alpha = min(max(kp * error + ki * integral, -1.0), 1.0)
        applied.append(pytest.approx(alpha, abs=1e-12))
        for call in calls:
            assert json.loads(call["extra_info"][CONTROL_INPUTS_KEY]) == {
                "entropic": {"entropic_alpha": applied[-1]}
            }
        integral += error
        assert metrics["entropic/integral"] == pytest.approx(integral)
        assert metrics["entropic/error"] == pytest.approx(error)
    return applied


def test_entropic_trains_with_its_weights_on_the_high_probability_tokens(verl_config, in_memory_tq):
    """EntroPIC with a threshold the tiny policy's tokens cross (0.4) and the target at 0.5 × H_0, so α
    leaves 0 from step 1 (its own error): each call's loss is expected_loss's, whose weights 1 ± α act on
    some tokens."""
    trainer = EAPOVerlTrainer(
        preset_config(
            verl_config, "entropic", entropic_threshold=0.4, entropic_target_ratio=0.5, entropic_kp=0.5
        )
    )
    assert trainer.config.actor_rollout_ref.actor.calculate_entropy is False  # EntroPIC reads no entropies
    history = train(trainer, in_memory_tq, 3, TinyPolicy(seed=2))
    applied = replayed_entropic(history, kp=0.5, ki=0.01, target_ratio=0.5)
    assert [m["entropic/alpha"] for m, _ in history] == applied
    assert history[0][0]["entropic/alpha"] != 0.0 and history[1][0]["entropic/alpha"] != 0.0
    mask = padded([[1.0] * len(row) for row in TOKENS]).bool()
    reweighted = 0
    for _, calls in history:
        for call in calls:
            assert call["loss"] == pytest.approx(expected_loss(call, trainer, 1.0, 1.0), abs=1e-6)
            reweighted += int(((call["logp"].exp() > 0.4) & mask).sum())
    assert reweighted > 0, "the test needs tokens above the threshold"
    # the same calls without EntroPIC's weights give another loss where α ≠ 0
    plain = EAPOVerlTrainer(preset_config(verl_config.copy(), "grpo"))
    assert any(
        abs(call["loss"] - expected_loss(call, plain, 1.0, 1.0)) > 1e-4
        for _, calls in history[1:]
        for call in calls
    )


def test_controls_compose_with_eapo_weighting(verl_config, in_memory_tq):
    verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2
    verl_config.algorithm.eapo = {"epsilon_high": 0.28, "top_entropy_quantile": 0.5, "entropy_coef": 0.02}
    trainer = EAPOVerlTrainer(verl_config)
    assert trainer.algorithm.method == "eapo"
    actor = trainer.config.actor_rollout_ref.actor
    assert (actor.clip_ratio_high, actor.entropy_coeff, actor.calculate_entropy) == (0.28, 0.02, True)
    history = train(trainer, in_memory_tq, 2, TinyPolicy(seed=1))
    h0 = history[0][0]["entropy/rollout"]
    for metrics, calls in history:
        w_pos = min(max(0.2 * metrics["entropy/rollout"] / h0, 0.0), 2.0)  # Eq. dynamic_weight
        assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == pytest.approx((w_pos, 1.0))
        assert metrics["entropy_control/coef"] == 0.02
        for call in calls:
            assert call["loss"] == pytest.approx(expected_loss(call, trainer, w_pos, 1.0), abs=1e-6)


@pytest.mark.parametrize("method", ["eapo_pi", "qae"])
def test_eapo_pi_and_qae_train_through_the_plugin(method, verl_config, in_memory_tq):
    """Three steps of rollouts, advantage step and actor update (two epochs) through the plugin: eapo_pi
    composed with the quantile split, and qae. Every recorded loss is eapo.core's objective on the
    step's w+ (eapo_pi: the scheme replayed on the logged entropies) and the quantile advantages."""
    verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2
    verl_config.algorithm.adv_estimator = method
    verl_config.algorithm.eapo = {"split_by": "quantile"} if method == "eapo_pi" else {}
    trainer = EAPOVerlTrainer(verl_config)
    policy = TinyPolicy()
    start = policy.logits.detach().clone()
    history = train(trainer, in_memory_tq, 3, policy)
    assert not torch.equal(policy.logits, start)
    replay = make_weighting(method)
    for metrics, calls in history:
        w_pos, w_neg = replay.weights(metrics["entropy/rollout"])
        assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == pytest.approx((w_pos, w_neg))
        for call in calls:
            assert call["loss"] == pytest.approx(
                expected_loss(call, trainer, w_pos, w_neg, quantile_k=0.4), abs=1e-6
            )
    if method == "eapo_pi":
        assert history[-1][0]["eapo/integral"] == pytest.approx(replay.integral) and replay.integral != 0.0


def _two_steps_saved_then_resumed(config, queue, tmp_path):
    """``(uninterrupted trainer, trainer resumed from its step-2 checkpoint, the saved state)``, after steps
    with entropies 1.2 (H_0) and 1.0."""
    from test_verl_trainer import attach_checkpoint_io, run_step

    trainer = attach_checkpoint_io(EAPOVerlTrainer(config.copy()), tmp_path)
    for step, entropy in enumerate([1.2, 1.0], start=1):
        run_step(trainer, queue, step, entropy=entropy)
    trainer.global_steps = 2
    trainer._save_checkpoint()
    state = json.loads((tmp_path / "global_step_2" / "eapo_state.json").read_text())
    resumed = attach_checkpoint_io(EAPOVerlTrainer(config.copy()), tmp_path)
    resumed._load_checkpoint()
    return trainer, resumed, state


def test_resume_restores_the_adaptive_coefficient(verl_config, in_memory_tq, tmp_path):
    from test_verl_trainer import attach_checkpoint_io, run_step

    config = preset_config(verl_config, "adaptive_entropy", entropy_coef_delta=0.01)
    trainer, resumed, state = _two_steps_saved_then_resumed(config, in_memory_tq, tmp_path)
    assert state["method"] == "adaptive_entropy"
    assert state["controls"]["adaptive_entropy"]["coef"] == pytest.approx(0.02)
    assert state["controls"]["adaptive_entropy"]["target"] == pytest.approx(1.2)
    assert state["controls"]["adaptive_entropy"]["last_entropy"] == pytest.approx(1.0)
    assert (
        resumed.eapo_step.controls["adaptive_entropy"].state_dict()
        == trainer.eapo_step.controls["adaptive_entropy"].state_dict()
    )
    # the uninterrupted run and the resumed one apply the same coefficient next: 0.02
    _, continued = run_step(trainer, in_memory_tq, 3, entropy=1.5)
    _, after_resume = run_step(resumed, in_memory_tq, 4, entropy=1.5)
    assert after_resume["entropy_control/coef"] == continued["entropy_control/coef"] == pytest.approx(0.02)
    assert (
        resumed.eapo_step.controls["adaptive_entropy"].coef
        == trainer.eapo_step.controls["adaptive_entropy"].coef
        == pytest.approx(0.01)
    )

    other_method = preset_config(verl_config.copy(), "entropy_bonus")
    with pytest.raises(ValueError, match=r"method adaptive_entropy, but this run uses entropy_bonus"):
        attach_checkpoint_io(EAPOVerlTrainer(other_method), tmp_path)._load_checkpoint()

    changed = preset_config(verl_config.copy(), "adaptive_entropy", entropy_coef_delta=0.02)
    with pytest.raises(
        ValueError, match=r"checkpointed adaptive entropy delta=0.01 differs from the configured delta=0.02"
    ):
        attach_checkpoint_io(EAPOVerlTrainer(changed), tmp_path)._load_checkpoint()


def test_resume_restores_the_entropic_integral(verl_config, in_memory_tq, tmp_path):
    """target = H_0 = 1.2. Step 1: e = 0, α = 0, I = 0; step 2: e = −0.2, α = −0.2, I = −0.2 (saved). At the
    next step both the uninterrupted and the resumed run see H = 1.5: e = 0.3, and they apply that step's
    α = 0.3 + 0.01 · (−0.2) = 0.298 (H_t is known before the update); I = 0.1 in both."""
    from test_verl_trainer import attach_checkpoint_io, run_step

    config = preset_config(verl_config, "entropic")
    trainer, resumed, state = _two_steps_saved_then_resumed(config, in_memory_tq, tmp_path)
    assert state["method"] == "entropic"
    assert state["controls"]["entropic"] == {
        "integral": pytest.approx(-0.2),
        "error": pytest.approx(-0.2),
        "alpha": pytest.approx(-0.2),
        "target": pytest.approx(1.2),
        "settings": {"kp": 1.0, "ki": 0.01, "threshold": 0.95, "target_ratio": 1.0},
    }
    assert (
        resumed.eapo_step.controls["entropic"].state_dict()
        == trainer.eapo_step.controls["entropic"].state_dict()
    )
    _, continued = run_step(trainer, in_memory_tq, 3, entropy=1.5)
    _, after_resume = run_step(resumed, in_memory_tq, 4, entropy=1.5)
    assert after_resume["entropic/alpha"] == continued["entropic/alpha"] == pytest.approx(0.298)
    assert after_resume["entropic/integral"] == continued["entropic/integral"] == pytest.approx(0.1)
    assert (
        resumed.step_inputs == trainer.step_inputs == {"entropic": {"entropic_alpha": pytest.approx(0.298)}}
    )
    assert resumed.eapo_step.controls["entropic"].alpha == pytest.approx(0.298)

    changed = preset_config(verl_config.copy(), "entropic", entropic_ki=0.02)
    with pytest.raises(
        ValueError, match=r"checkpointed EntroPIC ki=0.01 differs from the configured ki=0.02"
    ):
        attach_checkpoint_io(EAPOVerlTrainer(changed), tmp_path)._load_checkpoint()


def test_init_hands_the_workers_eapos_loss_only_with_a_control(verl_config, monkeypatch):
    """After verl's init() built the workers (here: a recording stand-in), the trainer replaces their loss."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    def fake_init(self):  # what verl's init() leaves behind that the override touches
        self.actor_rollout_wg = TinyActorWorkerGroup(queue=None, policy=TinyPolicy())

    monkeypatch.setattr(PPOTrainerSync, "init", fake_init)
    plain = EAPOVerlTrainer(verl_config.copy())
    plain.init()
    assert plain.actor_rollout_wg.loss_fn is None  # verl's own ppo_loss stays
    controlled = EAPOVerlTrainer(preset_config(verl_config, "top_entropy"))
    controlled.init()
    installed = controlled.actor_rollout_wg.loss_fn
    assert installed.func is entropy_control_loss and installed.keywords["controls"] == ("top_entropy",)
    assert installed.keywords["settings"]["top_entropy_quantile"] == 0.2
    assert installed.keywords["config"].calculate_entropy is True


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_eapo_grpo_estimator_equals_verls_grpo(norm_by_std):
    """The presets' estimator is GRPO: on groups of two or more it gives verl's own ``grpo`` advantages."""
    import numpy as np
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from eapo.engines.verl.estimators import compute_eapo_grpo_advantage

    generator = torch.Generator().manual_seed(3)
    mask = (torch.arange(6)[None, :] < torch.tensor([3, 6, 2, 5, 4, 1, 6, 2])[:, None]).float()  # [8, 6]
    rewards = torch.zeros(8, 6)
    rewards[torch.arange(8), mask.sum(-1).long() - 1] = torch.rand(8, generator=generator)
    index = np.array(["p", "q", "p", "q", "r", "r", "p", "q"], dtype=object)
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm_by_std})
    ours, _ = compute_eapo_grpo_advantage(rewards, mask, index=index, config=config)
    theirs, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert ours.abs().sum() > 0


def test_resume_without_the_adaptive_control_is_refused(verl_config, in_memory_tq, tmp_path):
    from test_verl_trainer import attach_checkpoint_io, run_step

    with_control = preset_config(verl_config.copy(), "grpo", adaptive_entropy=True)
    trainer = attach_checkpoint_io(EAPOVerlTrainer(with_control), tmp_path)
    run_step(trainer, in_memory_tq, 1, entropy=1.0)
    trainer.global_steps = 1
    trainer._save_checkpoint()
    without = preset_config(verl_config.copy(), "grpo")
    with pytest.raises(
        ValueError, match=r"written with the entropy control adaptive_entropy, which this run does not have"
    ):
        attach_checkpoint_io(EAPOVerlTrainer(without), tmp_path)._load_checkpoint()


def _gather_worker(rank: int, world: int, port: int, results) -> None:
    import torch.distributed as dist

    from eapo.engines.verl.entropy_control import _dp_gather

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        values = [torch.tensor([0.1, 0.9, 0.5]), torch.tensor([0.7, 0.3])][rank]  # uneven per rank
        gather = _dp_gather(dist.group.WORLD)
        mask = torch.ones(1, len(values))
        kept = top_entropy_mask(values[None, :], mask, 0.4, gather=gather)
        results[rank] = (gather(values).tolist(), kept[0].tolist())
    finally:
        dist.destroy_process_group()


def test_top_entropy_threshold_is_taken_over_the_data_parallel_group():
    """Two ranks with 3 and 2 tokens: each gathers all five (the quantile of the by-hand test, 0.58),
    so rank 0 keeps 0.9 and rank 1 keeps 0.7, as one process holding all five would."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_gather_worker, args=(2, port, results), nprocs=2, join=True)
    assert results[0][0] == results[1][0] == pytest.approx([0.1, 0.9, 0.5, 0.7, 0.3])
    assert results[0][1] == [False, True, False]
    assert results[1][1] == [True, False]
