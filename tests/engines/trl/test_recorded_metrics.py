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
#: Then why each rollout ended (issue 46): without stop strings, the cap's share is TRL's clipped_ratio.
STOP_REASONS = {"completions/stopped_by_string", "completions/stopped_by_eos", "completions/stopped_by_cap"}
ADDED = {"eapo/num_unscored"} | STOP_REASONS


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
        assert row["eapo/num_unscored"] == 0.0  # tiny's rewards score every rollout
        assert row["completions/stopped_by_string"] == 0.0  # tiny.yaml sets no stop strings
        assert row["completions/stopped_by_cap"] + row["completions/stopped_by_eos"] == pytest.approx(1.0)
        # TRL's clipped_ratio also takes a row whose last sampled token is the pad token for a finished one
        # (the random model samples it: 1 of 8 rollouts here); eapo counts only an EOS as ending a rollout
        assert row["completions/stopped_by_cap"] >= expected["completions/clipped_ratio"]
