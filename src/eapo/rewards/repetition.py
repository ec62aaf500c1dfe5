"""The n-gram repetition penalty ``r_rep(y) ∈ [max_penalty, 0]`` (Appendix C.2 of "Demystifying Long
Chain-of-Thought Reasoning", Yeo et al. 2025, arXiv 2502.03373, as TRL and open-r1 implement it).

With ``G(y)`` the list of ``y``'s n-grams (every run of ``ngram_size`` consecutive tokens) and ``p``
the most negative penalty (``max_penalty``)::

    R(y) = (1 - |set(G(y))| / |G(y)|) · p        (0 when y has fewer than n tokens)

An answer with no repeated n-gram scores 0; one that repeats a phrase over and over tends to ``p``
(``R`` reaches ``p`` only in the limit: the first n-gram is always new). By default it reads the
*whole* completion (``extract="whole"``), so text written after ``</advice>`` counts: the cure for
runs that close the answer and repeat themselves to the length cap
(docs/results/study-cpu-controls/README.md), which Rouge-L and the reranker, reading ``<advice>``,
never see.

Against TRL's ``trl.rewards.get_repetition_penalty_reward(ngram_size=3, max_penalty=-1.0)`` and
open-r1's ``get_repetition_penalty_reward`` (the same formula and defaults; a completion with fewer
than n tokens scores 0.0 in all three, and a score of exactly 0 is ``0.0``, never ``-0.0``). Where
eapo departs:

* **Tokens are words, not token ids.** TRL counts n-grams of the completion's token ids (the
  tokenizer's pieces); open-r1 of ``text.lower().split()``. eapo's scorers see text (verl's scorer
  and ``eapo eval`` have no ids), so it counts words as Rouge-L does
  (:func:`eapo.rewards.rouge.tokenize`): lower-cased; ``level="word"`` (default) takes runs of
  letters and digits, each CJK character its own token, and drops punctuation and whitespace (so
  ``"burn."`` and ``"burn"`` are one word, where open-r1 keeps them apart); ``level="char"`` takes
  every non-whitespace character; ``level="auto"`` is ``char`` for a mostly-CJK completion, else
  ``word`` (decided per completion). A repeated phrase is penalised however it is tokenised, but the
  numbers differ from TRL's on the same text.
* **What is read** is ``extract``: the whole completion (default), or the ``<advice>`` answer (or
  another tag's) as Rouge-L extracts it.
* ``max_penalty`` must be < 0 (TRL and open-r1 accept 0, a penalty that never fires: give the
  component weight 0 instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from eapo.rewards.base import as_text, check_batch
from eapo.rewards.extract import check_extract, extract_answer, extract_label
from eapo.rewards.registry import RewardComponent, register_reward
from eapo.rewards.rouge import LEVELS, is_mostly_cjk, tokenize

__all__ = ["RepetitionPenalty", "repetition_penalty", "repeated_ngram_share"]


def repeated_ngram_share(tokens: Sequence[str], ngram_size: int) -> float:
    """``1 - unique n-grams / n-grams`` of ``tokens``: 0 when no n-gram repeats (or there is none)."""
    if len(tokens) < ngram_size:
        return 0.0
    ngrams = list(zip(*(tokens[start:] for start in range(ngram_size)), strict=False))
    return 1 - len(set(ngrams)) / len(ngrams)


def repetition_penalty(
    text: str, *, ngram_size: int = 3, max_penalty: float = -1.0, level: str = "word"
) -> float:
    """The penalty of one text: ``repeated_ngram_share(tokens) · max_penalty`` (0.0 without repeats)."""
    resolved = ("char" if is_mostly_cjk(text) else "word") if level == "auto" else level
    share = repeated_ngram_share(tokenize(text, resolved), ngram_size)  # type: ignore[arg-type]
    return share * max_penalty if share else 0.0


class RepetitionPenalty:
    """The n-gram repetition penalty, in ``[max_penalty, 0]``; never ``None``.

    Args:
        ngram_size: n, the length of the repeated phrases counted, in tokens (default 3, as TRL's and
            open-r1's).
        max_penalty: ``p`` < 0, the score a completion tends to as it becomes all repetition
            (default -1.0).
        level: how text becomes tokens: ``"word"`` (default), ``"char"`` or ``"auto"`` (the module
            docstring).
        extract: which part is read: ``"whole"`` (default: the whole completion, text after
            ``</advice>`` included), ``"advice"`` or another tag name (as Rouge-L's ``extract``).
    """

    name = "repetition"

    def __init__(
        self,
        ngram_size: int = 3,
        max_penalty: float = -1.0,
        *,
        level: str = "word",
        extract: str = "whole",
    ) -> None:
        if not isinstance(ngram_size, int) or isinstance(ngram_size, bool) or ngram_size < 1:
            raise ValueError(
                f"repetition: ngram_size must be an int >= 1 (tokens per n-gram), got {ngram_size!r}"
            )
        if (
            not isinstance(max_penalty, int | float)
            or isinstance(max_penalty, bool)
            or not math.isfinite(max_penalty)
            or max_penalty >= 0
        ):
            raise ValueError(
                f"repetition: max_penalty must be a finite number < 0 (e.g. -1.0: the score of an answer "
                f"that is all repetition), got {max_penalty!r}; to switch the penalty off give it weight 0"
            )
        if level not in LEVELS:
            raise ValueError(f"repetition: unknown level {level!r}; known: {', '.join(LEVELS)}")
        check_extract(extract)
        self.ngram_size = ngram_size
        self.max_penalty = float(max_penalty)
        self.level = level
        self.extract = extract
        self.label = (
            f"repetition penalty ({ngram_size}-grams, {level} level, max {self.max_penalty:g}, "
            f"{extract_label(extract)})"
        )
        self.__name__ = self.name  # TRL names reward functions by __name__

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_batch(self.name, prompts, completions, references, needs_references=False)
        return [
            repetition_penalty(
                extract_answer(as_text(completion), self.extract),
                ngram_size=self.ngram_size,
                max_penalty=self.max_penalty,
                level=self.level,
            )
            for completion in completions
        ]

    def __repr__(self) -> str:
        return (
            f"RepetitionPenalty(ngram_size={self.ngram_size}, max_penalty={self.max_penalty}, "
            f"level={self.level!r}, extract={self.extract!r})"
        )


register_reward(
    RewardComponent(
        name="repetition",
        build=RepetitionPenalty,
        title="Repetition",
        help="[max_penalty, 0]: the share of repeated word n-grams times max_penalty (TRL's and open-r1's "
        "penalty), of the whole completion by default",
        light=True,
    )
)
