"""Datasets and prompts: CMD, RJUA-QA, MedQuAD, any JSONL/CSV/Parquet or Hugging Face dataset,
and a shipped demo set, turned into :class:`Record` s and rendered with the paper's prompts.

Typical use (the trainer, the evaluator and the verl exporter)::

    from eapo.data import load, default_prompt_for, render_prompts

    train = load("rjua", split="train")             # $EAPO_DATA_DIR/rjua, seeded carve of valid.jsonl
    prompts = render_prompts(train, tokenizer, default_prompt_for("rjua"), max_prompt_tokens=1024)

Data files are read at run time from ``$EAPO_DATA_DIR`` (``../shared/data`` under ``make``) and
never committed. Split semantics per loader are documented in :mod:`eapo.data.loaders`.
"""

from eapo.data.loaders import DATA_DIR_ENV, LOADERS, LoaderInfo, LoadOptions, data_dir, load
from eapo.data.prompts import (
    CHAT_PROMPTS,
    PROMPTS,
    PromptList,
    build_messages,
    default_prompt_for,
    fill,
    get_messages,
    get_template,
    render_prompts,
)
from eapo.data.records import DataError, DataFileNotFoundError, Record, RecordList
from eapo.data.splits import SPLIT_NAMES, carve_dev, fraction_indices, normalize_split, seeded_permutation

__all__ = [
    "CHAT_PROMPTS",
    "DATA_DIR_ENV",
    "LOADERS",
    "PROMPTS",
    "SPLIT_NAMES",
    "DataError",
    "DataFileNotFoundError",
    "LoadOptions",
    "LoaderInfo",
    "PromptList",
    "Record",
    "RecordList",
    "build_messages",
    "carve_dev",
    "data_dir",
    "default_prompt_for",
    "fill",
    "fraction_indices",
    "get_messages",
    "get_template",
    "load",
    "normalize_split",
    "render_prompts",
    "seeded_permutation",
]
