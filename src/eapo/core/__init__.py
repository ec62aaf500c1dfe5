"""The algorithm core of EAPO: pure tensor maths, no model, I/O or config objects.

Everything the trainers (TRL, verl) and users' own code need lives here:

* group-relative advantages (GRPO, Eq. "A_i" in Section 2.2 of the EAPO paper),
* the reward-mean polarity split D+ / D- (Section 2.2),
* polarity-weighted advantages  Â_i = w+·A_i on D+, w-·A_i on D-  (Section 4.1),
* the entropy-driven positive weight  w+_t = clip(w0 · H_t / H_0, w_min, w_max)
  (Eq. ``dynamic_weight``; closed form of the recursion in the appendix "Formula Derivation"),
* a registry of weighting schemes (GRPO, PSR, NSR, W-REINFORCE, EAPO), filled by
  :func:`register_weighting` (as verl's ``register_adv_est``),
* the whole per-step decision both trainers delegate to (:mod:`eapo.core.step`): group statistics
  by group id that tolerate unscorable (NaN) rollouts and uneven groups, the split, ``(w+, w-)``,
  ``H_0``, the ``eapo/*`` metrics and the one checkpointed state (:class:`EAPOStep`),
* per-token entropy, masked means, the rollout entropy ``H_t`` with a named aggregation
  (:func:`rollout_entropy`, the one definition the TRL and verl trainers share), the PPO-clip
  surrogate of Eq. ``grpo`` with named loss aggregations, and the k1/k2/k3 KL estimators;
* the importance weights between the trainer and a vLLM rollout engine, with where their bound
  acted (:func:`importance_correction`, TRL 1.16's modes).

Departures from the paper, all opt-in and off by default:

* ``positive_mask(by="median")`` splits at the group median (the paper's Limitations section notes
  the mean's sensitivity to outliers);
* ``EntropyAdaptiveWeight(anchor_steps=k)`` anchors H_0 on the mean of the first k entropies
  (k = 1 is the paper);
* ``group_advantages(scale="batch" | "none")`` for batch-std (REINFORCE++-style) and
  mean-centred (Dr. GRPO) advantages.

Shapes follow verl's notation: ``B`` = number of sequences (``num_prompts * group_size``),
``G`` = group size, ``T`` = response length, ``V`` = vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch

__all__ = [
    "group_advantages",
    "positive_mask",
    "weight_advantages",
    "polarity_weighted_advantages",
    "EntropyAdaptiveWeight",
    "WeightingScheme",
    "FixedWeighting",
    "EntropyAdaptiveWeighting",
    "make_weighting",
    "WEIGHTING_SCHEMES",
    "register_weighting",
    "token_entropy",
    "token_logprobs_and_entropy",
    "masked_mean",
    "ENTROPY_AGGREGATIONS",
    "entropy_sums",
    "rollout_entropy",
    "IMPORTANCE_CORRECTIONS",
    "importance_correction",
    "importance_correction_counts",
    "aggregate_loss",
    "LOSS_AGGREGATIONS",
    "policy_loss",
    "kl_penalty",
    "KL_ESTIMATORS",
]

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


def _centred(rewards: torch.Tensor, group_size: int, by: str = "mean") -> torch.Tensor:
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
    else:
        raise ValueError(f"unknown split {by!r}; known: 'mean' (the paper), 'median'")
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
) -> torch.Tensor:
    """Group-relative advantages (GRPO; Section 2.2 of the EAPO paper, ``A_i = (r_i - r̄_x)/(σ_x + ε)``).

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
    centred = _centred(rewards, group_size)  # [P, G] float64
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
    rewards: torch.Tensor, group_size: int, *, by: Literal["mean", "median"] = "mean"
) -> torch.Tensor:
    """The paper's polarity split: True for D+ = {i : r_i >= r̄_x}, False for D- (Section 2.2).

    Args:
        rewards: ``(B,)``, groups contiguous.
        group_size: ``G`` (>= 2).
        by: ``"mean"`` (the paper) or ``"median"`` (robust to outliers; beyond the paper).

    Returns:
        ``(B,)`` bool. A reward equal to the group centre is positive even when float rounding puts
        the computed centre a hair above it; a group of equal rewards is all positive.
    """
    _check_rewards(rewards, group_size)
    return (_centred(rewards, group_size, by=by) >= 0).reshape(-1)


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


def polarity_weighted_advantages(
    rewards: torch.Tensor,
    group_size: int,
    w_pos: float,
    w_neg: float,
    *,
    scale: AdvantageScale = "group",
    by: Literal["mean", "median"] = "mean",
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards → (weighted advantages ``(B,)``, positive mask ``(B,)``): the three steps above in one call."""
    advantages = group_advantages(rewards, group_size, scale=scale, eps=eps)
    positive = positive_mask(rewards, group_size, by=by)
    return weight_advantages(advantages, positive, w_pos, w_neg), positive


# ---------------------------------------------------------------------------------------------
# Entropy-driven positive weight (Eq. dynamic_weight) and the weighting-scheme registry
# ---------------------------------------------------------------------------------------------


def _check_entropy(entropy: float) -> float:
    value = float(entropy)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"rollout entropy must be finite and > 0, got {value!r}; check that the completion mask is "
            "not empty and the logits are finite"
        )
    return value


@dataclass
class EntropyAdaptiveWeight:
    """``w+_t = clip(w0 · H_t / H_0, w_min, w_max)`` (Eq. ``dynamic_weight`` of the EAPO paper).

    ``H_0`` is the mean of the first ``anchor_steps`` rollout entropies (``anchor_steps = 1`` is the
    paper: "the rollout entropy recorded at the first training step, fixed thereafter"). During the
    anchor steps the weight is ``clip(w0, w_min, w_max)``. The closed form equals the paper's
    recursion ``w_t = w_{t-1} · H_t / H_{t-1}`` (appendix "Formula Derivation") without its error
    accumulation.
    """

    w0: float = 0.2
    w_min: float = 0.0
    w_max: float = 2.0
    anchor_steps: int = 1
    _anchor_sum: float = field(default=0.0, repr=False)
    _anchor_count: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.w0) and self.w0 >= 0):
            raise ValueError(f"w0 must be finite and >= 0, got {self.w0}")
        if not (self.w_min <= self.w_max):
            raise ValueError(f"w_min ({self.w_min}) must be <= w_max ({self.w_max})")
        if self.w_min < 0:
            raise ValueError(f"w_min must be >= 0 (a negative weight flips the update), got {self.w_min}")
        if not isinstance(self.anchor_steps, int) or self.anchor_steps < 1:
            raise ValueError(f"anchor_steps must be an integer >= 1, got {self.anchor_steps!r}")

    @property
    def h0(self) -> float | None:
        """The anchor entropy ``H_0``, or None until ``anchor_steps`` entropies have been seen."""
        if self._anchor_count < self.anchor_steps:
            return None
        return self._anchor_sum / self._anchor_count

    def _clip(self, value: float) -> float:
        return min(max(value, self.w_min), self.w_max)

    def peek(self, entropy: float) -> float:
        """The weight :meth:`update` would return for ``entropy``, without changing any state."""
        entropy = _check_entropy(entropy)
        if self.h0 is None:
            return self._clip(self.w0)
        return self._clip(self.w0 * entropy / self.h0)

    def update(self, entropy: float) -> float:
        """Record this step's rollout entropy ``H_t`` and return ``w+_t``."""
        entropy = _check_entropy(entropy)
        if self._anchor_count < self.anchor_steps:  # an anchor step: H_t goes into H_0, w+ = w0
            self._anchor_sum += entropy
            self._anchor_count += 1
            return self._clip(self.w0)
        return self.peek(entropy)

    def state_dict(self) -> dict[str, Any]:
        return {
            "w0": self.w0,
            "w_min": self.w_min,
            "w_max": self.w_max,
            "anchor_steps": self.anchor_steps,
            "anchor_sum": self._anchor_sum,
            "anchor_count": self._anchor_count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = {"anchor_sum", "anchor_count"} - set(state)
        if missing:
            raise KeyError(f"EntropyAdaptiveWeight state is missing {sorted(missing)}")
        for key in ("w0", "w_min", "w_max", "anchor_steps"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"checkpointed {key}={state[key]} differs from the configured {key}={getattr(self, key)}; "
                    "resume with the same algorithm settings"
                )
        self._anchor_sum = float(state["anchor_sum"])
        self._anchor_count = int(state["anchor_count"])


class WeightingScheme(Protocol):
    """One interface for every polarity weighting: ``weights(entropy) -> (w_pos, w_neg)``."""

    name: str
    needs_entropy: bool

    def weights(self, entropy: float | None) -> tuple[float, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _check_weight(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


class FixedWeighting:
    """Constant ``(w_pos, w_neg)``: GRPO (1, 1), PSR (1, 0), NSR (0, 1), W-REINFORCE (0.1, 1)."""

    needs_entropy = False

    def __init__(self, name: str, w_pos: float, w_neg: float) -> None:
        self.name = name
        self.w_pos = _check_weight("w_pos", w_pos)
        self.w_neg = _check_weight("w_neg", w_neg)

    def weights(self, entropy: float | None = None) -> tuple[float, float]:
        return self.w_pos, self.w_neg

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "w_pos": self.w_pos, "w_neg": self.w_neg}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state.get("w_pos"), state.get("w_neg")) != (self.w_pos, self.w_neg):
            raise ValueError(
                f"checkpointed weights (w_pos={state.get('w_pos')}, w_neg={state.get('w_neg')}) differ from the "
                f"configured ({self.w_pos}, {self.w_neg}); resume with the same algorithm settings"
            )

    def __repr__(self) -> str:
        return f"FixedWeighting(name={self.name!r}, w_pos={self.w_pos}, w_neg={self.w_neg})"


class EntropyAdaptiveWeighting:
    """EAPO: adaptive ``w+_t`` from :class:`EntropyAdaptiveWeight`, fixed ``w-``."""

    needs_entropy = True

    def __init__(
        self,
        name: str = "eapo",
        w0: float = 0.2,
        w_min: float = 0.0,
        w_max: float = 2.0,
        w_neg: float = 1.0,
        anchor_steps: int = 1,
    ) -> None:
        self.name = name
        self.adaptive = EntropyAdaptiveWeight(w0=w0, w_min=w_min, w_max=w_max, anchor_steps=anchor_steps)
        self.w_neg = _check_weight("w_neg", w_neg)

    @property
    def h0(self) -> float | None:
        return self.adaptive.h0

    def weights(self, entropy: float | None) -> tuple[float, float]:
        if entropy is None:
            raise ValueError("the 'eapo' weighting needs this step's rollout entropy, got None")
        return self.adaptive.update(entropy), self.w_neg

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "w_neg": self.w_neg, "adaptive": self.adaptive.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("w_neg") != self.w_neg:
            raise ValueError(
                f"checkpointed w_neg={state.get('w_neg')} differs from the configured {self.w_neg}; "
                "resume with the same algorithm settings"
            )
        self.adaptive.load_state_dict(state["adaptive"])

    def __repr__(self) -> str:
        a = self.adaptive
        return (
            f"EntropyAdaptiveWeighting(w0={a.w0}, w_min={a.w_min}, w_max={a.w_max}, "
            f"w_neg={self.w_neg}, anchor_steps={a.anchor_steps})"
        )


#: name -> (builder, the override keys it accepts), filled by :func:`register_weighting`. Defaults
#: are the paper's (Section 5.1).
WEIGHTING_SCHEMES: dict[str, tuple[Callable[..., WeightingScheme], tuple[str, ...]]] = {}


def register_weighting(
    name: str, accepts: tuple[str, ...]
) -> Callable[[Callable[..., WeightingScheme]], Callable[..., WeightingScheme]]:
    """Register a weighting scheme's builder under ``name`` (as verl's ``register_adv_est``).

    The builder is called as ``builder(name, **overrides)`` with overrides among ``accepts``.
    Registering another builder under a taken name raises.
    """

    def decorator(builder: Callable[..., WeightingScheme]) -> Callable[..., WeightingScheme]:
        existing = WEIGHTING_SCHEMES.get(name)
        if existing is not None and existing[0] is not builder:
            raise ValueError(f"weighting scheme {name!r} is already registered to {existing[0]!r}")
        WEIGHTING_SCHEMES[name] = (builder, tuple(accepts))
        return builder

    return decorator


_FIXED_KEYS = ("w_pos", "w_neg")


#: The fixed schemes' default (w+, w−), the paper's (Section 5.1); each is overridable per run.
FIXED_WEIGHTS: dict[str, tuple[float, float]] = {
    "grpo": (1.0, 1.0),
    "psr": (1.0, 0.0),
    "nsr": (0.0, 1.0),
    "w_reinforce": (0.1, 1.0),
}


def _fixed(default_pos: float, default_neg: float) -> Callable[..., FixedWeighting]:
    def build(name: str, *, w_pos: float = default_pos, w_neg: float = default_neg) -> FixedWeighting:
        return FixedWeighting(name, w_pos=w_pos, w_neg=w_neg)

    return build


for _name, (_pos, _neg) in FIXED_WEIGHTS.items():
    register_weighting(_name, _FIXED_KEYS)(_fixed(_pos, _neg))


@register_weighting("eapo", ("w0", "w_min", "w_max", "w_neg", "anchor_steps"))
def _adaptive(
    name: str,
    *,
    w0: float = 0.2,
    w_min: float = 0.0,
    w_max: float = 2.0,
    w_neg: float = 1.0,
    anchor_steps: int = 1,
) -> EntropyAdaptiveWeighting:
    return EntropyAdaptiveWeighting(
        name, w0=w0, w_min=w_min, w_max=w_max, w_neg=w_neg, anchor_steps=anchor_steps
    )


def make_weighting(name: str, **overrides: Any) -> WeightingScheme:
    """Build a weighting scheme by name: ``grpo``, ``psr``, ``nsr``, ``w_reinforce`` or ``eapo``.

    ``overrides`` replace the scheme's defaults (``w_pos``/``w_neg`` for the fixed schemes;
    ``w0``/``w_min``/``w_max``/``w_neg``/``anchor_steps`` for ``eapo``); ``None`` values are ignored.
    """
    if name not in WEIGHTING_SCHEMES:
        raise ValueError(f"unknown weighting scheme {name!r}; known: {', '.join(WEIGHTING_SCHEMES)}")
    builder, accepted = WEIGHTING_SCHEMES[name]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(overrides) - set(accepted))
    if unknown:
        raise ValueError(f"weighting scheme {name!r} does not take {unknown}; it accepts {list(accepted)}")
    return builder(name, **overrides)


# ---------------------------------------------------------------------------------------------
# Per-token entropy and masked means
# ---------------------------------------------------------------------------------------------


def token_entropy(logits: torch.Tensor, *, temperature: float = 1.0, chunk_size: int = 1024) -> torch.Tensor:
    """Per-token entropy ``H = -Σ_v p_v log p_v`` of ``softmax(logits / temperature)``.

    Args:
        logits: ``(..., V)``, any float dtype (computed in float32 or higher).
        temperature: sampling temperature (> 0) whose distribution the entropy describes.
        chunk_size: rows of ``(chunk_size, V)`` processed at once; peak extra memory is
            O(chunk_size × V) instead of O(rows × V).

    Returns:
        ``(...)`` entropies, float32 (float64 for float64 input). Differentiable.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    leading = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    compute_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    pieces = []
    for start in range(0, flat.shape[0], chunk_size):
        chunk = flat[start : start + chunk_size].to(compute_dtype) / temperature  # [n, V]
        log_probs = torch.log_softmax(chunk, dim=-1)
        probs = log_probs.exp()
        # 0·log 0 = 0: masked (-inf) logits contribute nothing (and no NaN gradient)
        safe_log_probs = torch.where(probs > 0, log_probs, torch.zeros_like(log_probs))
        pieces.append(-(probs * safe_log_probs).sum(dim=-1))  # [n]
    if not pieces:
        return flat.new_zeros(leading, dtype=compute_dtype)
    return torch.cat(pieces).reshape(leading)


class _TokenLogProbs(torch.autograd.Function):
    """``log p(target)`` and ``H`` of ``softmax((hidden @ weight.T + bias) / temperature)``, chunked over
    tokens. The forward keeps only ``log Z`` and ``H`` per token; the backward recomputes each chunk's
    logits (peak extra memory: two ``(chunk, V)`` float32 blocks)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_tokens):
        ctx.set_materialize_grads(False)
        n = hidden.shape[0]
        logps = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_empty(n, dtype=torch.float32)
        log_z = hidden.new_empty(n, dtype=torch.float32)
        for start in range(0, n, chunk_tokens):
            end = min(start + chunk_tokens, n)
            z = _chunk_logits(hidden[start:end], weight, bias, temperature)  # [n, V] float32
            log_z[start:end] = torch.logsumexp(z, dim=-1)
            log_p = z.sub_(log_z[start:end, None])  # in place: z is now log p
            logps[start:end] = log_p.gather(1, targets[start:end, None]).squeeze(1)
            # H = -Σ p log p; 0·log 0 = 0 where a probability underflows
            entropy[start:end] = -torch.nan_to_num(log_p.exp().mul_(log_p), nan=0.0).sum(dim=-1)
        ctx.save_for_backward(hidden, weight, bias, targets, log_z, entropy)
        ctx.temperature, ctx.chunk_tokens = temperature, chunk_tokens
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):
        hidden, weight, bias, targets, log_z, entropy = ctx.saved_tensors
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros_like(hidden, dtype=torch.float32) if needs_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if needs_weight else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if needs_bias else None
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            end = min(start + ctx.chunk_tokens, hidden.shape[0])
            log_p = _chunk_logits(hidden[start:end], weight, bias, ctx.temperature).sub_(
                log_z[start:end, None]
            )
            p = log_p.exp()
            # d log p_t / dz_j = 1[j = t] - p_j ;  dH / dz_j = -p_j (log p_j + H)
            g_lp = grad_logps[start:end, None].float() if grad_logps is not None else None
            if grad_entropy is not None:
                coeff = log_p.add_(entropy[start:end, None]).mul_(grad_entropy[start:end, None].float())
                if g_lp is not None:
                    coeff.add_(g_lp)  # g_lp + g_H (log p_j + H)
            else:
                coeff = g_lp
            grad_z = p.mul_(coeff).neg_()  # -p_j (g_lp + g_H (log p_j + H))
            if grad_logps is not None:
                grad_z.scatter_add_(1, targets[start:end, None], g_lp)
            grad_z.div_(ctx.temperature)
            if grad_hidden is not None:
                grad_hidden[start:end] = grad_z.to(weight.dtype) @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad_z.t(), hidden[start:end].float())
            if grad_bias is not None:
                grad_bias += grad_z.sum(dim=0)

        def cast(grad, like):
            return None if grad is None else grad.to(like.dtype)

        return cast(grad_hidden, hidden), cast(grad_weight, weight), cast(grad_bias, bias), None, None, None


def _chunk_logits(hidden, weight, bias, temperature) -> torch.Tensor:
    z = (hidden @ weight.t() if bias is None else torch.addmm(bias, hidden, weight.t())).float()
    return z if temperature == 1.0 else z.div_(temperature)


def token_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probability of ``targets`` and entropy under an LM head, without keeping logits.

    ``p = softmax((hidden @ weight.T + bias) / temperature)``: ``log p[target]`` and
    ``H = -Σ_v p_v log p_v`` for each row, from one pass over each chunk's logits. Both are
    differentiable (w.r.t. ``hidden``, ``weight`` and ``bias``); the backward recomputes the logits
    chunk by chunk, so peak extra memory is O(``chunk_tokens`` × V) however many rows there are.
    Pass only the positions that are scored (e.g. completion tokens): each row costs a full
    ``V``-wide projection.

    Args:
        hidden: ``(N, H)`` final hidden states (after the model's last norm).
        weight: ``(V, H)`` the LM head.
        targets: ``(N,)`` token ids, in ``[0, V)``.
        bias: ``(V,)`` or None.
        temperature: the sampling temperature the log-probabilities describe (> 0).
        chunk_tokens: rows projected at once.

    Returns:
        ``(logps, entropy)``, each ``(N,)`` float32.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden (N, H) and weight (V, H) expected, got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must be (N,) = {tuple(hidden.shape[:1])}, got {tuple(targets.shape)}")
    return _TokenLogProbs.apply(hidden, weight, bias, targets, float(temperature), int(chunk_tokens))


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


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip surrogate of Eq. ``grpo`` (without the KL term; add :func:`kl_penalty` for it).

    ``loss = agg(-min(ρ_t Â, clip(ρ_t, 1 - clip_low, 1 + clip_high) Â))`` with ``ρ_t = π_θ / π_old``.

    Args:
        logp: ``(B, T)`` log-probs of the sampled tokens under the current policy.
        old_logp: ``(B, T)`` the same under the behaviour (old) policy; no gradient flows into it.
        advantages: ``(B,)`` per-sequence or ``(B, T)`` per-token (already polarity-weighted).
        mask: ``(B, T)`` 1 for response tokens, 0 for padding.
        clip_low, clip_high: the clip range ε (the paper: 0.2 both sides).
        agg: a key of :data:`LOSS_AGGREGATIONS`.

    Returns:
        ``(loss, metrics)``: a scalar loss to minimise and detached 0-dim tensors
        ``clip_frac`` (fraction of tokens where the clipped branch is active),
        ``approx_kl`` (k3 estimate of KL(π_old ‖ π_θ)) and ``ratio_mean``.
    """
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask {tuple(mask.shape)} must have one shape (B, T)"
        )
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # [B, 1] broadcasts over T
    log_ratio = logp - old_logp.detach()  # [B, T]
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)  # [B, T]
    loss = aggregate_loss(per_token, mask, agg)
    with torch.no_grad():
        metrics = {
            "clip_frac": masked_mean((clipped < unclipped).to(logp.dtype), mask),
            "approx_kl": masked_mean(kl_penalty(old_logp.detach(), logp.detach(), kind="k3"), mask),
            "ratio_mean": masked_mean(ratio.detach(), mask),
        }
    return loss, metrics


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


# The field's entropy controls (presets, Clip-Cov / KL-Cov losses, the top-entropy mask, the adaptive
# entropy coefficient) live in their own module and are re-exported here.
from eapo.core.entropy_control import (  # noqa: E402
    ENTROPY_CONTROLS,
    LOSS_MODES,
    AdaptiveEntropyCoef,
    EntropyControl,
    clip_cov_mask,
    clip_cov_policy_loss,
    kl_cov_mask,
    kl_cov_policy_loss,
    register_entropy_control,
    top_entropy_mask,
)

#: Every ``algorithm.method``: the polarity weighting schemes, then the entropy-control presets.
METHODS: tuple[str, ...] = (*WEIGHTING_SCHEMES, *ENTROPY_CONTROLS)


def method_scheme(method: str) -> str:
    """The polarity weighting scheme of a method: the method itself, or ``grpo`` for an entropy-control
    preset (GRPO's weights plus one control)."""
    if method in WEIGHTING_SCHEMES:
        return method
    if method in ENTROPY_CONTROLS:
        return "grpo"
    raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")


__all__ += [
    "METHODS",
    "method_scheme",
    "ENTROPY_CONTROLS",
    "LOSS_MODES",
    "AdaptiveEntropyCoef",
    "EntropyControl",
    "clip_cov_mask",
    "clip_cov_policy_loss",
    "kl_cov_mask",
    "kl_cov_policy_loss",
    "register_entropy_control",
    "top_entropy_mask",
]

# The per-step decision of both engines (group statistics by index, the split, weights, H_0, metrics,
# state): :mod:`eapo.core.step`.
from eapo.core.step import (  # noqa: E402
    METRIC_KEYS,
    STATE_FILE,
    EAPOStep,
    grouped_advantages,
    grouped_polarity_advantages,
    polarity_split,
)

__all__ += [
    "METRIC_KEYS",
    "STATE_FILE",
    "EAPOStep",
    "grouped_advantages",
    "grouped_polarity_advantages",
    "polarity_split",
]
