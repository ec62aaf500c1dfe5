"""The model cache: a directory is only ever moved into place complete, and a broken leftover heals."""

from __future__ import annotations

import pytest

from eapo.runtime import models


def _write_complete(tmp):
    (tmp / "config.json").write_text("{}")
    (tmp / "model.safetensors").write_bytes(b"weights")


def test_a_broken_leftover_in_the_cache_is_replaced(tmp_path):
    target = tmp_path / "models" / "tiny-x"
    target.mkdir(parents=True)
    (target / "tokenizer.json").write_text("{}")  # what a build killed half-way leaves
    assert models._atomic_save_dir(target, _write_complete) == target
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]


def test_a_complete_entry_written_by_another_process_is_kept(tmp_path):
    target = tmp_path / "models" / "tiny-x"
    target.mkdir(parents=True)
    (target / "config.json").write_text('{"winner": true}')
    (target / "model.safetensors").write_bytes(b"first")
    models._atomic_save_dir(target, _write_complete)
    assert (target / "config.json").read_text() == '{"winner": true}'
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_build_that_wrote_no_weights_never_enters_the_cache(tmp_path):
    target = tmp_path / "models" / "tiny-x"

    def tokenizer_only(tmp):
        (tmp / "tokenizer.json").write_text("{}")

    with pytest.raises(RuntimeError, match="no config.json or weights"):
        models._atomic_save_dir(target, tokenizer_only)
    assert not target.exists()
