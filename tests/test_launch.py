"""A launch that fails before its first step leaves nothing behind; one that fails after it keeps its
run and says how to resume; a directory a live process writes is refused, naming that process; a
killed process's lock blocks nothing.

Runs are configs/tiny.yaml on a CPU (a few seconds each); the two-process tests start real processes.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import TrainerCallback

from eapo.config import ConfigError, load_config
from eapo.run_dir import LOCK_FILE, complete_checkpoints, read_metrics
from eapo.train import RunError, run

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
FAST = ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false"]


def tiny(*overrides: str):
    return load_config(TINY, [*FAST, "train.save_steps=0", *overrides])


class FailAtStep(TrainerCallback):
    """Raises as step ``step + 1`` begins (``step`` steps done)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise RuntimeError(f"injected failure after {self.step} step(s)")


def _fail_trainer_construction(monkeypatch):
    import eapo.engines.trl.trainer

    def broken(self, *args, **kwargs):
        raise RuntimeError("injected: the trainer cannot be built")

    monkeypatch.setattr(eapo.engines.trl.trainer.EAPOTrainer, "__init__", broken)


def _bad_config():
    config = tiny()
    config.train.micro_batch_size = 0  # set in code, after load_config: run() checks again
    return config


# failure point -> (config, callbacks, setup, expected error)
FAILURES = {
    "config": (_bad_config, [], None, (ConfigError, r"train.micro_batch_size=0 is invalid")),
    "data": (
        lambda: tiny("data.name=jsonl", "data.path=/nonexistent/train.jsonl"),
        [],
        None,
        (RunError, r"data.name='jsonl' .* cannot be loaded"),
    ),
    "model": (
        lambda: tiny("model.name_or_path=/nonexistent/model"),
        [],
        None,
        (RunError, r"model.name_or_path='/nonexistent/model' cannot be loaded"),
    ),
    "judge": (
        lambda: tiny(
            "reward.weights.llm_judge=0.5",
            "reward.judge.base_url=http://127.0.0.1:9/v1",
            "reward.judge.model=m",
        ),
        [],
        None,
        (RunError, r"judge .* cannot be reached"),
    ),
    "trainer": (tiny, [], _fail_trainer_construction, (RuntimeError, "the trainer cannot be built")),
    # TensorBoard on: its events directory is written before step 1 and must go too
    "first_step": (
        lambda: load_config(TINY, ["logging.progress=false", "logging.plot=false", "train.save_steps=1"]),
        [FailAtStep(0)],
        None,
        (RuntimeError, "injected failure after 0 step"),
    ),
}


@pytest.mark.parametrize("point", list(FAILURES))
def test_a_launch_that_fails_before_its_first_step_leaves_no_directory(point, tmp_path, monkeypatch):
    make_config, callbacks, setup, (error, message) = FAILURES[point]
    config = make_config()
    if setup is not None:
        setup(monkeypatch)
    run_dir = tmp_path / "run"
    with pytest.raises(error, match=message):
        run(config, run_dir, callbacks=callbacks)
    assert not run_dir.exists()


def test_an_existing_directory_keeps_only_what_it_held(tmp_path):
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("the user's own file")
    config = load_config(TINY, ["logging.progress=false", "logging.plot=false"])  # TensorBoard on
    with pytest.raises(RuntimeError, match="injected failure"):
        run(config, run_dir, callbacks=[FailAtStep(0)])
    assert [p.name for p in run_dir.iterdir()] == ["notes.txt"]


def test_the_corrected_command_runs_where_a_failed_launch_was(tmp_path):
    """The issue's case: the first launch dies before step 1 and used to leave config.yaml, so the corrected
    command was refused ("already holds a run ... pass --resume") with no run to resume."""
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected failure"):
        run(tiny("train.max_steps=1"), run_dir, callbacks=[FailAtStep(0)])
    rows = read_metrics(run(tiny("train.max_steps=1"), run_dir))
    assert [row["step"] for row in rows] == [1]
    assert (run_dir / "final" / "config.json").exists() and not (run_dir / LOCK_FILE).exists()


def test_a_failure_after_step_1_keeps_the_run_and_says_how_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["train.save_steps=1", "train.max_steps=2"]
    with pytest.raises(RunError) as raised:
        run(tiny(*overrides), run_dir, callbacks=[FailAtStep(1)])
    message = str(raised.value)
    assert "training stopped at step 1 (1 step(s) done by this launch)" in message
    assert "RuntimeError: injected failure after 1 step(s)" in message
    assert (
        f"kept in {run_dir}" in message and "--resume" in message and "continues from checkpoint-1" in message
    )
    assert [row["step"] for row in read_metrics(run_dir)] == [1]
    assert (run_dir / "config.yaml").exists() and not (run_dir / LOCK_FILE).exists()
    assert [path.name for path in complete_checkpoints(run_dir)] == ["checkpoint-1"]
    resumed = read_metrics(run(tiny(*overrides), run_dir, resume=True))
    assert [row["step"] for row in resumed] == [1, 2]


# A live run: it holds its directory after checkpoint 1, as a run still writing would.
_LIVE_RUN = """
import sys, time
from pathlib import Path
from transformers import TrainerCallback
from eapo.config import load_config
from eapo.train import run

class HoldAfterCheckpoint(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 1:
            Path(sys.argv[3]).write_text("saved")
            time.sleep(600)

run(load_config(sys.argv[1], sys.argv[4:]), sys.argv[2], callbacks=[HoldAfterCheckpoint()])
"""


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 240.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.2)


def test_a_live_run_refuses_a_second_launch_and_its_killed_lock_does_not_block_resume(tmp_path):
    run_dir, marker = tmp_path / "run", tmp_path / "saved"
    overrides = [*FAST, "train.save_steps=1", "train.max_steps=2"]
    live = subprocess.Popen(
        [sys.executable, "-c", _LIVE_RUN, str(TINY), str(run_dir), str(marker), *overrides],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(marker, live)
        holder = json.loads((run_dir / LOCK_FILE).read_text())
        assert (holder["pid"], holder["command"]) == (live.pid, "eapo train")
        before = sorted(path.name for path in run_dir.iterdir())
        for resume in (True, False):
            with pytest.raises(RunError) as refused:
                run(load_config(TINY, overrides), run_dir, resume=resume)
            if resume:  # (without --resume the existing run is refused first)
                assert f"is being written by process {live.pid} (eapo train, since " in str(refused.value)
                assert f"kill {live.pid}" in str(refused.value)
        assert sorted(path.name for path in run_dir.iterdir()) == before  # the refused launch wrote nothing
    finally:
        live.kill()  # SIGKILL: no cleanup, the lock file stays behind
        live.wait()
    assert json.loads((run_dir / LOCK_FILE).read_text())["pid"] == live.pid  # stale
    resumed = read_metrics(run(load_config(TINY, overrides), run_dir, resume=True))
    assert [row["step"] for row in resumed] == [1, 2]
    assert not (run_dir / LOCK_FILE).exists()


_HOLD_LOCK = """
import sys, time
from eapo.run_dir import DirectoryLock
DirectoryLock(sys.argv[1], "eapo eval").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_evaluation_into_a_directory_being_written_is_refused(tmp_path):
    from eapo.evaluation import EvalError, EvalSettings, run_eval

    out = tmp_path / "eval"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(EvalError, match=rf"{out} is being written by process {holder.pid} \(eapo eval"):
            run_eval(
                EvalSettings(data="demo", split="dev", limit=1, k=1, scorers=("rouge_l",)),
                model="tiny",
                output_dir=out,
            )
        assert [path.name for path in out.iterdir()] == [LOCK_FILE]
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_exclusive_and_released(tmp_path):
    from eapo.run_dir import DirectoryBusyError, DirectoryLock

    first = DirectoryLock(tmp_path / "d", "first").acquire()
    with pytest.raises(DirectoryBusyError) as busy:
        DirectoryLock(tmp_path / "d", "second").acquire()  # another open file description: flock refuses
    assert busy.value.pid == os.getpid()
    first.release()
    assert not (tmp_path / "d" / LOCK_FILE).exists()
    with DirectoryLock(tmp_path / "d", "third") as third:
        assert third.held and json.loads((tmp_path / "d" / LOCK_FILE).read_text())["command"] == "third"


def _disk_full_under(monkeypatch, owner, name: str, part: str) -> list[str]:
    """Make ``owner.name`` (a writer taking the destination path first) fail with ENOSPC for paths
    containing ``part``, as a full disk would; returns the paths it refused."""
    import errno

    original = getattr(owner, name)
    refused: list[str] = []

    def writer(obj, destination, *args, **kwargs):
        if part in str(destination):
            refused.append(str(destination))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(destination))
        return original(obj, destination, *args, **kwargs)

    monkeypatch.setattr(owner, name, writer)
    return refused


def test_a_full_disk_during_a_checkpoint_or_final_keeps_the_last_complete_checkpoint(tmp_path):
    """torch.save (optimizer, scheduler, RNG state) fails inside checkpoint-2, then safetensors fails
    inside final/: each error names the path and the cause, nothing half-written stays, and --resume
    continues from the last complete checkpoint. save_total_limit=1: the rotation must not delete
    checkpoint-1 for a checkpoint-2 that never completed."""
    import torch
    import transformers.modeling_utils

    run_dir = tmp_path / "run"
    overrides = ["train.save_steps=1", "train.max_steps=2", "train.save_total_limit=1"]
    with pytest.MonkeyPatch.context() as patch:
        refused = _disk_full_under(patch, torch, "save", "checkpoint-2")
        with pytest.raises(RunError) as raised:
            run(tiny(*overrides), run_dir)
    message = str(raised.value)
    assert (
        refused
        and f"writing checkpoint {run_dir / 'checkpoint-2'} failed: No space left on device" in message
    )
    assert refused[0] in message  # the file the write was refused for
    assert "continues from checkpoint-1" in message
    assert [path.name for path in complete_checkpoints(run_dir)] == ["checkpoint-1"]
    assert not (run_dir / "checkpoint-2").exists()

    with pytest.MonkeyPatch.context() as patch:
        refused = _disk_full_under(patch, transformers.modeling_utils, "safe_save_file", ".final.tmp")
        with pytest.raises(RunError) as raised:
            run(tiny(*overrides), run_dir, resume=True)
    message = str(raised.value)
    assert refused and f"writing the final model into {run_dir / '.final.tmp'}" in message
    assert "No space left on device" in message and refused[0] in message
    assert "continues from checkpoint-2" in message
    assert not (run_dir / "final").exists() and not (run_dir / ".final.tmp").exists()
    assert [path.name for path in complete_checkpoints(run_dir)] == ["checkpoint-2"]  # rotated once complete

    rows = read_metrics(run(tiny(*overrides), run_dir, resume=True))
    assert [row["step"] for row in rows] == [1, 2]
    assert (run_dir / "final" / "config.json").exists()


def test_resume_drops_a_checkpoint_left_without_its_marker(tmp_path):
    """A checkpoint killed mid-write (no eapo_state.json) is never resumed from, and is removed."""
    from eapo.config import dump_config
    from eapo.core import STATE_FILE
    from eapo.run_dir import remove_incomplete_checkpoints
    from eapo.train import _inspect_run_dir

    config = tiny("train.save_steps=1")
    run_dir = tmp_path / "run"
    (run_dir / "checkpoint-1").mkdir(parents=True)
    (run_dir / "checkpoint-1" / STATE_FILE).write_text("{}")
    (run_dir / "config.yaml").write_text(dump_config(config))
    torn = run_dir / "checkpoint-7"
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"half")
    assert _inspect_run_dir(run_dir, config, resume=True).name == "checkpoint-1"
    assert remove_incomplete_checkpoints(run_dir) == [torn] and not torn.exists()
    assert (run_dir / "checkpoint-1").exists()


# Each process of a 2-process gloo group runs these blocks through fail_together, failing where the
# case says (argv: the file store, the rank), and prints what each block raised on it.
_FAIL_TOGETHER = """
import errno, json, os, sys
import torch.distributed as dist
from eapo.run_dir import fail_together

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=int(sys.argv[2]), world_size=2)
rank = dist.get_rank()
outcomes = {}
for case, failing in {"none": [], "0": [0], "1": [1], "both": [0, 1]}.items():
    try:
        with fail_together(f"writing {case}.json"):
            if rank in failing:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{case}-{rank}.json")
        outcomes[case] = None
    except Exception as error:
        outcomes[case] = f"{type(error).__name__}: {error}"
print(json.dumps(outcomes), flush=True)
dist.destroy_process_group()
"""


def test_fail_together_ends_every_process_when_one_fails(tmp_path):
    """A block one process fails: that process raises its own error, unchanged; the other raises
    ProcessFailedError naming the process, what it was doing and its error (of several, the first).
    One process (no process group): the error passes through as it was raised."""
    from eapo.run_dir import fail_together

    refused = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "summary.json")
    with pytest.raises(OSError) as raised, fail_together("writing summary.json"):
        raise refused
    assert raised.value is refused

    store = tmp_path / "store"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _FAIL_TOGETHER, str(store), str(rank)],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    results = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=120)
        finally:
            process.kill()
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    full = "OSError: [Errno 28] No space left on device"
    assert results == [
        {
            "none": None,
            "0": f"{full}: '0-0.json'",
            "1": "ProcessFailedError: process 1 of 2 failed writing 1.json: "
            f"{full}: '1-1.json'; process 0 stops too",
            "both": f"{full}: 'both-0.json'",
        },
        {
            "none": None,
            "0": "ProcessFailedError: process 0 of 2 failed writing 0.json: "
            f"{full}: '0-0.json'; process 1 stops too",
            "1": f"{full}: '1-1.json'",
            "both": f"{full}: 'both-1.json'",
        },
    ]
