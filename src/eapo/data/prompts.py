"""Prompts: the paper's templates (appendix "Prompt"), chat messages, and chat-template rendering.

Templates (:data:`PROMPTS`, files in ``eapo/data/prompts/``), each with one ``{question}``:

* ``rjua``, ``cmd``: Chinese renderings of the paper's "Prompt on RJUA" / "Prompt on CMD" (the
  paper prints them in English; the datasets are Chinese): the expert-physician persona, the two
  steps with ``<think>…</think>`` reasoning and ``<advice>…</advice>`` conclusion, then
  ``患者咨询：{question}``.
* ``rjua_en``, ``cmd_en``: the paper's English text verbatim.
* ``en``: the same structure for general English medical QA (MedQuAD, the demo set).
* ``en_fewshot`` (a ``.json`` chat prompt, :data:`CHAT_PROMPTS`): a one-line system instruction,
  one worked example exchange (a question and a short tagged answer), then ``{question}``. Made for
  small models such as SmolLM2-135M (``configs/demo.yaml``), which do not produce the tags from the
  paper's instructions alone but do copy an example turn.

A ``.txt`` template is sent whole as one **user** message (no system message), as the paper's
prompt boxes show one prompt. A ``.json`` template is a list of chat messages
(``{"role": "system"|"user"|"assistant", "content": ...}``) ending with the user message that holds
``{question}``. ``prompt=`` may also be the path of a template file of your own (``.txt`` or ``.json``).

:func:`render_prompts` applies the tokenizer's chat template with ``add_generation_prompt=True``
and, given ``max_prompt_tokens``, truncates over-long *questions* (never the instructions),
logging how many were cut and returning their positions in ``PromptList.truncated``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from eapo.data.records import DataError, DataFileNotFoundError, Record

logger = logging.getLogger(__name__)

PLACEHOLDER = "{question}"


def _packaged_prompts() -> dict[str, str]:
    folder = resources.files("eapo.data").joinpath("prompts")
    prompts = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".txt"):
            prompts[entry.name[: -len(".txt")]] = entry.read_text(encoding="utf-8").rstrip("\n")
    return prompts


#: name -> template text with one ``{question}``: ``cmd``, ``cmd_en``, ``en``, ``rjua``, ``rjua_en``.
PROMPTS: dict[str, str] = _packaged_prompts()

_ROLES = ("system", "user", "assistant")


def parse_chat_prompt(text: str, source: str) -> list[dict[str, str]]:
    """Check a ``.json`` chat prompt: a list of ``{"role", "content"}`` messages whose last one is the
    user message holding the only ``{question}``. ``source`` names the file in errors."""
    try:
        messages = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataError(
            f"{source}: chat prompt is not valid JSON (line {error.lineno}: {error.msg})"
        ) from None
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{source}: a chat prompt must be a non-empty JSON list of messages")
    for index, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or set(message) != {"role", "content"}
            or message["role"] not in _ROLES
            or not isinstance(message["content"], str)
        ):
            raise DataError(
                f'{source}: message {index} must be {{"role": one of {", ".join(_ROLES)}, "content": text}}, '
                f"got {message!r}"
            )
    last = messages[-1]
    if last["role"] != "user" or PLACEHOLDER not in last["content"]:
        raise DataError(f"{source}: the last message must be the user message containing {PLACEHOLDER}")
    if any(PLACEHOLDER in message["content"] for message in messages[:-1]):
        raise DataError(f"{source}: only the last message may contain {PLACEHOLDER}")
    return [{"role": message["role"], "content": message["content"]} for message in messages]


def _packaged_chat_prompts() -> dict[str, list[dict[str, str]]]:
    folder = resources.files("eapo.data").joinpath("prompts")
    prompts = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".json"):
            name = entry.name[: -len(".json")]
            prompts[name] = parse_chat_prompt(entry.read_text(encoding="utf-8"), f"packaged prompt {name!r}")
    return prompts


#: name -> chat messages (the last one holds ``{question}``): ``en_fewshot``.
CHAT_PROMPTS: dict[str, list[dict[str, str]]] = _packaged_chat_prompts()

#: The prompt each loader uses by default (any loader not listed uses ``en``).
_DEFAULT_PROMPTS = {"cmd": "cmd", "rjua": "rjua"}


def default_prompt_for(loader_name: str) -> str:
    """The prompt name for a loader: ``cmd`` -> ``cmd``, ``rjua`` -> ``rjua``, everything else
    (``medquad``, ``demo``, ``jsonl``, ``csv``, ``parquet``, ``hf``/``hf:<name>``) -> ``en``."""
    from eapo.data.loaders import LOADERS

    base = "hf" if loader_name.startswith("hf:") else loader_name
    if base not in LOADERS:
        raise DataError(
            f"unknown dataset loader {loader_name!r}; known: {', '.join(LOADERS)} (or 'hf:<dataset>')"
        )
    return _DEFAULT_PROMPTS.get(base, "en")


def get_template(prompt: str) -> str:
    """The template text for a prompt name in :data:`PROMPTS`, or read from a template file path.

    A file must be UTF-8 text containing ``{question}`` (the only placeholder; other braces are
    kept literally).
    """
    if prompt in PROMPTS:
        return PROMPTS[prompt]
    if prompt in CHAT_PROMPTS:
        raise DataError(f"prompt {prompt!r} is a chat prompt (several messages): use get_messages()")
    path = Path(prompt).expanduser()
    looks_like_path = path.suffix != "" or "/" in prompt or "\\" in prompt
    if not looks_like_path and not path.is_file():
        raise DataError(
            f"unknown prompt {prompt!r}; known: {', '.join([*PROMPTS, *CHAT_PROMPTS])}, or the path of a "
            f"template file (.txt or .json) containing {PLACEHOLDER}"
        )
    if not path.is_file():
        raise DataFileNotFoundError(f"prompt template file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8").rstrip("\n")
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: prompt template is not UTF-8 text ({error.reason})") from None
    if PLACEHOLDER not in text:
        raise DataError(f"{path}: prompt template has no {PLACEHOLDER} placeholder")
    return text


def get_messages(prompt: str) -> list[dict[str, str]]:
    """The chat messages of a prompt, ``{question}`` unfilled: a chat prompt's list (a name in
    :data:`CHAT_PROMPTS` or a ``.json`` file), else one user message with :func:`get_template`'s text."""
    if prompt in CHAT_PROMPTS:
        return [dict(message) for message in CHAT_PROMPTS[prompt]]
    path = Path(prompt).expanduser()
    if prompt not in PROMPTS and path.suffix == ".json":
        if not path.is_file():
            raise DataFileNotFoundError(f"chat prompt file not found: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise DataError(f"{path}: chat prompt is not UTF-8 text ({error.reason})") from None
        return parse_chat_prompt(text, str(path))
    return [{"role": "user", "content": get_template(prompt)}]


def fill(template: str, question: str) -> str:
    """Put ``question`` in place of every ``{question}`` (plain replacement, not ``str.format``)."""
    return template.replace(PLACEHOLDER, question)


def build_messages(record: Record | str, prompt: str = "en") -> list[dict[str, str]]:
    """Chat messages for one record (or a bare question): ``[{"role": "user", "content": ...}]`` for a
    ``.txt`` template; a chat prompt's messages with ``{question}`` filled in the last one.

    ``prompt`` is a name in :data:`PROMPTS` or :data:`CHAT_PROMPTS`, or a template file path.
    """
    question = record.question if isinstance(record, Record) else record
    return [{"role": m["role"], "content": fill(m["content"], question)} for m in get_messages(prompt)]


class PromptList(list[str]):
    """The ``list[str]`` of rendered prompts that :func:`render_prompts` returns.

    Attributes:
        truncated: positions (into the input records) whose question was truncated.
        chat_template: whether the tokenizer's chat template was applied (False: plain text).
        questions: the question each prompt holds, cut where it was truncated (what an engine that
            renders the prompt itself is given: verl's).
    """

    def __init__(
        self,
        prompts: Sequence[str] = (),
        *,
        truncated: Sequence[int] = (),
        chat_template: bool = True,
        questions: Sequence[str] = (),
    ) -> None:
        super().__init__(prompts)
        self.truncated = list(truncated)
        self.chat_template = chat_template
        self.questions = list(questions)


def render_prompts(
    records: Sequence[Record | str],
    tokenizer: Any,
    prompt: str = "en",
    max_prompt_tokens: int | None = None,
    *,
    chat_template_kwargs: dict[str, Any] | None = None,
    response_prefix: str = "",
) -> PromptList:
    """Render records into model-ready prompt strings.

    Args:
        records: records (or bare questions).
        tokenizer: a ``transformers`` tokenizer. With a chat template, each prompt is
            ``apply_chat_template(messages, tokenize=False, add_generation_prompt=True)`` with the
            messages of :func:`build_messages`; without one, the messages' contents joined by blank
            lines are used as is (logged as a warning).
        prompt: a name in :data:`PROMPTS` or :data:`CHAT_PROMPTS`, or a template file path.
        max_prompt_tokens: if set, a prompt longer than this (counted as
            ``len(tokenizer(text, add_special_tokens=False).input_ids)`` for chat-templated text,
            with special tokens for plain text) has its question cut, token-wise from the end,
            until it fits. The instructions are never cut; if they alone do not fit, DataError.
        chat_template_kwargs: extra keyword arguments for ``apply_chat_template`` (e.g.
            ``{"enable_thinking": False}`` for Qwen3).
        response_prefix: text appended to every rendered prompt, after the generation prompt: the
            start of the model's response (``"<think>"`` opens the reasoning, as DeepSeek-R1's and
            Qwen3's templates do). It counts towards ``max_prompt_tokens``.

    Returns:
        A :class:`PromptList` (a ``list[str]``) with ``truncated`` positions; the count of
        truncated prompts is also logged (warning) whenever it is non-zero.
    """
    messages = get_messages(prompt)
    if max_prompt_tokens is not None and (isinstance(max_prompt_tokens, bool) or max_prompt_tokens < 1):
        raise DataError(f"max_prompt_tokens must be a positive integer or None, got {max_prompt_tokens!r}")
    use_chat = bool(getattr(tokenizer, "chat_template", None))
    if not use_chat:
        logger.warning(
            "tokenizer %s has no chat template; using the plain prompt text (no role markers)",
            type(tokenizer).__name__,
        )
    kwargs = dict(chat_template_kwargs or {})

    def render(question: str) -> str:
        filled = [{"role": m["role"], "content": fill(m["content"], question)} for m in messages]
        if not use_chat:
            return "\n\n".join(m["content"] for m in filled) + response_prefix
        text = tokenizer.apply_chat_template(filled, tokenize=False, add_generation_prompt=True, **kwargs)
        return text + response_prefix

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=not use_chat)["input_ids"])

    prompts: list[str] = []
    questions: list[str] = []
    truncated: list[int] = []
    overhead: int | None = None  # tokens the prompt takes with an empty question
    for position, record in enumerate(records):
        question = record.question if isinstance(record, Record) else record
        text = render(question)
        if max_prompt_tokens is None or count(text) <= max_prompt_tokens:
            prompts.append(text)
            questions.append(question)
            continue
        if overhead is None:
            overhead = count(render(""))
            if overhead >= max_prompt_tokens:
                raise DataError(
                    f"prompt {prompt!r} takes {overhead} tokens before any question; "
                    f"max_prompt_tokens={max_prompt_tokens} leaves no room for the question"
                )
        text, question = _truncate(
            question, max_prompt_tokens - overhead, max_prompt_tokens, tokenizer, render, count
        )
        prompts.append(text)
        questions.append(question)
        truncated.append(position)
    if truncated:
        logger.warning(
            "%d of %d prompts exceeded max_prompt_tokens=%d; their questions were truncated (instructions kept)",
            len(truncated),
            len(prompts),
            max_prompt_tokens,
        )
    return PromptList(prompts, truncated=truncated, chat_template=use_chat, questions=questions)


def _truncate(
    question: str, budget: int, max_tokens: int, tokenizer: Any, render: Any, count: Any
) -> tuple[str, str]:
    """``(prompt, question)`` with the longest token prefix of ``question`` (starting at ``budget`` tokens)
    whose rendered prompt fits ``max_tokens``; re-tokenising the joined text can shift counts by a token
    or two."""
    question_ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    keep = min(budget, len(question_ids))
    while keep > 0:
        cut = tokenizer.decode(question_ids[:keep]).rstrip("\ufffd")  # drop a split multi-byte char
        text = render(cut)
        excess = count(text) - max_tokens
        if excess <= 0:
            return text, cut
        keep -= excess
    return render(""), ""
