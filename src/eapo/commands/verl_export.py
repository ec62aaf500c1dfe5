"""``eapo data export-verl``: write a dataset in verl's RL parquet format (no verl needed).

Example (the paper's RJUA run; ``examples/verl/run_eapo_qwen3_8b_rjua.sh`` reads these files)::

    eapo data export-verl rjua --out data/verl/rjua            # train.parquet, dev.parquet

Columns and their meaning: :mod:`eapo.engines.verl.parquet`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from eapo.commands.data import _OPTIONS, _PATH, _load, _parse_options, data_app


def export_verl(
    name: str = typer.Argument(
        ..., help="Loader: cmd, rjua, medquad, jsonl, csv, parquet, demo, hf:<dataset>."
    ),
    out: Path = typer.Option(..., "--out", help="Output folder; one <split>.parquet per split."),
    path: str | None = _PATH,
    split: list[str] = typer.Option(
        ["train", "dev"], "--split", help="Split to export, repeatable: train, dev, test, all, 0.9, 0.9:1.0."
    ),
    prompt: str | None = typer.Option(None, help="Prompt name or template file (default: the loader's)."),
    data_source: str | None = typer.Option(None, help="The data_source column (default: eapo/<name>)."),
    limit: int | None = typer.Option(None, min=1, help="Keep the first N rows of each split."),
    option: list[str] | None = _OPTIONS,
) -> None:
    """Write verl parquet files (prompt, reward_model.ground_truth, extra_info...) for RLHFDataset."""
    from eapo.data import DataError, default_prompt_for
    from eapo.engines.verl.parquet import verl_rows, write_verl_parquet

    options = _parse_options(option)
    if limit is not None:
        options["limit"] = limit
    try:
        prompt = prompt or default_prompt_for(name)
    except DataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    source = data_source or f"eapo/{name}"
    for split_name in split:
        records = _load(name, path, split_name, options)
        try:
            rows = verl_rows(records, prompt=prompt, data_source=source, split=split_name)
        except DataError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
        file_stem = split_name.replace(":", "-").replace("/", "-")
        written = write_verl_parquet(rows, out / f"{file_stem}.parquet")
        typer.echo(f"{split_name}: {len(rows)} rows -> {written} (prompt {prompt}, data_source {source})")


def register(app: typer.Typer) -> None:
    """Add ``export-verl`` to ``eapo data`` (``app`` is unused: the command lives on :data:`data_app`)."""
    data_app.command("export-verl")(export_verl)
