"""``eapo train``: one EAPO (or baseline) training run into a run directory."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import typer

from eapo.commands.options import ENGINE, OVERRIDES, config_option, with_engine


def quiet_third_party() -> None:
    """Keep the console to our progress bar and log: no per-file weight bars or deprecation chatter."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_warning()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    warnings.filterwarnings("ignore", message=".*pin_memory.*")


def start_time() -> str:
    """``YYYYmmdd-HHMMSS`` as the main process read it: under torchrun or accelerate launch every
    process must name the same default run directory, and they read their clocks seconds apart."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    from eapo.engines.trl.args import use_cpu

    stamp = [time.strftime("%Y%m%d-%H%M%S")]
    if PartialState(cpu=use_cpu()).num_processes > 1:
        broadcast_object_list(stamp, from_process=0)
    return stamp[0]


def train(
    overrides: list[str] = OVERRIDES,
    config: Path = config_option("demo"),
    output_dir: Path = typer.Option(
        None, "--output-dir", "-o", help="Run directory (default: runs/<method>-<time>)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --output-dir from its last checkpoint."
    ),
    engine: str = ENGINE,
) -> None:
    """Train with EAPO or a baseline (algorithm.method: a weighting scheme or an entropy-control preset) on
    TRL, or on verl (--engine verl)."""
    from eapo.config import ConfigError, load_config
    from eapo.run_dir import ProcessFailedError
    from eapo.train import RunError, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_third_party()
    try:
        cfg = load_config(config, with_engine(overrides, engine))
    except ConfigError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if output_dir is None:
        if resume:
            typer.echo("error: --resume needs --output-dir (the run to continue)", err=True)
            raise typer.Exit(2)
        output_dir = Path("runs") / f"{cfg.algorithm.method}-{start_time()}"
    try:
        run_dir = run(cfg, output_dir, resume=resume)
    except ConfigError as error:  # a setting that only this machine or launch refuses
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    # ProcessFailedError: another process of a multi-process run failed (the message names its error)
    except (RunError, ProcessFailedError, FileNotFoundError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"run directory: {run_dir}")


def register(app: typer.Typer) -> None:
    app.command("train")(train)
