"""Shared by every loader: the reader options (:class:`LoadOptions`), a raw row as a reader yields it,
and the validation that turns rows into :class:`~eapo.data.records.Record` s (required text fields,
ids, duplicates), raising on a bad row or skipping it (``skip_bad_rows=True``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from eapo.data.records import DataError, Record


@dataclass(frozen=True)
class LoadOptions:
    """Reader options shared by the loaders (validated once here)."""

    question_field: str = "question"
    """Row field holding the question."""
    reference_field: str = "answer"
    """Row field holding the reference answer."""
    id_field: str | None = "id"
    """Row field holding a unique id; ``None`` numbers rows ``<file stem>-<line>``. When left at
    its default, rows without an id are numbered too; when given explicitly, it is required."""
    id_field_required: bool = False
    """Set when ``id_field`` was passed explicitly."""
    encoding: str = "utf-8"
    """Text encoding of JSONL/CSV files (the original CMD CSVs are ``gb18030``)."""
    skip_bad_rows: bool = False
    """Skip malformed rows and rows with a missing or empty required field, instead of raising."""
    include_title: bool = True
    """CMD only: prefix the question with the row's ``title``."""
    subset: str | None = None
    """Hugging Face only: the dataset configuration (``load_dataset(path, subset)``)."""
    revision: str | None = None
    """Hugging Face only: the dataset revision."""
    cache_dir: str | None = None
    """Hugging Face only: the ``datasets`` cache folder."""

    def __post_init__(self) -> None:
        for name in ("question_field", "reference_field"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise DataError(f"{name} must be a non-empty field name, got {value!r}")
        if self.id_field is not None and (not isinstance(self.id_field, str) or not self.id_field):
            raise DataError(f"id_field must be a non-empty field name or None, got {self.id_field!r}")
        if len({self.question_field, self.reference_field}) != 2:
            raise DataError(f"question_field and reference_field are both {self.question_field!r}")
        try:
            "".encode(self.encoding)
        except (LookupError, TypeError):
            raise DataError(f"unknown encoding {self.encoding!r} (try 'utf-8' or 'gb18030')") from None


@dataclass(frozen=True)
class Row:
    where: str  # "<file>:<line>" for messages
    line: int  # 1-based line (JSONL, CSV) or row number (Parquet, HF)
    fields: dict[str, Any] | None
    problem: str | None = None  # why the raw row could not be parsed


class BadRow(Exception):
    """A row-level problem; :class:`Collector` raises it as DataError or skips the row."""


def _text_field(fields: dict[str, Any], name: str, option: str) -> str:
    if name not in fields:
        present = ", ".join(sorted(map(str, fields))[:12])
        raise BadRow(
            f"missing required field {name!r} (fields: {present}); pass {option}= to use another field"
        )
    value = fields[name]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadRow(f"required field {name!r} is empty")
    if not isinstance(value, str):
        raise BadRow(f"field {name!r} must be text, got {type(value).__name__} {value!r}")
    return value.strip()


def build_record(row: Row, stem: str, options: LoadOptions) -> Record:
    fields = row.fields or {}
    question = _text_field(fields, options.question_field, "question_field")
    reference = _text_field(fields, options.reference_field, "reference_field")
    record_id = None
    if options.id_field is not None:
        value = fields.get(options.id_field)
        if value is not None and str(value).strip():
            record_id = str(value).strip()
        elif options.id_field_required:
            raise BadRow(f"missing or empty id field {options.id_field!r}; pass id_field=None to number rows")
    if record_id is None:
        record_id = f"{stem}-{row.line}"
    used = {options.question_field, options.reference_field, options.id_field}
    metadata = {key: value for key, value in fields.items() if key not in used}
    return Record(id=record_id, question=question, reference=reference, metadata=metadata)


class Collector:
    """Turns the rows of each split file into records; raises on, or skips, bad rows and duplicate ids."""

    def __init__(self, skip_bad_rows: bool) -> None:
        self.skip_bad_rows = skip_bad_rows
        self.roles: dict[str, list[Record]] = {}
        self.files: list[str] = []
        self.skipped: list[str] = []
        self._first_seen: dict[str, str] = {}

    def add(self, role: str, label: str, rows: Iterable[Row], build: Callable[[Row], Record]) -> None:
        records = []
        for row in rows:
            try:
                if row.problem is not None:
                    raise BadRow(row.problem)
                record = build(row)
                if record.id in self._first_seen:
                    raise BadRow(
                        f"duplicate id {record.id!r} (first at {self._first_seen[record.id]}); ids must be "
                        "unique: fix the file, or pass id_field=None to number rows instead"
                    )
            except BadRow as bad:
                message = f"{row.where}: {bad}"
                if not self.skip_bad_rows:
                    raise DataError(f"{message} (or pass skip_bad_rows=True to skip bad rows)") from None
                self.skipped.append(message)
                continue
            self._first_seen[record.id] = row.where
            records.append(record)
        self.roles[role] = records
        self.files.append(label)
