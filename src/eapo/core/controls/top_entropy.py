"""'Beyond the 80/20 Rule' (Wang et al. 2025): only the highest-entropy tokens carry the policy loss.

TRL 1.16 has it (``top_entropy_quantile``: its loss applies its own mask; where eapo forms TRL's loss it
applies TRL's mask, ``trl_token_mask``); verl 0.9.1 lacks it, so the verl plugin's loss multiplies
:func:`top_entropy_mask` into the policy loss (the registry's ``token_weights`` path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from eapo.core.controls.registry import CONTROL_METRICS, EntropyControl, TokenInputs, register_entropy_control
from eapo.core.settings import Setting, between


def top_entropy_mask(
    entropies: torch.Tensor,
    mask: torch.Tensor,
    quantile: float,
    *,
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``(B, T)`` bool: response tokens whose entropy is at or above the ``1 − quantile`` quantile of
    all response tokens' entropies (``gather`` collects them over processes), as TRL 1.16's
    ``get_high_entropy_mask``. ``quantile`` 1 keeps every token, 0 only the highest."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"top_entropy_quantile must lie in [0, 1], got {quantile}")
    valid = mask.bool()
    values = entropies.detach()[valid].float()
    if gather is not None:
        values = gather(values)
    if values.numel() == 0:
        return torch.zeros_like(valid)
    threshold = torch.quantile(values, 1.0 - quantile)
    return (entropies.detach() * mask.to(entropies.dtype) >= threshold) & valid


def _token_weights(inputs: TokenInputs) -> torch.Tensor:
    """The mask as 0/1 weights ``(B, T)`` over every process's tokens."""
    if inputs.entropy is None:
        raise ValueError("top_entropy_quantile needs the update's per-token entropies")
    keep = top_entropy_mask(
        inputs.entropy, inputs.mask, float(inputs.settings["top_entropy_quantile"]), gather=inputs.gather
    )
    return keep.to(inputs.logp.dtype)


def _trl_token_mask(trainer: Any, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """TRL 1.16's own mask ``(B, T)`` bool (``GRPOTrainer.get_high_entropy_mask``, over every process), as
    its loss applies it; None while its ``top_entropy_quantile`` keeps every token."""
    if trainer.top_entropy_quantile < 1.0:
        return trainer.get_high_entropy_mask(entropies, mask, 1 - trainer.top_entropy_quantile)
    return None


TOP_ENTROPY = register_entropy_control(
    EntropyControl(
        "top_entropy",
        "'Beyond the 80/20 Rule' (Wang et al. 2025, arXiv 2506.01939): the top 20% highest-entropy tokens",
        {"top_entropy_quantile": 0.2},
        "only tokens at or above the (1 − top_entropy_quantile) quantile of the update's token entropies "
        "carry the policy loss",
        trl_fields={"top_entropy_quantile": "top_entropy_quantile"},
        trl_token_mask=_trl_token_mask,
        token_weights=_token_weights,
        needs_entropy=True,
        weight_metric=CONTROL_METRICS["top_entropy_frac"],
        metrics=(CONTROL_METRICS["top_entropy_frac"],),
        label="Top-entropy",
        declares=(
            Setting(
                "top_entropy_quantile",
                float,
                "Only the top share of tokens by entropy carry the policy loss (1: all; the top_entropy preset: "
                "0.2, the paper's). TRL: top_entropy_quantile; verl: eapo.core.top_entropy_mask.",
                between(0, 1),
                default=1.0,
                citation="Wang et al. 2025, arXiv 2506.01939",
            ),
        ),
    )
)
