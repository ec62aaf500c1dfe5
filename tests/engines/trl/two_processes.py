"""Launching ``eapo train`` on 2 CPU processes (gloo) for tests/engines/trl/test_distributed.py (DDP, torchrun)
and tests/engines/trl/test_sharded.py (FSDP2, ``accelerate launch`` with configs/accelerate/fsdp.yaml).

Each process runs tests/engines/trl/dist_worker.py, which runs the ``eapo train`` command and dumps what it
computed (see there).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"
#: accelerate launch configurations of the sharded runs: FSDP2, and DeepSpeed ZeRO-3 (when installed)
SHARDED_CONFIGS = {
    "fsdp": ROOT / "configs" / "accelerate" / "fsdp.yaml",
    "zero3": ROOT / "configs" / "accelerate" / "zero3.yaml",
}
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
TIMEOUT_S = 240  # one launch takes 20-60 s on a loaded 2-core CPU; a hung collective must not hang the suite


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launcher(kind: str) -> list[str]:
    """``torchrun`` (DDP, as the CPU line of docs/guide/backends.md) or ``accelerate launch`` with a sharded configuration
    (``fsdp``, ``zero3``) on NPROC processes, in float32 (zero3.yaml's bf16 is for GPUs)."""
    if kind == "torchrun":  # --standalone: torchrun picks a free port itself
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={NPROC}"]
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(SHARDED_CONFIGS[kind]),
        "--num_processes",
        str(NPROC),
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(free_port()),
    ]


def environment(cwd: Path) -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",  # the CPU path (gloo) also on a machine with GPUs
        "EAPO_CACHE_DIR": str(cwd / "cache"),  # a fresh cache: process 0 must build the tiny model first
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def command(
    kind: str,
    dump_dir: Path,
    args: tuple[str, ...],
    worker_options: tuple[str, ...],
    overrides: tuple[str, ...],
) -> list[str]:
    return [
        *launcher(kind),
        str(WORKER),
        str(dump_dir),
        *worker_options,
        "--",
        "--config",
        str(TINY),
        *args,
        *OVERRIDES,
        *overrides,  # after OVERRIDES: the later value of a key wins
    ]


def launch(
    cwd: Path,
    dump_dir: Path,
    *args: str,
    kind: str = "torchrun",
    worker_options: tuple[str, ...] = (),
    overrides: tuple[str, ...] = (),
) -> tuple[int, str]:
    """``eapo train --config configs/tiny.yaml ARGS`` on NPROC processes (in ``cwd``); returns the
    exit code and the output. A launch that runs past TIMEOUT_S (a hung collective) fails the test."""
    proc = subprocess.Popen(
        command(kind, dump_dir, args, worker_options, overrides),
        cwd=cwd,
        env=environment(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return finish(proc, TIMEOUT_S)


def start(
    cwd: Path,
    dump_dir: Path,
    *args: str,
    kind: str,
    worker_options: tuple[str, ...] = (),
    overrides: tuple[str, ...] = (),
) -> subprocess.Popen:
    """As :func:`launch`, without waiting (output to ``cwd/launch.log``)."""
    log = open(cwd / "launch.log", "wb")  # noqa: SIM115 - the launch holds it; finish() reads it back
    proc = subprocess.Popen(
        command(kind, dump_dir, args, worker_options, overrides),
        cwd=cwd,
        env=environment(cwd),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log_path = cwd / "launch.log"  # type: ignore[attr-defined]
    return proc


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """Wait for a launch; past ``timeout`` stop it and its workers and fail the test."""
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        output, _ = proc.communicate()
        pytest.fail(
            f"2-process run exceeded {timeout} s:\n{(output or b'').decode(errors='replace')[-3000:]}"
        )
    if output is None and hasattr(proc, "log_path"):  # started by start(): the output went to a file
        output = proc.log_path.read_bytes()
    return proc.returncode, (output or b"").decode(errors="replace")


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL a launch: its workers, then the launcher's process group. torch's elastic agent (torchrun,
    accelerate launch) starts each worker in a session of its own, so killing the launcher's group alone
    would leave them running, holding the output pipe open (the test would then wait forever)."""
    for pid in children(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # the worker leads its own group: it and what it started
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[-1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until ``path`` exists while ``proc`` runs; fail the test otherwise."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the launch ended (exit code {proc.returncode}) before {path.name} appeared")
        if time.monotonic() > deadline:
            stop(proc)
            pytest.fail(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as ended
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(")")[-1].split()[0] == "Z")


def dumps(dump_dir: Path) -> list[dict]:
    return [json.loads((dump_dir / f"rank{rank}.json").read_text()) for rank in range(NPROC)]
