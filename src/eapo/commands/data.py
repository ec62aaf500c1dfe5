"""``eapo data ...``: dataset tools. Other modules add commands to :data:`data_app`.

Defined here: ``eapo data list``, ``eapo data preview NAME`` and ``eapo data stats NAME``.
"""

from __future__ import annotations

import statistics
from typing import Any

import typer

data_app = typer.Typer(help="Dataset tools: inspect loaders, export to other engines.", no_args_is_help=True)

_PATH = typer.Option(
    None, "--path", "-p", help="A file or directory (default: $EAPO_DATA_DIR/<name> for cmd/rjua/medquad)."
)
_OPTIONS = typer.Option(
    None,
    "--option",
    "-o",
    help="Loader option KEY=VALUE, repeatable (e.g. -o question_field=ask -o encoding=gb18030 -o skip_bad_rows=true).",
)


def _parse_options(pairs: list[str] | None) -> dict[str, Any]:
    import yaml

    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        options[key.strip()] = yaml.safe_load(value) if value.strip() else value
    return options


def _load(name: str, path: str | None, split: str, options: dict[str, Any]) -> Any:
    from eapo.data import DataError, load

    try:
        return load(name, path, split=split, **options)
    except DataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


@data_app.command("list")
def list_datasets() -> None:
    """List the dataset loaders and the prompt templates."""
    from eapo.data import CHAT_PROMPTS, LOADERS, PROMPTS, data_dir

    typer.echo("loaders:")
    for name, info in LOADERS.items():
        typer.echo(
            f"  {name:<8} {info.description} (prompt: {info.prompt}; dev_fraction {info.dev_fraction})"
        )
    typer.echo("prompts: " + ", ".join([*PROMPTS, *(f"{name} (chat)" for name in CHAT_PROMPTS)]))
    typer.echo(f"EAPO_DATA_DIR: {data_dir() or '(not set)'}")


@data_app.command("preview")
def preview(
    name: str = typer.Argument(
        ..., help="Loader: cmd, rjua, medquad, jsonl, csv, parquet, demo, hf:<dataset>."
    ),
    path: str | None = _PATH,
    split: str = typer.Option("all", help="all, train, dev, test, a fraction (0.9) or a range (0.9:1.0)."),
    n: int = typer.Option(3, "--n", min=1, help="How many records to show."),
    prompt: str | None = typer.Option(None, help="Prompt name or template file (default: the loader's)."),
    tokenizer: str | None = typer.Option(
        None, help="A local tokenizer directory: render through its chat template (default: plain messages)."
    ),
    max_prompt_tokens: int | None = typer.Option(None, help="Truncate questions to fit (needs --tokenizer)."),
    option: list[str] | None = _OPTIONS,
) -> None:
    """Print the first N records of a split as rendered prompts with their references."""
    from eapo.data import DataError, build_messages, default_prompt_for, render_prompts

    records = _load(name, path, split, {**_parse_options(option), "limit": n})
    try:
        prompt = prompt or default_prompt_for(name)
        if tokenizer:
            from transformers import AutoTokenizer

            rendered = render_prompts(
                records, AutoTokenizer.from_pretrained(tokenizer), prompt, max_prompt_tokens=max_prompt_tokens
            )
        else:
            rendered = [
                "\n\n".join(
                    m["content"] if len(messages) == 1 else f"[{m['role']}] {m['content']}" for m in messages
                )
                for messages in (build_messages(record, prompt) for record in records)
            ]
    except DataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    for record, text in zip(records, rendered, strict=True):
        typer.echo(f"=== {record.id} ===")
        typer.echo(f"--- prompt ({prompt}) ---\n{text}")
        typer.echo(f"--- reference ---\n{record.reference}")
        if record.metadata:
            shown = {k: (v if len(str(v)) <= 80 else str(v)[:77] + "...") for k, v in record.metadata.items()}
            typer.echo(f"--- metadata ---\n{shown}")
    typer.echo(f"({len(records)} shown from {', '.join(records.files)})")


def _length_row(label: str, values: list[int]) -> str:
    if not values:
        return f"  {label:<10} {'-':>8} {'-':>8} {'-':>8}"
    ordered = sorted(values)
    p95 = ordered[max(0, -(-95 * len(ordered) // 100) - 1)]  # nearest rank
    return f"  {label:<10} {statistics.median(ordered):>8g} {p95:>8} {ordered[-1]:>8}"


@data_app.command("stats")
def stats(
    name: str = typer.Argument(
        ..., help="Loader: cmd, rjua, medquad, jsonl, csv, parquet, demo, hf:<dataset>."
    ),
    path: str | None = _PATH,
    option: list[str] | None = _OPTIONS,
) -> None:
    """Rows per split and character lengths of questions and references."""
    from eapo.data import LOADERS, DataError, load

    options = _parse_options(option)
    everything = _load(name, path, "all", options)
    typer.echo(f"{name}: {len(everything)} rows in {', '.join(everything.files)}")
    if everything.skipped:
        typer.echo(f"skipped {len(everything.skipped)} bad rows, first: {everything.skipped[0]}")
    for split in ("train", "dev", "test"):
        try:
            count = len(load(name, path, split=split, **options))
        except DataError:
            held_out = LOADERS[name.split(":")[0]].held_out if split == "test" else ""
            typer.echo(f"  {split:<5} -  (absent{': ' + held_out if held_out else ''})")
            continue
        typer.echo(f"  {split:<5} {count}")
    typer.echo(f"  {'chars':<10} {'median':>8} {'p95':>8} {'max':>8}")
    typer.echo(_length_row("question", [len(r.question) for r in everything]))
    typer.echo(_length_row("reference", [len(r.reference) for r in everything]))


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
