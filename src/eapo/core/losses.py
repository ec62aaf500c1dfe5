"""The importance weights between the trainer and a vLLM rollout engine (:func:`importance_correction`,
TRL 1.16's modes), the PPO-clip surrogate of Eq. ``grpo`` with named loss aggregations, and the
k1/k2/k3 KL estimators: the paper's objective in tensors (tests check each engine's loss against them)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from eapo.core.entropy import masked_mean

# ---------------------------------------------------------------------------------------------
# Importance correction between the trainer and a vLLM rollout engine
# ---------------------------------------------------------------------------------------------

#: TRL 1.16's ``vllm_importance_sampling_mode`` values, plus ``"none"`` (no correction).
IMPORTANCE_CORRECTIONS: tuple[str, ...] = (
    "token_truncate",
    "token_mask",
    "sequence_truncate",
    "sequence_mask",
    "none",
)


def importance_correction(
    old_logp: torch.Tensor,
    sampling_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance weights ``ρ = π_train / π_rollout`` bounded as TRL 1.16 bounds them, and where the bound acted.

    ``ρ`` is ``exp(log π_old - log π_vllm)`` per token (``token_*``) or ``exp(Σ_t ...)`` per sequence
    (``sequence_*``); tokens whose rollout log-prob is NaN (vLLM did not return it) count as ratio 1.
    ``*_truncate`` clamps ``ρ`` to ``[clip_min, clip_max]``; ``*_mask`` sets a ``ρ`` outside it to 0.

    Args:
        old_logp: ``(B, T)`` log-probs of the sampled tokens under the trainer's policy.
        sampling_logp: ``(B, T)`` the same as reported by the rollout engine.
        mask: ``(B, T)`` completion mask.
        mode: one of :data:`IMPORTANCE_CORRECTIONS` except ``"none"``.
        clip_min, clip_max: the bounds ``C_min``, ``C_max`` (``None``: unbounded on that side).

    Returns:
        ``(weights, affected)``: ``(B, T)`` for token modes or ``(B, 1)`` for sequence modes;
        ``affected`` is True where ``ρ`` lay outside the bounds (truncated or zeroed).
    """
    if mode not in IMPORTANCE_CORRECTIONS or mode == "none":
        valid = ", ".join(m for m in IMPORTANCE_CORRECTIONS if m != "none")
        raise ValueError(f"unknown importance-correction mode {mode!r}; valid: {valid}")
    difference = torch.nan_to_num((old_logp - sampling_logp) * mask, nan=0.0)  # [B, T]
    if mode.startswith("sequence"):
        difference = difference.sum(dim=-1, keepdim=True)  # [B, 1]
    ratio = torch.exp(difference)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    affected = (ratio < low) | (ratio > high)
    if mode.endswith("truncate"):
        weights = ratio if clip_min is None and clip_max is None else ratio.clamp(min=clip_min, max=clip_max)
    else:
        weights = ratio.masked_fill(affected, 0.0)
    return weights, affected


def importance_correction_counts(affected: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(4,)`` float64 counts for the step's log, summable over processes:
    ``[affected tokens, tokens, affected rows, rows]``.

    ``affected`` is the second output of :func:`importance_correction` (``(B, T)`` or ``(B, 1)``);
    a row is affected when any of its tokens is (or its sequence weight is); rows without a
    completion token count in neither.
    """
    weights = mask.detach().to(torch.float64)  # [B, T]
    hit = affected.detach().to(torch.float64).expand_as(weights) * weights  # [B, T]
    rows = weights.sum(dim=-1) > 0  # [B]
    return torch.stack(
        [
            hit.sum(),
            weights.sum(),
            ((hit.sum(dim=-1) > 0) & rows).sum().to(torch.float64),
            rows.sum().to(torch.float64),
        ]
    )


# ---------------------------------------------------------------------------------------------
# Loss aggregation, the PPO-clip surrogate (Eq. grpo) and KL estimators
# ---------------------------------------------------------------------------------------------


def _token_mean(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_mean(loss, mask)


def _seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_mean(loss, mask, dim=-1).mean()  # [B] -> ()


def _seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (loss * mask.to(loss.dtype)).sum(dim=-1).mean()


#: Named loss aggregations (verl's ``loss_agg_mode``). ``seq-mean-token-mean`` is the paper's
#: ``(1/N) Σ_i (1/|y_i|) Σ_t`` of Eq. ``grpo``.
LOSS_AGGREGATIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
}


def aggregate_loss(loss: torch.Tensor, mask: torch.Tensor, agg: str = "seq-mean-token-mean") -> torch.Tensor:
    """Reduce a per-token loss ``(B, T)`` under ``mask`` ``(B, T)`` to a scalar with a named mode."""
    if agg not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {agg!r}; known: {', '.join(LOSS_AGGREGATIONS)}")
    return LOSS_AGGREGATIONS[agg](loss, mask)


def ppo_clip_per_token(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> torch.Tensor:
    """The PPO-clip surrogate per token, ``(B, T)``: ``−min(ρ_t Â, clip(ρ_t, 1 − clip_low, 1 + clip_high) Â)``
    with ``ρ_t = π_θ / π_old`` (no gradient into ``old_logp``); ``advantages`` ``(B,)`` or ``(B, T)``."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # [B, 1] broadcasts over T
    ratio = torch.exp(logp - old_logp.detach())  # [B, T]
    return -torch.minimum(
        ratio * advantages, torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    )


def _k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def _k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2


def _k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


#: Per-token estimators of KL(π_θ ‖ π_ref) from samples of π_θ (Schulman's k1, k2, k3).
KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": _k1,
    "k2": _k2,
    "k3": _k3,
    "low_var_kl": _k3,
}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, *, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimate ``(B, T)`` between the policy and the reference (the β·D_KL term of Eq. ``grpo``).

    ``k1 = log π - log π_ref``; ``k2 = ½ (log π - log π_ref)²``;
    ``k3 = π_ref/π - log(π_ref/π) - 1`` (unbiased, non-negative, low variance; verl's ``low_var_kl``
    without its clamp).
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; known: {', '.join(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[kind](logp, ref_logp)
