"""The medical corpora, read from ``$EAPO_DATA_DIR/<name>/`` by default: CMD (the question prefixed
with its title; also the original Toyhom CSVs), RJUA-QA (the official valid split as the pool when the
train file is missing) and MedQuAD."""

from __future__ import annotations

import logging
import os

from eapo.data.loaders.files import collect_files, resolve, split_files
from eapo.data.loaders.rows import Collector, LoadOptions, Row, build_record
from eapo.data.records import Record

logger = logging.getLogger("eapo.data.loaders")  # every loader logs under the package's name


def _build_cmd_record(row: Row, stem: str, options: LoadOptions) -> Record:
    fields = dict(row.fields or {})
    if "ask" in fields and options.question_field not in fields:  # an original Toyhom CSV row
        fields[options.question_field] = fields.pop("ask")
        if "department" in fields:
            fields["sub_department"] = fields.pop("department")
    record = build_record(Row(row.where, row.line, fields), stem, options)
    title = record.metadata.get("title")
    if not options.include_title or not isinstance(title, str) or not title.strip():
        return record
    title = title.strip()
    question = record.question if record.question.startswith(title) else f"{title}\n{record.question}"
    return Record(id=record.id, question=question, reference=record.reference, metadata=record.metadata)


def load_cmd(path: str | os.PathLike[str] | None, options: LoadOptions) -> Collector:
    files = split_files("cmd", resolve("cmd", path, "cmd"), (".jsonl", ".csv"))
    # An original Toyhom CSV names the question column "ask" (renamed in _build_cmd_record).
    return collect_files(files, options, _build_cmd_record, csv_columns=(options.reference_field,))


def load_rjua(path: str | os.PathLike[str] | None, options: LoadOptions) -> Collector:
    location = resolve("rjua", path, "rjua")
    files = split_files("rjua", location, (".jsonl", ".json"))
    if "train" not in files and "dev" in files:
        # The official train file is missing here: the official valid split becomes the pool that
        # train and dev are carved from. This departs from the paper, which trains on official train.
        files = {"train": files.pop("dev"), **files}
        logger.warning(
            "rjua: no train file in %s; training and dev evaluation use seeded slices of the official "
            "valid split (%s)",
            location,
            files["train"].name,
        )
    return collect_files(files, options, build_record)


def load_medquad(path: str | os.PathLike[str] | None, options: LoadOptions) -> Collector:
    files = split_files("medquad", resolve("medquad", path, "medquad"), (".jsonl",))
    return collect_files(files, options, build_record)
