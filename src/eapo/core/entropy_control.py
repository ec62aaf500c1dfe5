"""The field's entropy controls beside EAPO: the registry of presets and the maths an engine lacks.

Each control is a named preset of ``algorithm.*`` settings on top of GRPO (and composes with any
polarity weighting). Where an engine has the control, eapo only maps its settings onto the engine's
own option; the functions here are the mathematics that one of the two engines lacks:

=====================  ==============================  ==================  ==============================
control                source                          TRL 1.16            verl 0.9.1
=====================  ==============================  ==================  ==============================
``entropy_bonus``      PPO's entropy term              ``entropy_coef``    ``actor.entropy_coeff``
``adaptive_entropy``   Skywork-OR1 (arXiv 2505.22312)  ``use_adaptive_…``  :class:`AdaptiveEntropyCoef`
``clip_higher``        DAPO (arXiv 2503.14476)         ``epsilon_high``    ``actor.clip_ratio_high``
``clip_cov``           Cui et al. 2025 (2505.22617)    :func:`clip_cov_…`  ``policy_loss.loss_mode``
``kl_cov``             Cui et al. 2025 (2505.22617)    :func:`kl_cov_…`    ``policy_loss.loss_mode``
``top_entropy``        Wang et al. 2025 (2506.01939)   ``top_entropy_…``   :func:`top_entropy_mask`
=====================  ==============================  ==================  ==============================

Shapes: ``B`` sequences, ``T`` response positions. Losses are *per-token* ``(B, T)`` matrices, to be
aggregated with the run's loss aggregation (:func:`eapo.core.aggregate_loss`), the β·KL term added by
the caller, as verl's policy losses leave both to the actor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from eapo.core.settings import (
    ANY_OF_TYPE,
    FINITE,
    Setting,
    above,
    at_least,
    between,
    check_settings,
    one_of,
    settings_by_name,
)

__all__ = [
    "CONTROL_METRICS",
    "CONTROL_SETTINGS",
    "control_defaults",
    "resolve_controls",
    "EntropyControl",
    "ENTROPY_CONTROLS",
    "register_entropy_control",
    "LOSS_MODES",
    "clip_cov_mask",
    "clip_cov_policy_loss",
    "kl_cov_mask",
    "kl_cov_policy_loss",
    "top_entropy_mask",
    "AdaptiveEntropyCoef",
]

#: ``algorithm.loss_mode`` values: the PPO-clip surrogate of the paper, or a covariance-selected variant.
LOSS_MODES: tuple[str, ...] = ("vanilla", "clip_cov", "kl_cov")


# ---------------------------------------------------------------------------------------------
# The registry: each control declares its settings once, and a preset of them on top of GRPO
# ---------------------------------------------------------------------------------------------


_SKYWORK = "Skywork-OR1 (He et al. 2025, arXiv 2505.22312); TRL 1.16's defaults"
_CUI = "Cui et al. 2025, 'The Entropy Mechanism of RL for Reasoning LMs', arXiv 2505.22617; verl's ActorConfig defaults"


@dataclass(frozen=True)
class EntropyControl:
    """A control of the field: the settings it declares, and a method preset on GRPO's weights.

    ``declares`` are the ``algorithm.*`` settings the control introduces, each declared once here
    (:class:`eapo.core.settings.Setting`: its ``default`` is the value that leaves the control off);
    ``preset`` are the values the method preset of the same name sets where the user left them unset
    (the source's own); ``help`` says what the control does.
    """

    name: str
    source: str
    preset: dict[str, Any] = field(default_factory=dict)
    help: str = ""
    declares: tuple[Setting, ...] = ()


#: name -> :class:`EntropyControl`. Filled by :func:`register_entropy_control`.
ENTROPY_CONTROLS: dict[str, EntropyControl] = {}


def register_entropy_control(control: EntropyControl) -> EntropyControl:
    """Add a control to :data:`ENTROPY_CONTROLS` (verl's ``register_policy_loss`` pattern); its preset
    may only set declared settings (its own or an earlier control's)."""
    if control.name in ENTROPY_CONTROLS:
        raise ValueError(f"entropy control {control.name!r} is registered twice")
    declared = settings_by_name([*CONTROL_SETTINGS.values(), *control.declares])
    check_settings(declared, control.preset, f"the {control.name} preset's ")
    ENTROPY_CONTROLS[control.name] = control
    CONTROL_SETTINGS.clear()
    CONTROL_SETTINGS.update(declared)
    return control


#: Every entropy-control setting, by name, in declaration order (each declared by one control).
CONTROL_SETTINGS: dict[str, Setting] = {}


register_entropy_control(
    EntropyControl(
        "entropy_bonus",
        "PPO's entropy term (Schulman et al. 2017, arXiv 1707.06347; c2 = 0.01 in its Atari runs)",
        {"entropy_coef": 0.01},
        "loss − entropy_coef · (mean per-token entropy of the update's tokens)",
        declares=(
            Setting(
                "entropy_coef",
                float,
                "Entropy bonus: loss − entropy_coef · mean token entropy (0: off; the entropy_bonus preset: 0.01, "
                "PPO's c2). With adaptive_entropy, the initial coefficient. TRL: entropy_coef; verl: "
                "actor.entropy_coeff.",
                at_least(0),
                default=0.0,
                citation="Schulman et al. 2017, arXiv 1707.06347",
            ),
        ),
    )
)
register_entropy_control(
    EntropyControl(
        "adaptive_entropy",
        "Skywork-OR1 adaptive entropy control (He et al. 2025, arXiv 2505.22312); TRL 1.16's defaults",
        {
            "entropy_coef": 0.0,
            "adaptive_entropy": True,
            "entropy_target_ratio": 1.0,
            "entropy_coef_delta": 0.005,
            "entropy_coef_min": 0.0,
            "entropy_coef_max": 1.0,
        },
        "after every update the coefficient moves by ±entropy_coef_delta towards keeping the update's "
        "entropy at the target (up when at or below it), within [entropy_coef_min, entropy_coef_max], and "
        "applies only while entropy is at or below the target; the target is entropy_target nats, or "
        "entropy_target_ratio × H_0 (the run's first-step entropy, as EAPO anchors) when entropy_target is unset",
        declares=(
            Setting(
                "adaptive_entropy",
                bool,
                "Adaptive entropy bonus: after every update the coefficient moves by ±entropy_coef_delta, up while "
                "the update's entropy is at or below the target, and applies only then (the adaptive_entropy "
                "preset: true). TRL: use_adaptive_entropy; verl: eapo.core.AdaptiveEntropyCoef.",
                ANY_OF_TYPE,
                default=False,
                citation=_SKYWORK,
            ),
            Setting(
                "entropy_target",
                float,
                "Adaptive entropy's target in nats per token; null: entropy_target_ratio × H_0, the run's own "
                "first-step rollout entropy (per-token entropy of open-ended answers differs by model, tokenizer "
                "and language, so Skywork-OR1's and TRL's 0.2 from math RL would never trigger here).",
                at_least(0),
                default=None,
                citation=_SKYWORK,
            ),
            Setting(
                "entropy_target_ratio",
                float,
                "Adaptive entropy with entropy_target null: target = entropy_target_ratio × H_0 (1.0: hold the "
                "starting entropy, the reference EAPO's w+ uses).",
                above(0),
                default=1.0,
                citation="eapo's H_0 anchor",
            ),
            Setting(
                "entropy_coef_delta",
                float,
                "Adaptive entropy: the coefficient's step per update.",
                at_least(0),
                default=0.005,
                citation=_SKYWORK,
            ),
            Setting(
                "entropy_coef_min",
                float,
                "Adaptive entropy: the coefficient's lower bound.",
                at_least(0),
                default=0.0,
                citation=_SKYWORK,
            ),
            Setting(
                "entropy_coef_max",
                float,
                "Adaptive entropy: the coefficient's upper bound.",
                at_least(0),
                default=1.0,
                citation=_SKYWORK,
            ),
        ),
    )
)
register_entropy_control(
    EntropyControl(
        "clip_higher",
        "DAPO's decoupled clip (Yu et al. 2025, arXiv 2503.14476): ε_low = 0.2, ε_high = 0.28",
        {"epsilon_high": 0.28},
        "the PPO ratio is clipped to [1 − epsilon, 1 + epsilon_high]; acts only where the policy has moved "
        "since sampling (num_iterations > 1 or several updates per rollout batch)",
        declares=(
            Setting(
                "epsilon_high",
                float,
                "Clip-higher: the PPO ratio's upper clip 1 + epsilon_high (null: epsilon; the clip_higher preset: "
                "DAPO's 0.28). TRL: epsilon_high; verl: actor.clip_ratio_high. Acts only where the policy moved "
                "since sampling (num_iterations > 1).",
                above(0),
                default=None,
                citation="DAPO, Yu et al. 2025, arXiv 2503.14476",
            ),
        ),
    )
)
register_entropy_control(
    EntropyControl(
        "clip_cov",
        "Clip-Cov (Cui et al. 2025, 'The Entropy Mechanism of RL for Reasoning LMs', arXiv 2505.22617); "
        "verl's ActorConfig defaults",
        {"loss_mode": "clip_cov", "clip_cov_ratio": 2e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
        "a random clip_cov_ratio share of the tokens whose centred advantage × log-prob covariance lies in "
        "(clip_cov_lb, clip_cov_ub) gets no gradient",
        declares=(
            Setting(
                "loss_mode",
                str,
                "Policy loss: vanilla (the paper's PPO-clip), clip_cov or kl_cov (covariance-selected tokens lose "
                "their gradient / get a |log ratio| penalty). verl: actor.policy_loss.loss_mode; TRL: "
                "eapo.core.clip_cov_policy_loss / kl_cov_policy_loss.",
                one_of(*LOSS_MODES),
                default="vanilla",
                citation=_CUI,
            ),
            Setting(
                "clip_cov_ratio",
                float,
                "Clip-Cov: share of tokens whose gradient is cut.",
                between(0, 1, low_open=True),
                default=2e-4,
                citation=_CUI,
            ),
            Setting(
                "clip_cov_lb",
                float,
                "Clip-Cov: lower covariance bound of candidates.",
                FINITE,
                default=1.0,
                citation=_CUI,
            ),
            Setting(
                "clip_cov_ub",
                float,
                "Clip-Cov: upper covariance bound of candidates.",
                FINITE,
                default=5.0,
                citation=_CUI,
            ),
        ),
    )
)
register_entropy_control(
    EntropyControl(
        "kl_cov",
        "KL-Cov (Cui et al. 2025, arXiv 2505.22617); verl's ActorConfig defaults",
        {"loss_mode": "kl_cov", "kl_cov_ratio": 2e-4, "ppo_kl_coef": 0.1},
        "the top kl_cov_ratio share of tokens by advantage × log-prob covariance get ppo_kl_coef · |log ρ| "
        "added; no ratio clipping (as verl)",
        declares=(
            Setting(
                "kl_cov_ratio",
                float,
                "KL-Cov: share of highest-covariance tokens penalised.",
                between(0, 1, low_open=True),
                default=2e-4,
                citation=_CUI,
            ),
            Setting(
                "ppo_kl_coef",
                float,
                "KL-Cov: coefficient of the |log ratio| penalty. Zero at the first update of a batch (ratio 1), "
                "so it acts only with num_iterations > 1.",
                at_least(0),
                default=0.1,
                citation=_CUI,
            ),
        ),
    )
)
register_entropy_control(
    EntropyControl(
        "top_entropy",
        "'Beyond the 80/20 Rule' (Wang et al. 2025, arXiv 2506.01939): the top 20% highest-entropy tokens",
        {"top_entropy_quantile": 0.2},
        "only tokens at or above the (1 − top_entropy_quantile) quantile of the update's token entropies "
        "carry the policy loss",
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


def control_defaults() -> dict[str, Any]:
    """Every control setting's "off" value (its declared default), by name."""
    return {name: setting.default for name, setting in CONTROL_SETTINGS.items()}


def resolve_controls(method: str, values: Mapping[str, Any], *, fill_defaults: bool = True) -> dict[str, Any]:
    """Every control setting resolved: ``values`` where set (not None), else ``method``'s preset where it
    is one, else the declared default (off), or None with ``fill_defaults=False`` (the verl plugin: an
    unset control leaves verl's own option alone). The one resolution of presets for every engine."""
    preset = ENTROPY_CONTROLS[method].preset if method in ENTROPY_CONTROLS else {}
    resolved = {}
    for name, setting in CONTROL_SETTINGS.items():
        value = values.get(name)
        default = setting.default if fill_defaults else None
        resolved[name] = value if value is not None else preset.get(name, default)
    return resolved


# ---------------------------------------------------------------------------------------------
# Clip-Cov and KL-Cov (Cui et al. 2025): the losses verl has and TRL lacks
# ---------------------------------------------------------------------------------------------


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def _per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
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
    advantages = _per_token(advantages, logp)  # [B, T]
    valid = mask > 0  # [B, T]
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        unclipped = -advantages * ratio
        clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
        clip_by_origin = (clipped > unclipped) & valid
        cov = (advantages - _masked_mean(advantages, mask)) * (logp - _masked_mean(logp, mask))  # [B, T]
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
    advantages = _per_token(advantages, logp)
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


def kl_cov_mask(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *, kl_cov_ratio: float = 2e-4
) -> torch.Tensor:
    """KL-Cov's token selection: ``(B, T)`` bool, the top ``max(1, ⌊kl_cov_ratio · #tokens⌋)`` tokens by
    ``(A_t − mean A) · (log π_t − mean log π)`` (verl's ``compute_policy_loss_kl_cov``)."""
    if not kl_cov_ratio > 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    advantages = _per_token(advantages, logp)
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
    advantages = _per_token(advantages, logp)
    selected = kl_cov_mask(logp, advantages, mask, kl_cov_ratio=kl_cov_ratio)
    log_ratio = logp - old_logp.detach()
    loss = -advantages * torch.exp(log_ratio)
    penalty = ppo_kl_coef * log_ratio.abs()
    return torch.where(selected, loss + penalty, loss), selected


# ---------------------------------------------------------------------------------------------
# The top-entropy mask ("Beyond the 80/20 Rule") and Skywork-OR1's adaptive coefficient: verl lacks both
# ---------------------------------------------------------------------------------------------


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


def _finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


@dataclass
class AdaptiveEntropyCoef:
    """Skywork-OR1's adaptive entropy coefficient, with TRL 1.16's update rule.

    After each update, with ``H`` the update's mean per-token entropy:
    ``coef ← min(coef + delta, coef_max)`` if ``H ≤ target`` else ``max(coef − delta, coef_min)``.
    The coefficient applied to an update is :meth:`applied`: ``coef`` while the last measured entropy
    was at or below the target, 0 otherwise (and 0 before the first measurement).

    ``target`` is nats per token, or None to anchor it at ``target_ratio × H_0`` once :meth:`anchor`
    is called with the run's first-step entropy (for open-ended QA, where per-token entropy differs by
    model and language, a fixed number from math RL rarely means anything).
    """

    coef: float = 0.0
    delta: float = 0.005
    coef_min: float = 0.0
    coef_max: float = 1.0
    target: float | None = None
    target_ratio: float = 1.0
    last_entropy: float = math.inf

    def __post_init__(self) -> None:
        for name in ("coef", "delta", "coef_min", "coef_max", "target_ratio"):
            if _finite(name, getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.coef_min > self.coef_max:
            raise ValueError(f"coef_min ({self.coef_min}) must be <= coef_max ({self.coef_max})")
        if self.target is not None and _finite("target", self.target) < 0:
            raise ValueError(f"target must be >= 0, got {self.target}")

    def anchor(self, h0: float) -> None:
        """Fix an unset target at ``target_ratio × h0`` (the run's first-step entropy)."""
        if self.target is None:
            self.target = self.target_ratio * _finite("H_0", h0)

    def applied(self) -> float:
        """The coefficient the next update uses."""
        if self.target is None or not self.last_entropy <= self.target:
            return 0.0
        return self.coef

    def update(self, entropy: float) -> float:
        """Move the coefficient after an update whose entropy was ``entropy``; returns the new value."""
        if self.target is None:
            raise ValueError("the adaptive entropy target is unset: call anchor(H_0) first")
        entropy = _finite("entropy", entropy)
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = entropy
        return self.coef

    def settings(self) -> dict[str, float]:
        """The configured settings a resume must keep."""
        return {
            "delta": self.delta,
            "coef_min": self.coef_min,
            "coef_max": self.coef_max,
            "target_ratio": self.target_ratio,
        }

    def state_dict(self) -> dict[str, Any]:
        last = self.last_entropy if math.isfinite(self.last_entropy) else None
        return {"coef": self.coef, "target": self.target, "last_entropy": last, "settings": self.settings()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore; a state without ``coef`` (the TRL engine's older files held the target only) keeps
        the current coefficient.

        Raises:
            ValueError: the saved settings, or a configured fixed target, differ from this run's.
        """
        configured = self.settings()
        changed = [key for key, value in state.get("settings", {}).items() if configured.get(key) != value]
        if self.target is not None and state.get("target") is not None and state["target"] != self.target:
            changed.append("target")
        if changed:
            key = changed[0]
            was = state["target"] if key == "target" else state["settings"][key]
            now = self.target if key == "target" else configured[key]
            raise ValueError(
                f"checkpointed adaptive entropy {key}={was} differs from the configured {key}={now}; "
                "resume with the same algorithm settings"
            )
        if "coef" in state:
            self.coef = float(state["coef"])
        if state.get("target") is not None:
            self.target = float(state["target"])
        last = state.get("last_entropy")
        self.last_entropy = math.inf if last is None else float(last)


#: The metric keys the entropy controls act through, the same on both engines (``eapo plot`` draws them).
CONTROL_METRICS = {
    "coef": "entropy_control/coef",  # the entropy coefficient applied to this update (bonus or adaptive)
    "clip_low_frac": "entropy_control/clip_low_frac",  # share of tokens the lower PPO clip acted on
    "clip_high_frac": "entropy_control/clip_high_frac",  # share of tokens the upper PPO clip acted on
    "cov_frac": "entropy_control/cov_frac",  # share of tokens Clip-Cov / KL-Cov selected
    "top_entropy_frac": "entropy_control/top_entropy_frac",  # share of tokens the top-entropy mask kept
}
