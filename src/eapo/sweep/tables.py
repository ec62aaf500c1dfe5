"""The sweep's tables: the finished evaluations grouped by configuration (seeds pooled), the paper's
"Performance comparison", "Sensitivity" and positive/negative weight tables, and the files they are written to
(with the overlaid training-dynamics figure)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eapo.core import WEIGHT_SETTINGS, WEIGHTING_SCHEMES, method_scheme
from eapo.evaluation.labels import METHOD_NAMES, METHOD_ORDER, effective_weights, method_label
from eapo.evaluation.metrics import MAIN_AVG, avg_columns, metric_keys
from eapo.evaluation.report import (
    column_title,
    comparison_notes,
    csv_text,
    format_value,
    markdown_table,
    reported_columns,
    shown_tables,
    stand_in_columns,
    stand_in_mark,
    table_notes,
)
from eapo.rewards.registry import eval_columns
from eapo.run_dir import atomic_write_text
from eapo.sweep.manifest import MANIFEST, read_json
from eapo.sweep.plan import GRID_KEYS, SweepError


def paper_weight_columns() -> tuple[str, ...]:
    """The columns of the paper's Sensitivity and fixed-weight (w+/w−) tables: the main table's columns
    of a prompt's mean score (Rouge-L and Reranker), as the components register them."""
    means = {column.key for _, column in eval_columns() if column.per_prompt == "mean"}
    return tuple(key for key in avg_columns()[MAIN_AVG] if key in means)


#: The fixed-weight table's named rows, in the paper's order (W-REINFORCE follows in blocks).
FIXED_ROWS = ("psr", "nsr", "grpo")


def _symbol(key: str) -> str:
    """How the tables write a weight: its declared symbol (eapo.core.Setting.symbol)."""
    return WEIGHT_SETTINGS[key].shown_as if key in WEIGHT_SETTINGS else key


@dataclass
class Entry:
    """One configuration's evaluation(s) for the tables: one results dict per seed."""

    name: str
    method: str | None  # None: the base model
    label: str
    weights: dict[str, float]
    results: list[dict[str, Any]]
    runs: list[str] = field(default_factory=list)


def _sort_key(entry: Entry) -> tuple:
    if entry.method is None:
        return (-1, ())
    order = METHOD_ORDER.index(entry.method) if entry.method in METHOD_ORDER else len(METHOD_ORDER)
    return (order, tuple(sorted(entry.weights.items())))


def collect_entries(
    output_dir: Path, manifest: Mapping[str, Any], *, include_base: bool = True
) -> list[Entry]:
    """Group the finished evaluations of the manifest's runs by configuration (seeds pooled)."""
    grouped: dict[tuple, Entry] = {}
    seen: set[tuple] = set()
    for name, record in manifest.get("runs", {}).items():
        results = read_json(output_dir / "runs" / name / "eval" / "results.json")
        if results is None:
            continue
        method = record["method"]
        weights = effective_weights(method, record.get("weights") or {})
        # A labelled run (a study's runs: entry) is its own row, whatever its method and weights.
        tag = record.get("tag")
        key = (
            method,
            tuple(sorted(weights.items())),
            tag,
            json.dumps(record.get("extra") or {}, sort_keys=True),
        )
        # The same configuration and seed reached twice (e.g. `w_reinforce` with its default w+ and
        # a grid point w_pos=0.1 in a later sweep) is one run, not two seeds.
        if (key, record.get("seed")) in seen:
            continue
        seen.add((key, record.get("seed")))
        label = tag if tag is not None else method_label(method, record.get("weights"))
        entry = grouped.setdefault(key, Entry(name, method, label, weights, []))
        entry.results.append(results)
        entry.runs.append(name)
    entries = sorted(grouped.values(), key=_sort_key)
    base = read_json(output_dir / "base" / "results.json") if include_base else None
    if base is not None:
        entries.insert(0, Entry("base", None, "Base model (before training)", {}, [base], ["base"]))
    return entries


def _summary(entry: Entry, key: str) -> tuple[float | None, list[float] | None, float | None]:
    """(value, ci, sd): one seed -> its value and CI; several -> mean and standard deviation over seeds."""
    values = [r["metrics"].get(key) for r in entry.results if r["metrics"].get(key) is not None]
    if not values:
        return None, None, None
    if len(entry.results) == 1:
        return values[0], entry.results[0]["ci95"].get(key), None
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, None, sd


def _cell(value: float | None, ci: list[float] | None, sd: float | None, bold: bool = False) -> str:
    if value is None:
        return "–"
    text = f"**{value:.3f}**" if bold else f"{value:.3f}"
    if sd is not None:
        return f"{text} ± {sd:.3f}"
    if ci is not None:
        return f"{text} [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def _all_results(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    return [r for e in entries for r in e.results]


def _common_k(results: Sequence[Mapping[str, Any]]) -> int | None:
    ks = {r.get("k") for r in results}
    return ks.pop() if len(ks) == 1 else None


def _labels(results: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each scorer's label; distinct labels across the evaluations are all listed (so a column that
    mixes the stand-in with the cross-encoder is still marked †)."""
    labels: dict[str, list[str]] = {}
    for r in results:
        for name, label in r.get("labels", {}).items():
            if label not in labels.setdefault(name, []):
                labels[name].append(label)
    return {name: " | ".join(found) for name, found in labels.items()}


def _comparison_rows(entries: Sequence[Entry], columns: Sequence[str]) -> list[list[str]]:
    """One row per entry; the best trained value per column is bold."""
    trained = [e for e in entries if e.method is not None]
    best = {}
    for column in columns:
        values = [_summary(e, column)[0] for e in trained]
        values = [v for v in values if v is not None]
        best[column] = max(values) if values else None
    rows = []
    for entry in entries:
        row = [entry.label + (f" ({len(entry.results)} seeds)" if len(entry.results) > 1 else "")]
        for column in columns:
            value, ci, sd = _summary(entry, column)
            is_best = (
                entry.method is not None and value is not None and len(trained) > 1 and value == best[column]
            )
            row.append(_cell(value, ci, sd, bold=is_best))
        rows.append(row)
    return rows


def comparison_table(
    entries: Sequence[Entry], *, failures: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The paper's "Performance comparison" table (Rouge-L, Reranker, RL@k, RR@k, Avg), when a judge
    ran its LLM-as-a-Judge layout (Rouge-L, Reranker, LAAJ, Avg over those three), and when the format
    scorer ran the strict table (the same columns, an answer without its ``<advice>`` block scoring 0;
    ``avg_strict``): ``(markdown, csv)``. The best trained value per column is bold."""
    results = _all_results(entries)
    k = _common_k(results)
    labels = _labels(results)
    flagged = stand_in_columns(labels)
    n_prompts = sorted({r.get("n_prompts") for r in results})
    first = results[0] if results else {}
    lines = [
        "# Performance comparison",
        "",
        f"Data: {first.get('data', '?')}; {', '.join(map(str, n_prompts))} prompts; k = {k} samples per prompt. "
        "Cells: value [95% bootstrap CI over prompts]; with several seeds: mean ± sd over seeds. "
        "Bold: best trained configuration.",
        "",
    ]
    for table in shown_tables(results):
        avg, title = table.avg, ("" if table.avg == MAIN_AVG else table.heading)
        columns = reported_columns(results, avg)
        header = ["Methods"] + [column_title(c, k) + stand_in_mark(c, flagged) for c in columns]
        if title:
            lines += [title, ""]
        rows = _comparison_rows(entries, columns)
        lines.append(markdown_table(header, rows) if rows else "(no finished evaluation yet)\n")
    lines += comparison_notes(results, labels, k=k)
    if failures:
        lines += ["", "Failed runs (not in the table):"] + [
            f"- {name}: {message.splitlines()[0]}" for name, message in failures.items()
        ]
    csv_header = ["row", "method", "label", *GRID_KEYS, "n_seeds", "runs"]
    keys = metric_keys()
    for column in keys:  # the CSV keeps every column (empty = not measured) for a stable schema
        csv_header += [column, f"{column}_ci_low", f"{column}_ci_high", f"{column}_sd"]
    csv_rows = []
    for entry in entries:
        row: list[Any] = [
            entry.name if entry.method is None else entry.runs[0],
            entry.method or "base",
            entry.label,
        ]
        row += [entry.weights.get(key) for key in GRID_KEYS]
        row += [len(entry.results), ";".join(entry.runs)]
        for column in keys:
            value, ci, sd = _summary(entry, column)
            row += [value, ci[0] if ci else None, ci[1] if ci else None, sd]
        csv_rows.append(row)
    return "\n".join(lines) + "\n", csv_text(csv_header, csv_rows)


def sensitivity_blocks(entries: Sequence[Entry]) -> list[tuple[str, str, str, list[tuple[float, Entry]]]]:
    """``[(method, varied key, fixed description, [(value, entry), ...])]`` for every weight a method was
    run with at two or more values while its other weights were held fixed."""
    blocks = []
    by_method: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.method is not None:
            by_method.setdefault(entry.method, []).append(entry)
    for method in sorted(by_method, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 99):
        group = by_method[method]
        for key in GRID_KEYS:
            if key not in group[0].weights:
                continue
            by_rest: dict[tuple, list[tuple[float, Entry]]] = {}
            for entry in group:
                rest = tuple((k, v) for k, v in sorted(entry.weights.items()) if k != key and k in GRID_KEYS)
                by_rest.setdefault(rest, []).append((entry.weights[key], entry))
            for rest, members in by_rest.items():
                if len({value for value, _ in members}) < 2:
                    continue
                defaults = effective_weights(method)
                always = WEIGHTING_SCHEMES[method_scheme(method)].shown  # W-REINFORCE: w+ and w−
                shown = [(k, v) for k, v in rest if k in always or v != defaults.get(k)]
                fixed = ", ".join(f"{_symbol(k)}={v:g}" for k, v in shown)
                blocks.append((method, key, fixed, sorted(members, key=lambda item: item[0])))
    return blocks


def _data_label(entries: Sequence[Entry]) -> str:
    data = [r.get("data") for r in _all_results(entries) if r.get("data")]
    return str(data[0]) if data else "?"


def sensitivity_table(
    entries: Sequence[Entry] | Mapping[str, Sequence[Entry]], *, columns: Sequence[str] | None = None
) -> tuple[str, str]:
    """The paper's "Sensitivity" table: per method and varied weight, one row per value and
    ``Range (max−min)`` per metric, with Rouge-L and Reranker per dataset. ``(markdown, csv)``.

    Args:
        entries: one sweep's entries, or ``{dataset label: entries}`` for several datasets side by
            side (the paper puts RJUA and CMD next to each other).
        columns: the metric keys shown (default :func:`paper_weight_columns`, the paper's Rouge-L and
            Reranker; ``eapo study`` shows every metric and both Avgs); the CSV always has every metric.
    """
    paper_columns = paper_weight_columns()
    shown_columns = list(paper_columns if columns is None else columns)
    keys = metric_keys()
    datasets: dict[str, list[Entry]] = (
        {name: [e for e in group if e.method is not None] for name, group in entries.items()}
        if isinstance(entries, Mapping)
        else {_data_label(entries): [e for e in entries if e.method is not None]}
    )
    results = [r for group in datasets.values() for r in _all_results(group)]
    labels = _labels(results)
    flagged = {name: stand_in_columns(_labels(_all_results(group))) for name, group in datasets.items()}
    side_by_side = len(datasets) > 1
    # Blocks merged over datasets: (method, varied, fixed) -> {dataset: {value: entry}}.
    merged: dict[tuple[str, str, str], dict[str, dict[float, Entry]]] = {}
    for name, group in datasets.items():
        for method, key, fixed, members in sensitivity_blocks(group):
            merged.setdefault((method, key, fixed), {})[name] = dict(members)
    k = _common_k(results)
    columns = [(name, column) for name in datasets for column in shown_columns]
    header = ["Methods"] + [
        column_title(column, k)
        + (" (strict)" if column.endswith("_strict") else "")
        + stand_in_mark(column, flagged[name])
        + (f" ({name})" if side_by_side else "")
        for name, column in columns
    ]
    rows: list[list[str]] = []
    csv_rows: list[list[Any]] = []
    for (method, key, fixed), by_data in merged.items():
        title = f"*{METHOD_NAMES.get(method, method)}, {_symbol(key)} varied" + (
            f" ({fixed})*" if fixed else "*"
        )
        rows.append([title] + [""] * len(columns))
        values = sorted({value for members in by_data.values() for value in members})
        for value in values:
            row = [f"{_symbol(key)}={value:g}"]
            for name, column in columns:
                entry = by_data.get(name, {}).get(value)
                row.append(_cell(*_summary(entry, column)) if entry is not None else "–")
            rows.append(row)
            for name, members in by_data.items():
                if value in members:
                    summaries = [_summary(members[value], column)[0] for column in keys]
                    csv_rows.append([name, method, key, fixed, value, *summaries])
        ranges: dict[tuple[str, str], float | None] = {}
        for name in datasets:
            members = by_data.get(name, {})
            for column in keys:
                found = [_summary(entry, column)[0] for entry in members.values()]
                found = [v for v in found if v is not None]
                ranges[(name, column)] = max(found) - min(found) if len(found) >= 2 else None
            if members:
                csv_rows.append(
                    [name, method, key, fixed, "range"] + [ranges[(name, column)] for column in keys]
                )
        rows.append(["Range (max−min)"] + [format_value(ranges[(name, column)]) for name, column in columns])
    lines = ["# Sensitivity to the weights", ""]
    if rows:
        lines += [
            "Range = max − min over the values of the varied weight (the paper's Sensitivity table); "
            "a small range means the method is insensitive to that weight. Cells: value [95% CI] "
            "(or mean ± sd over seeds). Columns: "
            + (
                " and ".join(column_title(c, k) for c in paper_columns) + ", as in the paper"
                if tuple(shown_columns) == paper_columns
                else ", ".join(
                    column_title(c, k) + (" (strict)" if c.endswith("_strict") else "") for c in shown_columns
                )
                + " (strict: an answer without its <advice> block scores 0)"
            )
            + (f", for each of {', '.join(datasets)}" if side_by_side else f" (data: {next(iter(datasets))})")
            + "; sensitivity.csv has every metric.",
            "",
            markdown_table(header, rows),
        ]
        lines += [f"- {note}" for note in table_notes(results, labels)]
    else:
        lines.append(
            "No method was run with two or more values of one weight. For the paper's table pass e.g. "
            "`--methods w_reinforce,eapo --grid w_pos=0.05,0.1,0.2 --grid w0=0.05,0.1,0.2`."
        )
    csv_header = ["data", "method", "varied", "fixed", "value", *keys]
    return "\n".join(lines) + "\n", csv_text(csv_header, csv_rows)


def weight_ratio(w_pos: float, w_neg: float) -> float:
    """``w+/w−``: ``inf`` for w− = 0 < w+ (PSR), NaN when both are 0."""
    if w_neg == 0:
        return math.inf if w_pos > 0 else math.nan
    return w_pos / w_neg


def _ratio_text(ratio: float) -> str:
    if math.isnan(ratio):
        return "–"
    return "∞" if math.isinf(ratio) else f"{ratio:.4g}"


def fixed_weight_table(entries: Sequence[Entry]) -> tuple[str, str]:
    """The paper's "Performance under different positive/negative reward weight configurations":
    PSR, NSR and GRPO, then the W-REINFORCE runs in blocks — w− varied at a fixed w+ ("P/N ↓", the
    ratio falls down the block) and w+ varied at a fixed w− ("P/N ↑") — with columns w+, w−,
    w+/w−, Rouge-L and Reranker. ``(markdown, csv)``."""
    fixed = [e for e in entries if e.method is not None and set(e.weights) == {"w_pos", "w_neg"}]
    results = _all_results(fixed)
    labels = _labels(results)
    flagged = stand_in_columns(labels)
    columns = list(paper_weight_columns())
    header = ["Methods", "w+", "w−", "w+/w−"] + [
        column_title(c, None) + ("†" if c in flagged else "") for c in columns
    ]
    blocks: list[tuple[str, list[Entry]]] = []
    named = sorted(
        (e for e in fixed if e.method in FIXED_ROWS),
        key=lambda e: (FIXED_ROWS.index(e.method or ""), sorted(e.weights.items())),
    )
    if named:
        blocks.append(("", named))
    placed: set[int] = set()
    # The paper's order: w− varied (P/N ↓) before w+ varied (P/N ↑).
    weight_blocks = sorted(sensitivity_blocks(fixed), key=lambda block: block[1] != "w_neg")
    for method, key, held, members in weight_blocks:
        if method in FIXED_ROWS:
            continue  # a grid over PSR/NSR/GRPO weights is W-REINFORCE by another name; listed above
        direction = "P/N ↓" if key == "w_neg" else "P/N ↑"
        name = METHOD_NAMES.get(method, method)
        blocks.append((f"{name}, {direction} ({held}, {_symbol(key)} varied)", [e for _, e in members]))
        placed.update(id(e) for _, e in members)
    others = [e for e in fixed if e.method not in FIXED_ROWS and id(e) not in placed]
    if others:
        blocks.append(("Other fixed weights", others))
    rows: list[list[str]] = []
    csv_rows: list[list[Any]] = []
    for title, members in blocks:
        if title:
            rows.append([f"*{title}*"] + [""] * (len(header) - 1))
        for entry in members:
            w_pos, w_neg = entry.weights["w_pos"], entry.weights["w_neg"]
            ratio = weight_ratio(w_pos, w_neg)
            name = METHOD_NAMES.get(entry.method or "", entry.method or "")
            seeds = f" ({len(entry.results)} seeds)" if len(entry.results) > 1 else ""
            row = [name + seeds, f"{w_pos:g}", f"{w_neg:g}", _ratio_text(ratio)]
            row += [_cell(*_summary(entry, column)) for column in columns]
            rows.append(row)
            csv_rows.append(
                [title or "methods", entry.method, entry.label, w_pos, w_neg, ratio, len(entry.results)]
                + [";".join(entry.runs)]
                + [_summary(entry, column)[0] for column in metric_keys()]
            )
    lines = ["# Positive/negative weight configurations", ""]
    if rows:
        lines += [
            "Fixed weights w+ (positive samples) and w− (negative samples) and their ratio w+/w− (the "
            "paper's table of positive/negative reward weight configurations). Cells: value [95% CI] "
            "(or mean ± sd over seeds); fixed_weights.csv has every metric.",
            "",
            markdown_table(header, rows),
        ]
        lines += [f"- {note}" for note in table_notes(results, labels)]
    else:
        lines.append(
            "No fixed-weight method (GRPO, PSR, NSR, W-REINFORCE) was run. For the paper's table pass e.g. "
            "`--methods grpo,psr,nsr,w_reinforce --grid w_reinforce.w_pos=1 --grid w_neg=0.05,0.1,0.2,5`, "
            "then `--methods w_reinforce --grid w_pos=0.05,0.1,0.2,5` into the same --output-dir."
        )
    csv_header = ["block", "method", "label", "w_pos", "w_neg", "ratio", "n_seeds", "runs", *metric_keys()]
    return "\n".join(lines) + "\n", csv_text(csv_header, csv_rows)


def _side_by_side_entries(
    output_dir: Path, entries: Sequence[Entry], others: Sequence[str | os.PathLike]
) -> dict[str, list[Entry]]:
    """``{dataset label: entries}``: this sweep's, then each other sweep directory's."""
    datasets: dict[str, list[Entry]] = {_data_label(entries): list(entries)}
    for other in others:
        other = Path(other)
        manifest = read_json(other / MANIFEST)
        if manifest is None:
            raise SweepError(
                f"--side-by-side {other}: no readable {MANIFEST}; pass a directory written by `eapo sweep`"
            )
        group = collect_entries(other, manifest, include_base=False)
        name = _data_label(group)
        if name in datasets:
            name = f"{name} [{other.name}]"
        datasets[name] = group
    return datasets


def write_reports(
    output_dir: Path,
    manifest: Mapping[str, Any],
    *,
    include_base: bool = True,
    failures: Mapping[str, str] | None = None,
    side_by_side: Sequence[str | os.PathLike] = (),
) -> list[Path]:
    """Write comparison.{md,csv}, sensitivity.{md,csv}, fixed_weights.{md,csv} and dynamics.{png,svg};
    return the paths written. ``side_by_side``: other sweep directories (e.g. the same grid on
    another dataset) whose runs join this one's in the sensitivity table."""
    entries = collect_entries(output_dir, manifest, include_base=include_base)
    written = []
    tables = {
        "comparison": comparison_table(entries, failures=failures),
        "sensitivity": sensitivity_table(
            _side_by_side_entries(output_dir, entries, side_by_side) if side_by_side else entries
        ),
        "fixed_weights": fixed_weight_table(entries),
    }
    for stem, (markdown, table_csv) in tables.items():
        for name, text in ((f"{stem}.md", markdown), (f"{stem}.csv", table_csv)):
            atomic_write_text(output_dir / name, text)
            written.append(output_dir / name)
    # Run directories live at runs/<name> (the manifest's paths may be relative to another cwd).
    candidates = [output_dir / "runs" / name for name in manifest.get("runs", {})]
    run_dirs = [
        d for d in candidates if (d / "metrics.jsonl").exists() and (d / "metrics.jsonl").stat().st_size
    ]
    if run_dirs:
        from eapo.plot import plot_runs

        plot_runs(run_dirs, output_dir / "dynamics.png", title="Training dynamics")
        written += [output_dir / "dynamics.png", output_dir / "dynamics.svg"]
    return written
