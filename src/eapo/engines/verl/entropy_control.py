"""Entropy controls on verl: eapo's unified ``algorithm.eapo.*`` names, mapped onto verl's own options
where verl has the control, and run through :mod:`eapo.core.controls` where it does not.

Where verl 0.9.1 has the control, the ``eapo`` trainer writes eapo's value into verl's option under
``actor_rollout_ref.actor`` (each control's ``verl_options``:
:func:`eapo.core.controls.verl_control_options`) before verl's ``__init__``
(:func:`apply_to_actor_config`) and verl does the rest; nothing is re-implemented.

A verl option that is already set to something other than verl's default and other than eapo's
value is a conflict and refused (name one of the two). The controls verl lacks
(:func:`eapo.core.controls.applied_by_eapo`) run through one generic path, never by name: a wrapper of verl's ``ppo_loss``
(:func:`entropy_control_loss`) that the trainer hands to the actor workers with verl's own
``set_loss_fn`` after ``init()``:

* a control's **run state** lives in core's step, in the trainer: each step the trainer takes every
  state's inputs to the coming update (:meth:`eapo.core.EAPOStep.control_inputs`: ``loss_inputs()``
  from the entropies up to step t−1, then ``observe(H_t)``, with ``H_t`` the rollout entropy of the
  old-log-prob pass, :func:`eapo.core.rollout_entropy` with ``algorithm.eapo.entropy_agg``). They
  reach the actor as the update batch's non-tensor ``eapo_control_inputs`` (JSON; verl copies
  ``KVBatchMeta.extra_info`` into every micro-batch). An input named like a setting verl has an
  option for replaces that option for the update: the adaptive coefficient (Skywork-OR1, its target
  ``entropy_target`` nats or ``entropy_target_ratio × H_0``) is that step's ``entropy_coeff`` for
  verl's ``−coef · entropy`` term, so step t's coefficient depends on entropies up to step t−1, as on TRL;
* a control's **per-token weights** (the top-entropy mask of "Beyond the 80/20 Rule", computed from
  the micro-batch's per-token entropies gathered over the data-parallel group, as TRL gathers over
  processes) reach the configured loss (any of :data:`eapo.core.controls.LOSS_MODES`) as
  ``rollout_is_weights`` (multiplied into any rollout-correction weights) through the policy loss
  ``eapo_token_weights`` (registered with verl's ``register_policy_loss``). Every one of them
  multiplies it into its per-token loss before aggregating: a token weighted 0 carries no policy
  gradient but still counts in the aggregation's denominators, as TRL's ``per_token_loss *
  entropy_mask``; the KL loss is untouched.

A control that needs the update's per-token entropies makes the trainer set
``actor.calculate_entropy=True``.

Metrics (eapo's documented keys, as on TRL): ``entropy_control/coef`` (the coefficient this step's
update applies), ``entropy_control/clip_low_frac`` and ``entropy_control/clip_high_frac`` (share of
response tokens whose ratio is below ``1 − clip_ratio_low`` with A < 0 / above
``1 + clip_ratio_high`` with A > 0, TRL's ``clip_ratio/low_mean`` and ``high_mean``; verl's own
``actor/pg_clipfrac`` counts both sides together; not logged where the loss ``loss_mode`` names does not
clip, :func:`eapo.core.controls.clips_ratio`), ``entropy_control/cov_frac`` (share of tokens the policy
loss of the control ``loss_mode`` names selected, its registered ``verl_selected``) and each eapo-run
control's ``weight_metric`` (the mean of its token weights, e.g. the share a mask kept).

Presets (``algorithm.eapo.method=<name>``, :data:`eapo.core.controls.ENTROPY_CONTROLS`) are
GRPO's weights (1, 1) plus the control's settings; they run with ``algorithm.adv_estimator=eapo_grpo``
(eapo's polarity estimator with (1, 1)). ``method=eapo`` (or any weighting scheme) plus control keys
composes the control with that scheme's weights. Keys a preset sets are defaults: a key set under
``algorithm.eapo`` wins.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from eapo.core import Algorithm
from eapo.core.controls import (
    CONTROL_METRICS,
    ENTROPY_CONTROLS,
    LOSS_MODES,
    TokenInputs,
    clips_ratio,
    control_token_weights,
    verl_control_options,
)

__all__ = [
    "CONTROL_INPUTS_KEY",
    "WEIGHTED_LOSS_MODE",
    "METRIC_PREFIX",
    "VERL_ACTOR_OPTIONS",
    "controls_active",
    "verl_actor_values",
    "verl_overrides",
    "apply_to_actor_config",
    "entropy_control_loss",
    "compute_policy_loss_token_weights",
    "register_policy_losses",
    "actor_metrics",
]

#: Non-tensor field of the actor-update batch that carries the controls' inputs to the update (JSON:
#: control name -> {input: value}, :meth:`eapo.core.EAPOStep.control_inputs`).
CONTROL_INPUTS_KEY = "eapo_control_inputs"
#: The policy loss eapo registers with verl (selected by :func:`entropy_control_loss`, never by hand).
WEIGHTED_LOSS_MODE = "eapo_token_weights"
#: Namespace of the controls' metrics.
METRIC_PREFIX = "entropy_control/"

#: eapo name -> the option under ``actor_rollout_ref.actor`` that verl reads for it: the registered
#: controls' own mappings (:attr:`eapo.core.controls.EntropyControl.verl_options`).
VERL_ACTOR_OPTIONS: dict[str, str] = {
    key: option for control in ENTROPY_CONTROLS.values() for key, option in control.verl_options.items()
}

#: verl losses that multiply ``rollout_is_weights`` into the per-token loss (token weights' way in).
_WEIGHTABLE_LOSS_MODES = LOSS_MODES


# ---------------------------------------------------------------------------------------------
# Settings: presets resolved, validated once, mapped onto verl's actor config
# ---------------------------------------------------------------------------------------------


def controls_active(algorithm: Algorithm) -> bool:
    """Whether any control is set (then the actor's loss is :func:`entropy_control_loss`, which also
    measures the clip and covariance shares)."""
    return any(value not in (None, False) for value in algorithm.controls.values())


def verl_actor_values(algorithm: Algorithm) -> dict[str, Any]:
    """verl option (under ``actor_rollout_ref.actor``) -> the value eapo sets it to, from the set controls. A
    setting an eapo-run control sets per update (its ``step_settings``) is not written: it reaches the loss
    each step."""
    applied = algorithm.applied_by_eapo("verl")
    per_step = {key for control in applied for key in control.step_settings}
    values = {}
    for option, (key, value) in verl_control_options(algorithm.controls).items():
        if key not in per_step:
            values[option] = value if isinstance(value, str) else float(value)
    if any(control.needs_entropy for control in applied):
        values["calculate_entropy"] = True  # the loss needs the update's per-token entropies
    return values


def verl_overrides(algorithm: Algorithm) -> list[str]:
    """The same as Hydra overrides (``actor_rollout_ref.actor.clip_ratio_high=0.28``), for reading."""
    return [
        f"actor_rollout_ref.actor.{option}={value}" for option, value in verl_actor_values(algorithm).items()
    ]


def _verl_actor_defaults() -> dict[str, Any]:
    from verl.workers.config import ActorConfig, PolicyLossConfig

    defaults = {
        f.name: f.default for f in dataclasses.fields(ActorConfig) if f.default is not dataclasses.MISSING
    }
    defaults.update(
        {
            f"policy_loss.{f.name}": f.default
            for f in dataclasses.fields(PolicyLossConfig)
            if f.default is not dataclasses.MISSING
        }
    )
    return defaults


def _eapo_key_of(option: str) -> str:
    for key, mapped in VERL_ACTOR_OPTIONS.items():
        if mapped == option:
            return f"algorithm.eapo.{key}"
    return "algorithm.eapo (a control verl lacks)"


def apply_to_actor_config(actor: Any, algorithm: Algorithm) -> dict[str, Any]:
    """Write the controls' verl options into ``actor`` (``actor_rollout_ref.actor``, an OmegaConf node).

    Returns the options written. Raises ValueError when the user set verl's option to another value
    than verl's default and eapo's, or set an option that an eapo-run control sets per update (the
    adaptive coefficient's ``entropy_coeff``).
    """
    from omegaconf import OmegaConf, open_dict

    defaults = _verl_actor_defaults()
    for control in algorithm.applied_by_eapo("verl"):
        for key in control.step_settings:
            option = VERL_ACTOR_OPTIONS.get(key)
            if option is None:
                continue  # no verl option: the value reaches the loss only
            current = OmegaConf.select(actor, option, default=defaults.get(option))
            if current != defaults.get(option):
                raise ValueError(
                    f"algorithm.eapo.{control.name} sets the {key} each step (as "
                    f"actor_rollout_ref.actor.{option}), but actor_rollout_ref.actor.{option}={current}: "
                    f"set the starting value as algorithm.eapo.{key} and leave {option} at {defaults.get(option)}"
                )
    values = verl_actor_values(algorithm)
    for option, value in values.items():
        current = OmegaConf.select(actor, option, default=defaults.get(option))
        if current != value and current != defaults.get(option):
            raise ValueError(
                f"{_eapo_key_of(option)} sets actor_rollout_ref.actor.{option}={value}, but it is set to "
                f"{current}: set one of the two (eapo writes verl's option from its own)"
            )
    with open_dict(actor):
        for option, value in values.items():
            OmegaConf.update(actor, option, value, merge=False)
    loss_mode = OmegaConf.select(actor, "policy_loss.loss_mode", default="vanilla")
    weighted = [c.name for c in algorithm.applied_by_eapo("verl") if c.token_weights is not None]
    if weighted and loss_mode not in _WEIGHTABLE_LOSS_MODES:
        raise ValueError(
            f"algorithm.eapo's {weighted[0]} weights the per-token policy loss of "
            f"{', '.join(_WEIGHTABLE_LOSS_MODES)}; actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} "
            "is not one of them"
        )
    return values


# ---------------------------------------------------------------------------------------------
# The actor's loss: verl's ppo_loss with the per-step coefficient, the top-entropy mask, and metrics
# ---------------------------------------------------------------------------------------------


@dataclass
class _WeightsCall:
    """What :func:`compute_policy_loss_token_weights` needs from the enclosing loss call."""

    base_loss_mode: str
    weights: torch.Tensor  # [B, T] padded, detached: the product of the eapo-run controls' token weights


_WEIGHTS_CALL: contextvars.ContextVar[_WeightsCall | None] = contextvars.ContextVar(
    "eapo_token_weights_call", default=None
)


def _dp_gather(dp_group: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """All ranks' 1-D tensors of any length, concatenated (None on one process)."""
    import torch.distributed as dist

    if dp_group is None or not dist.is_initialized() or dist.get_world_size(dp_group) == 1:
        return None

    def gather(values: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size(dp_group)
        size = torch.tensor([values.numel()], device=values.device)
        sizes = [torch.zeros_like(size) for _ in range(world)]
        dist.all_gather(sizes, size, group=dp_group)
        longest = int(max(s.item() for s in sizes))
        padded = torch.zeros(longest, dtype=values.dtype, device=values.device)
        padded[: values.numel()] = values
        chunks = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(chunks, padded, group=dp_group)
        return torch.cat([chunk[: int(s.item())] for chunk, s in zip(chunks, sizes, strict=True)])

    return gather


def compute_policy_loss_token_weights(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy loss ``eapo_token_weights``: the configured loss with the eapo-run controls' per-token
    weights (:func:`entropy_control_loss` puts them in context) multiplied in as ``rollout_is_weights``.
    All tensors ``(bs, response_length)``."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    call = _WEIGHTS_CALL.get()
    if call is None:
        weighting = [
            f"algorithm.eapo.{control.switch or control.declares[0].name}"
            for control in ENTROPY_CONTROLS.values()
            if control.token_weights is not None and not control.verl_options and control.declares
        ]
        raise RuntimeError(
            f"policy_loss.loss_mode={WEIGHTED_LOSS_MODE} is selected by eapo's trainer, not by hand: set a control "
            f"verl lacks (e.g. {' or '.join(weighting)}) with trainer.use_v1=True trainer.v1.trainer_mode=eapo"
        )
    weights = call.weights.to(log_prob.dtype)
    weights = weights if rollout_is_weights is None else rollout_is_weights * weights
    return get_policy_loss_fn(call.base_loss_mode)(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=weights,
    )


def register_policy_losses() -> None:
    """Register :func:`compute_policy_loss_token_weights` with verl as ``eapo_token_weights``."""
    from verl.trainer.ppo.core_algos import register_policy_loss

    register_policy_loss(WEIGHTED_LOSS_MODE)(compute_policy_loss_token_weights)


def _with_options(config: Any, options: Mapping[str, float]) -> Any:
    """``config`` (verl's ActorConfig) with dotted options replaced (``policy_loss.x`` too)."""
    for option, value in options.items():
        head, _, rest = option.partition(".")
        if rest:
            config = dataclasses.replace(
                config, **{head: _with_options(getattr(config, head), {rest: value})}
            )
        else:
            config = dataclasses.replace(config, **{head: value})
    return config


def _verl_settings(control: Any, config: Any) -> dict[str, Any]:
    """``control``'s settings as verl's actor ``config`` holds them (its ``verl_options``)."""
    values = {}
    for key, option in control.verl_options.items():
        node = config
        for part in option.split("."):
            node = getattr(node, part)
        values[key] = node
    return values


def _clip_shares(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: Any,
) -> tuple[float, float]:
    """TRL's ``clip_ratio/low_mean`` and ``high_mean``: shares of response tokens with ρ < 1 − ε_low
    and A < 0, and with ρ > 1 + ε_high and A > 0 (ε from verl's actor config)."""
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    with torch.no_grad():
        ratio = torch.exp(log_prob - old_log_prob)  # [B, T]
        valid = mask.bool()
        count = max(int(valid.sum().item()), 1)
        below = ((ratio < 1 - low) & (advantages < 0) & valid).sum().item() / count
        above = ((ratio > 1 + high) & (advantages > 0) & valid).sum().item() / count
    return below, above


def entropy_control_loss(
    config: Any,
    model_output: Any,
    data: Any,
    dp_group: Any = None,
    *,
    controls: tuple[str, ...] = (),
    settings: Mapping[str, Any] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's ``ppo_loss`` with the controls eapo runs on verl; same signature (bound with
    ``functools.partial``: ``controls``, the names of :meth:`eapo.core.Algorithm.applied_by_eapo` ("verl"), and
    ``settings``, every control setting resolved).

    * the micro-batch's non-tensor ``eapo_control_inputs`` (the trainer's per-step inputs of each
      control's run state): an input named like a setting verl has an option for replaces that option
      for this update (the adaptive coefficient: ``entropy_coeff``), the others reach the control's
      token weights;
    * the controls' token weights route the policy loss through ``eapo_token_weights``;
    * adds the ``entropy_control/*`` share metrics and each control's ``weight_metric``.
    """
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    applied = [ENTROPY_CONTROLS[name] for name in controls]
    settings = dict(settings or {})
    raw = tu.get_non_tensor_data(data=data, key=CONTROL_INPUTS_KEY, default=None)
    step_inputs: dict[str, dict[str, float]] = json.loads(raw) if raw else {}
    options = {
        VERL_ACTOR_OPTIONS[key]: float(value)
        for inputs in step_inputs.values()
        for key, value in inputs.items()
        if key in VERL_ACTOR_OPTIONS
    }
    config = _with_options(config, options)
    base_loss_mode = config.policy_loss.get("loss_mode", "vanilla")

    log_prob = no_padding_2_padding(model_output["log_probs"], data).detach()
    padded = data.select("response_mask", "old_log_probs", "advantages").to_padded_tensor()
    mask, advantages = padded["response_mask"].bool(), padded["advantages"]
    weighted = [control for control in applied if control.token_weights is not None]
    entropy = None
    if any(control.needs_entropy for control in weighted):
        entropy = model_output.get("entropy", None)
        if entropy is None:
            raise RuntimeError(
                f"algorithm.eapo's {weighted[0].name} needs the update's per-token entropies, but the actor "
                "computed none: actor_rollout_ref.actor.calculate_entropy must be True (the eapo trainer sets it)"
            )
        entropy = no_padding_2_padding(entropy, data).detach()
    gather = _dp_gather(dp_group)
    weights, weight_shares = control_token_weights(
        weighted,
        lambda control: TokenInputs(
            logp=log_prob,
            old_logp=padded["old_log_probs"],
            advantages=advantages,
            mask=mask,
            entropy=entropy,
            settings=settings,
            step=step_inputs.get(control.name, {}),
            gather=gather,
        ),
    )
    token = None
    if weights is not None:
        policy_loss = dataclasses.replace(config.policy_loss, loss_mode=WEIGHTED_LOSS_MODE)
        token = _WEIGHTS_CALL.set(_WeightsCall(base_loss_mode=base_loss_mode, weights=weights))
        try:
            loss, metrics = ppo_loss(
                dataclasses.replace(config, policy_loss=policy_loss), model_output, data, dp_group
            )
        finally:
            _WEIGHTS_CALL.reset(token)
    else:
        loss, metrics = ppo_loss(config, model_output, data, dp_group)

    shares: dict[str, float] = {}
    if clips_ratio(base_loss_mode):
        shares[CONTROL_METRICS["clip_low_frac"]], shares[CONTROL_METRICS["clip_high_frac"]] = _clip_shares(
            log_prob, padded["old_log_probs"], advantages, mask, config
        )
    loss_control = ENTROPY_CONTROLS.get(base_loss_mode)  # the control whose policy loss verl runs, if any
    if loss_control is not None and loss_control.verl_selected is not None:

        def verl_metric(key: str) -> float | None:
            value = metrics.get(key, None)
            if value is None:
                return None
            return float(value.aggregate() if isinstance(value, Metric) else value)

        selected = loss_control.verl_selected(
            TokenInputs(
                logp=log_prob,
                old_logp=padded["old_log_probs"],
                advantages=advantages,
                mask=mask,
                entropy=entropy,
                settings={**settings, **_verl_settings(loss_control, config)},
                gather=gather,
            ),
            verl_metric,
        )
        if selected is not None:
            shares[CONTROL_METRICS["cov_frac"]] = selected
    for key, value in shares.items():
        metrics[key] = Metric(value=value, aggregation=AggregationType.MEAN)
    for key, value in weight_shares.items():
        metrics[key] = Metric(value=value, aggregation=AggregationType.MEAN)
    return loss, metrics


def actor_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The actor update's metrics with the controls' keys moved out of verl's ``actor/`` prefix
    (``actor/entropy_control/x`` -> ``entropy_control/x``; a registered control's own ``weight_metric`` and
    ``metrics`` too), so they read as on TRL."""
    own = {
        key
        for control in ENTROPY_CONTROLS.values()
        for key in (*control.metrics, *((control.weight_metric,) if control.weight_metric else ()))
    }

    def moved(key: str) -> str:
        bare = key[len("actor/") :] if key.startswith("actor/") else None
        return bare if bare is not None and (bare.startswith(METRIC_PREFIX) or bare in own) else key

    return {moved(key): value for key, value in metrics.items()}
