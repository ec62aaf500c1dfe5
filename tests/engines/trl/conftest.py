"""The uninterrupted 2-process DDP run shared by tests/engines/trl/test_distributed.py and the DDP-equality
check of tests/engines/trl/test_sharded.py (one launch for both)."""

from __future__ import annotations

import pytest
from two_processes import NPROC, dumps, launch


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory):
    """An uninterrupted 3-step run of configs/tiny.yaml on 2 processes (torchrun, DDP over gloo), with no
    --output-dir (runs/eapo-<start time>): (run_dir, per-rank dumps, the launch's output)."""
    base = tmp_path_factory.mktemp("ddp")
    code, output = launch(base, base / "dump")
    assert code == 0, output[-4000:]
    # one directory, although process 1's clock reads 2 s later than process 0's
    (run_dir,) = (base / "runs").iterdir()
    assert run_dir.name.startswith("eapo-")
    ranks = dumps(base / "dump")
    assert [(base / dump["run_dir"]).resolve() for dump in ranks] == [run_dir.resolve()] * NPROC
    return run_dir, ranks, output
