"""``eapo sweep``: train and evaluate a grid of methods and weights; write the paper's tables and figure."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from eapo.commands.options import (
    BACKEND,
    ENGINE,
    EVAL_BATCH_SIZE,
    EVAL_LIMIT,
    EVAL_MAX_NEW_TOKENS,
    EVAL_SPLIT,
    EVAL_TEMPERATURE,
    JOBS,
    JUDGE_API_KEY_ENV,
    JUDGE_BASE_URL,
    JUDGE_MODEL,
    NO_JUDGE,
    OVERRIDES,
    REPORT_ONLY,
    SAMPLES_PER_PROMPT,
    SCORERS,
    SEEDS,
    SWEEP_DIR,
    config_option,
    given,
    judge_fields,
    seed_list,
    with_engine,
    with_scorer_settings,
)


@with_scorer_settings
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
    seeds: str = SEEDS,
    side_by_side: list[Path] = typer.Option(
        None,
        "--side-by-side",
        metavar="DIR",
        help="Another sweep directory (e.g. the same grid on CMD) shown next to this one in the "
        "sensitivity table, as in the paper (repeatable).",
    ),
    output_dir: Path = SWEEP_DIR,
    k: int = SAMPLES_PER_PROMPT,
    eval_limit: int = EVAL_LIMIT,
    eval_split: str = EVAL_SPLIT,
    eval_temperature: float = EVAL_TEMPERATURE,
    eval_max_new_tokens: int = EVAL_MAX_NEW_TOKENS,
    eval_batch_size: int = EVAL_BATCH_SIZE,
    backend: str = BACKEND,
    scorers: str = SCORERS,
    scorer_settings: dict[str, str] | None = None,
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
    jobs: int = JOBS,
    report_only: bool = REPORT_ONLY,
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
    eval_options = EvalSettings(
        **given(
            k=k,
            limit=eval_limit,
            split=eval_split,
            temperature=eval_temperature,
            max_new_tokens=eval_max_new_tokens,
            batch_size=eval_batch_size,
            backend=backend,
            scorers=scorers,
        ),
        scorer_settings=scorer_settings,
        **judge_fields(judge_base_url, judge_model, judge_api_key_env, no_judge),
    )
    runner = SubprocessRunner(launcher=[*shlex.split(launcher)] if launcher else None)
    try:
        report = run_sweep(
            config,
            output_dir,
            methods=[m.strip() for m in methods.split(",") if m.strip()],
            grids=grid or [],
            seeds=seed_list(seeds),
            overrides=with_engine(overrides, engine),
            eval_options=eval_options,
            include_base=base,
            runner=runner,
            echo=typer.echo,
            side_by_side=side_by_side or [],
            jobs=jobs or 1,
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
