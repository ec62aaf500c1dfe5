"""The sweep's record, ``sweep.json``: every run, its overrides, status and error, merged across
``eapo sweep`` invocations on one directory (the runs write it, the tables and ``eapo study`` read it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eapo.run_dir import atomic_write_text

MANIFEST = "sweep.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None if the file is missing or not valid JSON (e.g. cut short)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def update_manifest(
    path: Path, header: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Merge ``header`` (top-level keys) and ``runs`` (per-run fields) into the manifest at ``path``.

    Read, merge and the atomic write happen under an exclusive lock on ``path.lock``, so concurrent
    writers (the threads of ``--jobs``, or two ``eapo sweep`` processes on one directory) never lose
    each other's records. Returns the manifest as written.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            manifest = read_json(path) or {"runs": {}}
            manifest.setdefault("runs", {})
            manifest.update(header)
            for name, fields in runs.items():
                manifest["runs"].setdefault(name, {}).update(fields)
            atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
    return manifest
