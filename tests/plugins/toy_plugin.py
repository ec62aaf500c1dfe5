"""A plugin of the tests (issue 48): a weighting scheme with a setting of its own, an entropy control and a
reward component with an option of its own, registered from outside ``src/`` with eapo's own registration
calls. ``EAPO_PLUGINS=toy_plugin`` (with this folder on the Python path) makes every process eapo or verl
starts import it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from eapo.core import FixedWeighting, Setting, register_entropy_control, register_weighting
from eapo.core.controls import EntropyControl
from eapo.core.settings import between
from eapo.rewards import RewardComponent, as_text, register_reward

#: w+ = tilt, w- = 1 - tilt: one knob trading positives against negatives.
TILT = Setting("tilt", float, "Tilted: w+ = tilt, w- = 1 - tilt.", between(0, 1), default=0.25, symbol="τ")


@register_weighting(
    "tilted",
    ("tilt",),
    label="Tilted",
    help="A test's scheme: w+ = tilt, w- = 1 - tilt.",
    shown=("tilt",),
    grid=("tilt",),
    declares=(TILT,),
)
def tilted(name: str, *, tilt: float = 0.25) -> FixedWeighting:
    return FixedWeighting(name, w_pos=tilt, w_neg=1.0 - tilt)


#: The metric the control logs: the mean of its token weights over response tokens.
FLOOR_METRIC = "toy/token_floor"


def _floor_weights(inputs) -> torch.Tensor:
    return torch.full(inputs.mask.shape, float(inputs.settings["token_floor"]), dtype=torch.float32)


register_entropy_control(
    EntropyControl(
        "token_floor",
        "a test's control",
        {"token_floor": 0.5},
        "every response token's policy loss is multiplied by token_floor (1: off)",
        token_weights=_floor_weights,
        weight_metric=FLOOR_METRIC,
        metrics=(FLOOR_METRIC,),
        label="Token floor",
        declares=(
            Setting(
                "token_floor",
                float,
                "Token floor: the weight of every token's policy loss (1: off).",
                between(0, 1, low_open=True),
                default=1.0,
            ),
        ),
    )
)


class ToyLength:
    """``min(1, len(text) / target)``: the completion's length in characters against ``target`` (its one
    option, ``reward.options.toy_length.target``), in [0, 1]; an empty completion scores 0."""

    name = "toy_length"

    def __init__(self, target: int = 32) -> None:
        if isinstance(target, bool) or not isinstance(target, int) or target < 1:
            raise ValueError(f"toy_length: target must be an integer >= 1, got {target!r}")
        self.target = target
        self.label = f"toy length (chars / {target}, capped at 1)"
        self.__name__ = self.name

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]:
        return [min(1.0, len(as_text(completion)) / self.target) for completion in completions]


register_reward(
    RewardComponent(
        name="toy_length",
        build=ToyLength,
        title="Toy length",
        help="[0, 1]: min(1, the completion's length in characters / target)",
        light=True,  # its options are checked by building it when a config is loaded
        evaluation=None,  # a training reward only: not an `eapo eval` scorer
    )
)
