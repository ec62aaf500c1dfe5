"""The entropy bonus: PPO's entropy term, ``loss − entropy_coef · mean token entropy``.

Both engines have it: TRL 1.16's ``entropy_coef``, verl 0.9.1's ``actor.entropy_coeff``.
"""

from __future__ import annotations

from eapo.core.controls.registry import CONTROL_METRICS, EntropyControl, register_entropy_control
from eapo.core.settings import Setting, at_least

ENTROPY_BONUS = register_entropy_control(
    EntropyControl(
        "entropy_bonus",
        "PPO's entropy term (Schulman et al. 2017, arXiv 1707.06347; c2 = 0.01 in its Atari runs)",
        {"entropy_coef": 0.01},
        "loss − entropy_coef · (mean per-token entropy of the update's tokens)",
        trl_fields={"entropy_coef": "entropy_coef"},
        verl_options={"entropy_coef": "entropy_coeff"},
        # TRL's bonus lives in its _compute_loss
        trl_loss_only={"entropy_coef": "TRL's entropy bonus, loss − entropy_coef · mean token entropy"},
        metrics=(CONTROL_METRICS["coef"],),
        label="Entropy bonus",
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
