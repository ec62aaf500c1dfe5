"""Pulling the reasoning and the answer out of a completion.

The paper's prompts (appendix "Prompt") ask for clinical reasoning in ``<think>…</think>`` followed
by the diagnosis and advice in ``<advice>…</advice>``. Rouge-L and the reranker score the answer
part, the LLM judge scores the reasoning (training) or the answer (evaluation); the evaluation
harness uses the same two helpers, so training and evaluation read completions identically.

Which part Rouge-L and the reranker score is their ``extract`` option: ``"advice"`` (the default)
or ``"whole"`` (the whole completion, tags included). The paper says they score "the response"
without saying which part; ``advice`` is our reading (the answer, not the reasoning, is compared
with the reference answer). Every table prints the choice (:func:`extract_label`).
"""

from __future__ import annotations

import re

__all__ = ["extract_think", "extract_answer", "extract_label", "check_extract", "ANSWER_MODES"]

#: ``extract_answer`` modes: ``"advice"`` (the paper's answer tag), ``"whole"``, or any other tag name.
ANSWER_MODES = ("advice", "whole")

_TAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def extract_think(text: str) -> str | None:
    """The reasoning of a completion, stripped; ``None`` when there is none.

    * ``"<think>R</think>…"`` → ``R`` (the first block);
    * ``"R</think>…"`` → ``R`` (the chat template already opened ``<think>`` in the prompt, as
      Qwen3's does);
    * ``"<think>R"`` (generation stopped inside the reasoning) → ``R``;
    * no think tag, or only whitespace inside it → ``None``.
    """
    open_at = text.find(_THINK_OPEN)
    close_at = text.find(_THINK_CLOSE)
    if open_at != -1 and (close_at == -1 or open_at < close_at):
        start = open_at + len(_THINK_OPEN)
        end = close_at if close_at != -1 else len(text)
    elif close_at != -1:
        start, end = 0, close_at
    else:
        return None
    content = text[start:end].strip()
    return content or None


def check_extract(mode: str) -> None:
    """Raise a ValueError unless ``mode`` is ``"advice"``, ``"whole"`` or a plain tag name."""
    if not isinstance(mode, str) or (mode != "whole" and not _TAG_NAME.match(mode)):
        raise ValueError(
            f"unknown extract mode {mode!r}; use 'advice' (the default), 'whole', or a tag name like 'answer'"
        )


def extract_label(mode: str) -> str:
    """How a scorer's label names its ``extract`` mode: ``"answer = <advice>"`` or ``"whole completion"``."""
    check_extract(mode)
    return "whole completion" if mode == "whole" else f"answer = <{mode}>"


def extract_answer(text: str, mode: str = "advice") -> str:
    """The answer part of a completion, stripped (possibly ``""``).

    ``mode="whole"``: the whole completion. ``mode="advice"`` (or any tag name ``T``), looking only
    after the last ``</think>`` when there is one:

    1. the content of the first ``<T>…</T>``;
    2. an opened but unclosed ``<T>`` (generation truncated): everything after it;
    3. no ``<T>``: the text after the last ``</think>``;
    4. no ``</think>`` either: the whole completion.
    """
    check_extract(mode)
    if mode == "whole":
        return text.strip()
    think_end = text.rfind(_THINK_CLOSE)
    tail = text[think_end + len(_THINK_CLOSE) :] if think_end != -1 else text
    open_tag, close_tag = f"<{mode}>", f"</{mode}>"
    open_at = tail.find(open_tag)
    if open_at != -1:
        start = open_at + len(open_tag)
        close_at = tail.find(close_tag, start)
        return tail[start : close_at if close_at != -1 else len(tail)].strip()
    if think_end != -1:
        return tail.strip()
    return text.strip()
