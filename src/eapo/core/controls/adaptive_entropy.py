"""Skywork-OR1's adaptive entropy bonus: the coefficient moves toward keeping entropy at a target.

TRL 1.16 has it (``use_adaptive_entropy`` and its fields: its loss moves the coefficient; eapo anchors the
target at ``ratio × H_0`` and saves the state); verl 0.9.1 lacks it, so core's step moves
:class:`AdaptiveEntropyCoef`, this control's run state, and its ``loss_inputs`` (the step's
``entropy_coef``) replace verl's ``entropy_coeff`` for the update (the registry's run-state path).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eapo.core.controls.registry import (
    CONTROL_METRICS,
    EntropyControl,
    check_resumed_settings,
    finite,
    register_entropy_control,
    state_from_settings,
    switched_problems,
)
from eapo.core.settings import ANY_OF_TYPE, Setting, above, at_least

_SKYWORK = "Skywork-OR1 (He et al. 2025, arXiv 2505.22312); TRL 1.16's defaults"


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
            if finite(name, getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.coef_min > self.coef_max:
            raise ValueError(f"coef_min ({self.coef_min}) must be <= coef_max ({self.coef_max})")
        if self.target is not None and finite("target", self.target) < 0:
            raise ValueError(f"target must be >= 0, got {self.target}")

    def anchor(self, h0: float) -> None:
        """Fix an unset target at ``target_ratio × h0`` (the run's first-step entropy)."""
        if self.target is None:
            self.target = self.target_ratio * finite("H_0", h0)

    def applied(self) -> float:
        """The coefficient the next update uses."""
        if self.target is None or not self.last_entropy <= self.target:
            return 0.0
        return self.coef

    def update(self, entropy: float) -> float:
        """Move the coefficient after an update whose entropy was ``entropy``; returns the new value."""
        if self.target is None:
            raise ValueError("the adaptive entropy target is unset: call anchor(H_0) first")
        entropy = finite("entropy", entropy)
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = entropy
        return self.coef

    def loss_inputs(self) -> dict[str, float]:
        """The coming update's input, where the engine lacks the control: its entropy coefficient
        (``entropy_coef``, replacing the entropy bonus's option for that update)."""
        return {"entropy_coef": self.applied()}

    def observe(self, entropy: float) -> None:
        """Move the coefficient with this step's ``H_t`` (after :meth:`loss_inputs`: step t's coefficient
        depends on the entropies up to step t−1)."""
        self.update(entropy)

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
        """Restore from :meth:`state_dict`.

        Raises:
            ValueError: the state lacks one of :meth:`state_dict`'s keys, or the saved settings, or a
                configured fixed target, differ from this run's.
        """
        missing = [key for key in ("coef", "target", "last_entropy") if key not in state]
        if missing:
            raise ValueError(
                f"the adaptive entropy state has no {', '.join(missing)} (controls.adaptive_entropy."
                f"{missing[0]} of the checkpoint's eapo_state.json): it was not written by "
                "AdaptiveEntropyCoef.state_dict; resume from a checkpoint this version of eapo wrote"
            )
        check_resumed_settings("adaptive entropy", self.settings(), self.target, state)
        self.coef = float(state["coef"])
        if state["target"] is not None:
            self.target = float(state["target"])
        last = state["last_entropy"]
        self.last_entropy = math.inf if last is None else float(last)


def _trl_applied_coef(trainer: Any) -> float | None:
    """The coefficient TRL 1.16's loss applies to the coming update while its own controller runs
    (``use_adaptive_entropy``): its ``entropy_coef`` while the last measured entropy is at or below
    ``args.entropy_target``, else 0 (:meth:`AdaptiveEntropyCoef.applied`, on TRL's attributes)."""
    if not trainer.use_adaptive_entropy:
        return None
    return trainer.entropy_coef if trainer._last_world_entropy <= trainer.args.entropy_target else 0.0


def _state(values: Mapping[str, Any]) -> AdaptiveEntropyCoef | None:
    """The adaptive coefficient of the resolved settings (None when the control is off)."""
    fields = {
        "coef": "entropy_coef",
        "delta": "entropy_coef_delta",
        "coef_min": "entropy_coef_min",
        "coef_max": "entropy_coef_max",
        "target": "entropy_target",
        "target_ratio": "entropy_target_ratio",
    }
    return state_from_settings(AdaptiveEntropyCoef, values, "adaptive_entropy", fields)


_ADAPTIVE_KEYS = (
    "entropy_target",
    "entropy_target_ratio",
    "entropy_coef_delta",
    "entropy_coef_min",
    "entropy_coef_max",
)


def _problems(values: Mapping[str, Any]) -> list[str]:
    problems = switched_problems(
        values, "adaptive_entropy", _ADAPTIVE_KEYS, "the adaptive entropy coefficient"
    )
    if values["entropy_coef_min"] > values["entropy_coef_max"]:
        problems.append(
            f"{{p}}entropy_coef_min ({values['entropy_coef_min']}) must be <= entropy_coef_max "
            f"({values['entropy_coef_max']})"
        )
    return problems


ADAPTIVE_ENTROPY = register_entropy_control(
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
        trl_fields={
            "adaptive_entropy": "use_adaptive_entropy",
            "entropy_target": "entropy_target",
            "entropy_coef_delta": "entropy_coef_delta",
            "entropy_coef_min": "entropy_coef_min",
            "entropy_coef_max": "entropy_coef_max",
        },
        # TRL 1.16 runs this controller itself: the run state mirrors TRL's trainer attributes
        trl_moves={"coef": "entropy_coef", "last_entropy": "_last_world_entropy"},
        trl_reads={"target": "args.entropy_target"},
        # an H_0-anchored target (null) is set from the control's state at step 1 (trl_reads); 0 until then
        trl_placeholders={"entropy_target": 0.0},
        trl_applied_coef=_trl_applied_coef,
        switch="adaptive_entropy",
        # TRL's coefficient applies, and moves, inside its _compute_loss
        trl_loss_only={
            "use_adaptive_entropy": "TRL's adaptive entropy bonus (Skywork-OR1) and its coefficient's update"
        },
        make_state=_state,
        problems=_problems,
        needs_entropy=True,  # the step's coefficient multiplies the update's entropy
        step_settings=("entropy_coef",),  # the coefficient moves each step (loss_inputs)
        metrics=(CONTROL_METRICS["coef"],),
        label="Adaptive entropy",
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
