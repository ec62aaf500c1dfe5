"""The Rouge-L reward ``r_rouge(y, d̂) ∈ [0, 1]`` of Section 2.3 ("Reward Design") of the EAPO paper.

``F1 = 2·P·R / (P + R)`` with ``P = LCS / |prediction|`` and ``R = LCS / |reference|`` over tokens,
0 when either side has no tokens — the definition of Google's ``rouge-score`` (``rougeL``,
β = 1), reproduced to the last bit: same operations in the same order. The LCS length comes from
rapidfuzz's bit-parallel C++ ``LCSseq`` (O(n·m/64)), not a Python dynamic programme.

Tokenisation and normalisation:

* ``level="char"`` (the paper's, for Chinese): lower-case, drop every whitespace character, one
  token per remaining code point; punctuation is kept (as ``rouge-chinese`` keeps it when fed
  space-separated characters).
* ``level="word"`` (English): lower-case; every CJK ideograph / kana is its own token, other tokens
  are maximal runs of letters and digits; punctuation, underscores and whitespace separate tokens
  and are dropped. On ASCII text this is ``rouge-score``'s default tokenizer without stemming.
* ``level="auto"``: ``char`` when more than half of the reference's non-whitespace characters are
  CJK, else ``word`` (decided per sample).

Departures: ``rouge-chinese`` computes ``2PR / (P + R + 1e-8)``, which differs from the exact F1 by
up to ~1e-8; we follow ``rouge-score``'s exact F1 (``bench/rouge.py`` reports both). The paper
does not say which part of the response is scored; the default scores the ``<advice>`` answer
(``extract="whole"`` scores the whole completion).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from rapidfuzz.distance import LCSseq

from eapo.rewards.base import as_text, check_batch
from eapo.rewards.extract import check_extract, extract_answer, extract_label
from eapo.rewards.registry import EvalColumn, EvalScorer, RewardComponent, ScorerSetting, register_reward

__all__ = ["RougeL", "rouge_l_f1", "rouge_l_scores", "lcs_length", "tokenize", "is_mostly_cjk", "LEVELS"]

Level = Literal["char", "word", "auto"]
LEVELS = ("char", "word", "auto")

# CJK ideographs (unified, extension A, compatibility, extensions B+) and Japanese kana.
_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_CJK_CHAR = re.compile(f"[{_CJK_CLASS}]")
_WORD_TOKEN = re.compile(f"[{_CJK_CLASS}]|[^\\W_{_CJK_CLASS}]+")


def _drop_whitespace(text: str) -> str:
    # str.split() splits on exactly the characters str.isspace() accepts (as re's \s does), in C.
    return "".join(text.split())


def is_mostly_cjk(text: str) -> bool:
    """True when more than half of ``text``'s non-whitespace characters are CJK."""
    visible = _drop_whitespace(text)
    return bool(visible) and 2 * len(_CJK_CHAR.findall(visible)) > len(visible)


def _resolve_level(level: str, reference: str) -> str:
    if level == "auto":
        return "char" if is_mostly_cjk(reference) else "word"
    return level


def tokenize(text: str, level: Literal["char", "word"], *, lowercase: bool = True) -> list[str]:
    """The tokens Rouge-L compares (see the module docstring)."""
    if lowercase:
        text = text.lower()
    if level == "char":
        return list(_drop_whitespace(text))
    if level == "word":
        return _WORD_TOKEN.findall(text)
    raise ValueError(f"unknown Rouge-L level {level!r}; known: 'char', 'word' (and 'auto' for RougeL)")


def lcs_length(a: Sequence[Any] | str, b: Sequence[Any] | str) -> int:
    """Length of the longest common subsequence of two strings or two token lists (rapidfuzz, C++).

    Token lists are mapped to dense integer ids first, so two different tokens can never collide.
    """
    if len(a) > len(b):
        a, b = b, a  # the shorter sequence is the bit-parallel pattern: fewer 64-bit blocks
    if isinstance(a, str) and isinstance(b, str):
        return int(LCSseq.similarity(a, b))
    ids: dict[Any, int] = {}
    a_ids = [ids.setdefault(token, len(ids)) for token in a]
    b_ids = [ids.setdefault(token, len(ids)) for token in b]
    return int(LCSseq.similarity(a_ids, b_ids))


def _f1(lcs: int, prediction_length: int, reference_length: int) -> float:
    # rouge-score's _score_lcs + scoring.fmeasure, operation for operation.
    if prediction_length == 0 or reference_length == 0:
        return 0.0
    precision = lcs / prediction_length
    recall = lcs / reference_length
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


def rouge_l_scores(
    prediction: str, reference: str, *, level: Level = "char", lowercase: bool = True
) -> tuple[float, float, float]:
    """``(precision, recall, f1)`` of Rouge-L between two strings (empty side → all 0)."""
    if level not in LEVELS:
        raise ValueError(f"unknown Rouge-L level {level!r}; known: {', '.join(LEVELS)}")
    resolved = _resolve_level(level, reference)
    if resolved == "char":
        if lowercase:
            prediction, reference = prediction.lower(), reference.lower()
        pred: Sequence[Any] | str = _drop_whitespace(prediction)
        ref: Sequence[Any] | str = _drop_whitespace(reference)
    else:
        pred = tokenize(prediction, "word", lowercase=lowercase)
        ref = tokenize(reference, "word", lowercase=lowercase)
    if not pred or not ref:
        return 0.0, 0.0, 0.0
    lcs = lcs_length(pred, ref)
    return lcs / len(pred), lcs / len(ref), _f1(lcs, len(pred), len(ref))


def rouge_l_f1(prediction: str, reference: str, *, level: Level = "char", lowercase: bool = True) -> float:
    """Rouge-L F1 between two strings; 0.0 when either has no tokens."""
    return rouge_l_scores(prediction, reference, level=level, lowercase=lowercase)[2]


class RougeL:
    """``r_rouge``: Rouge-L F1 between each completion's answer and its reference.

    Args:
        level: ``"char"`` (the paper), ``"word"`` or ``"auto"``.
        extract: which part of the completion is scored — ``"advice"`` (default: the ``<advice>``
            answer, see :func:`eapo.rewards.extract_answer`), ``"whole"`` (the whole completion,
            tags included) or another tag name. The label, and so every table, names the choice.
        lowercase: case-fold both sides first.

    A ``None`` reference scores ``None``; an empty answer or reference scores 0.0.
    """

    name = "rouge_l"

    def __init__(self, level: Level = "char", *, extract: str = "advice", lowercase: bool = True) -> None:
        if level not in LEVELS:
            raise ValueError(f"rouge_l: unknown level {level!r}; known: {', '.join(LEVELS)}")
        check_extract(extract)
        self.level = level
        self.extract = extract
        self.lowercase = bool(lowercase)
        self.label = f"Rouge-L F1 ({level} level, {extract_label(extract)})"
        self.__name__ = self.name  # TRL names reward functions by __name__

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_batch(self.name, prompts, completions, references, needs_references=True)
        assert references is not None
        scores: list[float | None] = []
        for completion, reference in zip(completions, references, strict=True):
            if reference is None:
                scores.append(None)
                continue
            answer = extract_answer(as_text(completion), self.extract)
            scores.append(rouge_l_f1(answer, reference, level=self.level, lowercase=self.lowercase))
        return scores

    def __repr__(self) -> str:
        return f"RougeL(level={self.level!r}, extract={self.extract!r}, lowercase={self.lowercase})"


register_reward(
    RewardComponent(
        name="rouge_l",
        build=RougeL,
        title="Rouge-L",
        help="[0, 1]: Rouge-L F1 against the reference (char, word or auto level) of the <advice> answer "
        "or the whole completion",
        light=True,
        default_weight=0.3,
        evaluation=EvalScorer(
            default=True,
            settings=(
                ScorerSetting(
                    "rouge_level",
                    "level",
                    "Rouge-L tokens: char (the paper's), word, or auto (char where most of the reference is CJK, else word).",
                    choices=LEVELS,
                ),
            ),
            columns=(
                EvalColumn("rouge_l", "Rouge-L", averages=("avg", "avg_laaj"), strict=True, order=1),
                EvalColumn("rl_at_k", "RL@{k}", per_prompt="best", averages=("avg",), strict=True, order=3),
            ),
        ),
    )
)
