"""The one change the core-owned step made to the TRL engine's numbers is the advantages' epsilon.

:class:`eapo.core.EAPOStep` now computes the TRL engine's group statistics (it used TRL's own, whose
std epsilon is 1e-4) with core's :data:`eapo.core.step.ADVANTAGE_EPS` (1e-6, verl's default too), so
``fixtures/tiny_eapo_3steps.json`` was re-recorded. ``fixtures/tiny_eapo_3steps_trl_eps.json`` is the
record made before the step moved into core (issue #27); with the epsilon set back to TRL's 1e-4,
the same fixed-seed tiny run reproduces it: every other number is unchanged, within 1e-5 relative
(core computes the group statistics in float64, TRL in float32: after three updates the KL term
differs in its sixth significant digit).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import eapo.core.step
from eapo.config import load_config
from eapo.run_dir import read_metrics
from eapo.train import run

ROOT = Path(__file__).resolve().parents[3]
BEFORE = Path(__file__).parent / "fixtures" / "tiny_eapo_3steps_trl_eps.json"
WALL_CLOCK = {"step_time", "time"}


def test_with_trls_epsilon_the_core_step_reproduces_the_record_made_before_it(tmp_path, monkeypatch):
    monkeypatch.setattr(eapo.core.step, "ADVANTAGE_EPS", 1e-4)
    config = load_config(
        ROOT / "configs" / "tiny.yaml",
        ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false", "train.save_steps=0"],
    )
    rows = read_metrics(run(config, tmp_path / "run"))
    recorded = json.loads(BEFORE.read_text())
    assert len(rows) == len(recorded) == 3
    for row, expected in zip(rows, recorded, strict=True):
        for key, value in expected.items():
            if key in WALL_CLOCK:
                continue
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(row[key]), key
            elif isinstance(value, float):
                assert row[key] == pytest.approx(value, rel=1e-5, abs=1e-9), (row["step"], key)
            else:
                assert row[key] == value, (row["step"], key)
