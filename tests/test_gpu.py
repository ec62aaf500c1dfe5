"""GPU-only checks (skipped without CUDA: CI has none)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eapo.config import load_config
from eapo.run_dir import read_metrics
from eapo.train import run

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_tiny_run_on_gpu_in_bfloat16(tmp_path):
    config = load_config(
        ROOT / "configs" / "tiny.yaml",
        ["model.dtype=bfloat16", "train.save_steps=0", "logging.progress=false", "logging.plot=false"],
    )
    rows = read_metrics(run(config, tmp_path / "gpu"))
    assert [row["step"] for row in rows] == [1, 2, 3]
    h0 = rows[0]["entropy/rollout"]
    for row in rows:
        assert row["eapo/w_pos"] == pytest.approx(
            min(max(0.2 * row["entropy/rollout"] / h0, 0.0), 2.0), rel=1e-6
        )
