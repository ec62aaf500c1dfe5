"""``eapo summary``: what a finished run shows — reward first -> last third, H_0 -> last entropy,
the w+ range, and the evaluation table against the base model (the end of ``make demo``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def summary_command(
    run_dir: Path = typer.Argument(..., help="A run directory written by `eapo train`."),
    base: Path = typer.Option(
        None, "--base", help="The base model's evaluation directory (`eapo eval --config ... --output-dir`)."
    ),
    eval_dir: Path = typer.Option(
        None, "--eval", help="The trained model's evaluation directory (default RUN_DIR/eval, when present)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON instead of text."),
) -> None:
    """Summarise a run: reward over the first and last third of the steps, entropy, w+, evaluations."""
    from eapo.summary import render_summary, summarize_run

    try:
        summary = summarize_run(run_dir, eval_dir=eval_dir, base_eval_dir=base)
    except (FileNotFoundError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(summary, indent=2) if as_json else render_summary(summary))


def register(app: typer.Typer) -> None:
    app.command("summary")(summary_command)
