"""``eapo judge serve``: a local LLM judge — vLLM's OpenAI-compatible server on a model, in the foreground."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import typer

judge_app = typer.Typer(
    name="judge",
    help="A local LLM judge: vLLM's OpenAI-compatible server (reward.judge.* points at it).",
    no_args_is_help=True,
)


@judge_app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    model: str = typer.Option(
        "smollm2-135m-instruct",
        "--model",
        "-m",
        help="The judge model: smollm2-135m-instruct (embedded, offline), a model directory or a hub id.",
    ),
    served_model_name: str = typer.Option(
        "judge", "--served-model-name", help="The name requests use (reward.judge.model)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8011, "--port", help="Port to listen on (0: a free one)."),
    kv_cache_gib: float = typer.Option(1.0, "--kv-cache-gib", help="KV cache size on a CPU, GiB."),
    max_model_len: int = typer.Option(4096, "--max-model-len", help="Longest prompt + answer, in tokens."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (float32 on a CPU), float32, bfloat16, float16."),
    api_key_env: str = typer.Option(
        None,
        "--api-key-env",
        help="NAME of an environment variable whose value the server requires as its API key (default: none).",
    ),
    startup_timeout: float = typer.Option(
        600.0, "--startup-timeout", help="Seconds to wait for the server to answer."
    ),
    log_file: Path = typer.Option(
        None, "--log-file", help="Write vLLM's output there (default: this terminal)."
    ),
) -> None:
    """Start vLLM's OpenAI-compatible server on MODEL, wait until it answers, print the reward.judge.*
    settings that point at it, and serve until Ctrl-C or SIGTERM, then stop it cleanly.

    Arguments after `--` go to vLLM's api_server unchanged (e.g. `-- --max-num-seqs 64`).
    """
    from eapo.runtime.vllm_server import VLLMServer, VLLMServerError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = VLLMServer(
            model,
            served_model_name=served_model_name,
            host=host,
            port=port,
            dtype=dtype,
            kv_cache_gib=kv_cache_gib,
            max_model_len=max_model_len,
            api_key_env=api_key_env,
            extra_args=list(ctx.args),
            log_path=log_file,
        )
    except (ValueError, FileNotFoundError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None

    stopping: list[int] = []

    def request_stop(signum: int, frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        start = time.monotonic()
        try:
            server.start(timeout=startup_timeout)
        except (VLLMServerError, FileNotFoundError) as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(1) from None
        key = api_key_env if api_key_env else "null"
        typer.echo(
            f"judge ready at {server.base_url} (model {served_model_name!r}, vLLM pid {server.pid}) after "
            f"{time.monotonic() - start:.0f} s\n"
            f"  use: reward.judge.base_url={server.base_url} reward.judge.model={served_model_name} "
            f"reward.judge.api_key_env={key}\n"
            f"  stop: Ctrl-C (or SIGTERM to pid {_own_pid()})",
        )
        while not stopping:
            if not server.running():
                code = server.process.returncode if server.process is not None else None
                typer.echo(f"error: vLLM's server (pid {server.pid}) exited with code {code}", err=True)
                raise typer.Exit(1)
            time.sleep(0.5)
    finally:
        code = server.stop()
    typer.echo(f"judge stopped (vLLM exit code {code})")


def _own_pid() -> int:
    import os

    return os.getpid()


def register(app: typer.Typer) -> None:
    app.add_typer(judge_app, name="judge")
