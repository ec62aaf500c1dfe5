"""An eapo plugin: a reward component of your own, ``concise``, the answer's length against a budget.

    EAPO_PLUGINS=concise_answer PYTHONPATH=examples/plugin \
        eapo train --config tiny reward.weights.concise=0.2 reward.options.concise.max_chars=200 train.max_steps=2

or ``plugins: [concise_answer]`` in a config (docs/guide/plugins.md). Nothing under ``src/`` names it: its
registration carries what eapo's views need (``reward.weights.concise``, its option
``reward.options.concise.max_chars`` checked when the config is loaded, verl's ``compute_score`` through the
run's ``reward_kwargs``, its score in rollouts.jsonl, ``reward/concise/{mean,std,none_frac}`` in the TRL
engine's metrics.jsonl, its ``eapo plot`` panel, ``eapo eval --scorers concise``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eapo.rewards import RewardComponent, as_text, extract_answer, register_reward


class ConciseAnswer:
    """1 for an answer (the ``<advice>`` block, :func:`eapo.rewards.extract_answer`) of at most ``max_chars``
    characters, ``max_chars / length`` for a longer one, 0 for none: in [0, 1]. Its keyword arguments are
    its options (``reward.options.concise``)."""

    name = "concise"

    def __init__(self, max_chars: int = 400) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"concise: max_chars must be an integer >= 1, got {max_chars!r}")
        self.max_chars = max_chars
        self.label = f"concise (answer within {max_chars} characters)"
        self.__name__ = self.name

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]:
        answers = [extract_answer(as_text(completion)) for completion in completions]
        return [min(1.0, self.max_chars / len(answer)) if answer else 0.0 for answer in answers]


register_reward(
    RewardComponent(
        name="concise",
        build=ConciseAnswer,
        title="Concise",
        help="[0, 1]: 1 for an answer within max_chars characters, max_chars / length beyond, 0 for none",
        light=True,  # built when a config is loaded, so a bad option is refused there, naming its key
        panels=(("reward/concise/mean", "Concise answers"),),
    )
)
