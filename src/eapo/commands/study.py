"""``eapo study``: train a study config's configurations, evaluate them, and judge its claims file's claims."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from eapo.commands.options import ENGINE, OVERRIDES, backend_option, config_option, with_engine


def study_command(
    overrides: list[str] = OVERRIDES,
    config: Path = config_option("study"),
    output_dir: Path = typer.Option(
        ..., "--output-dir", "-o", help="Study directory (runs/, tables, claims.md)."
    ),
    seeds: str = typer.Option(None, "--seeds", help="Comma-separated training seeds (default: study.seeds)."),
    jobs: int = typer.Option(
        None, "--jobs", "-j", min=1, help="Runs at once on the GPU (default: study.jobs)."
    ),
    k: int = typer.Option(None, "--k", min=1, help="Samples per prompt in evaluation (default: study.k)."),
    eval_limit: int = typer.Option(
        None, "--eval-limit", min=1, help="Prompts evaluated (default: study.eval_limit)."
    ),
    eval_split: str = typer.Option(None, "--eval-split", help="Held-out split (default: study.eval_split)."),
    eval_max_new_tokens: int = typer.Option(
        None, "--eval-max-new-tokens", help="Response cap in evaluation (default: the run's)."
    ),
    eval_batch_size: int = typer.Option(None, "--eval-batch-size", help="Prompts per generation call."),
    backend: str = backend_option(None, shown="study.backend"),
    engine: str = ENGINE,
    report_only: bool = typer.Option(
        False,
        "--report-only",
        help="Train and evaluate nothing: write the tables, figure and claims from the runs finished so "
        "far (an interim report while the study runs in another process). A configuration counts once "
        "all its runs have finished; claims over the others are not measured.",
    ),
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
        changes = {
            "jobs": jobs,
            "k": k,
            "eval_limit": eval_limit,
            "eval_split": eval_split,
            "eval_max_new_tokens": eval_max_new_tokens,
            "eval_batch_size": eval_batch_size,
            "backend": backend,
        }
        if seeds is not None:
            try:
                changes["seeds"] = [int(s) for s in seeds.split(",") if s.strip()]
            except ValueError:
                raise SweepError(f"--seeds {seeds!r} must be comma-separated integers") from None
        settings = dataclasses.replace(settings, **{key: v for key, v in changes.items() if v is not None})
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
