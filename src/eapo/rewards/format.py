"""The format reward ``r_fmt(y) ∈ {0, 1}`` of Section 2.3 ("Reward Design") of the EAPO paper.

The paper only says the reward "checks whether the response contains all required structural
tags". Here a completion scores 1 when the configured tags (by default the paper's prompt order,
``<think>`` then ``<advice>``) each occur exactly once as an open/close pair, in order, not nested,
each with non-blank content, and — unless ``allow_text_outside=True`` — nothing but whitespace
outside the blocks. Anything else (an unclosed, duplicated, nested or out-of-order tag, an empty
block) scores 0. ``prefix`` is prepended before checking, for chat templates that already open
``<think>`` in the prompt (pass ``prefix="<think>"``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from eapo.rewards.base import as_text, check_batch

__all__ = ["FormatReward", "format_ok"]

_TAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _tag_pattern(tags: Sequence[str]) -> re.Pattern[str]:
    return re.compile(r"<(/?)(" + "|".join(re.escape(tag) for tag in tags) + r")>")


def format_ok(
    text: str, tags: Sequence[str] = ("think", "advice"), *, allow_text_outside: bool = False
) -> bool:
    """True when ``text`` is exactly ``<t1>…</t1> <t2>…</t2> …`` for ``tags`` (see the module docstring)."""
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
        allow_text_outside: accept non-blank text before, between or after the tag blocks.
        prefix: text prepended to every completion before checking (e.g. ``"<think>"`` when the
            chat template ends the prompt with it).
    """

    name = "format"

    def __init__(
        self,
        tags: Sequence[str] = ("think", "advice"),
        *,
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
        self.tags = tags
        self.allow_text_outside = bool(allow_text_outside)
        self.prefix = prefix
        self.label = "format (" + " then ".join(f"<{tag}>" for tag in tags) + ")"
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
            1.0
            if format_ok(
                self.prefix + as_text(completion), self.tags, allow_text_outside=self.allow_text_outside
            )
            else 0.0
            for completion in completions
        ]

    def __repr__(self) -> str:
        return f"FormatReward(tags={list(self.tags)}, allow_text_outside={self.allow_text_outside}, prefix={self.prefix!r})"
