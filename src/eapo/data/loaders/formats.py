"""File formats -> raw rows: JSON Lines (or one JSON array), CSV with a header row, Parquet. A row that
cannot be parsed is kept with its problem, so the collector can name its file and line."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from eapo.data.loaders.rows import LoadOptions, Row
from eapo.data.records import DataError, DataFileNotFoundError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


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


def read_jsonl(path: Path | Traversable, options: LoadOptions) -> list[Row]:
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
                Row(f"{path}:{line_no}", line_no, None, f"malformed JSON ({error.msg}, column {error.colno})")
            )
            continue
        rows.append(_as_row(f"{path}:{line_no}", line_no, item))
    return rows


def _as_row(where: str, line: int, item: object) -> Row:
    if not isinstance(item, dict):
        return Row(where, line, None, f"expected a JSON object, got {type(item).__name__}")
    return Row(where, line, item)


def read_csv(path: Path, options: LoadOptions, required: tuple[str, ...] = ()) -> list[Row]:
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
                Row(
                    f"{path}:{line}",
                    line,
                    None,
                    f"{len(header) + len(extra)} values for {len(header)} columns",
                )
            )
            continue
        rows.append(Row(f"{path}:{line}", line, {k: v for k, v in item.items() if v is not None}))
    return rows


def _read_parquet(path: Path, options: LoadOptions) -> list[Row]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise DataFileNotFoundError(f"no such file: {path}") from None
    except Exception as error:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: cannot read as Parquet: {error}") from None
    return [Row(f"{path} row {i}", i, item) for i, item in enumerate(table.to_pylist(), 1)]


READERS: dict[str, Callable[..., list[Row]]] = {
    ".jsonl": read_jsonl,
    ".json": read_jsonl,
    ".csv": read_csv,
    ".parquet": _read_parquet,
}
