"""The soft overlong penalty ``r_len(y) ∈ [-1, 0]``: Eq. 13 of DAPO (Yu et al. 2025, arXiv 2503.14476).

With ``L_max`` the length cap (``max_tokens``) and ``L_cache`` the buffer below it (``buffer``),
``|y|`` the completion's length in tokens::

    R(y) = 0                                 if |y| <= L_max - L_cache
         = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
         = -1                                if |y| > L_max

A completion inside the buffer loses linearly more the closer it runs to the cap; one cut at the cap
(``|y| = L_max``, the usual case: generation stops there) scores -1, as one past it does. It never
rewards a short answer, only punishes a long one: the cure for runs that close ``</advice>`` and
write on to the cap (docs/results/study-cpu-controls/README.md).

``|y|`` is read, per call, from the keyword ``completion_lengths`` (a list of ints; eapo's evaluation
passes it: the lengths after a stop string cut the sample) or else from TRL's ``completion_ids``
(``len`` of each; TRL's ids keep the EOS token). A ``None`` length scores ``None`` (could not score).

Against TRL's ``trl.rewards.get_soft_overlong_punishment(max_completion_len, soft_punish_cache)``
(the same equation): the same values for the same lengths (a test checks it). Where eapo departs:
it also reads ``completion_lengths`` (eapo's evaluation passes lengths, and verl's scorer sees text,
not ids), and a ``None`` length scores ``None``; the buffer defaults to a fifth of the cap (DAPO's
4096 of 20480) where TRL has no default; a buffer outside ``[0, max_tokens]`` is refused (TRL takes
any: one larger than the cap punishes even an empty completion); and the cap defaults, in eapo's
configuration, to the run's ``rollout.max_completion_tokens`` (:func:`eapo.config.reward_options`).
With ``buffer=0`` both give the hard penalty: 0 up to the cap, -1 past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eapo.rewards.base import check_batch
from eapo.rewards.registry import RewardComponent, register_reward

__all__ = ["OverlongPenalty", "soft_overlong_penalty", "token_lengths"]

#: The default ``buffer`` is the cap divided by this, DAPO's ratio (L_cache = 4096 of L_max = 20480).
DAPO_CAP_PER_BUFFER = 5


def soft_overlong_penalty(length: int, max_tokens: int, buffer: int) -> float:
    """DAPO's Eq. 13 for one completion of ``length`` tokens: 0, a linear ramp down to -1, then -1."""
    start = max_tokens - buffer  # L_max - L_cache: the last length that costs nothing
    if length <= start:
        return 0.0
    if length <= max_tokens:
        return (start - length) / buffer  # buffer > 0 here: start < length <= max_tokens
    return -1.0


def token_lengths(name: str, n: int, kwargs: dict[str, Any]) -> list[int | None]:
    """Each completion's length in tokens: ``completion_lengths`` if given, else ``len`` of each of
    TRL's ``completion_ids``; a ValueError naming the component when neither is given or the count
    is wrong."""
    lengths = kwargs.get("completion_lengths")
    source = "completion_lengths"
    if lengths is None and kwargs.get("completion_ids") is not None:
        lengths = [None if ids is None else len(ids) for ids in kwargs["completion_ids"]]
        source = "completion_ids"
    if lengths is None:
        raise ValueError(
            f"reward {name!r} needs each completion's length in tokens: pass completion_lengths=[int, ...] "
            "(eapo's evaluation does) or TRL's completion_ids=[[token ids], ...] (TRL's GRPOTrainer does)"
        )
    lengths = list(lengths)
    if len(lengths) != n:
        raise ValueError(
            f"reward {name!r}: {source} has {len(lengths)} entries but completions has {n}; "
            "pass one length per completion"
        )
    bad = [
        length
        for length in lengths
        if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 0)
    ]
    if bad:
        raise ValueError(f"reward {name!r}: {source} must hold token counts (ints >= 0), got {bad[:3]}")
    return lengths


class OverlongPenalty:
    """DAPO's soft overlong punishment: 0 up to ``max_tokens - buffer`` tokens, then down to -1 at the cap.

    Args:
        max_tokens: the cap ``L_max`` in tokens; required (eapo's configuration fills it with
            ``rollout.max_completion_tokens`` when ``reward.options.overlong.max_tokens`` is unset).
        buffer: ``L_cache``, the tokens below the cap over which the penalty ramps from 0 to -1;
            ``None`` (default): ``max_tokens // 5`` (DAPO's ratio), at least 1; 0: the hard
            penalty (-1 only past the cap).

    Each call needs ``completion_lengths`` or ``completion_ids`` (see the module docstring).
    """

    name = "overlong"

    def __init__(self, max_tokens: int | None = None, buffer: int | None = None) -> None:
        if max_tokens is None:
            raise ValueError(
                "overlong: max_tokens (the length cap L_max in tokens) is required; eapo's config sets it to "
                "rollout.max_completion_tokens unless reward.options.overlong.max_tokens is given"
            )
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"overlong: max_tokens must be an int >= 1 (tokens), got {max_tokens!r}")
        if buffer is None:
            buffer = max(1, max_tokens // DAPO_CAP_PER_BUFFER)
        if not isinstance(buffer, int) or isinstance(buffer, bool) or not 0 <= buffer <= max_tokens:
            raise ValueError(
                f"overlong: buffer must be an int in [0, max_tokens={max_tokens}] (the tokens below the cap "
                f"over which the penalty ramps to -1; DAPO: 4096 of 20480), got {buffer!r}"
            )
        self.max_tokens = max_tokens
        self.buffer = buffer
        # the label fingerprints stored scores: the cap and the buffer change them
        self.label = f"overlong penalty (DAPO soft, cap {max_tokens} tokens, buffer {buffer})"
        self.__name__ = self.name  # TRL names reward functions by __name__

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_batch(self.name, prompts, completions, references, needs_references=False)
        lengths = token_lengths(self.name, len(completions), kwargs)
        return [
            None if length is None else soft_overlong_penalty(length, self.max_tokens, self.buffer)
            for length in lengths
        ]

    def __repr__(self) -> str:
        return f"OverlongPenalty(max_tokens={self.max_tokens}, buffer={self.buffer})"


def _run_options(config: Any, options: dict[str, Any], run_dir: Path | None) -> dict[str, Any]:
    """The cap ``max_tokens`` defaults to ``rollout.max_completion_tokens`` (an explicit one wins)."""
    if options.get("max_tokens") is not None:
        return options
    return {**options, "max_tokens": config.rollout.max_completion_tokens}


register_reward(
    RewardComponent(
        name="overlong",
        build=OverlongPenalty,
        title="Overlong",
        help="[-1, 0]: DAPO's soft overlong punishment, 0 up to max_tokens - buffer tokens, then a ramp "
        "to -1 at the cap",
        light=True,
        run_options=_run_options,
    )
)
