"""Clip-Cov (Cui et al. 2025): a random share of high-covariance tokens loses its gradient.

verl 0.9.1 has it (``policy_loss.loss_mode=clip_cov``); TRL 1.16 lacks it, so the TRL engine replaces
its PPO-clip surrogate by :func:`clip_cov_policy_loss` while ``loss_mode`` is ``clip_cov``.

Shapes: ``B`` sequences, ``T`` response positions. Losses are *per-token* ``(B, T)`` matrices, to be
aggregated with the run's loss aggregation (:func:`eapo.core.aggregate_loss`), the β·KL term added by
the caller, as verl's policy losses leave both to the actor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from eapo.core.controls.registry import (
    CONTROL_METRICS,
    LOSS_MODES,
    EntropyControl,
    TokenInputs,
    register_entropy_control,
    stray_settings,
)
from eapo.core.settings import FINITE, Setting, between, one_of

CUI_2025 = "Cui et al. 2025, 'The Entropy Mechanism of RL for Reasoning LMs', arXiv 2505.22617; verl's ActorConfig defaults"


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` over the response tokens of ``mask`` (both ``(B, T)``)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(B,)`` per-sequence or ``(B, T)`` per-token advantages as ``(B, T)``."""
    return advantages.unsqueeze(-1).expand_as(like) if advantages.dim() == 1 else advantages


def clip_cov_mask(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Clip-Cov's token selection: ``(B, T)`` bool, True where the token's gradient is cut.

    ``cov_t = (A_t − mean A) · (log π_t − mean log π)`` over the response tokens; tokens the PPO clip
    already acts on are excluded; of those with ``clip_cov_lb < cov_t < clip_cov_ub``, a random
    ``max(1, ⌊clip_cov_ratio · #tokens⌋)`` are selected (``torch.randperm``, as verl; pass
    ``generator`` for a fixed draw). Same arithmetic as verl's ``compute_policy_loss_clip_cov``.
    """
    if not clip_cov_ratio > 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {clip_cov_ratio}")
    advantages = per_token(advantages, logp)  # [B, T]
    valid = mask > 0  # [B, T]
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        unclipped = -advantages * ratio
        clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
        clip_by_origin = (clipped > unclipped) & valid
        cov = (advantages - masked_token_mean(advantages, mask)) * (
            logp - masked_token_mean(logp, mask)
        )  # [B, T]
        candidates = (cov < clip_cov_ub) & (cov > clip_cov_lb) & valid & ~clip_by_origin
        index = torch.nonzero(candidates)  # [K, 2]
        count = max(int(clip_cov_ratio * mask.sum().item()), 1)
        if len(index) > 0:
            perm = torch.randperm(len(index), generator=generator)  # on the CPU, as verl
            index = index[perm[: min(count, len(index))].to(index.device)]
        selected = torch.zeros_like(valid)
        selected[index[:, 0], index[:, 1]] = True
    return selected


def clip_cov_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-Cov's per-token loss ``(B, T)`` and its selection ``(B, T)`` bool.

    ``loss_t = max(−A_t ρ_t, −A_t clip(ρ_t, 1 − clip_low, 1 + clip_high)) · (0 if selected else 1)``:
    the PPO-clip surrogate with the selected tokens' gradient cut (:func:`clip_cov_mask`).
    """
    advantages = per_token(advantages, logp)
    selected = clip_cov_mask(
        logp,
        old_logp,
        advantages,
        mask,
        clip_cov_ratio=clip_cov_ratio,
        clip_cov_lb=clip_cov_lb,
        clip_cov_ub=clip_cov_ub,
        clip_low=clip_low,
        clip_high=clip_high,
        generator=generator,
    )
    ratio = torch.exp(logp - old_logp.detach())  # [B, T]
    surrogate = torch.maximum(
        -advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    )
    return surrogate * (~selected).to(surrogate.dtype), selected


def _policy_loss(logp, old_logp, advantages, mask, values: Mapping[str, Any], *, clip_low, clip_high):
    return clip_cov_policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        clip_cov_ratio=values["clip_cov_ratio"],
        clip_cov_lb=values["clip_cov_lb"],
        clip_cov_ub=values["clip_cov_ub"],
    )


def _verl_selected(inputs: TokenInputs, verl_metric: Callable[[str], float | None]) -> float | None:
    """verl's Clip-Cov reports the share of tokens it selected as its ``pg_clipfrac``."""
    return verl_metric("actor/pg_clipfrac")


def mode_problems(values: Mapping[str, Any], mode: str, keys: tuple[str, ...]) -> list[str]:
    """``keys`` set while ``loss_mode`` is not ``mode``: "applies only with" (Clip-Cov's and KL-Cov's rule)."""
    stray = stray_settings(values, keys)
    if stray and values["loss_mode"] != mode:
        return [
            f"{{p}}{stray[0]} applies only with {{p}}loss_mode={mode} (method={mode}); loss_mode is "
            f"{values['loss_mode']}"
        ]
    return []


def _problems(values: Mapping[str, Any]) -> list[str]:
    problems = mode_problems(values, "clip_cov", ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"))
    if not values["clip_cov_lb"] < values["clip_cov_ub"]:
        problems.append(
            f"{{p}}clip_cov_lb ({values['clip_cov_lb']}) must be < clip_cov_ub ({values['clip_cov_ub']})"
        )
    return problems


CLIP_COV = register_entropy_control(
    EntropyControl(
        "clip_cov",
        "Clip-Cov (Cui et al. 2025, 'The Entropy Mechanism of RL for Reasoning LMs', arXiv 2505.22617); "
        "verl's ActorConfig defaults",
        {"loss_mode": "clip_cov", "clip_cov_ratio": 2e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
        "a random clip_cov_ratio share of the tokens whose centred advantage × log-prob covariance lies in "
        "(clip_cov_lb, clip_cov_ub) gets no gradient",
        verl_options={
            "loss_mode": "policy_loss.loss_mode",
            "clip_cov_ratio": "policy_loss.clip_cov_ratio",
            "clip_cov_lb": "policy_loss.clip_cov_lb",
            "clip_cov_ub": "policy_loss.clip_cov_ub",
        },
        policy_loss=_policy_loss,
        verl_selected=_verl_selected,
        problems=_problems,
        metrics=(
            CONTROL_METRICS["cov_frac"],
            CONTROL_METRICS["clip_low_frac"],
            CONTROL_METRICS["clip_high_frac"],
        ),
        label="Clip-Cov",
        declares=(
            Setting(
                "loss_mode",
                str,
                "Policy loss: vanilla (the paper's PPO-clip), clip_cov or kl_cov (covariance-selected tokens lose "
                "their gradient / get a |log ratio| penalty). verl: actor.policy_loss.loss_mode; TRL: "
                "eapo.core.clip_cov_policy_loss / kl_cov_policy_loss.",
                one_of(*LOSS_MODES),
                default="vanilla",
                citation=CUI_2025,
            ),
            Setting(
                "clip_cov_ratio",
                float,
                "Clip-Cov: share of tokens whose gradient is cut.",
                between(0, 1, low_open=True),
                default=2e-4,
                citation=CUI_2025,
            ),
            Setting(
                "clip_cov_lb",
                float,
                "Clip-Cov: lower covariance bound of candidates.",
                FINITE,
                default=1.0,
                citation=CUI_2025,
            ),
            Setting(
                "clip_cov_ub",
                float,
                "Clip-Cov: upper covariance bound of candidates.",
                FINITE,
                default=5.0,
                citation=CUI_2025,
            ),
        ),
    )
)
