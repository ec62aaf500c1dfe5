"""The field's entropy controls on the TRL engine: what :class:`~eapo.engines.trl.trainer.EAPOTrainer`
adds to TRL's GRPO loss for them (:mod:`eapo.core.controls` holds the maths).

TRL 1.16 has the entropy bonus, Skywork-OR1's adaptive coefficient, DAPO's clip-higher and the
top-entropy mask (set through ``args``); :class:`EntropyControlMixin` anchors the adaptive target at
``ratio × H_0``, replaces TRL's PPO-clip surrogate by the policy loss ``loss_mode`` names (Clip-Cov /
KL-Cov, which TRL lacks), runs every control TRL lacks through one generic path
(:func:`eapo.core.controls.applied_by_eapo`: its run state moved by core's step, its per-token
weights multiplied into the policy loss, :meth:`EntropyControlMixin._eapo_loss`), and logs what every
control acted through under :data:`eapo.core.CONTROL_METRICS` (``entropy_control/*``), the keys the
verl engine logs too.

Where eapo forms the loss, the TRL options that act only in TRL's own loss (:data:`LOSS_ONLY_OPTIONS`:
the entropy bonus and its adaptive update, ``delta``, ``off_policy_mask_threshold``, sequence-level
importance sampling; also a ``loss_type`` other than grpo/bnpo and a MoE router's auxiliary loss) are
refused when the trainer is built, each named (:func:`options_eapo_loss_drops`), never dropped silently.
"""

from __future__ import annotations

from typing import Any

import torch

from eapo.core import CONTROL_METRICS, aggregate_loss, kl_penalty, ppo_clip_per_token
from eapo.core.controls import (
    ENTROPY_CONTROLS,
    EntropyControl,
    TokenInputs,
    control_token_weights,
    policy_loss_of,
)

__all__ = ["EntropyControlMixin", "options_eapo_loss_drops"]

#: TRL loss types eapo's Clip-Cov / KL-Cov loss aggregates like: 1/|y_i| (the paper) or token-mean.
_COV_AGGREGATION = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean"}

#: The ``GRPOConfig`` options that act only inside TRL 1.16's ``GRPOTrainer._compute_loss`` and that eapo's
#: loss (:meth:`EntropyControlMixin._eapo_loss`) does not form: option -> what it does in TRL's loss (the
#: registered controls' ``trl_loss_only``, then TRL's own). Set to other than TRL's default, each is refused
#: where eapo forms the loss (:func:`options_eapo_loss_drops`). The options TRL's loss shares with eapo's
#: (``epsilon``/``epsilon_high``, ``beta``, ``use_bias_correction_kl``, a control's ``trl_token_mask``, the
#: vLLM importance correction) are applied there.
LOSS_ONLY_OPTIONS: dict[str, str] = {
    **{field: what for control in ENTROPY_CONTROLS.values() for field, what in control.trl_loss_only.items()},
    "delta": "the upper bound on the ratio of two-sided GRPO clipping (INTELLECT-2)",
    "off_policy_mask_threshold": "off-policy sequence masking (DeepSeek-V3.2)",
    "importance_sampling_level": "the sequence-level importance ratio (GSPO)",
}


def options_eapo_loss_drops(args: Any, *, router_aux_loss: bool = False) -> list[str]:
    """The TRL options in ``args`` (a ``GRPOConfig``) that eapo's loss would drop, one phrase each: every
    :data:`LOSS_ONLY_OPTIONS` entry set to other than ``GRPOConfig``'s default, a ``loss_type`` eapo's loss
    does not aggregate like, and (``router_aux_loss``: TRL's trainer enabled it for this model) the
    mixture-of-experts router's auxiliary loss. Empty: eapo's loss forms everything TRL's would."""
    from trl import GRPOConfig

    defaults = GRPOConfig.__dataclass_fields__
    dropped = [
        f"{name}={getattr(args, name)!r} ({what}; TRL's default {defaults[name].default!r})"
        for name, what in LOSS_ONLY_OPTIONS.items()
        if getattr(args, name, defaults[name].default) != defaults[name].default
    ]
    if args.loss_type not in _COV_AGGREGATION:
        dropped.append(
            f"loss_type={args.loss_type!r} (eapo's loss aggregates like loss_type 'grpo', the paper's 1/|y_i|, "
            "or 'bnpo', token-mean)"
        )
    if router_aux_loss:
        dropped.append(
            f"router_aux_loss_coef={args.router_aux_loss_coef!r} (the mixture-of-experts router's load-balancing "
            "loss, on for this model; 0.0 turns it off)"
        )
    return dropped


class EntropyControlMixin:
    """The entropy-control half of :class:`~eapo.engines.trl.trainer.EAPOTrainer` (mixed into it; reads
    TRL's trainer state: ``args``, ``entropy_coef``, ``_metrics``, ..., and hands the trainer to the hooks
    the controls register for what TRL does itself, ``trl_applied_coef`` and ``trl_token_mask``)."""

    #: the run's algorithm (:class:`eapo.core.Algorithm`): the controls' resolved settings
    algorithm: Any
    #: the controls TRL lacks that are on, which eapo runs (set by the trainer)
    eapo_controls: list[EntropyControl]
    #: their run states' inputs to the coming update (core's EAPOStep.control_inputs), by name
    _step_inputs: dict[str, dict[str, float]]

    def _check_eapo_loss_drops_nothing(self) -> None:
        """Refuse, at construction, every TRL option eapo's loss would silently drop (the entropy bonus,
        ``delta``, ...: :func:`options_eapo_loss_drops`) when eapo forms the loss.

        Raises:
            ValueError: naming each such option, what it does and what to do.
        """
        if not self._eapo_runs_the_loss():
            return
        dropped = options_eapo_loss_drops(self.args, router_aux_loss=self.aux_loss_enabled)
        if dropped:
            raise ValueError(
                f"EAPOTrainer forms the policy loss itself here (loss_mode={self.algorithm.control_values()['loss_mode']}, "
                f"controls TRL lacks: {[control.name for control in self.eapo_controls]}), and that loss does not "
                f"apply these TRL options, which would be dropped: {'; '.join(dropped)}. Set each to TRL's "
                "default, or train without loss_mode and the controls TRL lacks so that TRL forms the loss "
                "(on verl, actor.entropy_coeff composes with eapo's loss)"
            )

    def _eapo_runs_the_loss(self) -> bool:
        """Whether eapo forms the policy loss (:meth:`_eapo_loss`) in place of TRL's: ``loss_mode`` names a
        control's policy loss, or a control TRL lacks weights the per-token loss."""
        return self.algorithm.control_values()["loss_mode"] != "vanilla" or any(
            control.token_weights is not None for control in self.eapo_controls
        )

    def _applied_entropy_coef(self) -> float:
        """The entropy coefficient TRL applies to the coming update: 0 with TRL's entropy term off, a
        control's own where TRL runs one that decides it (its ``trl_applied_coef``), else ``entropy_coef``."""
        if not self._entropy_bonus_enabled:
            return 0.0
        for control in ENTROPY_CONTROLS.values():
            applied = control.trl_applied_coef(self) if control.trl_applied_coef is not None else None
            if applied is not None:
                return applied
        return self.entropy_coef

    def _trl_token_masks(self, entropies: torch.Tensor, mask: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """The per-token masks TRL's own loss applies for the controls TRL has (each one's
        ``trl_token_mask`` on this trainer, those that are on): ``(its weight_metric, mask (B, T))``."""
        masks = []
        for control in ENTROPY_CONTROLS.values():
            mask_of = control.trl_token_mask
            kept = mask_of(self, entropies, mask) if mask_of is not None else None
            if kept is not None:
                masks.append((control.weight_metric, kept))
        return masks

    def _eapo_loss(self, model, inputs):
        """TRL's GRPO loss formed by eapo, for what TRL lacks: the per-token policy loss of the control
        ``loss_mode`` names (Clip-Cov / KL-Cov, from :mod:`eapo.core`) or the PPO-clip surrogate
        (``vanilla``), times the per-token weights of the controls TRL lacks, then what TRL's loss adds —
        the top-entropy mask, the vLLM importance weights, β·k3 to the reference — aggregated as
        ``loss_type``: 1/|y_i| (``grpo``, the paper) or token-mean (``bnpo``). What TRL's loss does beyond
        that (:data:`LOSS_ONLY_OPTIONS`) was refused when the trainer was built."""
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + T]
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        mask = self._completion_mask(inputs)  # [B, T]
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )  # [B, T] each; a deferred polarity weighting has now been applied to inputs["advantages"]
        advantages = inputs["advantages"]  # [B] or [B, T]
        old_logps = inputs.get("old_per_token_logps")
        old_logps = logps.detach() if old_logps is None else old_logps
        controls = self.algorithm.control_values()
        mode = "train" if self.model.training else "eval"
        loss_of_mode = policy_loss_of(controls["loss_mode"])
        if loss_of_mode is None:  # vanilla: the paper's PPO-clip surrogate
            per_token = ppo_clip_per_token(
                logps, old_logps, advantages, clip_low=self.epsilon_low, clip_high=self.epsilon_high
            )
            with torch.no_grad():  # what TRL logs as clip_ratio/low_mean and high_mean
                ratio = torch.exp(logps - old_logps)
                signed = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
                low = (ratio < 1 - self.epsilon_low) & (signed < 0)
                high = (ratio > 1 + self.epsilon_high) & (signed > 0)
            if mode == "train":
                self._metrics[mode][CONTROL_METRICS["clip_low_frac"]].append(
                    self._global_masked_mean(low.to(per_token.dtype), mask)
                )
                self._metrics[mode][CONTROL_METRICS["clip_high_frac"]].append(
                    self._global_masked_mean(high.to(per_token.dtype), mask)
                )
        else:
            per_token, selected = loss_of_mode(
                logps,
                old_logps,
                advantages,
                mask,
                controls,
                clip_low=self.epsilon_low,
                clip_high=self.epsilon_high,
            )
            self._metrics[mode][CONTROL_METRICS["cov_frac"]].append(
                self._global_masked_mean(selected.to(per_token.dtype), mask)
            )
        weights, shares = control_token_weights(
            self.eapo_controls,
            lambda control: TokenInputs(
                logp=logps.detach(),
                old_logp=old_logps.detach(),
                advantages=advantages.unsqueeze(-1).expand_as(logps) if advantages.dim() == 1 else advantages,
                mask=mask,
                entropy=entropies.detach(),
                settings=controls,
                step=self._step_inputs.get(control.name, {}),
                gather=self._gather_any,
            ),
        )
        if weights is not None:
            per_token = per_token * weights
        for key, value in shares.items():
            self._metrics[mode][key].append(value)
        for _, kept in self._trl_token_masks(entropies, mask):  # what TRL's loss multiplies in
            per_token = per_token * kept
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token = per_token * inputs["importance_sampling_ratio"]
        if self.beta != 0.0:
            kl = kl_penalty(logps, inputs["ref_per_token_logps"], kind="k3")  # [B, T]
            if self.args.use_bias_correction_kl:
                kl = kl * torch.exp(logps - old_logps)
            per_token = per_token + self.beta * kl
            self._metrics[mode]["kl"].append(self._global_masked_mean(kl.detach(), mask))
        loss = aggregate_loss(per_token, mask, _COV_AGGREGATION[self.loss_type])
        self._metrics[mode]["entropy"].append(self._global_masked_mean(entropies.detach(), mask))
        normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        return loss / normalizer

    def _gather_any(self, values: torch.Tensor) -> torch.Tensor:
        """Every process's 1-D ``values`` (any length), concatenated."""
        if self.accelerator.num_processes == 1:
            return values
        sizes = self.accelerator.gather(torch.tensor([values.numel()], device=values.device))  # [world]
        padded = self.accelerator.gather(self.accelerator.pad_across_processes(values, dim=0))
        chunks = padded.view(sizes.numel(), -1)
        return torch.cat([chunk[: int(n)] for chunk, n in zip(chunks, sizes.tolist(), strict=True)])

    def _global_masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        totals = torch.stack([(values * mask).sum(), mask.sum().to(values.dtype)])
        totals = self.accelerator.reduce(totals, reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    def _log_control_metrics(self, inputs: dict[str, Any], applied_coef: float) -> None:
        """The entropy controls' ``entropy_control/*`` metrics of this update (:data:`CONTROL_METRICS`)."""
        metrics = self._metrics["train"]
        if self._entropy_bonus_enabled:
            metrics[CONTROL_METRICS["coef"]].append(applied_coef)
        if not self._eapo_runs_the_loss() and metrics.get("clip_ratio/low_mean"):  # TRL's loss measured them
            metrics[CONTROL_METRICS["clip_low_frac"]].append(metrics["clip_ratio/low_mean"][-1])
            metrics[CONTROL_METRICS["clip_high_frac"]].append(metrics["clip_ratio/high_mean"][-1])
        entropies = self._loss_entropies
        if entropies is not None:
            mask = self._completion_mask(inputs)
            for key, kept in self._trl_token_masks(entropies.detach(), mask):
                if key is not None:
                    metrics[key].append(self._global_masked_mean(kept.to(entropies.dtype), mask))
