"""``logging.report_to``: eapo's metrics reach an experiment tracker other than TensorBoard.

Trackio (a local SQLite store, no server, no account) is the tracker tested offline: ``eapo train``
logs into a project under ``$TRACKIO_DIR``, and what Trackio stored is read back and compared with
``metrics.jsonl``, line by line. transformers' integrations (Trackio, W&B, MLflow, ...) file the
trainer's keys under ``train/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eapo.run_dir import read_metrics

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("trackio", reason="the tracker test needs trackio (pip install 'eapo[dev]')")

#: eapo's own keys (the metrics contract) that a tracker must receive at every step.
EAPO_KEYS = (
    "entropy/rollout",
    "eapo/H0",
    "eapo/w_pos",
    "eapo/w_neg",
    "eapo/frac_positive",
    "reward/mean",
    "reward/rouge_l/mean",
    "reward/format/mean",
)

_READ_BACK = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
project, run = sys.argv[1], sys.argv[2]
print(json.dumps({"runs": SQLiteStorage.get_runs(project), "logs": SQLiteStorage.get_logs(project, run)}))
"""


def test_trackio_receives_eapos_metrics_at_every_step(tmp_path):
    env = {
        **os.environ,
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    run_dir = tmp_path / "tracked"
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "eapo.cli",
            "train",
            "--config",
            str(ROOT / "configs" / "tiny.yaml"),
            "--output-dir",
            str(run_dir),
            "logging.report_to=[tensorboard,trackio]",
            "logging.project=eapo-test",
            "train.max_steps=2",
            "train.save_steps=0",
            "logging.progress=false",
            "logging.plot=false",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-4000:]
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))  # TensorBoard as before

    stored = subprocess.run(
        [sys.executable, "-c", _READ_BACK, "eapo-test", "tracked"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert stored.returncode == 0, stored.stderr[-4000:]
    tracked = json.loads(stored.stdout.strip().splitlines()[-1])
    assert tracked["runs"] == ["tracked"]  # the run is named after its directory, in logging.project
    steps = [log for log in tracked["logs"] if "train/entropy/rollout" in log]
    assert [log["train/global_step"] for log in steps] == [1, 2]
    for row, log in zip(rows, steps, strict=True):
        for key in EAPO_KEYS:
            assert log[f"train/{key}"] == pytest.approx(row[key], rel=1e-9, abs=1e-12), key
    assert steps[0]["train/eapo/w_pos"] == pytest.approx(0.2, rel=1e-9)  # w0 at step 1 (H_1 = H_0)


def test_report_to_rejects_an_unknown_tracker():
    from eapo.config import ConfigError, load_config

    with pytest.raises(
        ConfigError,
        match=r"logging.report_to=\['tensorbored'\] is invalid; valid: a list of trackers \(tensorboard, wandb",
    ):
        load_config(ROOT / "configs" / "tiny.yaml", ["logging.report_to=[tensorbored]"])
    assert load_config(ROOT / "configs" / "tiny.yaml").logging.report_to == ["tensorboard"]
