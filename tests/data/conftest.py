"""Fixtures for the eapo.data tests: the shared datasets (skipped when absent), file writers and
a tiny character-level tokenizer with a real (jinja) chat template -- no model hub needed."""

from __future__ import annotations

import json
import os
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _shared_data_dir() -> Path | None:
    candidates = [os.environ.get("EAPO_DATA_DIR", ""), str(REPO_ROOT.parent / "shared" / "data")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "cmd" / "train.jsonl").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ``../shared/data`` folder (or ``$EAPO_DATA_DIR``); skips the test when it is absent."""
    found = _shared_data_dir()
    if found is None:
        pytest.skip(
            "shared datasets not found: set EAPO_DATA_DIR or place them at ../shared/data next to the repo"
        )
    return found


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """``write_jsonl(name, rows)``: rows are dicts (dumped) or raw strings (written verbatim)."""

    def write(name: str, rows: list[Any]) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [row if isinstance(row, str) else json.dumps(row, ensure_ascii=False) for row in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


def make_char_tokenizer(texts: list[str], chat_template: str | None = CHATML_TEMPLATE) -> Any:
    """A character-level ``PreTrainedTokenizerFast``: one token per character of ``texts`` (plus
    printable ASCII), ``<|im_start|>``/``<|im_end|>`` as single special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[UNK]", "<|im_start|>", "<|im_end|>"]
    chars = sorted(set(string.printable).union(*map(set, texts)))
    vocab = {token: i for i, token in enumerate(specials + chars)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", additional_special_tokens=specials[1:]
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


@pytest.fixture(scope="session")
def byte_tokenizer() -> Any:
    """A byte-level BPE tokenizer with no merges (one token per UTF-8 byte) and the ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|im_start|>", "<|im_end|>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(specials + alphabet)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, additional_special_tokens=specials)
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


@pytest.fixture
def char_tokenizer() -> Callable[..., Any]:
    return make_char_tokenizer
