"""eapo.runtime.vllm_server.VLLMServer without vLLM: the command it builds, its key handling, and its lifecycle
(start, wait until /v1/models answers, stop the process group, report an early death) on a stand-in
server process. The real server is started by tests/conftest.py for the tests marked vllm."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from eapo.runtime.vllm_server import VLLMServer, VLLMServerError, free_port


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path / "model"


def test_the_cpu_command_bounds_the_kv_cache_and_runs_eager_in_float32(model_dir: Path) -> None:
    server = VLLMServer(
        str(model_dir),
        port=8123,
        device="cpu",
        kv_cache_gib=0.5,
        max_model_len=2048,
        extra_args=["--seed", "1"],
    )
    argv = server.command()
    assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--model"] == str(model_dir) and pairs["--served-model-name"] == "judge"
    assert (pairs["--host"], pairs["--port"], pairs["--max-model-len"]) == ("127.0.0.1", "8123", "2048")
    assert json.loads(argv[argv.index("--structured-outputs-config") + 1]) == {
        "backend": "xgrammar",
        "disable_any_whitespace": True,
    }
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(512 * 1024**2)
    assert "--enforce-eager" in argv and "--no-enable-chunked-prefill" in argv
    assert argv[-2:] == ["--seed", "1"]
    on_gpu = VLLMServer(str(model_dir), device="cuda").command()
    assert not {"--enforce-eager", "--kv-cache-memory-bytes", "--dtype"} & set(on_gpu)
    assert server.base_url == "http://127.0.0.1:8123/v1"


def test_the_key_goes_to_the_server_in_its_environment_never_its_command_line(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = VLLMServer(str(model_dir), device="cpu", api_key_env="EAPO_TEST_SERVE_KEY")
    monkeypatch.delenv("EAPO_TEST_SERVE_KEY", raising=False)
    with pytest.raises(VLLMServerError, match="EAPO_TEST_SERVE_KEY"):
        server._environment()
    monkeypatch.setenv("EAPO_TEST_SERVE_KEY", "sk-serve-secret")
    assert server._environment()["VLLM_API_KEY"] == "sk-serve-secret"
    assert "sk-serve-secret" not in " ".join(server.command()) and "sk-serve-secret" not in repr(server)
    monkeypatch.setenv("VLLM_API_KEY", "inherited")
    assert "VLLM_API_KEY" not in VLLMServer(str(model_dir), device="cpu")._environment()


class StandIn(VLLMServer):
    """The lifecycle around another command: the project's test judge server, or a process that dies."""

    def __init__(self, script: list[str], **kwargs) -> None:
        super().__init__("tiny", **kwargs)
        self.script = script

    def command(self) -> list[str]:
        return [sys.executable, *self.script]


def test_start_waits_for_the_models_endpoint_and_stop_ends_the_process_group(tmp_path: Path) -> None:
    port = free_port()
    server = StandIn(
        ["-m", "eapo.testing.judge_server", "--port", str(port), "--model", "judge"],
        port=port,
        log_path=tmp_path / "server.log",
    )
    with server:
        assert server.running() and server.models() == ["judge"]
        pid = server.pid
        with pytest.raises(VLLMServerError, match="already taken"):
            StandIn(["-c", "pass"], port=port).start(timeout=5)
    assert not server.running() and server.models() == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert server.stop() is None  # stopping twice is harmless


def test_a_server_that_dies_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    server = StandIn(
        ["-c", "import sys; print('cannot load the model: boom'); sys.exit(3)"],
        port=free_port(),
        log_path=tmp_path / "server.log",
    )
    with pytest.raises(VLLMServerError, match=r"exited with code 3 before answering(.|\n)*boom"):
        server.start(timeout=60)
    assert not server.running()


def test_kill_is_a_sigkill_of_the_group(tmp_path: Path) -> None:
    port = free_port()
    server = StandIn(["-m", "eapo.testing.judge_server", "--port", str(port), "--model", "judge"], port=port)
    server.start(timeout=60)
    process = server.process
    server.kill()
    assert process.returncode == -signal.SIGKILL and not server.running()
    server.restart(timeout=60)  # same port, new process
    try:
        assert server.models() == ["judge"] and server.process is not process
    finally:
        server.stop()
