"""KL-Cov (Cui et al. 2025): the highest-covariance tokens get a ``|log ratio|`` penalty.

verl 0.9.1 has it (``policy_loss.loss_mode=kl_cov``); TRL 1.16 lacks it, so the TRL engine replaces
its PPO-clip surrogate by :func:`kl_cov_policy_loss` while ``loss_mode`` is ``kl_cov``. Its
``loss_mode`` setting is Clip-Cov's (:mod:`eapo.core.controls.clip_cov`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from eapo.core.controls.clip_cov import CUI_2025, mode_problems, per_token
from eapo.core.controls.registry import (
    CONTROL_METRICS,
    EntropyControl,
    TokenInputs,
    register_entropy_control,
)
from eapo.core.settings import Setting, at_least, between


def kl_cov_mask(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *, kl_cov_ratio: float = 2e-4
) -> torch.Tensor:
    """KL-Cov's token selection: ``(B, T)`` bool, the top ``max(1, ⌊kl_cov_ratio · #tokens⌋)`` tokens by
    ``(A_t − mean A) · (log π_t − mean log π)`` (verl's ``compute_policy_loss_kl_cov``)."""
    if not kl_cov_ratio > 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    advantages = per_token(advantages, logp)
    valid = mask > 0
    selected = torch.zeros_like(valid)
    with torch.no_grad():
        flat_index = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]  # [K]
        if flat_index.numel() == 0:
            return selected
        adv = advantages[valid].detach().reshape(-1)
        lp = logp[valid].detach().reshape(-1)
        cov = (adv - adv.mean()) * (lp - lp.mean())
        count = max(1, int(cov.numel() * kl_cov_ratio))
        top = flat_index[torch.topk(cov, count, largest=True).indices]
        selected.view(-1)[top] = True
    return selected


def kl_cov_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_cov_ratio: float = 2e-4,
    ppo_kl_coef: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL-Cov's per-token loss ``(B, T)`` and its selection ``(B, T)`` bool.

    ``loss_t = −A_t ρ_t + (ppo_kl_coef · |log ρ_t| if selected)``, with no ratio clipping, as verl.
    At the first update of a batch (ρ ≡ 1) the penalty is 0 and so is its gradient (torch's
    ``sign(0) = 0``): KL-Cov acts only where the policy has moved since sampling.
    """
    advantages = per_token(advantages, logp)
    selected = kl_cov_mask(logp, advantages, mask, kl_cov_ratio=kl_cov_ratio)
    log_ratio = logp - old_logp.detach()
    loss = -advantages * torch.exp(log_ratio)
    penalty = ppo_kl_coef * log_ratio.abs()
    return torch.where(selected, loss + penalty, loss), selected


def _policy_loss(logp, old_logp, advantages, mask, values: Mapping[str, Any], *, clip_low, clip_high):
    return kl_cov_policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        kl_cov_ratio=values["kl_cov_ratio"],
        ppo_kl_coef=values["ppo_kl_coef"],
    )


def _verl_selected(inputs: TokenInputs, verl_metric: Callable[[str], float | None]) -> float | None:
    """The share of response tokens verl's KL-Cov selected, recomputed (deterministic top-k, so it draws
    nothing) with verl's ``kl_cov_ratio``."""
    selected = kl_cov_mask(
        inputs.logp, inputs.advantages, inputs.mask, kl_cov_ratio=inputs.settings["kl_cov_ratio"]
    )
    return selected.sum().item() / max(int(inputs.mask.sum().item()), 1)


def _problems(values: Mapping[str, Any]) -> list[str]:
    problems = mode_problems(values, "kl_cov", ("kl_cov_ratio", "ppo_kl_coef"))
    if values["loss_mode"] == "kl_cov" and values["epsilon_high"] is not None:
        problems.append(
            "{p}epsilon_high cannot be combined with loss_mode=kl_cov: KL-Cov does not clip the ratio "
            "(kl_cov_policy_loss, as verl's compute_policy_loss_kl_cov), so epsilon_high would have no effect"
        )
    return problems


def _inert(values: dict, objective: dict) -> list[str]:
    """At the first update of a batch |log ratio| is 0, and so is its gradient."""
    if objective.get("num_iterations", 1) > 1 or values["loss_mode"] != "kl_cov":
        return []
    return [
        "{p}loss_mode=kl_cov penalises |log ratio|, which is 0 (and so is its gradient) at num_iterations=1 "
        "with one update per rollout batch; only its unclipped surrogate differs from GRPO here (set "
        "{p}num_iterations > 1)"
    ]


KL_COV = register_entropy_control(
    EntropyControl(
        "kl_cov",
        "KL-Cov (Cui et al. 2025, arXiv 2505.22617); verl's ActorConfig defaults",
        {"loss_mode": "kl_cov", "kl_cov_ratio": 2e-4, "ppo_kl_coef": 0.1},
        "the top kl_cov_ratio share of tokens by advantage × log-prob covariance get ppo_kl_coef · |log ρ| "
        "added; no ratio clipping (as verl)",
        verl_options={"kl_cov_ratio": "policy_loss.kl_cov_ratio", "ppo_kl_coef": "policy_loss.ppo_kl_coef"},
        policy_loss=_policy_loss,
        verl_selected=_verl_selected,
        problems=_problems,
        inert=_inert,
        metrics=(CONTROL_METRICS["cov_frac"],),
        label="KL-Cov",
        declares=(
            Setting(
                "kl_cov_ratio",
                float,
                "KL-Cov: share of highest-covariance tokens penalised.",
                between(0, 1, low_open=True),
                default=2e-4,
                citation=CUI_2025,
            ),
            Setting(
                "ppo_kl_coef",
                float,
                "KL-Cov: coefficient of the |log ratio| penalty. Zero at the first update of a batch (ratio 1), "
                "so it acts only with num_iterations > 1.",
                at_least(0),
                default=0.1,
                citation=CUI_2025,
            ),
        ),
    )
)
