"""Group-relative advantages (GRPO, Section 2.2), the reward-mean polarity split D+ / D- and the
polarity-weighted advantages  Â_i = w+·A_i on D+, w-·A_i on D-  (Section 4.1). Pure tensor maths."""

from __future__ import annotations

import math
from typing import Literal

import torch

AdvantageScale = Literal["group", "batch", "none"]

# ---------------------------------------------------------------------------------------------
# Group statistics, advantages and polarity
# ---------------------------------------------------------------------------------------------


def _check_rewards(rewards: torch.Tensor, group_size: int) -> None:
    if rewards.dim() != 1:
        raise ValueError(
            f"rewards must be 1-D of shape (num_prompts * group_size,), got shape {tuple(rewards.shape)}"
        )
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(
            f"group_size must be an integer >= 2 (a group needs at least two rollouts), got {group_size!r}"
        )
    if rewards.numel() % group_size != 0:
        raise ValueError(
            f"rewards has length {rewards.numel()}, which is not divisible by group_size={group_size}; "
            "each prompt must contribute exactly group_size contiguous rollouts"
        )
    finite = torch.isfinite(rewards)
    if not bool(finite.all()):
        index = int((~finite).nonzero()[0, 0])
        raise ValueError(
            f"reward at index {index} is not finite ({float(rewards[index])}); score every rollout or drop its group"
        )


#: How :func:`group_quantile` reads the K-quantile off a group's rewards: ``linear`` interpolates between
#: the two sorted rewards around position ``K·(G − 1)`` (``torch.quantile``'s default, what QAE's reference
#: code computes); ``inverse_cdf`` takes the smallest reward ``x`` with ``#{r <= x} / G >= K``.
QUANTILE_METHODS: tuple[str, ...] = ("linear", "inverse_cdf")


def group_quantile(grouped: torch.Tensor, k: float, method: str = "linear") -> torch.Tensor:
    """QAE's baseline: each row's ``K``-quantile, ``(P, 1)`` from ``(P, G)`` rewards, read as ``method``
    (:data:`QUANTILE_METHODS`):

    * ``"linear"`` (QAE's reference code, ``torch.quantile``): the sorted rewards interpolated at position
      ``K·(G − 1)``, so between two rewards of the group when ``K·(G − 1)`` is not whole;
    * ``"inverse_cdf"``: the inverse of the empirical CDF, the smallest reward ``x`` of the row with
      ``F(x) = #{r <= x} / G >= K`` (sorted rewards at position ``ceil(K·G) − 1``, clamped to the row),
      always one of the group's own rewards.

    Ties at the quantile share it (every reward equal to it has advantage 0). With binary rewards, success
    rate ``p`` and ``inverse_cdf`` it is 0 when ``p <= 1 − K`` (hard prompts: only successes move) and 1
    otherwise (easy prompts: only failures move), QAE's two regimes (arXiv 2509.22611, K = 0.4);
    ``linear`` agrees except where the interpolation position falls between a failure and a success
    (G = 4, K = 0.4, p = 0.5: position 1.2 of [0, 0, 1, 1], baseline 0.2 where ``inverse_cdf`` gives 0)."""
    if not 0.0 <= k <= 1.0:
        raise ValueError(f"quantile_k must lie in [0, 1], got {k}")
    if method == "linear":
        return torch.quantile(grouped, k, dim=1, keepdim=True, interpolation="linear")
    if method != "inverse_cdf":
        raise ValueError(f"unknown quantile_method {method!r}; known: {', '.join(QUANTILE_METHODS)}")
    size = grouped.shape[1]
    position = min(max(math.ceil(k * size - 1e-9) - 1, 0), size - 1)
    return grouped.sort(dim=1).values[:, position : position + 1]


def _centred(
    rewards: torch.Tensor,
    group_size: int,
    by: str = "mean",
    quantile_k: float = 0.4,
    quantile_method: str = "linear",
) -> torch.Tensor:
    """``r_i - centre(group)`` of shape ``(num_prompts, G)``, with rounding noise snapped to exactly 0.

    The centre is computed in float64. A difference whose magnitude is within a few units of
    rounding of the input dtype (relative to the group's largest |r|) is set to exactly 0, so a
    reward that equals the centre is never flipped to the negative side by float error, and a
    group of equal rewards is centred to exact zeros.
    """
    grouped = rewards.detach().to(torch.float64).view(-1, group_size)  # [P, G]
    if by == "mean":
        centre = grouped.mean(dim=1, keepdim=True)
    elif by == "median":
        centre = torch.quantile(grouped, 0.5, dim=1, keepdim=True)
    elif by == "quantile":
        centre = group_quantile(grouped, quantile_k, quantile_method)
    else:
        raise ValueError(f"unknown split {by!r}; known: 'mean' (the paper), 'median', 'quantile'")
    centred = grouped - centre  # [P, G]
    dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float64
    scale = grouped.abs().amax(dim=1, keepdim=True)
    tolerance = 4 * group_size * torch.finfo(dtype).eps * scale
    return torch.where(centred.abs() <= tolerance, torch.zeros_like(centred), centred)


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    scale: AdvantageScale = "group",
    eps: float = 1e-6,
    centre: Literal["mean", "quantile"] = "mean",
    quantile_k: float = 0.4,
    quantile_method: str = "linear",
) -> torch.Tensor:
    """Group-relative advantages (GRPO; Section 2.2 of the EAPO paper, ``A_i = (r_i - r̄_x)/(σ_x + ε)``);
    ``centre="quantile"``: QAE's ``A_i = (r_i − Q_K(x))/(σ_x + ε)`` with :func:`group_quantile`
    (``quantile_k``, ``quantile_method``).

    Args:
        rewards: ``(B,)`` with ``B = num_prompts * group_size``; each prompt's rollouts contiguous.
        group_size: rollouts per prompt ``G`` (>= 2).
        scale: ``"group"`` divides by the group's unbiased std + ``eps`` (GRPO, verl);
            ``"batch"`` by the whole batch's unbiased std + ``eps``; ``"none"`` only centres (Dr. GRPO).
        eps: added to the std.

    Returns:
        ``(B,)`` advantages in the dtype of ``rewards`` (float32 for integer input). A group whose
        rewards are all equal gets exactly 0.

    Raises:
        ValueError: ``group_size < 2``, a length not divisible by it, or a non-finite reward (the
            message names the index).
    """
    _check_rewards(rewards, group_size)
    if centre not in ("mean", "quantile"):
        raise ValueError(f"unknown advantage centre {centre!r}; known: 'mean' (GRPO), 'quantile' (QAE)")
    centred = _centred(
        rewards, group_size, by=centre, quantile_k=quantile_k, quantile_method=quantile_method
    )  # [P, G] float64
    grouped = rewards.detach().to(torch.float64).view(-1, group_size)
    if scale == "group":
        advantages = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        batch_std = (
            rewards.detach().to(torch.float64).std()
            if rewards.numel() > 1
            else torch.zeros((), dtype=torch.float64)
        )
        advantages = centred / (batch_std + eps)
    elif scale == "none":
        advantages = centred
    else:
        raise ValueError(f"unknown advantage scale {scale!r}; known: 'group', 'batch', 'none'")
    # 0 / (0 + eps) is NaN when eps = 0: a centred value of exactly 0 stays exactly 0.
    advantages = torch.where(centred == 0, torch.zeros_like(advantages), advantages)
    out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    return advantages.reshape(-1).to(out_dtype)


def positive_mask(
    rewards: torch.Tensor,
    group_size: int,
    *,
    by: Literal["mean", "median", "quantile"] = "mean",
    quantile_k: float = 0.4,
    quantile_method: str = "linear",
) -> torch.Tensor:
    """The paper's polarity split: True for D+ = {i : r_i >= r̄_x}, False for D- (Section 2.2).

    Args:
        rewards: ``(B,)``, groups contiguous.
        group_size: ``G`` (>= 2).
        by: ``"mean"`` (the paper), ``"median"`` (robust to outliers; beyond the paper) or ``"quantile"``
            (QAE's ``K``-quantile, ``quantile_k``, read as ``quantile_method``: :func:`group_quantile`).

    Returns:
        ``(B,)`` bool. A reward equal to the group centre is positive even when float rounding puts
        the computed centre a hair above it; a group of equal rewards is all positive.
    """
    _check_rewards(rewards, group_size)
    centred = _centred(rewards, group_size, by=by, quantile_k=quantile_k, quantile_method=quantile_method)
    return (centred >= 0).reshape(-1)


def weight_advantages(
    advantages: torch.Tensor,
    positive: torch.Tensor,
    w_pos: float,
    w_neg: float,
) -> torch.Tensor:
    """Polarity-weighted advantages (Section 4.1): ``Â_i = w_pos·A_i`` on D+, ``w_neg·A_i`` on D-.

    Args:
        advantages: ``(B,)`` or ``(B, T)`` (token-level advantages, broadcast per sequence).
        positive: ``(B,)`` bool from :func:`positive_mask`.
        w_pos, w_neg: non-negative scalar weights.

    Returns:
        Tensor with the shape and dtype of ``advantages``.
    """
    if positive.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"positive has {positive.shape[0]} entries but advantages has {advantages.shape[0]} sequences"
        )
    positive = positive.to(torch.bool).to(advantages.device)
    while positive.dim() < advantages.dim():
        positive = positive.unsqueeze(-1)  # [B, 1] broadcasts over T
    return torch.where(positive, advantages * w_pos, advantages * w_neg)
