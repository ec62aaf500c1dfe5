"""An eapo plugin: the W-REINFORCE family as one knob, and an entropy control, in a module of your own.

    EAPO_PLUGINS=mixed_weights PYTHONPATH=examples/plugin \
        eapo train --config tiny algorithm.method=mixed algorithm.mix=0.2 train.max_steps=2

or ``plugins: [mixed_weights]`` in a config (docs/guide/plugins.md). Nothing under ``src/`` names them: the
registrations carry everything eapo's views need (the config's keys, ``EAPOConfig``'s fields, verl's
``algorithm.adv_estimator=mixed``, ``eapo weights --method mixed``, sweeps, labels, plots).
"""

from __future__ import annotations

import torch

from eapo.core import FixedWeighting, Setting, register_entropy_control, register_weighting
from eapo.core.controls import EntropyControl, TokenInputs
from eapo.core.settings import between

#: ``mix`` = λ: positives weighted 1 − λ, negatives λ. λ = 0.5 is GRPO up to scale, 0 is PSR, 1 is NSR; the
#: paper's W-REINFORCE (0.1, 1) has the same ratio as λ ≈ 0.91.
MIX = Setting(
    "mix",
    float,
    "Mixed weights: w+ = 1 − mix, w− = mix (0: PSR, 0.5: GRPO up to scale, 1: NSR).",
    between(0, 1),
    default=0.5,
    citation="the W-REINFORCE family of Zhu et al. 2025 (arXiv 2506.01347), as one knob",
    symbol="λ",
)


@register_weighting(
    "mixed",
    ("mix",),
    label="Mixed",
    help="W-REINFORCE's family as one knob: w+ = 1 − mix, w− = mix.",
    shown=("mix",),
    grid=("mix",),
    declares=(MIX,),
)
def mixed(name: str, *, mix: float = 0.5) -> FixedWeighting:
    return FixedWeighting(name, w_pos=1.0 - mix, w_neg=mix)


#: The control's metric: the share of response tokens it kept.
KEPT = "entropy_control/low_prob_kept"


def _keep_low_probability(inputs: TokenInputs) -> torch.Tensor:
    """Keep the policy gradient of tokens the sampling policy found unlikely (p < low_prob_cap), where
    entropy lives; weight the others by 0 (they still count in the aggregation's denominator)."""
    cap = float(inputs.settings["low_prob_cap"])
    return (inputs.old_logp.exp() < cap).to(torch.float32)


register_entropy_control(
    EntropyControl(
        "low_prob",
        "an example plugin (the token-selection idea of Wang et al. 2025, arXiv 2506.01939, by probability)",
        {"low_prob_cap": 0.9},
        "only tokens whose sampling probability is below low_prob_cap carry a policy gradient",
        token_weights=_keep_low_probability,
        weight_metric=KEPT,
        metrics=(KEPT,),
        label="Low-probability tokens",
        declares=(
            Setting(
                "low_prob_cap",
                float,
                "Low-probability tokens: a token keeps its policy gradient when its sampling probability is below "
                "this (1: every token, off).",
                between(0, 1, low_open=True),
                default=1.0,
            ),
        ),
    )
)
