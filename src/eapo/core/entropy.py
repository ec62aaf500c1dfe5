"""Masked means and the rollout entropy ``H_t`` with a named aggregation (:func:`rollout_entropy`: the
one definition the TRL and verl engines share; each engine computes the per-token entropies itself)."""

from __future__ import annotations

from collections.abc import Callable

import torch

# ---------------------------------------------------------------------------------------------
# Masked means
# ---------------------------------------------------------------------------------------------


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is true (over all elements, or along ``dim``).

    An empty mask gives 0 rather than NaN.
    """
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp_min(1.0)
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim).clamp_min(1.0)


# ---------------------------------------------------------------------------------------------
# The rollout entropy H_t (Eq. dynamic_weight) and its aggregation
# ---------------------------------------------------------------------------------------------

#: How :func:`rollout_entropy` averages per-token entropies into ``H_t`` (verl's ``loss_agg_mode`` names).
ENTROPY_AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean")


def entropy_sums(entropies: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean") -> torch.Tensor:
    """The numerator and denominator of ``H_t`` as a ``(2,)`` float64 tensor, for an all-reduce (sum).

    * ``token-mean``: ``(Σ_{i,t} m_it·h_it, Σ_{i,t} m_it)`` — every completion token weighs the same;
    * ``seq-mean-token-mean``: ``(Σ_i h̄_i, #{i : |y_i| > 0})`` with ``h̄_i`` the mean entropy of
      sequence ``i``'s tokens — every sequence weighs the same (verl's ``agg_loss`` mode of that
      name, without its ``1e-8`` in the per-sequence division).

    A sequence without an unmasked token (verl's padding rows) counts in neither.

    Args:
        entropies: ``(B, T)`` per-token entropies (detached or not; the sums are detached).
        mask: ``(B, T)`` 1 for completion tokens, 0 for padding (bool or float).
        agg: a name in :data:`ENTROPY_AGGREGATIONS`.
    """
    if agg not in ENTROPY_AGGREGATIONS:
        raise ValueError(f"unknown entropy aggregation {agg!r}; known: {', '.join(ENTROPY_AGGREGATIONS)}")
    if entropies.shape != mask.shape or entropies.dim() != 2:
        raise ValueError(
            f"entropies {tuple(entropies.shape)} and mask {tuple(mask.shape)} must have one shape (B, T)"
        )
    values = entropies.detach().to(torch.float64)
    weights = mask.detach().to(torch.float64)
    token_sums = (values * weights).sum(dim=-1)  # [B]
    token_counts = weights.sum(dim=-1)  # [B]
    if agg == "token-mean":
        return torch.stack([token_sums.sum(), token_counts.sum()])
    scored = token_counts > 0  # [B]
    sequence_means = token_sums[scored] / token_counts[scored]
    return torch.stack([sequence_means.sum(), scored.sum().to(torch.float64)])


def rollout_entropy(
    entropies: torch.Tensor,
    mask: torch.Tensor,
    *,
    agg: str = "token-mean",
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> float:
    """The rollout entropy ``H_t`` of Eq. ``dynamic_weight``: per-token entropies averaged by ``agg``.

    Args:
        entropies: ``(B, T)`` per-token entropies of the policy on this step's completions.
        mask: ``(B, T)`` completion mask.
        agg: ``"token-mean"`` or ``"seq-mean-token-mean"`` (see :func:`entropy_sums`).
        reduce: sums the ``(2,)`` tensor of :func:`entropy_sums` over processes (e.g.
            ``lambda s: accelerator.reduce(s, reduction="sum")``); ``None`` on one process.

    Returns:
        ``H_t`` as a float (0.0 when no token is unmasked anywhere).
    """
    sums = entropy_sums(entropies, mask, agg)  # [2]
    if reduce is not None:
        sums = reduce(sums)
    return float(sums[0] / sums[1].clamp(min=1.0))
