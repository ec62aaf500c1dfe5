"""Loaders for data in no particular layout: any JSONL / CSV / Parquet file or directory, the demo set
shipped in the package, and a Hugging Face ``datasets`` dataset."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from importlib import resources
from typing import Any

from eapo.data.loaders.files import collect_files, resolve, split_files
from eapo.data.loaders.formats import read_jsonl
from eapo.data.loaders.rows import Collector, LoadOptions, Row, build_record
from eapo.data.records import DataError

logger = logging.getLogger("eapo.data.loaders")  # every loader logs under the package's name


def generic(suffixes: tuple[str, ...], name: str) -> Callable[[Any, LoadOptions], Collector]:
    def load_generic(path: str | os.PathLike[str] | None, options: LoadOptions) -> Collector:
        files = split_files(name, resolve(name, path, None), suffixes)
        return collect_files(files, options, build_record)

    return load_generic


def load_demo(path: str | os.PathLike[str] | None, options: LoadOptions) -> Collector:
    if path is not None:
        raise DataError(
            "the demo dataset is packaged with eapo and takes no path=; use load('jsonl', path=...) for a file"
        )
    demo = resources.files("eapo.data").joinpath("demo.jsonl")
    collector = Collector(options.skip_bad_rows)
    collector.add(
        "train", str(demo), read_jsonl(demo, options), lambda row: build_record(row, "demo", options)
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


def load_hf(path: str | os.PathLike[str] | None, options: LoadOptions) -> Collector:
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
    collector = Collector(options.skip_bad_rows)
    for split_name, dataset in splits.items():
        role = _HF_ROLES.get(split_name.lower())
        if role is None or role in collector.roles:
            logger.info("hf: %s: ignoring split %r (not train/validation/test)", name, split_name)
            continue
        label = f"{name}[{split_name}]"
        rows = [Row(f"{label} row {i}", i, item) for i, item in enumerate(dataset.to_list(), 1)]
        collector.add(role, label, rows, lambda row, stem=split_name: build_record(row, stem, options))
    if not collector.roles:
        raise DataError(f"hf: dataset {name!r} has no train/validation/test split (it has {list(splits)})")
    return collector
