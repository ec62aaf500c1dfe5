"""What the evaluated answers look like: cut at the cap, text after the closing tag, repetition.

The scores of :mod:`eapo.evaluation.metrics` read the ``<advice>`` block (or the text after
``</think>``) and the format check passes whatever follows the last block, so nothing in the reward
sees text written after ``</advice>``. A policy can learn to close the block and write on to the length
cap, repeating itself (a repeated phrase has a low per-token entropy): the controls study found it only
afterwards (``docs/results/study-cpu-controls/``). :func:`answer_shape` measures it on any set of
answers, and ``eapo eval`` (``results.json["answers"]``, ``results.md``) and ``eapo summary`` report it.

Definitions, over ``n`` answers (each completion's text as generated; a response prefix such as
``<think>`` sits in the prompt, before the completion, so it never changes what follows the closing tag):

* ``cut_at_cap``: the share of answers that ended at the length cap: ``stop_reason == "cap"`` (why a sample
  ended, :data:`eapo.runtime.stop.STOP_REASONS`).
* ``no_close_tag``: the share of answers without the closing tag (``</advice>`` by default) anywhere.
* the *tail* of an answer: its text after the **first** closing tag (``split="last"``: after the last
  one); empty when the answer has no closing tag. The first, because the scorers read the first
  ``<advice>`` block (:func:`eapo.rewards.extract.extract_answer`): everything after its ``</advice>`` is
  text no score sees. The exploit often repeats the block (``<advice>A</advice> <advice>A</advice> …``
  to the cap), and after the last tag that loop does not count: on the controls study's EntroPIC answers
  the share of characters after the first tag is 0.33, after the last 0.09.
* ``text_after_close``: the share of answers whose tail holds a non-whitespace character.
* ``wrote_on``: the share of answers whose tail is longer than ``wrote_on_chars`` (20) characters,
  whitespace included: the controls study's "wrote on after ``</advice>``".
* ``chars_after_close``: the mean length of the tail in characters, whitespace included (0 for an answer
  without the tag), over all answers.
* ``share_after_close``: the mean share of an answer's characters that lie in its tail (0 for an empty
  answer), over all answers.
* ``distinct_ngrams``: per answer, the unique word ``ngram``-grams over all of them (words split on
  whitespace, over the whole completion), averaged over the answers with at least one n-gram; 1 when an
  answer never repeats a phrase, low when it loops. ``None`` when no answer has ``ngram`` words.

With the default ``split="first"`` the result also holds ``text_after_last_close`` and
``chars_after_last_close`` (the same two figures after the *last* closing tag; with ``split="last"``:
``text_after_first_close`` and ``chars_after_first_close``). The result also records ``close_tag``,
``split``, ``ngram`` and ``wrote_on_chars``, so a reader of
``results.json`` knows what was measured. Pure Python: no torch, no NumPy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "DEFAULT_CLOSE_TAG",
    "WROTE_ON_CHARS",
    "answer_shape",
    "answer_shape_of_samples",
    "close_tag_of",
    "close_tag_of_scorers",
    "close_tag_of_label",
    "cut_at_cap",
    "distinct_ngram_ratio",
    "tail_after_close",
]

#: The closing tag of the format reward's last default tag (``("think", "advice")``).
DEFAULT_CLOSE_TAG = "</advice>"
#: More characters than this after the closing tag: the answer "wrote on" (the controls study's threshold).
WROTE_ON_CHARS = 20

Split = Literal["first", "last"]


def close_tag_of(tags: Sequence[str]) -> str:
    """The closing tag of the last of the format reward's ``tags``: ``("think", "advice")`` -> ``</advice>``."""
    if not tags:
        raise ValueError("close_tag_of: tags must name at least one tag, e.g. ('think', 'advice')")
    return f"</{tags[-1]}>"


def close_tag_of_scorers(scorers: Mapping[str, Any]) -> str:
    """The closing tag of the gate scorer among ``scorers`` (the format check,
    :func:`eapo.evaluation.metrics.strict_gate`: a scorer with ``tags``, e.g.
    :class:`eapo.rewards.format.FormatReward`), else :data:`DEFAULT_CLOSE_TAG`."""
    from eapo.evaluation.metrics import strict_gate

    tags = getattr(scorers.get(strict_gate() or ""), "tags", None)
    return close_tag_of(tuple(tags)) if tags else DEFAULT_CLOSE_TAG


_LABEL_TAGS = re.compile(r"^format \(((?:<[A-Za-z][A-Za-z0-9_-]*>(?: then )?)+);")
_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9_-]*)>")


def close_tag_of_label(label: str | None) -> str:
    """The closing tag named by a format scorer's label (``format (<think> then <advice>; ...)`` ->
    ``</advice>``), as ``results.json["labels"]["format"]`` records it; :data:`DEFAULT_CLOSE_TAG` when
    there is no label or it names no tags."""
    match = _LABEL_TAGS.match(label or "")
    if match is None:
        return DEFAULT_CLOSE_TAG
    return close_tag_of(_TAG.findall(match.group(1)))


def cut_at_cap(sample: Mapping[str, Any]) -> bool:
    """Whether a ``samples.jsonl`` sample ended at the length cap: ``stop_reason == "cap"``. A sample
    without ``stop_reason`` is a ValueError (:func:`eapo.evaluation.harness.load_samples` names its file)."""
    if "stop_reason" not in sample:
        raise ValueError(
            f"sample {sample.get('id')!r} #{sample.get('sample')} has no stop_reason: written before eapo eval "
            "recorded why a sample ended; evaluate again into a fresh --output-dir"
        )
    return sample["stop_reason"] == "cap"


def tail_after_close(text: str, close_tag: str = DEFAULT_CLOSE_TAG, split: Split = "first") -> str | None:
    """The text after the first (``split="last"``: the last) ``close_tag``; ``None`` without one."""
    if split not in ("first", "last"):
        raise ValueError(f"split must be 'first' or 'last', got {split!r}")
    at = text.rfind(close_tag) if split == "last" else text.find(close_tag)
    return None if at == -1 else text[at + len(close_tag) :]


def distinct_ngram_ratio(text: str, n: int = 4) -> float | None:
    """Unique word n-grams over all word n-grams of ``text`` (words split on whitespace); ``None`` when
    ``text`` has fewer than ``n`` words. ``"a b c a b c"`` with ``n=2``: 3 unique of 5 -> 0.6."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def answer_shape(
    texts: Sequence[str],
    cut: Sequence[bool],
    *,
    close_tag: str = DEFAULT_CLOSE_TAG,
    ngram: int = 4,
    wrote_on_chars: int = WROTE_ON_CHARS,
    split: Split = "first",
) -> dict[str, Any]:
    """The shape of ``texts`` (answers) of which ``cut[i]`` says whether answer i ended at the length cap.

    Returns ``{"n", "cut_at_cap", "no_close_tag", "text_after_close", "wrote_on", "chars_after_close",
    "share_after_close", "distinct_ngrams", "close_tag", "split", "ngram", "wrote_on_chars"}`` (the module
    docstring defines each); every share and mean is ``None`` when ``texts`` is empty.
    """
    if len(texts) != len(cut):
        raise ValueError(f"got {len(texts)} texts but {len(cut)} cut flags; pass one flag per text")
    if not close_tag:
        raise ValueError("close_tag must be a non-empty string, e.g. '</advice>'")
    n = len(texts)
    tails = [tail_after_close(text, close_tag, split) for text in texts]
    after = [len(tail) if tail is not None else 0 for tail in tails]
    ratios = [r for r in (distinct_ngram_ratio(text, ngram) for text in texts) if r is not None]

    def mean(values: Iterable[float]) -> float | None:
        values = list(values)
        return sum(values) / len(values) if values else None

    return {
        "n": n,
        "cut_at_cap": mean(float(flag) for flag in cut),
        "no_close_tag": mean(float(tail is None) for tail in tails),
        "text_after_close": mean(float(bool(tail and tail.strip())) for tail in tails),
        "wrote_on": mean(float(chars > wrote_on_chars) for chars in after),
        "chars_after_close": mean(float(chars) for chars in after),
        "share_after_close": mean(
            chars / len(text) if text else 0.0 for chars, text in zip(after, texts, strict=True)
        ),
        "distinct_ngrams": mean(ratios),
        # the other split's two figures, whichever ``split`` is: "after the last closing tag" (the
        # issue's wording) and "after the first" (what no score sees) are both in every result
        **_other_split(texts, close_tag, split),
        "close_tag": close_tag,
        "split": split,
        "ngram": ngram,
        "wrote_on_chars": wrote_on_chars,
    }


def _other_split(texts: Sequence[str], close_tag: str, split: Split) -> dict[str, float | None]:
    other: Split = "last" if split == "first" else "first"
    tails = [tail_after_close(text, close_tag, other) for text in texts]
    if not texts:
        return {f"text_after_{other}_close": None, f"chars_after_{other}_close": None}
    return {
        f"text_after_{other}_close": sum(bool(tail and tail.strip()) for tail in tails) / len(texts),
        f"chars_after_{other}_close": sum(len(tail) if tail is not None else 0 for tail in tails)
        / len(texts),
    }


def answer_shape_of_samples(samples: Iterable[Mapping[str, Any]], **options: Any) -> dict[str, Any]:
    """:func:`answer_shape` of ``samples.jsonl`` samples (their ``completion``, cut by :func:`cut_at_cap`);
    ``options`` are :func:`answer_shape`'s keywords."""
    samples = list(samples)
    return answer_shape(
        [sample["completion"] for sample in samples], [cut_at_cap(sample) for sample in samples], **options
    )
