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

This module holds the registry, :func:`load` and the split selection; the rest, one module per concern:
:mod:`~eapo.data.loaders.rows` (the options, row -> record validation shared by every loader),
:mod:`~eapo.data.loaders.formats` (JSONL, CSV, Parquet readers), :mod:`~eapo.data.loaders.files`
(``$EAPO_DATA_DIR`` and the split files), :mod:`~eapo.data.loaders.corpora` (``cmd``, ``rjua``,
``medquad``) and :mod:`~eapo.data.loaders.generic` (``jsonl``, ``csv``, ``parquet``, ``demo``, ``hf``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eapo.data.loaders.corpora import load_cmd, load_medquad, load_rjua
from eapo.data.loaders.files import DATA_DIR_ENV, ROLES, data_dir
from eapo.data.loaders.formats import READERS
from eapo.data.loaders.generic import generic, load_demo, load_hf
from eapo.data.loaders.rows import Collector, LoadOptions
from eapo.data.records import DataError, Record, RecordList
from eapo.data.splits import carve_dev, fraction_indices, normalize_split

__all__ = ["DATA_DIR_ENV", "LOADERS", "LoadOptions", "LoaderInfo", "data_dir", "load"]

logger = logging.getLogger(__name__)

_COMMON_OPTIONS = ("split", "seed", "limit", "dev_fraction", "skip_bad_rows")
_FIELD_OPTIONS = ("question_field", "reference_field", "id_field")


@dataclass(frozen=True)
class LoaderInfo:
    """One entry of :data:`LOADERS`."""

    load: Callable[[str | os.PathLike[str] | None, LoadOptions], Collector]
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
        load_cmd,
        (*_FIELD_OPTIONS, "encoding", "include_title"),
        0.05,
        "cmd",
        "CMD Chinese Medical Dialogue (title + question -> answer); $EAPO_DATA_DIR/cmd",
        "the CMD test split (727 rows) is held out and not in ../shared/data",
    ),
    "rjua": LoaderInfo(
        load_rjua,
        (*_FIELD_OPTIONS, "encoding"),
        0.2,
        "rjua",
        "RJUA-QA urology (question -> answer; context/disease/advice in metadata); $EAPO_DATA_DIR/rjua",
        "the RJUA-QA official test split (213 rows) is held out and not in ../shared/data",
    ),
    "medquad": LoaderInfo(
        load_medquad,
        (*_FIELD_OPTIONS, "encoding"),
        0.05,
        "en",
        "MedQuAD English NIH QA (train 8,309 / dev 437 files); $EAPO_DATA_DIR/medquad",
        "the MedQuAD test split (972 rows) is held out and not in ../shared/data",
    ),
    "jsonl": LoaderInfo(
        generic((".jsonl", ".json"), "jsonl"),
        (*_FIELD_OPTIONS, "encoding"),
        0.05,
        "en",
        "any JSON Lines file or directory; path=",
    ),
    "csv": LoaderInfo(
        generic((".csv",), "csv"),
        (*_FIELD_OPTIONS, "encoding"),
        0.05,
        "en",
        "any CSV file or directory with a header row; path=",
    ),
    "parquet": LoaderInfo(
        generic((".parquet",), "parquet"), _FIELD_OPTIONS, 0.05, "en", "any Parquet file or directory; path="
    ),
    "hf": LoaderInfo(
        load_hf,
        (*_FIELD_OPTIONS, "subset", "revision", "cache_dir"),
        0.05,
        "en",
        "a Hugging Face datasets dataset: 'hf:<name>' or path=<name> (needs the network or a local copy)",
    ),
    "demo": LoaderInfo(load_demo, (), 0.1, "en", "66 English medical QA pairs shipped with eapo (no path)"),
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
        if Path(name).suffix.lower() in READERS or os.sep in name:
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
    collected: Collector,
    split: str | tuple[float, float],
    seed: int,
    dev_fraction: float,
) -> list[Record]:
    roles = collected.roles
    if isinstance(split, tuple) or split == "all":
        pool = [record for role in ROLES for record in roles.get(role, [])]
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
