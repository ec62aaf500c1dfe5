"""The format reward ``r_fmt(y) ∈ {0, 1}`` of Section 2.3 ("Reward Design") of the EAPO paper.

The paper says the reward "checks whether the response contains all required structural tags".
Two checks, chosen with ``strict`` (the tags are by default the paper's prompt order, ``<think>``
then ``<advice>``; tag names are case-sensitive):

* ``strict=False`` (the default; the paper's check): each tag's block is *present, in order and
  non-empty*. Scanning left to right, the first ``<t1>`` is followed by a ``</t1>`` with non-blank
  text between them; after that ``</t1>``, the first ``<t2>`` is followed by a ``</t2>`` with
  non-blank text between them; and so on. Text before, between or after the blocks and a repeated
  tag later in the text are accepted. A tag missing or unclosed, a block that is empty (e.g. the
  first ``<think></think>``), ``<advice>`` only inside ``<think>`` (nested) or before it (out of
  order) score 0.
* ``strict=True`` (ours, stricter than the paper): each tag occurs *exactly once* as an
  open/close pair, in order, not nested, with non-blank content, and — unless
  ``allow_text_outside=True`` — nothing but whitespace outside the blocks. A duplicated tag or a
  word outside the tags scores 0.

``prefix`` is prepended before checking, for chat templates that already open ``<think>`` in the
prompt (pass ``prefix="<think>"``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eapo.rewards.base import as_text, check_batch
from eapo.rewards.registry import EvalScorer, RewardComponent, StrictGate, register_reward

__all__ = ["FormatReward", "format_ok", "tags_present"]

_TAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _tag_pattern(tags: Sequence[str]) -> re.Pattern[str]:
    return re.compile(r"<(/?)(" + "|".join(re.escape(tag) for tag in tags) + r")>")


def tags_present(text: str, tags: Sequence[str] = ("think", "advice")) -> bool:
    """True when ``tags``' blocks are present in ``text``, in order, each non-empty (``strict=False``).

    See the module docstring: the first ``<t>`` after the previous block, and the first ``</t>`` after
    it, must enclose non-blank text.
    """
    position = 0
    for tag in tags:
        open_tag, close_tag = f"<{tag}>", f"</{tag}>"
        open_at = text.find(open_tag, position)
        if open_at == -1:
            return False
        start = open_at + len(open_tag)
        close_at = text.find(close_tag, start)
        if close_at == -1 or not text[start:close_at].strip():
            return False
        position = close_at + len(close_tag)
    return True


def format_ok(
    text: str, tags: Sequence[str] = ("think", "advice"), *, allow_text_outside: bool = False
) -> bool:
    """True when ``text`` is exactly ``<t1>…</t1> <t2>…</t2> …`` for ``tags`` (``strict=True``; see the module docstring)."""
    pattern = _tag_pattern(tags)
    expected = [(closing, tag) for tag in tags for closing in ("", "/")]  # open t1, close t1, open t2, …
    found = list(pattern.finditer(text))
    if [(m.group(1), m.group(2)) for m in found] != expected:
        return False
    outside = [text[: found[0].start()]]
    for index in range(0, len(found), 2):
        opening, closing = found[index], found[index + 1]
        if not text[opening.end() : closing.start()].strip():
            return False
        following = found[index + 2].start() if index + 2 < len(found) else len(text)
        outside.append(text[closing.end() : following])
    return allow_text_outside or not any(segment.strip() for segment in outside)


class FormatReward:
    """``r_fmt``: 1.0 when a completion has the required tag structure, else 0.0 (never ``None``).

    Args:
        tags: the required tags, in order (default the paper's ``("think", "advice")``).
        strict: ``False`` (default, the paper's check): the tags' blocks are present, in order and
            non-empty, whatever else the text holds. ``True``: each tag exactly once, in order, and
            nothing outside the blocks (see the module docstring).
        allow_text_outside: with ``strict=True``, accept non-blank text before, between or after
            the tag blocks (duplicates are still refused). Has no effect with ``strict=False``.
        prefix: text prepended to every completion before checking (e.g. ``"<think>"`` when the
            chat template ends the prompt with it).
    """

    name = "format"

    def __init__(
        self,
        tags: Sequence[str] = ("think", "advice"),
        *,
        strict: bool = False,
        allow_text_outside: bool = False,
        prefix: str = "",
    ) -> None:
        tags = tuple(tags)
        if not tags:
            raise ValueError("format reward: tags must name at least one tag, e.g. ['think', 'advice']")
        bad = [tag for tag in tags if not isinstance(tag, str) or not _TAG_NAME.match(tag)]
        if bad:
            raise ValueError(
                f"format reward: tags must be plain names like 'think' (no angle brackets), got {bad}"
            )
        if len(set(tags)) != len(tags):
            raise ValueError(f"format reward: tags must be distinct, got {list(tags)}")
        if not isinstance(strict, bool):
            raise ValueError(
                f"format reward: strict must be true or false, got {strict!r} "
                "(false: tags present in order and non-empty, the paper's check; true: nothing else allowed)"
            )
        self.tags = tags
        self.strict = strict
        self.allow_text_outside = bool(allow_text_outside)
        self.prefix = prefix
        order = " then ".join(f"<{tag}>" for tag in tags)
        if not strict:
            check = "present in order, non-empty"
        elif self.allow_text_outside:
            check = "strict: each once, in order"
        else:
            check = "strict: each once, in order, nothing outside"
        # the label fingerprints stored scores (a changed label rescores them): the prefix changes them
        prefixed = f"; after {prefix!r}" if prefix else ""
        self.label = f"format ({order}; {check}{prefixed})"
        self.__name__ = self.name  # TRL names reward functions by __name__

    def check(self, text: str) -> bool:
        """Whether one completion's text (``prefix`` not yet added) has the required structure."""
        text = self.prefix + text
        if self.strict:
            return format_ok(text, self.tags, allow_text_outside=self.allow_text_outside)
        return tags_present(text, self.tags)

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_batch(self.name, prompts, completions, references, needs_references=False)
        return [1.0 if self.check(as_text(completion)) else 0.0 for completion in completions]

    def __repr__(self) -> str:
        return (
            f"FormatReward(tags={list(self.tags)}, strict={self.strict}, "
            f"allow_text_outside={self.allow_text_outside}, prefix={self.prefix!r})"
        )


def _run_options(config: Any, options: dict[str, Any], run_dir: Path | None) -> dict[str, Any]:
    """The check reads ``data.response_prefix`` + completion: the response already starts with the prefix
    (an explicit ``prefix`` wins)."""
    prefix = config.data.response_prefix
    return {**options, "prefix": prefix} if prefix and "prefix" not in options else options


register_reward(
    RewardComponent(
        name="format",
        build=FormatReward,
        title="Format",
        help="{0, 1}: the <think> then <advice> blocks present, in order, non-empty (strict: each once, "
        "nothing outside)",
        light=True,
        default_weight=0.1,
        run_options=_run_options,
        evaluation=EvalScorer(
            default=True,
            prefix_option="prefix",
            gate=StrictGate(
                heading="## Strict: an answer without its <advice> block scores 0",
                note=(
                    "Strict: a sample that fails the format reward's check (Format, below: the <think> and "
                    "<advice> blocks present, in order, non-empty) has no answer to score, so it scores 0 on "
                    "Rouge-L and the reranker (in the lenient table Rouge-L and the reranker fall back to the "
                    "text after </think>, or the whole response). Avg (strict): mean of the four strict "
                    "columns (ours, not the paper's)."
                ),
                summary_note=(
                    "Avg (strict): the same mean, but an answer without its <advice> block scores 0 "
                    "(Avg scores the text after </think>, or the whole response, instead)"
                ),
            ),
        ),
    )
)
