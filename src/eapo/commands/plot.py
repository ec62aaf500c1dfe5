"""``eapo plot``: the training-dynamics figure of one or more runs (PNG and SVG)."""

from __future__ import annotations

from pathlib import Path

import typer


def plot_command(
    run_dirs: list[Path] = typer.Argument(
        ..., help="Run directories (each with metrics.jsonl and config.yaml)."
    ),
    output: Path = typer.Option(
        Path("dynamics.png"), "--output", "-o", help="FILE.png (FILE.svg is written beside it)."
    ),
    smoothing: float = typer.Option(
        None, "--smoothing", help="EMA weight of the bold lines in [0, 1) (default: by run length, 0 to 0.9)."
    ),
    title: str = typer.Option(None, "--title", help="Figure title."),
    labels: str = typer.Option(
        None, "--labels", help="Comma-separated legend labels, one per run (default: method and weights)."
    ),
) -> None:
    """Plot entropy, reward (and each component), response length, w+, KL and clip fraction against step."""
    from eapo.plot import plot_runs

    label_list = [label.strip() for label in labels.split(",")] if labels else None
    try:
        plot_runs(run_dirs, output, labels=label_list, smoothing=smoothing, title=title)
    except (ValueError, FileNotFoundError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    stem = output.with_suffix("") if output.suffix.lower() in (".png", ".svg") else output
    typer.echo(f"wrote {stem}.png and {stem}.svg")


def register(app: typer.Typer) -> None:
    app.command("plot")(plot_command)
