"""Dataset loaders: ``load(name, path=None, **options) -> list[Record]``.

Loaders (the registry :data:`LOADERS`; every entry has the same signature):

==========  =================================================================================
``cmd``     CMD, Chinese Medical Dialogue (Toyhom), as converted in ``../shared/data/cmd``.
            ``question`` = ``title`` + newline + ``question`` (the patient's short title, then
            the question; the data README's "title + question"; ``include_title=False`` keeps the
            question alone). ``reference`` = ``answer``. Metadata keeps ``title``,
            ``department``, ``department_en``, ``sub_department``, ``source_file``,
            ``source_row``, ``split``. Also reads an original CSV (``department,title,ask,
            answer``; pass ``encoding="gb18030"``), whose ``department`` column becomes
            ``sub_department``.
``rjua``    RJUA-QA (urology). ``question``/``answer``; ``context``, ``disease``, ``advice``
            (and ``split``) in metadata.
``medquad`` MedQuAD (English, NIH). ``question``/``answer``; ``source``, ``qtype``, ``focus``
            in metadata.
``jsonl``   Any JSON Lines file (``.jsonl``/``.json``; a ``.json`` holding one JSON array also
            works), with ``question_field=``, ``reference_field=``, ``id_field=``.
``csv``     Any CSV file with a header row, same field options.
``parquet`` Any Parquet file, same field options.
``hf``      A Hugging Face ``datasets`` dataset: ``load("hf:<name>")`` or
            ``load("hf", path="<name>")``; ``subset=``, ``revision=``, ``cache_dir=``. Needs the
            network (or a local folder / the datasets cache): the Makefile sets
            ``HF_DATASETS_OFFLINE=1``.
``demo``    The English QA set shipped in the package (``eapo/data/demo.jsonl``); no path.
==========  =================================================================================

Where files come from. ``path`` is a file or a directory. With no ``path``, ``cmd``, ``rjua``
and ``medquad`` read ``$EAPO_DATA_DIR/<name>/`` (the Makefile sets ``EAPO_DATA_DIR`` to
``../shared/data``). In a directory the split files are ``train``, ``dev`` (or ``valid`` /
``validation``) and ``test`` with the loader's extension. A single file is one pool that plays
the ``train`` role.

Splits (``split=``; ``seed=0``, ``dev_fraction=`` per loader, ``limit=None``):

* ``"all"`` (the default): every row of every split file, in file order (train, dev, test).
* ``"train"`` / ``"dev"``: the ``train`` and ``dev`` files where both exist. Where there is no
  dev file, dev is **carved** from the train pool: the first ``round(dev_fraction·n)`` rows of a
  ``random.Random(seed)`` shuffle, and ``train`` is the rest, so the two never overlap. Carved
  splits come back in shuffled order.
* ``"test"``: the ``test`` file, or an error. The CMD and RJUA-QA test splits are held out and
  are *not* in ``../shared/data``.
* a float ``f`` (e.g. ``0.9``, the paper's 9:1 for CMD) or a range ``(start, stop)``: that slice
  of a seeded shuffle of the ``"all"`` rows; ``0.9`` and ``(0.9, 1.0)`` are disjoint and cover
  everything.
* ``limit=N`` keeps the first ``N`` rows of the chosen split.

What that means for the shipped data (``../shared/data``):

* ``cmd``: only ``train.jsonl`` (6,539 rows; Internal Medicine only, the train part of the
  source's 9:1 split). ``train``/``dev`` are carved from it with ``dev_fraction=0.05``
  (6,212 / 327). ``test`` is absent (727 rows held out).
* ``rjua``: only the official **valid** file (``valid.jsonl``, 211 rows); the official train
  file could not be obtained. **We train and dev-evaluate on slices of the official valid
  split**: ``dev`` is carved with ``dev_fraction=0.2`` (42 rows) and ``train`` is the other 169.
  If an official ``train.jsonl`` is present, ``train`` is that file and ``dev`` is
  ``valid.jsonl``. ``test`` is absent (213 rows held out).
* ``medquad``: ``train.jsonl`` (8,309) and ``dev.jsonl`` (437) are used as they are; ``test``
  is absent (972 rows held out).
* ``demo``: 66 rows; ``dev`` carved with ``dev_fraction=0.1`` (7 rows).

Bad input raises :class:`~eapo.data.records.DataError` (missing files also
:class:`FileNotFoundError`) naming the file, line and field; ``skip_bad_rows=True`` skips bad
rows instead, logs how many and records them in ``RecordList.skipped``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eapo.data.records import DataError, DataFileNotFoundError, Record, RecordList
from eapo.data.splits import carve_dev, fraction_indices, normalize_split

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

logger = logging.getLogger(__name__)

#: Environment variable naming the folder that holds ``cmd/``, ``rjua/`` and ``medquad/``.
DATA_DIR_ENV = "EAPO_DATA_DIR"

_ROLES = ("train", "dev", "test")
_ROLE_STEMS = {"train": ("train",), "dev": ("dev", "valid", "validation"), "test": ("test",)}
_COMMON_OPTIONS = ("split", "seed", "limit", "dev_fraction", "skip_bad_rows")
_FIELD_OPTIONS = ("question_field", "reference_field", "id_field")


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


# ---------------------------------------------------------------------------------------------
# Raw rows: readers turn a file into (location, fields-or-problem) rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    where: str  # "<file>:<line>" for messages
    line: int  # 1-based line (JSONL, CSV) or row number (Parquet, HF)
    fields: dict[str, Any] | None
    problem: str | None = None  # why the raw row could not be parsed


class _BadRow(Exception):
    """A row-level problem; :class:`_Collector` raises it as DataError or skips the row."""


def _read_bytes(path: Path | Traversable) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataFileNotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a directory, expected a file") from None


def _decode(path: object, data: bytes, encoding: str) -> str:
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(
            f"{path}:{line}: cannot decode bytes {data[error.start : error.end + 3]!r} as {encoding}; "
            f"pass encoding= with the file's encoding (the original CMD CSVs need encoding='gb18030')"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text  # drop a byte-order mark


def _read_jsonl(path: Path | Traversable, options: LoadOptions) -> list[_Row]:
    text = _decode(path, _read_bytes(path), options.encoding)
    if path.name.endswith(".json") and text.lstrip().startswith("["):  # one JSON array of objects
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}:{error.lineno}: malformed JSON array: {error.msg}") from None
        return [_as_row(f"{path} item {i}", i, item) for i, item in enumerate(items, 1)]
    rows = []
    for line_no, line in enumerate(text.split("\n"), 1):  # "\n" only: JSON strings may hold U+2028
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            rows.append(
                _Row(
                    f"{path}:{line_no}", line_no, None, f"malformed JSON ({error.msg}, column {error.colno})"
                )
            )
            continue
        rows.append(_as_row(f"{path}:{line_no}", line_no, item))
    return rows


def _as_row(where: str, line: int, item: object) -> _Row:
    if not isinstance(item, dict):
        return _Row(where, line, None, f"expected a JSON object, got {type(item).__name__}")
    return _Row(where, line, item)


def _read_csv(path: Path, options: LoadOptions, required: tuple[str, ...] = ()) -> list[_Row]:
    text = _decode(path, _read_bytes(path), options.encoding)
    reader = csv.DictReader(io.StringIO(text, newline=""), restkey="\0extra")
    header = reader.fieldnames or []
    if not header:
        raise DataError(f"{path}: empty CSV file (expected a header row)")
    missing = [name for name in required if name not in header]
    if missing:
        raise DataError(
            f"{path}:1: CSV header has no column {missing[0]!r} (columns: {', '.join(header)}); "
            "pass question_field= / reference_field= to name the right columns"
        )
    rows = []
    for item in reader:
        line = reader.line_num
        extra = item.pop("\0extra", None)
        if extra is not None:
            rows.append(
                _Row(
                    f"{path}:{line}",
                    line,
                    None,
                    f"{len(header) + len(extra)} values for {len(header)} columns",
                )
            )
            continue
        rows.append(_Row(f"{path}:{line}", line, {k: v for k, v in item.items() if v is not None}))
    return rows


def _read_parquet(path: Path, options: LoadOptions) -> list[_Row]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise DataFileNotFoundError(f"no such file: {path}") from None
    except Exception as error:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: cannot read as Parquet: {error}") from None
    return [_Row(f"{path} row {i}", i, item) for i, item in enumerate(table.to_pylist(), 1)]


_READERS: dict[str, Callable[..., list[_Row]]] = {
    ".jsonl": _read_jsonl,
    ".json": _read_jsonl,
    ".csv": _read_csv,
    ".parquet": _read_parquet,
}


# ---------------------------------------------------------------------------------------------
# Rows -> records
# ---------------------------------------------------------------------------------------------


def _text_field(fields: dict[str, Any], name: str, option: str) -> str:
    if name not in fields:
        present = ", ".join(sorted(map(str, fields))[:12])
        raise _BadRow(
            f"missing required field {name!r} (fields: {present}); pass {option}= to use another field"
        )
    value = fields[name]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise _BadRow(f"required field {name!r} is empty")
    if not isinstance(value, str):
        raise _BadRow(f"field {name!r} must be text, got {type(value).__name__} {value!r}")
    return value.strip()


def _build_record(row: _Row, stem: str, options: LoadOptions) -> Record:
    fields = row.fields or {}
    question = _text_field(fields, options.question_field, "question_field")
    reference = _text_field(fields, options.reference_field, "reference_field")
    record_id = None
    if options.id_field is not None:
        value = fields.get(options.id_field)
        if value is not None and str(value).strip():
            record_id = str(value).strip()
        elif options.id_field_required:
            raise _BadRow(
                f"missing or empty id field {options.id_field!r}; pass id_field=None to number rows"
            )
    if record_id is None:
        record_id = f"{stem}-{row.line}"
    used = {options.question_field, options.reference_field, options.id_field}
    metadata = {key: value for key, value in fields.items() if key not in used}
    return Record(id=record_id, question=question, reference=reference, metadata=metadata)


def _build_cmd_record(row: _Row, stem: str, options: LoadOptions) -> Record:
    fields = dict(row.fields or {})
    if "ask" in fields and options.question_field not in fields:  # an original Toyhom CSV row
        fields[options.question_field] = fields.pop("ask")
        if "department" in fields:
            fields["sub_department"] = fields.pop("department")
    record = _build_record(_Row(row.where, row.line, fields), stem, options)
    title = record.metadata.get("title")
    if not options.include_title or not isinstance(title, str) or not title.strip():
        return record
    title = title.strip()
    question = record.question if record.question.startswith(title) else f"{title}\n{record.question}"
    return Record(id=record.id, question=question, reference=record.reference, metadata=record.metadata)


class _Collector:
    """Turns the rows of each split file into records; raises on, or skips, bad rows and duplicate ids."""

    def __init__(self, skip_bad_rows: bool) -> None:
        self.skip_bad_rows = skip_bad_rows
        self.roles: dict[str, list[Record]] = {}
        self.files: list[str] = []
        self.skipped: list[str] = []
        self._first_seen: dict[str, str] = {}

    def add(self, role: str, label: str, rows: Iterable[_Row], build: Callable[[_Row], Record]) -> None:
        records = []
        for row in rows:
            try:
                if row.problem is not None:
                    raise _BadRow(row.problem)
                record = build(row)
                if record.id in self._first_seen:
                    raise _BadRow(
                        f"duplicate id {record.id!r} (first at {self._first_seen[record.id]}); ids must be "
                        "unique: fix the file, or pass id_field=None to number rows instead"
                    )
            except _BadRow as bad:
                message = f"{row.where}: {bad}"
                if not self.skip_bad_rows:
                    raise DataError(f"{message} (or pass skip_bad_rows=True to skip bad rows)") from None
                self.skipped.append(message)
                continue
            self._first_seen[record.id] = row.where
            records.append(record)
        self.roles[role] = records
        self.files.append(label)


# ---------------------------------------------------------------------------------------------
# Finding files
# ---------------------------------------------------------------------------------------------


def data_dir() -> Path | None:
    """``$EAPO_DATA_DIR`` as a path, or ``None`` when it is unset or empty."""
    value = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def _resolve(name: str, path: str | os.PathLike[str] | None, default_subdir: str | None) -> Path:
    if path is not None:
        resolved = Path(path).expanduser()
        if not resolved.exists():
            raise DataFileNotFoundError(f"{name}: no such file or directory: {resolved}")
        return resolved
    if default_subdir is None:
        raise DataError(f"loader {name!r} needs path= (a file or a directory of train/dev/test files)")
    root = data_dir()
    how = (
        f"set {DATA_DIR_ENV} to the folder that holds cmd/, rjua/ and medquad/ "
        f"(the Makefile sets it to ../shared/data), or pass path="
    )
    if root is None:
        raise DataFileNotFoundError(f"{name}: no path= given and {DATA_DIR_ENV} is not set; {how}")
    directory = root / default_subdir
    if not directory.is_dir():
        raise DataFileNotFoundError(
            f"{name}: dataset directory {directory} does not exist ({DATA_DIR_ENV}={root}); {how}"
        )
    return directory


def _split_files(name: str, location: Path, suffixes: tuple[str, ...]) -> dict[str, Path]:
    """``{"train"|"dev"|"test": file}``: a file is the train pool; a directory is searched."""
    if location.is_file():
        if location.suffix.lower() not in suffixes:
            raise DataError(
                f"{name}: {location} is not a {'/'.join(suffixes)} file; "
                f"use the loader for its type (jsonl, csv, parquet)"
            )
        return {"train": location}
    found: dict[str, Path] = {}
    for role in _ROLES:
        candidates = [location / f"{stem}{suffix}" for stem in _ROLE_STEMS[role] for suffix in suffixes]
        present = [candidate for candidate in candidates if candidate.is_file()]
        if len(present) > 1:
            raise DataError(
                f"{name}: {location} has several {role} files ({', '.join(p.name for p in present)}); keep one"
            )
        if present:
            found[role] = present[0]
    if not found:
        looked = ", ".join(f"{stem}{suffixes[0]}" for role in _ROLES for stem in _ROLE_STEMS[role])
        raise DataFileNotFoundError(f"{name}: no split files in {location} (looked for {looked})")
    return found


def _collect_files(
    files: dict[str, Path],
    options: LoadOptions,
    build: Callable[[_Row, str, LoadOptions], Record],
    csv_columns: tuple[str, ...] | None = None,
) -> _Collector:
    """Read each split file and build its records. ``csv_columns``: the columns a CSV header must
    have (default: the question and reference fields)."""
    collector = _Collector(options.skip_bad_rows)
    if csv_columns is None:
        csv_columns = (options.question_field, options.reference_field)
    for role, file in files.items():
        reader = _READERS[file.suffix.lower()]
        rows = reader(file, options, csv_columns) if reader is _read_csv else reader(file, options)
        collector.add(role, str(file), rows, lambda row, stem=file.stem: build(row, stem, options))
    return collector


# ---------------------------------------------------------------------------------------------
# The loaders (one signature: (path, options) -> _Collector)
# ---------------------------------------------------------------------------------------------


def _load_cmd(path: str | os.PathLike[str] | None, options: LoadOptions) -> _Collector:
    files = _split_files("cmd", _resolve("cmd", path, "cmd"), (".jsonl", ".csv"))
    # An original Toyhom CSV names the question column "ask" (renamed in _build_cmd_record).
    return _collect_files(files, options, _build_cmd_record, csv_columns=(options.reference_field,))


def _load_rjua(path: str | os.PathLike[str] | None, options: LoadOptions) -> _Collector:
    location = _resolve("rjua", path, "rjua")
    files = _split_files("rjua", location, (".jsonl", ".json"))
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
    return _collect_files(files, options, _build_record)


def _load_medquad(path: str | os.PathLike[str] | None, options: LoadOptions) -> _Collector:
    files = _split_files("medquad", _resolve("medquad", path, "medquad"), (".jsonl",))
    return _collect_files(files, options, _build_record)


def _generic(suffixes: tuple[str, ...], name: str) -> Callable[[Any, LoadOptions], _Collector]:
    def load_generic(path: str | os.PathLike[str] | None, options: LoadOptions) -> _Collector:
        files = _split_files(name, _resolve(name, path, None), suffixes)
        return _collect_files(files, options, _build_record)

    return load_generic


def _load_demo(path: str | os.PathLike[str] | None, options: LoadOptions) -> _Collector:
    if path is not None:
        raise DataError(
            "the demo dataset is packaged with eapo and takes no path=; use load('jsonl', path=...) for a file"
        )
    demo = resources.files("eapo.data").joinpath("demo.jsonl")
    collector = _Collector(options.skip_bad_rows)
    collector.add(
        "train", str(demo), _read_jsonl(demo, options), lambda row: _build_record(row, "demo", options)
    )
    return collector


_HF_ROLES = {
    "train": "train",
    "dev": "dev",
    "valid": "dev",
    "validation": "dev",
    "val": "dev",
    "test": "test",
}


def _load_hf(path: str | os.PathLike[str] | None, options: LoadOptions) -> _Collector:
    if not path:
        raise DataError("the hf loader needs a dataset name: load('hf:<name>') or load('hf', path='<name>')")
    import datasets

    name = str(path)
    try:
        loaded = datasets.load_dataset(
            name, options.subset, revision=options.revision, cache_dir=options.cache_dir
        )
    except Exception as error:  # hub, network and builder errors come in many types
        raise DataError(
            f"hf: could not load dataset {name!r}{f' (subset {options.subset!r})' if options.subset else ''}: "
            f"{type(error).__name__}: {error}. Offline (HF_DATASETS_OFFLINE=1, as the Makefile sets) only "
            "local folders and already-cached datasets load; export the data to JSONL and use load('jsonl', path=...)"
        ) from None
    splits = loaded if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
    collector = _Collector(options.skip_bad_rows)
    for split_name, dataset in splits.items():
        role = _HF_ROLES.get(split_name.lower())
        if role is None or role in collector.roles:
            logger.info("hf: %s: ignoring split %r (not train/validation/test)", name, split_name)
            continue
        label = f"{name}[{split_name}]"
        rows = [_Row(f"{label} row {i}", i, item) for i, item in enumerate(dataset.to_list(), 1)]
        collector.add(role, label, rows, lambda row, stem=split_name: _build_record(row, stem, options))
    if not collector.roles:
        raise DataError(f"hf: dataset {name!r} has no train/validation/test split (it has {list(splits)})")
    return collector


@dataclass(frozen=True)
class LoaderInfo:
    """One entry of :data:`LOADERS`."""

    load: Callable[[str | os.PathLike[str] | None, LoadOptions], _Collector]
    options: tuple[str, ...]
    """Loader-specific options accepted besides split, seed, limit, dev_fraction, skip_bad_rows."""
    dev_fraction: float
    """Default fraction of the train pool carved out as dev when there is no dev file."""
    prompt: str
    """The default prompt name (:data:`eapo.data.prompts.PROMPTS`)."""
    description: str
    held_out: str = ""
    """What to say when the test split is asked for and absent."""


#: name -> loader. ``load("hf:<dataset>")`` is shorthand for ``load("hf", path="<dataset>")``.
LOADERS: dict[str, LoaderInfo] = {
    "cmd": LoaderInfo(
        _load_cmd,
        (*_FIELD_OPTIONS, "encoding", "include_title"),
        0.05,
        "cmd",
        "CMD Chinese Medical Dialogue (title + question -> answer); $EAPO_DATA_DIR/cmd",
        "the CMD test split (727 rows) is held out and not in ../shared/data",
    ),
    "rjua": LoaderInfo(
        _load_rjua,
        (*_FIELD_OPTIONS, "encoding"),
        0.2,
        "rjua",
        "RJUA-QA urology (question -> answer; context/disease/advice in metadata); $EAPO_DATA_DIR/rjua",
        "the RJUA-QA official test split (213 rows) is held out and not in ../shared/data",
    ),
    "medquad": LoaderInfo(
        _load_medquad,
        (*_FIELD_OPTIONS, "encoding"),
        0.05,
        "en",
        "MedQuAD English NIH QA (train 8,309 / dev 437 files); $EAPO_DATA_DIR/medquad",
        "the MedQuAD test split (972 rows) is held out and not in ../shared/data",
    ),
    "jsonl": LoaderInfo(
        _generic((".jsonl", ".json"), "jsonl"),
        (*_FIELD_OPTIONS, "encoding"),
        0.05,
        "en",
        "any JSON Lines file or directory; path=",
    ),
    "csv": LoaderInfo(
        _generic((".csv",), "csv"),
        (*_FIELD_OPTIONS, "encoding"),
        0.05,
        "en",
        "any CSV file or directory with a header row; path=",
    ),
    "parquet": LoaderInfo(
        _generic((".parquet",), "parquet"), _FIELD_OPTIONS, 0.05, "en", "any Parquet file or directory; path="
    ),
    "hf": LoaderInfo(
        _load_hf,
        (*_FIELD_OPTIONS, "subset", "revision", "cache_dir"),
        0.05,
        "en",
        "a Hugging Face datasets dataset: 'hf:<name>' or path=<name> (needs the network or a local copy)",
    ),
    "demo": LoaderInfo(_load_demo, (), 0.1, "en", "66 English medical QA pairs shipped with eapo (no path)"),
}


# ---------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------


def _check_limit(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise DataError(f"limit must be a positive integer or None, got {value!r}")
    return value


def load(name: str, path: str | os.PathLike[str] | None = None, **options: Any) -> RecordList:
    """Load a dataset as records.

    Args:
        name: a key of :data:`LOADERS` (``cmd``, ``rjua``, ``medquad``, ``jsonl``, ``csv``,
            ``parquet``, ``hf``, ``demo``) or ``"hf:<dataset>"``.
        path: a file or a directory of ``train``/``dev``/``test`` files. Optional for ``cmd``,
            ``rjua`` and ``medquad`` (then ``$EAPO_DATA_DIR/<name>/``); the dataset name for ``hf``;
            not allowed for ``demo``.
        **options:
            split: ``"all"`` (default), ``"train"``, ``"dev"`` (aliases ``valid``/``validation``),
                ``"test"``, a float ``f`` in ``(0, 1]`` or a range ``(start, stop)``; see the module
                docstring for what each means per loader.
            seed: shuffle seed for carved dev splits and fraction splits (default 0).
            dev_fraction: fraction of the train pool carved out as dev when there is no dev file
                (defaults: cmd 0.05, rjua 0.2, medquad/jsonl/csv/parquet/hf 0.05, demo 0.1).
            limit: keep the first ``limit`` rows of the split.
            skip_bad_rows: skip malformed rows and rows with a missing or empty required field
                (logged; listed in ``RecordList.skipped``) instead of raising.
            question_field, reference_field, id_field: field names (defaults ``question``,
                ``answer``, ``id``).
            encoding: file encoding for JSONL and CSV (default ``utf-8``).
            include_title: cmd only (default True).
            subset, revision, cache_dir: hf only.

    Returns:
        A :class:`~eapo.data.records.RecordList` (a ``list[Record]`` that also carries ``files``
        and ``skipped``).

    Raises:
        DataError: unknown loader or option, bad split, malformed rows, missing fields, bad
            encoding, duplicate ids; ``DataFileNotFoundError`` (also a ``FileNotFoundError``) for
            missing files and dataset directories.
    """
    if name.startswith("hf:"):
        if path is not None:
            raise DataError(
                f"give the Hugging Face dataset once: load({name!r}) or load('hf', path=...), not both"
            )
        name, path = "hf", name[3:]
    if name not in LOADERS:
        hint = ""
        if Path(name).suffix.lower() in _READERS or os.sep in name:
            kind = {".json": "jsonl"}.get(
                Path(name).suffix.lower(), Path(name).suffix.lower().lstrip(".") or "jsonl"
            )
            hint = (
                f"; to read a file, name its loader and pass the file as path=: load({kind!r}, path={name!r})"
            )
        raise DataError(
            f"unknown dataset loader {name!r}; known: {', '.join(LOADERS)} (or 'hf:<dataset>'){hint}"
        )
    info = LOADERS[name]
    accepted = (*_COMMON_OPTIONS, *info.options)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise DataError(f"loader {name!r} does not take {unknown}; it accepts {list(accepted)}")

    split = normalize_split(options.pop("split", "all"))
    seed = options.pop("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DataError(f"seed must be an integer, got {seed!r}")
    limit = _check_limit(options.pop("limit", None))
    dev_fraction = options.pop("dev_fraction", None)
    dev_fraction = info.dev_fraction if dev_fraction is None else dev_fraction
    if (
        isinstance(dev_fraction, bool)
        or not isinstance(dev_fraction, int | float)
        or not 0 <= dev_fraction < 1
    ):
        raise DataError(f"dev_fraction must be a number in [0, 1), got {dev_fraction!r}")
    if "id_field" in options:
        options["id_field_required"] = options["id_field"] is not None
    skip_bad_rows = options.get("skip_bad_rows", False)
    if not isinstance(skip_bad_rows, bool):
        raise DataError(f"skip_bad_rows must be True or False, got {skip_bad_rows!r}")

    collected = info.load(path, LoadOptions(**options))
    records = _select(name, info, collected, split, seed, float(dev_fraction))
    if limit is not None:
        records = records[:limit]
    if collected.skipped:
        logger.warning(
            "%s: skipped %d bad row(s) (skip_bad_rows=True); first: %s",
            name,
            len(collected.skipped),
            collected.skipped[0],
        )
    logger.info("%s: %d records (split=%s) from %s", name, len(records), split, ", ".join(collected.files))
    return RecordList(records, name=name, split=split, files=collected.files, skipped=collected.skipped)


def _select(
    name: str,
    info: LoaderInfo,
    collected: _Collector,
    split: str | tuple[float, float],
    seed: int,
    dev_fraction: float,
) -> list[Record]:
    roles = collected.roles
    if isinstance(split, tuple) or split == "all":
        pool = [record for role in _ROLES for record in roles.get(role, [])]
        if split == "all":
            return pool
        return [pool[i] for i in fraction_indices(len(pool), split[0], split[1], seed)]
    if split == "test":
        if "test" not in roles:
            reason = f"{info.held_out}; " if info.held_out else ""
            raise DataError(
                f"{name}: no test split in {', '.join(collected.files)} ({reason}a test file must be named "
                "test.<ext> in the dataset directory). Evaluate on split='dev', or use a fraction split "
                "such as split=(0.9, 1.0)"
            )
        return list(roles["test"])
    if "dev" in roles:
        if split not in roles:
            raise DataError(f"{name}: no {split} split in {', '.join(collected.files)}")
        return list(roles[split])
    pool = roles["train"]
    train_positions, dev_positions = carve_dev(len(pool), dev_fraction, seed)
    return [pool[i] for i in (dev_positions if split == "dev" else train_positions)]
