"""Tables in the paper's layout (Markdown) and CSV, shared by ``eapo eval`` and ``eapo sweep``.

Columns follow the paper: Rouge-L, Reranker, RL@k, RR@k, (LAAJ), Avg, three decimals. A column
whose scorer was the offline bi-encoder stand-in instead of a cross-encoder reranker is marked
``†`` and the scorer's label is printed under the table, so a stand-in number is never read as
the paper's reranker.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from eapo.evaluation.metrics import COLUMNS, METRIC_KEYS

__all__ = [
    "column_title",
    "format_value",
    "format_cell",
    "markdown_table",
    "scorer_notes",
    "stand_in_columns",
    "reported_columns",
    "results_markdown",
    "results_csv",
    "csv_text",
]

_TITLES = {"rouge_l": "Rouge-L", "reranker": "Reranker", "laaj": "LAAJ", "avg": "Avg"}
_SCORER_OF = {
    "rouge_l": "rouge_l",
    "rl_at_k": "rouge_l",
    "reranker": "reranker",
    "rr_at_k": "reranker",
    "laaj": "laaj",
}


def column_title(key: str, k: int | None) -> str:
    """``rl_at_k`` -> ``RL@8``; ``rouge_l`` -> ``Rouge-L``; ..."""
    if key == "rl_at_k":
        return f"RL@{k}" if k else "RL@k"
    if key == "rr_at_k":
        return f"RR@{k}" if k else "RR@k"
    return _TITLES[key]


def format_value(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def format_cell(value: float | None, ci: Sequence[float] | None = None, digits: int = 3) -> str:
    """``0.312 [0.301, 0.323]`` (or just the value, or ``–`` for null)."""
    if value is None:
        return "–"
    if ci is None:
        return format_value(value, digits)
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, align: Sequence[str] | None = None
) -> str:
    """A GitHub-flavoured Markdown table; ``align`` holds ``"l"``/``"r"`` per column."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    rule = [":---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def stand_in_columns(labels: Mapping[str, str]) -> set[str]:
    """Metric keys whose scorer's label says it is a stand-in (the offline reranker fallback)."""
    flagged = {name for name, label in labels.items() if "stand-in" in label}
    return {key for key, scorer in _SCORER_OF.items() if scorer in flagged}


def scorer_notes(labels: Mapping[str, str]) -> list[str]:
    """One line per scorer: ``Reranker†: bi-encoder stand-in (...)``."""
    flagged = stand_in_columns(labels)
    names = {"rouge_l": "Rouge-L", "reranker": "Reranker", "laaj": "LAAJ", "format": "Format"}
    notes = []
    for name, label in labels.items():
        mark = "†" if name in flagged else ""
        notes.append(f"{names.get(name, name)}{mark}: {label}")
    if flagged:
        notes.append(
            "† scored with the offline bi-encoder stand-in (cosine similarity of sentence embeddings), "
            "not a cross-encoder reranker: not comparable with the paper's Reranker numbers."
        )
    return notes


def reported_columns(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The metric keys to show: every column some result has a value for, then ``avg``."""
    shown = [key for key in COLUMNS if any(r["metrics"].get(key) is not None for r in results)]
    return [*shown, "avg"]


def results_markdown(results: Mapping[str, Any]) -> str:
    """``results.md``: one evaluation in the paper's layout, with 95% CIs and the scorers used."""
    k = results["k"]
    columns = reported_columns([results])
    flagged = stand_in_columns(results.get("labels", {}))
    header = ["Model"] + [column_title(key, k) + ("†" if key in flagged else "") for key in columns]
    row = [str(results.get("display_name") or results["model"])]
    row += [format_cell(results["metrics"][key], results["ci95"][key]) for key in columns]
    settings = results.get("settings", {})
    avg_of = ", ".join(column_title(key, k) for key in results.get("avg_of", []))
    lines = [
        f"# Evaluation of {results['model']} on {results['data']}",
        "",
        f"k = {k} samples per prompt, {results['n_prompts']} prompts, temperature {settings.get('temperature')}, "
        f"top_p {settings.get('top_p')}, max_new_tokens {settings.get('max_new_tokens')}. "
        "Cells: value [95% bootstrap CI over prompts].",
        "",
        markdown_table(header, [row]),
        f"Rouge-L / Reranker / LAAJ: mean over the k samples; RL@{k} / RR@{k}: best of the k samples; "
        f"Avg: mean of {avg_of or 'no column'}.",
        "",
    ]
    lines += [f"- {note}" for note in scorer_notes(results.get("labels", {}))]
    extra = results.get("extra", {})
    if extra:
        lines += [
            "",
            "Also measured: " + ", ".join(f"{key} = {format_value(value)}" for key, value in extra.items()),
        ]
    return "\n".join(lines) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if value is None else value for value in row])
    return buffer.getvalue()


def results_csv(results: Mapping[str, Any]) -> str:
    """``results.csv``: one row — model, data, k, n_prompts, then each metric with its CI bounds."""
    header: list[str] = ["model", "data", "k", "n_prompts"]
    row: list[Any] = [results["model"], results["data"], results["k"], results["n_prompts"]]
    for key in METRIC_KEYS:
        ci = results["ci95"][key]
        header += [key, f"{key}_ci_low", f"{key}_ci_high"]
        row += [results["metrics"][key], ci[0] if ci else None, ci[1] if ci else None]
    return csv_text(header, [row])
