"""``eapo train``: one EAPO (or baseline) training run into a run directory."""

from __future__ import annotations

import logging
import time
from importlib import resources
from pathlib import Path

import typer


def packaged_config(name: str) -> Path:
    """Path of a preset shipped in the package (``demo``, ``tiny``, ``paper_rjua``, ``paper_cmd``)."""
    path = Path(str(resources.files("eapo") / "configs" / f"{name}.yaml"))
    if not path.exists():
        raise FileNotFoundError(f"no packaged preset {name!r} ({path})")
    return path


def config_path(config: Path | None) -> Path:
    """``--config``: a YAML file, or the name of a packaged preset (``tiny``, ``demo``, ``paper_rjua``, ...)
    where no such file exists, so an installed eapo runs its presets from any directory; none: ``demo``."""
    if config is None:
        return packaged_config("demo")
    if not config.exists() and config.parent == Path(".") and config.suffix in ("", ".yaml"):
        try:
            return packaged_config(config.stem)
        except FileNotFoundError:
            pass  # load_config names the missing file
    return config


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
    overrides: list[str] = typer.Argument(
        None, help="key=value overrides, e.g. algorithm.method=psr train.max_steps=3"
    ),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML config, or a packaged preset's name (tiny, demo, paper_rjua, ...); default: the demo preset.",
    ),
    output_dir: Path = typer.Option(
        None, "--output-dir", "-o", help="Run directory (default: runs/<method>-<time>)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --output-dir from its last checkpoint."
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        help="trl or verl (default: the config's engine, trl): the same config run by verl's main_ppo.",
    ),
) -> None:
    """Train with EAPO or a baseline (grpo, psr, nsr, w_reinforce) on TRL, or on verl (--engine verl)."""
    from eapo.config import ConfigError, load_config
    from eapo.run_dir import ProcessFailedError
    from eapo.train import RunError, run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_third_party()
    try:
        cfg = load_config(
            config_path(config), [*(overrides or []), *([f"engine={engine}"] if engine else [])]
        )
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
