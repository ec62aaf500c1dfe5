"""No behaviour change: a fixed-seed tiny training (configs/tiny.yaml, 3 steps, engine: generate)
logs every metric it logged before the per-step decision moved into :mod:`eapo.core.step`.

``fixtures/tiny_eapo_3steps.json`` was recorded from the code before that refactor (issue #27,
commit "tests: record tiny 3-step metrics"). Wall-clock keys are left out.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eapo.config import load_config
from eapo.run_dir import read_metrics
from eapo.train import run

ROOT = Path(__file__).resolve().parents[3]
RECORDED = Path(__file__).parent / "fixtures" / "tiny_eapo_3steps.json"
WALL_CLOCK = {"step_time", "time"}
#: Keys the refactor added to the TRL log (the verl plugin already logged them): none may disappear.
ADDED = {"eapo/num_unscored"}


def test_tiny_run_logs_the_recorded_metrics(tmp_path):
    config = load_config(
        ROOT / "configs" / "tiny.yaml",
        ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false", "train.save_steps=0"],
    )
    rows = read_metrics(run(config, tmp_path / "run"))
    recorded = json.loads(RECORDED.read_text())
    assert len(rows) == len(recorded)
    for row, expected in zip(rows, recorded, strict=True):
        assert set(row) - WALL_CLOCK - ADDED == set(expected) - WALL_CLOCK, row["step"]
        for key, value in expected.items():
            if key in WALL_CLOCK:
                continue
            got = row[key]
            if isinstance(value, float) and math.isnan(value):
                assert isinstance(got, float) and math.isnan(got), key
            elif isinstance(value, float):
                assert got == pytest.approx(value, rel=1e-6, abs=1e-9), (row["step"], key)
            else:
                assert got == value, (row["step"], key)
        for key in ADDED & set(row):
            assert row[key] == 0.0  # tiny's rewards score every rollout
