"""Where a loader's files are: ``path=`` or ``$EAPO_DATA_DIR/<name>/``, a single file (the train pool)
or a directory of ``train`` / ``dev`` (``valid``, ``validation``) / ``test`` files, each read by its
format into one :class:`~eapo.data.loaders.rows.Collector`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from eapo.data.loaders.formats import READERS, read_csv
from eapo.data.loaders.rows import Collector, LoadOptions, Row
from eapo.data.records import DataError, DataFileNotFoundError, Record

#: Environment variable naming the folder that holds ``cmd/``, ``rjua/`` and ``medquad/``.
DATA_DIR_ENV = "EAPO_DATA_DIR"

ROLES = ("train", "dev", "test")
_ROLE_STEMS = {"train": ("train",), "dev": ("dev", "valid", "validation"), "test": ("test",)}


def data_dir() -> Path | None:
    """``$EAPO_DATA_DIR`` as a path, or ``None`` when it is unset or empty."""
    value = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def resolve(name: str, path: str | os.PathLike[str] | None, default_subdir: str | None) -> Path:
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


def split_files(name: str, location: Path, suffixes: tuple[str, ...]) -> dict[str, Path]:
    """``{"train"|"dev"|"test": file}``: a file is the train pool; a directory is searched."""
    if location.is_file():
        if location.suffix.lower() not in suffixes:
            raise DataError(
                f"{name}: {location} is not a {'/'.join(suffixes)} file; "
                f"use the loader for its type (jsonl, csv, parquet)"
            )
        return {"train": location}
    found: dict[str, Path] = {}
    for role in ROLES:
        candidates = [location / f"{stem}{suffix}" for stem in _ROLE_STEMS[role] for suffix in suffixes]
        present = [candidate for candidate in candidates if candidate.is_file()]
        if len(present) > 1:
            raise DataError(
                f"{name}: {location} has several {role} files ({', '.join(p.name for p in present)}); keep one"
            )
        if present:
            found[role] = present[0]
    if not found:
        looked = ", ".join(f"{stem}{suffixes[0]}" for role in ROLES for stem in _ROLE_STEMS[role])
        raise DataFileNotFoundError(f"{name}: no split files in {location} (looked for {looked})")
    return found


def collect_files(
    files: dict[str, Path],
    options: LoadOptions,
    build: Callable[[Row, str, LoadOptions], Record],
    csv_columns: tuple[str, ...] | None = None,
) -> Collector:
    """Read each split file and build its records. ``csv_columns``: the columns a CSV header must
    have (default: the question and reference fields)."""
    collector = Collector(options.skip_bad_rows)
    if csv_columns is None:
        csv_columns = (options.question_field, options.reference_field)
    for role, file in files.items():
        reader = READERS[file.suffix.lower()]
        rows = reader(file, options, csv_columns) if reader is read_csv else reader(file, options)
        collector.add(role, str(file), rows, lambda row, stem=file.stem: build(row, stem, options))
    return collector
