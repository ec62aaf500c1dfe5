"""Tables in the paper's layout (Markdown) and CSV, shared by ``eapo eval`` and ``eapo sweep``.

Columns follow the paper, three decimals. The columns, their titles and the tables come from the
reward components' registrations (:mod:`eapo.rewards.registry`; :func:`report_tables`): each table
carries an Avg (:func:`eapo.evaluation.metrics.avg_columns`): the "Performance comparison" layout
(:data:`MAIN_TABLE`) is Rouge-L, Reranker, RL@k, RR@k, Avg (``avg``); the LLM-as-a-Judge layout the
judge registers is Rouge-L, Reranker, LAAJ, Avg (``avg_laaj``), shown only when a judge ran. A column
whose scorer's label says ``stand-in`` (the offline bi-encoder instead of a cross-encoder reranker) is
marked ``†``. Under every table: each scorer's label, which part of the response each table scorer
read (``extract``), and how many samples each scorer could not score.

Beside the paper's layout, a strict table (ours) with the same columns, in which an answer that
failed the gate's check (the format check: no ``<advice>`` block) scores 0, and its Avg
``avg_strict`` (:func:`eapo.evaluation.metrics.strict_columns`); shown when the gate scorer ran.

Under the scores, the shape of the answers (:mod:`eapo.evaluation.answers`, ``results.json["answers"]``):
cut at the cap, text after the closing tag, distinct 4-grams — what no score sees
(:func:`answer_shape_table`, shared with ``eapo summary``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from eapo.evaluation.metrics import (
    MAIN_AVG,
    STRICT_AVG,
    avg_columns,
    metric_keys,
    scorer_columns,
    strict_avg_columns,
    strict_columns,
)
from eapo.rewards.registry import EvalTable, eval_columns, eval_scorers

__all__ = [
    "comparison_notes",
    "column_title",
    "format_value",
    "format_cell",
    "markdown_table",
    "scorer_notes",
    "stand_in_columns",
    "stand_in_mark",
    "reported_columns",
    "MAIN_TABLE",
    "report_tables",
    "shown_tables",
    "has_strict",
    "strict_note",
    "columns_note",
    "avg_note",
    "extract_modes",
    "extract_note",
    "unscored_note",
    "table_notes",
    "results_markdown",
    "results_csv",
    "csv_text",
    "answer_shape_table",
    "answer_shape_note",
    "ANSWER_SHAPE_TITLE",
]

#: The main table, with the paper's Avg (:data:`eapo.evaluation.metrics.MAIN_AVG`).
MAIN_TABLE = EvalTable(
    avg=MAIN_AVG,
    heading="## Performance comparison",
    lead="Performance comparison: ",
    source='the paper\'s "Performance comparison" table',
)
#: Where the strict Avg comes from (its footnote).
_STRICT_SOURCE = "the strict table; ours, not the paper's"
#: The heading of the answer-shape table in ``results.md``.
ANSWER_SHAPE_TITLE = "## Answer shape: what no score sees"


def _avgs() -> dict[str, tuple[str, ...]]:
    """Every Avg a table can carry, with its columns."""
    return {**avg_columns(), **strict_avg_columns()}


def _scorer_titles() -> dict[str, str]:
    """Evaluation scorer -> its title in tables and notes (its registration's)."""
    return {name: scorer.title for name, scorer in eval_scorers().items()}


def report_tables() -> list[EvalTable]:
    """Every table a report can show, in order: :data:`MAIN_TABLE`, the tables the scorers add
    (:class:`eapo.rewards.EvalTable`: the LLM-as-a-Judge layout), then the strict table (its heading
    from the gate's registration, :class:`eapo.rewards.StrictGate`) when a scorer gates."""
    tables = [MAIN_TABLE, *(table for scorer in eval_scorers().values() for table in scorer.tables)]
    gate = next((scorer.gate for scorer in eval_scorers().values() if scorer.gate is not None), None)
    if gate is not None:
        tables.append(EvalTable(avg=STRICT_AVG, heading=gate.heading, lead="", source=_STRICT_SOURCE))
    return tables


def shown_tables(results: Sequence[Mapping[str, Any]]) -> list[EvalTable]:
    """The tables ``results`` fill (:func:`report_tables`): the main table always; a scorer's table when
    one of the columns only it has was measured (LAAJ: a judge ran); the strict table when a strict
    column was measured (:func:`has_strict`: the format scorer ran)."""
    columns = avg_columns()
    shown = []
    for table in report_tables():
        if table.avg == MAIN_AVG:
            measured = True
        elif table.avg == STRICT_AVG:
            measured = has_strict(results)
        else:
            own = [key for key in columns[table.avg] if key not in columns[MAIN_AVG]]
            measured = any(r["metrics"].get(key) is not None for r in results for key in own)
        if measured:
            shown.append(table)
    return shown


def _beside_main(tables: Sequence[EvalTable]) -> bool:
    """Whether another of the paper's layouts is shown beside the main one (then the main one has a heading)."""
    return any(table.avg not in (MAIN_AVG, STRICT_AVG) for table in tables)


def column_title(key: str, k: int | None) -> str:
    """``rl_at_k`` -> ``RL@8``; ``rouge_l`` -> ``Rouge-L``; every Avg -> ``Avg``; ... (the column's
    registered title); a strict key has its plain column's title (the strict table's heading says it
    is strict)."""
    if key in strict_columns() or key in strict_avg_columns():
        key = key.removesuffix("_strict")
    if key in _avgs():
        return "Avg"
    for _, column in eval_columns():
        if column.key == key:
            return column.title.format(k=k if k else "k")
    raise KeyError(f"no evaluation column {key!r}; columns: {', '.join(c.key for _, c in eval_columns())}")


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
    """Metric keys whose scorer's label says it is a stand-in (the offline reranker fallback); a
    strict column is flagged with its plain column (:func:`stand_in_mark`)."""
    flagged = {name for name, label in labels.items() if "stand-in" in label}
    return {column.key for scorer, column in eval_columns() if scorer in flagged}


def stand_in_mark(key: str, flagged: set[str]) -> str:
    """``"†"`` when ``key`` (or, for a strict column, its plain column) is in ``flagged``, else ``""``."""
    return "†" if key.removesuffix("_strict") in flagged else ""


def scorer_notes(labels: Mapping[str, str]) -> list[str]:
    """One line per scorer: ``Reranker†: bi-encoder stand-in (...)``, then the footnote of each stand-in
    (its registration's ``stand_in_note``)."""
    titles = _scorer_titles()
    in_table = scorer_columns()
    scorers = eval_scorers()
    flagged = [name for name, label in labels.items() if "stand-in" in label and name in in_table]
    notes = []
    for name, label in labels.items():
        mark = "†" if name in flagged else ""
        notes.append(f"{titles.get(name, name)}{mark}: {label}")
    for note in dict.fromkeys(scorers[name].stand_in_note for name in flagged):
        if note:
            notes.append(note)
    return notes


def reported_columns(results: Sequence[Mapping[str, Any]], avg: str = "avg") -> list[str]:
    """The metric keys of one table layout: the columns of ``avg`` (an Avg of :func:`report_tables`) that
    some result has a value for, then ``avg`` itself (always shown, ``–`` when it could not be computed)."""
    shown = [key for key in _avgs()[avg] if any(r["metrics"].get(key) is not None for r in results)]
    return [*shown, avg]


def has_strict(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any of ``results`` has a strict column (the format scorer ran; then the strict table is shown)."""
    return any(r["metrics"].get(key) is not None for r in results for key in strict_columns())


def strict_note() -> str:
    """What the strict table's cells are (the gate's registration says, :class:`eapo.rewards.StrictGate`)."""
    return next((s.gate.note for s in eval_scorers().values() if s.gate is not None), "")


def columns_note(k: int | None) -> str:
    """``Rouge-L / Reranker / LAAJ: mean over the k samples; RL@8 / RR@8: best of the k samples.``:
    every registered column's title, by how a prompt's samples make it."""
    parts = []
    for per_prompt, what in (("mean", "mean over the k samples"), ("best", "best of the k samples")):
        titles = [column.title.format(k=k) for _, column in eval_columns() if column.per_prompt == per_prompt]
        if titles:
            parts.append(f"{' / '.join(titles)}: {what}")
    return "; ".join(parts) + "."


def avg_note(avg: str, k: int | None) -> str:
    """``Avg: mean of Rouge-L, Reranker, RL@8 and RR@8 (the paper's ... table); – when ...``."""
    titles = [column_title(key, k) for key in _avgs()[avg]]
    listed = ", ".join(titles[:-1]) + " and " + titles[-1] if len(titles) > 1 else "".join(titles)
    source = next(table.source for table in report_tables() if table.avg == avg)
    return f"Avg: mean of {listed} ({source}); – when one of them was not measured."


def extract_modes(results: Mapping[str, Any]) -> dict[str, str | None]:
    """``{scorer: extract mode}`` (``results["extract"]``) for the scorers of one evaluation that read part
    of the response (those that fill table columns); ``None`` where a scorer's mode is not recorded."""
    recorded = results.get("extract") or {}
    in_table = scorer_columns()
    return {name: recorded.get(name) for name in results.get("labels") or {} if name in in_table}


def _part(mode: str | None) -> str:
    if mode is None:
        return "not recorded"
    if mode == "whole":
        return "the whole response (extract=whole)"
    return f"the <{mode}> part (extract={mode})"


def extract_note(results: Sequence[Mapping[str, Any]]) -> str | None:
    """The footnote naming what each table scorer (Rouge-L, the reranker, LAAJ) scored in each response
    (``None`` if none ran)."""
    modes: dict[str, list[str | None]] = {}
    for result in results:
        for name, mode in extract_modes(result).items():
            modes.setdefault(name, []).append(mode)
    if not modes:
        return None
    parts = []
    titles = _scorer_titles()
    for name in scorer_columns():
        if name not in modes:
            continue
        distinct = list(dict.fromkeys(modes[name]))
        if len(distinct) == 1:
            parts.append(f"{titles[name]}: {_part(distinct[0])}")
        else:
            counts = ", ".join(f"{_part(mode)} in {modes[name].count(mode)}" for mode in distinct)
            parts.append(f"{titles[name]}: MIXED — {counts} evaluations (not comparable)")
    return "Scored text: " + "; ".join(parts) + "."


def unscored_note(results: Sequence[Mapping[str, Any]]) -> str | None:
    """The footnote with each scorer's count of samples it could not score (``None`` if not recorded):
    ``Rouge-L 0/320, LAAJ 3/320`` — unscored / samples of the evaluations that ran that scorer."""
    recorded = [r for r in results if isinstance(r.get("unscored"), Mapping)]
    if not recorded:
        return None
    unscored: dict[str, int] = {}
    samples: dict[str, int] = {}
    for result in recorded:
        for name, count in result["unscored"].items():
            unscored[name] = unscored.get(name, 0) + int(count)
            samples[name] = samples.get(name, 0) + int(result.get("n_samples") or 0)
    titles = _scorer_titles()
    counts = ", ".join(
        f"{titles.get(name, name)} {count}/{samples[name]}" for name, count in unscored.items()
    )
    scope = f" (over {len(recorded)} evaluations)" if len(recorded) > 1 else ""
    return f"Samples a scorer could not score (None/NaN, left out of its means){scope}: {counts or 'none'}."


def comparison_notes(
    results: Sequence[Mapping[str, Any]], labels: Mapping[str, str], *, k: int | None
) -> list[str]:
    """The lines under a comparison table: what each column averages, the Avg of each shown table
    (:func:`shown_tables`), then every :func:`table_notes` bullet (``eapo eval``'s results.md and
    ``eapo sweep``'s comparison.md)."""
    tables = shown_tables(results)
    lines = [columns_note(k)]
    for table in tables:
        if table.avg == STRICT_AVG:
            lines += ["", strict_note()]
        else:
            lead = table.lead if table.avg != MAIN_AVG or _beside_main(tables) else ""
            lines += ["", lead + avg_note(table.avg, k)]
    return [*lines, "", *(f"- {note}" for note in table_notes(results, labels))]


def table_notes(results: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> list[str]:
    """The footnotes every table prints: scorer labels (with the † note), scored text, unscored counts."""
    notes = scorer_notes(labels)
    for note in (extract_note(results), unscored_note(results)):
        if note is not None:
            notes.append(note)
    return notes


def _results_table(results: Mapping[str, Any], avg: str) -> str:
    k = results["k"]
    columns = reported_columns([results], avg)
    flagged = stand_in_columns(results.get("labels", {}))
    header = ["Model"] + [column_title(key, k) + stand_in_mark(key, flagged) for key in columns]
    row = [str(results.get("display_name") or results["model"])]
    row += [format_cell(results["metrics"].get(key), results["ci95"].get(key)) for key in columns]
    return markdown_table(header, [row])


def _shape_tag(shapes: Sequence[Mapping[str, Any]]) -> str:
    """The closing tag the shapes were measured at (``</advice>``), or ``the closing tag`` when they differ."""
    tags = {shape.get("close_tag") for shape in shapes}
    return str(tags.pop()) if len(tags) == 1 else "the closing tag"


def answer_shape_table(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One row per ``(name, results.json["answers"])``.

    Columns: answers, the shares cut at the cap, without the closing tag, with text after it and that
    wrote on after it (more than ``wrote_on_chars`` characters), the mean characters after it, the mean
    share of an answer's characters after it, and the distinct word n-gram ratio.
    """
    shapes = [shape for _, shape in rows]
    tag = _shape_tag(shapes) if shapes else "</advice>"
    ngram = shapes[0].get("ngram", 4) if shapes else 4
    wrote_on = shapes[0].get("wrote_on_chars", 20) if shapes else 20
    header = [
        "Model",
        "Answers",
        "Cut at the cap",
        f"No `{tag}`",
        f"Text after `{tag}`",
        f"Wrote on (> {wrote_on} chars)",
        "Chars after it",
        "Share of chars after it",
        f"Distinct {ngram}-grams",
    ]
    table = []
    for name, shape in rows:
        keys = ("cut_at_cap", "no_close_tag", "text_after_close", "wrote_on")
        table.append(
            [
                name,
                str(shape.get("n")),
                *(format_value(shape.get(key), 2) for key in keys),
                format_value(shape.get("chars_after_close"), 1),
                format_value(shape.get("share_after_close"), 2),
                format_value(shape.get("distinct_ngrams"), 2),
            ]
        )
    return markdown_table(header, table)


def answer_shape_note(shapes: Sequence[Mapping[str, Any]]) -> str:
    """What the answer-shape columns are (:mod:`eapo.evaluation.answers`)."""
    tag = _shape_tag(shapes) if shapes else "</advice>"
    splits = {shape.get("split", "first") for shape in shapes} or {"first"}
    where = splits.pop() if len(splits) == 1 else "first or last"
    return (
        f"Answer shape (shares of the answers): Cut at the cap: ended at max_new_tokens. Text after `{tag}`: "
        f"non-whitespace text after the {where} `{tag}`, which no score reads (the scorers read the "
        "first block); wrote on: more characters after it than the column says. Chars "
        f"after it: the mean count (0 without `{tag}`); share: of each answer's characters. Distinct "
        "n-grams: unique word n-grams over all, per answer, averaged; low when answers repeat themselves."
    )


def results_markdown(results: Mapping[str, Any]) -> str:
    """``results.md``: one evaluation in the paper's layouts, with 95% CIs and the scorers used.

    The tables of :func:`shown_tables`: the "Performance comparison" table (Avg = ``avg``), then, when a
    judge ran, the LLM-as-a-Judge table (Avg = ``avg_laaj``), then, when the format scorer ran, the
    strict table (Avg = ``avg_strict``); under them the answers' shape (``results["answers"]``).
    """
    k = results["k"]
    settings = results.get("settings", {})
    tables = shown_tables([results])
    lines = [
        f"# Evaluation of {results['model']} on {results['data']}",
        "",
        f"k = {k} samples per prompt, {results['n_prompts']} prompts, temperature {settings.get('temperature')}, "
        f"top_p {settings.get('top_p')}, max_new_tokens {settings.get('max_new_tokens')}. "
        "Cells: value [95% bootstrap CI over prompts].",
        "",
    ]
    for table in tables:
        if table.avg != MAIN_AVG or _beside_main(tables):
            lines += [table.heading, ""]
        lines += [_results_table(results, table.avg)]
    lines += comparison_notes([results], results.get("labels", {}), k=k)
    shape = results["answers"]
    name = str(results.get("display_name") or results["model"])
    lines += ["", ANSWER_SHAPE_TITLE, "", answer_shape_table([(name, shape)]), answer_shape_note([shape])]
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
    """``results.csv``: one row — model, data, k, n_prompts, each metric with its CI bounds, then
    each scorer's count of unscored samples (``unscored_<scorer>``)."""
    header: list[str] = ["model", "data", "k", "n_prompts"]
    row: list[Any] = [results["model"], results["data"], results["k"], results["n_prompts"]]
    for key in metric_keys():
        ci = results["ci95"].get(key)
        header += [key, f"{key}_ci_low", f"{key}_ci_high"]
        row += [results["metrics"].get(key), ci[0] if ci else None, ci[1] if ci else None]
    for name, count in (results.get("unscored") or {}).items():
        header.append(f"unscored_{name}")
        row.append(count)
    return csv_text(header, [row])
