"""The one interface every reward component implements, and the text coercion they share.

A reward function is a plain callable ``(prompts, completions, references, **kwargs) -> list[float | None]``
(TRL's convention): one score per completion, ``None`` when that sample could not be scored. It
carries a registry ``name`` (``"rouge_l"``) used in metric keys and a human ``label``
(``"Rouge-L F1 (char level, answer = <advice>)"``) used wherever scores are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["RewardFunction", "as_text", "prompt_text", "check_batch"]


@runtime_checkable
class RewardFunction(Protocol):
    """``(prompts, completions, references, **kwargs) -> list[float | None]`` with a ``name`` and a ``label``."""

    name: str
    label: str

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]: ...


def as_text(value: Any) -> str:
    """A completion as plain text.

    Accepts a string, a chat message ``{"role": ..., "content": ...}`` or a list of messages (TRL's
    conversational format), whose contents are joined in order.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        content = value.get("content", "")
        return content if isinstance(content, str) else as_text(content)
    if isinstance(value, Sequence):
        return "".join(as_text(item) for item in value)
    raise TypeError(f"cannot read text from a {type(value).__name__}; pass a string or chat messages")


def prompt_text(value: Any) -> str:
    """A prompt as plain text: a string as is; for chat messages, the content of the last user message."""
    if isinstance(value, Sequence) and not isinstance(value, str) and value and isinstance(value[0], dict):
        users = [message for message in value if message.get("role") == "user"]
        return as_text(users[-1] if users else value[-1])
    return as_text(value)


def check_batch(
    name: str,
    prompts: Sequence[Any] | None,
    completions: Sequence[Any],
    references: Sequence[Any] | None,
    *,
    needs_references: bool,
    needs_prompts: bool = False,
) -> None:
    """Raise a ValueError naming the component when the batch's lists disagree in length or one is missing."""
    n = len(completions)
    if needs_references and references is None:
        raise ValueError(f"reward {name!r} needs references (the ground-truth answers); got references=None")
    if needs_prompts and prompts is None:
        raise ValueError(f"reward {name!r} needs prompts (the questions); got prompts=None")
    for field_name, values in (("prompts", prompts), ("references", references)):
        if values is not None and len(values) != n:
            raise ValueError(
                f"reward {name!r}: {field_name} has {len(values)} entries but completions has {n}; "
                "pass one entry per completion (repeat a prompt's reference for each of its rollouts)"
            )
