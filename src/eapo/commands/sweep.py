"""``eapo sweep``: train and evaluate a grid of methods and weights; write the paper's tables and figure."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from eapo.commands.options import (
    ENGINE,
    JUDGE_API_KEY_ENV,
    JUDGE_BASE_URL,
    JUDGE_MODEL,
    NO_JUDGE,
    OVERRIDES,
    RERANKER_BACKEND,
    SCORERS,
    backend_option,
    config_option,
    judge_fields,
    with_engine,
)


def sweep_command(
    overrides: list[str] = OVERRIDES,
    config: Path = config_option("demo"),
    methods: str = typer.Option(
        "grpo,psr,nsr,w_reinforce,eapo",
        "--methods",
        help="Comma-separated algorithm.method values: any registered weighting scheme or entropy-control preset "
        "(eapo.core.methods(); plugins' too). Default: the paper's five.",
    ),
    grid: list[str] = typer.Option(
        None,
        "--grid",
        help="KEY=V1,V2,... (repeatable). An unscoped KEY varies each scheme whose registration lists it in "
        "its grid (eapo.core.Scheme.grid: the paper's tables vary w_reinforce's w_pos/w_neg and eapo's "
        "w0/w_min/w_max); METHOD.KEY=... targets one method. Axes of one method multiply.",
    ),
    seeds: str = typer.Option(
        None, "--seeds", help="Comma-separated train.seed values (default: the config's)."
    ),
    side_by_side: list[Path] = typer.Option(
        None,
        "--side-by-side",
        metavar="DIR",
        help="Another sweep directory (e.g. the same grid on CMD) shown next to this one in the "
        "sensitivity table, as in the paper (repeatable).",
    ),
    output_dir: Path = typer.Option(
        ..., "--output-dir", "-o", help="Sweep directory (runs/, tables, figure)."
    ),
    k: int = typer.Option(8, "--k", help="Samples per prompt in evaluation (RL@k, RR@k)."),
    eval_limit: int = typer.Option(None, "--eval-limit", help="Evaluate at most this many prompts."),
    eval_split: str = typer.Option("dev", "--eval-split", help="Split to evaluate on."),
    eval_temperature: float = typer.Option(
        None, "--eval-temperature", help="Sampling temperature (default: the run's)."
    ),
    eval_max_new_tokens: int = typer.Option(
        None, "--eval-max-new-tokens", help="Response cap (default: the run's)."
    ),
    eval_batch_size: int = typer.Option(None, "--eval-batch-size", help="Prompts per generation call."),
    backend: str = backend_option(),
    scorers: str = SCORERS,
    reranker_backend: str = RERANKER_BACKEND,
    judge_base_url: str = JUDGE_BASE_URL,
    judge_model: str = JUDGE_MODEL,
    judge_api_key_env: str = JUDGE_API_KEY_ENV,
    no_judge: bool = NO_JUDGE,
    engine: str = ENGINE,
    base: bool = typer.Option(
        True, "--base/--no-base", help="Also evaluate the base model (first table row)."
    ),
    launcher: str = typer.Option(
        None,
        "--launcher",
        help="Run training with this launcher, e.g. 'accelerate launch --num_processes 4'.",
    ),
    jobs: int = typer.Option(
        1,
        "--jobs",
        "-j",
        min=1,
        help="Configurations trained/evaluated at the same time (on one GPU they share it; a small model "
        "leaves it mostly idle, so 3-5 jobs finish sooner).",
    ),
    report_only: bool = typer.Option(
        False,
        "--report-only",
        help="Train and evaluate nothing: write the tables and figure from the runs evaluated so far "
        "(e.g. while the sweep runs in another process).",
    ),
) -> None:
    """Train every configuration, evaluate each, write comparison/sensitivity tables and dynamics figure.

    Every run is `eapo train` on --config with the overrides, then the grid's; every evaluation is
    `eapo eval` with the evaluation and judge options below.

    Finished runs are skipped on rerun; a failed run is reported and the others continue.
    """
    import logging

    from eapo.evaluation import EvalSettings
    from eapo.sweep import SubprocessRunner, SweepError, run_sweep

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()] if seeds else None
    except ValueError:
        typer.echo(f"error: --seeds {seeds!r} must be comma-separated integers", err=True)
        raise typer.Exit(2) from None
    eval_options = EvalSettings(
        k=k,
        limit=eval_limit,
        split=eval_split,
        temperature=eval_temperature,
        max_new_tokens=eval_max_new_tokens,
        batch_size=eval_batch_size,
        backend=backend,
        scorers=scorers,
        reranker_backend=reranker_backend,
        **judge_fields(judge_base_url, judge_model, judge_api_key_env, no_judge),
    )
    runner = SubprocessRunner(launcher=[*shlex.split(launcher)] if launcher else None)
    try:
        report = run_sweep(
            config,
            output_dir,
            methods=[m.strip() for m in methods.split(",") if m.strip()],
            grids=grid or [],
            seeds=seed_list,
            overrides=with_engine(overrides, engine),
            eval_options=eval_options,
            include_base=base,
            runner=runner,
            echo=typer.echo,
            side_by_side=side_by_side or [],
            jobs=jobs,
            report_only=report_only,
        )
    except SweepError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo("")
    typer.echo((report.output_dir / "comparison.md").read_text(encoding="utf-8"))
    typer.echo((report.output_dir / "sensitivity.md").read_text(encoding="utf-8"))
    if report.failures:
        typer.echo(f"{len(report.failures)} run(s) failed: {', '.join(report.failures)}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_command)
