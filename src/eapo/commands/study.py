"""``eapo study``: train a study config's configurations, evaluate them, and judge its claims file's claims."""

from __future__ import annotations

import dataclasses
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
    OVERRIDES,
    REPORT_ONLY,
    SAMPLES_PER_PROMPT,
    SEEDS,
    SWEEP_DIR,
    config_option,
    given,
    seed_list,
    with_engine,
    with_scorer_settings,
)


@with_scorer_settings
def study_command(
    overrides: list[str] = OVERRIDES,
    config: Path = config_option("study"),
    output_dir: Path = SWEEP_DIR,
    seeds: str = SEEDS,
    jobs: int = JOBS,
    k: int = SAMPLES_PER_PROMPT,
    eval_limit: int = EVAL_LIMIT,
    eval_split: str = EVAL_SPLIT,
    eval_temperature: float = EVAL_TEMPERATURE,
    eval_max_new_tokens: int = EVAL_MAX_NEW_TOKENS,
    eval_batch_size: int = EVAL_BATCH_SIZE,
    backend: str = BACKEND,
    scorer_settings: dict[str, str] | None = None,
    engine: str = ENGINE,
    report_only: bool = REPORT_ONLY,
    claims_only: bool = typer.Option(
        False,
        "--claims-only",
        help="Judge the claims again from the finished runs, by the claims file (study.claims) as it is now, "
        "and rewrite claims.md and claims.json only (no run, table or figure); the study's run record in "
        "them is kept.",
    ),
) -> None:
    """The config's study.methods (with study.grids) from the same base and seed(s) — or its study.runs
    (labelled runs: sensitivity points, entropy-control comparators, per-run seeds): the comparison table,
    the sensitivity table, the dynamics figure and claims.md (each claim of its claims file, study.claims:
    held / did not hold / within noise).

    --config is a study config: a training config with a study: section. Built on `eapo sweep`:
    finished runs are skipped on rerun, a failed run is reported and the others go on.
    """
    import logging

    from eapo.study import read_study_config, rejudge_study, run_study
    from eapo.sweep import SweepError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings, _ = read_study_config(config)
        changes = given(
            seeds=seed_list(seeds),
            jobs=jobs,
            k=k,
            eval_limit=eval_limit,
            eval_split=eval_split,
            eval_temperature=eval_temperature,
            eval_max_new_tokens=eval_max_new_tokens,
            eval_batch_size=eval_batch_size,
            backend=backend,
        )
        if scorer_settings:  # each given one replaces the study config's
            changes["scorer_settings"] = {**settings.scorer_settings, **scorer_settings}
        settings = dataclasses.replace(settings, **changes)
        if claims_only:
            if report_only:
                raise SweepError(
                    "--claims-only and --report-only: give one (--claims-only runs nothing either)"
                )
            rejudge_study(config, output_dir, settings=settings.validate(), echo=typer.echo)
            typer.echo((output_dir / "claims.md").read_text(encoding="utf-8"))
            return
        report = run_study(
            config,
            output_dir,
            settings=settings.validate("study (with the command-line flags)"),
            overrides=with_engine(overrides, engine),
            echo=typer.echo,
            report_only=report_only,
        )
    except SweepError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo("")
    typer.echo((report.output_dir / "comparison.md").read_text(encoding="utf-8"))
    typer.echo((report.output_dir / "claims.md").read_text(encoding="utf-8"))
    if report.sweep.failures:
        typer.echo(
            f"{len(report.sweep.failures)} run(s) failed: {', '.join(report.sweep.failures)}", err=True
        )
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("study")(study_command)
