"""eapo.run_dir's atomic writes, which every file eapo writes whole goes through (run files, the judge's
disk cache, figures): all or nothing, ordinary permissions, and the umask never touched."""

from __future__ import annotations

import os
import stat

import pytest

from eapo.run_dir import atomic_write_bytes, atomic_write_text


def test_a_write_replaces_the_file_whole_with_ordinary_permissions(tmp_path, monkeypatch) -> None:
    path = tmp_path / "summary.json"
    path.write_text("old")
    mask = os.umask(0o027)
    try:

        def umask_changed(_mask: int) -> int:  # another thread may be creating files meanwhile
            raise AssertionError("atomic writes must not change the process umask")

        monkeypatch.setattr(os, "umask", umask_changed)
        atomic_write_text(path, "néw\n")
        atomic_write_bytes(tmp_path / "figure.png", b"\x89PNG", fsync=False)
    finally:
        monkeypatch.undo()
        os.umask(mask)
    assert path.read_bytes() == "néw\n".encode()
    assert (tmp_path / "figure.png").read_bytes() == b"\x89PNG"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0o666 less the umask 0o027
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.png", "summary.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("old")

    def disk_full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
