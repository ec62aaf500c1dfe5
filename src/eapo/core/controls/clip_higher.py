"""DAPO's clip-higher: the PPO ratio clipped to ``[1 − epsilon, 1 + epsilon_high]``.

Both engines have it: TRL 1.16's ``epsilon_high``, verl 0.9.1's ``actor.clip_ratio_high``.
"""

from __future__ import annotations

from eapo.core.controls.registry import CONTROL_METRICS, EntropyControl, register_entropy_control
from eapo.core.settings import Setting, above


def _inert(values: dict, objective: dict) -> list[str]:
    """With one update per rollout batch every ratio is 1: the upper clip never acts."""
    high = values["epsilon_high"]
    if objective.get("num_iterations", 1) > 1 or high is None or high == objective.get("epsilon"):
        return []
    return [
        "{p}epsilon_high clips ratios above 1 + epsilon_high, but with num_iterations=1 and one update per "
        "rollout batch every ratio is 1: clip-higher changes nothing here (set {p}num_iterations > 1)"
    ]


CLIP_HIGHER = register_entropy_control(
    EntropyControl(
        "clip_higher",
        "DAPO's decoupled clip (Yu et al. 2025, arXiv 2503.14476): ε_low = 0.2, ε_high = 0.28",
        {"epsilon_high": 0.28},
        "the PPO ratio is clipped to [1 − epsilon, 1 + epsilon_high]; acts only where the policy has moved "
        "since sampling (num_iterations > 1 or several updates per rollout batch)",
        trl_fields={"epsilon_high": "epsilon_high"},
        verl_options={"epsilon_high": "clip_ratio_high"},
        inert=_inert,
        metrics=(CONTROL_METRICS["clip_low_frac"], CONTROL_METRICS["clip_high_frac"]),
        label="Clip-higher",
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
