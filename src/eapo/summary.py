"""What a finished run shows, in a few lines: ``eapo summary RUN_DIR [--base BASE_EVAL_DIR]``.

``make demo`` ends with it. From ``metrics.jsonl`` it reads the reward (and each component) over the
first and the last third of the steps, the rollout entropy from ``H_0`` to the last step, the range
of ``w+``, the completion length and the fraction of completions cut at the length cap; from the
evaluation directories (``RUN_DIR/eval`` and, given, the base model's) it builds one table with the
base model's row above the trained model's. Beside the paper's (lenient) Avg the table shows the
strict Avg (``avg_strict``, :mod:`eapo.evaluation.metrics`: an answer without its ``<advice>`` block
scores 0) wherever the format scorer ran, so a model that learnt to drop the tags cannot pass for a
better one. Under it, the shape of each evaluation's answers (:mod:`eapo.evaluation.answers`: cut at the
cap, text after the closing tag, distinct 4-grams), so a model that learnt to close ``</advice>`` and
write on to the cap cannot pass unseen either: ``results.json["answers"]`` (a ``results.json`` without it,
from an older ``eapo eval``, is an error naming the file). Steps that reused an earlier generation
(``rollout/fresh: false``) carry that generation's values and are left out of the thirds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eapo.run_dir import CAP_SHARE_KEY, METRICS_FILE, cap_share, read_metrics

__all__ = [
    "first_last_thirds",
    "summarize_run",
    "render_summary",
    "eval_table",
    "read_answer_shape",
    "trend_keys",
]


def trend_keys() -> tuple[tuple[str, str], ...]:
    """``metrics.jsonl`` keys compared between the first and the last third, ``(label, key)``: the
    reward, each registered component's mean (:data:`eapo.rewards.REWARD_COMPONENTS`, indented under
    it), the length and the share cut at the cap."""
    from eapo.rewards import REWARD_COMPONENTS

    return (
        ("reward", "reward/mean"),
        *((f"  {c.name}", c.mean_key) for c in REWARD_COMPONENTS.values()),
        ("length (tokens)", "completion/mean_length"),
        # eapo.run_dir.cap_share: completions/stopped_by_cap (TRL's clipped_ratio counts a rollout that
        # ended at a stop string as clipped)
        ("truncated frac", CAP_SHARE_KEY),
    )


#: The columns of :func:`eval_table` beside the scorers: ``results.json["extra"]`` key -> title.
_SHAPE_TITLES = {"completion_tokens": "Tokens", "truncated_frac": "Truncated"}

#: Files of a run directory a reader should open, shown when they exist.
LOOK_AT = (
    ("metrics.jsonl", "one line per step"),
    ("dynamics.png", "entropy, reward, length and w+ against step"),
    ("final", "the trained model or LoRA adapter, with its model card (README.md)"),
)


def first_last_thirds(values: Sequence[float]) -> tuple[float, float, int]:
    """Means of the first and the last ``max(1, n // 3)`` values, and that count.

    ``[1, 2, 3, 4, 5, 6]`` -> ``(1.5, 5.5, 2)``; two values -> the first and the last.
    """
    if not values:
        raise ValueError("first_last_thirds needs at least one value")
    k = max(1, len(values) // 3)
    return sum(values[:k]) / k, sum(values[-k:]) / k, k


def _series(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    values = [row.get(key) for row in rows]
    return [
        float(v)
        for v in values
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]


def summarize_run(
    run_dir: str | Path, *, eval_dir: str | Path | None = None, base_eval_dir: str | Path | None = None
) -> dict[str, Any]:
    """Read ``RUN_DIR/metrics.jsonl`` (and the evaluations) into the plain dict :func:`render_summary` prints.

    ``eval_dir`` defaults to ``RUN_DIR/eval`` (skipped when absent); ``base_eval_dir`` is the base
    model's evaluation (``eapo eval --config ...``). A missing or empty ``metrics.jsonl`` is an error.
    """
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / METRICS_FILE} has no steps: did the run start?")
    for row in rows:
        cap_share(row, run_dir / METRICS_FILE)  # a run that did not log the cap's share is an error
    fresh = [row for row in rows if row.get("rollout/fresh", True) is not False]
    trends = {}
    for label, key in trend_keys():
        values = _series(fresh, key)
        if values:
            first, last, k = first_last_thirds(values)
            trends[key] = {"label": label, "first": first, "last": last, "k": k, "n": len(values)}
    entropies = _series(fresh, "entropy/rollout")
    h0 = _series(rows, "eapo/H0")
    w_pos = _series(rows, "eapo/w_pos")
    summary = dict(
        run_dir=str(run_dir),
        steps=int(rows[-1].get("step", len(rows))),
        trends=trends,
        entropy={
            "H0": h0[-1] if h0 else (entropies[0] if entropies else None),
            "last": entropies[-1] if entropies else None,
        },
        w_pos={"min": min(w_pos), "max": max(w_pos), "first": w_pos[0], "last": w_pos[-1]} if w_pos else None,
        runtime_s=_runtime(run_dir),
        look_at=[(name, what) for name, what in LOOK_AT if (run_dir / name).exists()],
    )
    evals = []
    dirs = []
    if base_eval_dir is not None:
        evals.append(("base", _read_results(Path(base_eval_dir))))
        dirs.append((Path(base_eval_dir), "the base model's evaluation (samples.jsonl: its answers)"))
    eval_dir = Path(eval_dir) if eval_dir is not None else run_dir / "eval"
    if eval_dir.exists() or eval_dir != run_dir / "eval":
        evals.append(("trained", _read_results(eval_dir)))
        dirs.append((eval_dir, "the trained model's evaluation (samples.jsonl: its answers)"))
    summary["evals"] = evals
    summary["answers"] = [
        (name, read_answer_shape(directory, results))
        for (name, results), (directory, _) in zip(evals, dirs, strict=True)
    ]
    for directory, what in dirs:
        shown = directory / "results.md"
        if shown.is_relative_to(run_dir):
            shown = shown.relative_to(run_dir)
        summary["look_at"].append((str(shown), what))
    return summary


def _runtime(run_dir: Path) -> float | None:
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["train_runtime_s"])
    except (ValueError, KeyError, TypeError):
        return None


def _read_results(eval_dir: Path) -> dict[str, Any]:
    path = eval_dir / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run `eapo eval ... --output-dir {eval_dir}` first")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    if "metrics" not in results:
        raise ValueError(f"{path} has no 'metrics': is it an `eapo eval` results file?")
    return results


def read_answer_shape(eval_dir: str | Path, results: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation's answer shape, ``results["answers"]`` (``results`` is ``eval_dir/results.json``); a
    ValueError naming the file when it has none (written by an older ``eapo eval``)."""
    shape = results.get("answers")
    if not isinstance(shape, Mapping):
        raise ValueError(
            f"{Path(eval_dir) / 'results.json'} has no 'answers' (written by an older eapo eval, before it "
            "recorded the answers' shape); evaluate again into a fresh --output-dir"
        )
    return dict(shape)


def eval_table(evals: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One Markdown table, a row per evaluation: the reported metric columns, the strict Avg beside
    the Avg (when the format scorer ran), then each scorer outside the table (the format reward), the
    mean completion length and the truncated fraction (``results.json`` ``extra``)."""
    from eapo.evaluation.report import (
        column_title,
        format_value,
        has_strict,
        markdown_table,
        reported_columns,
        stand_in_columns,
    )

    results = [r for _, r in evals]
    columns = reported_columns(results)
    strict = has_strict(results)
    k = results[0].get("k")
    flagged: set[str] = set()
    for r in results:
        flagged |= stand_in_columns(r.get("labels", {}))
    from eapo.rewards.registry import eval_scorers

    scorers = [name for name, scorer in eval_scorers().items() if not scorer.columns]
    extras = [key for key in (*scorers, *_SHAPE_TITLES) if any(key in r.get("extra", {}) for r in results)]
    titles = {**{name: scorer.title for name, scorer in eval_scorers().items()}, **_SHAPE_TITLES}
    header = ["Model"] + [column_title(key, k) + ("†" if key in flagged else "") for key in columns]
    header += ["Avg (strict)"] if strict else []
    header += [titles[key] for key in extras]
    rows = []
    for name, r in evals:
        row = [f"{name}: {r.get('display_name') or r.get('model')}"]
        row += [format_value(r["metrics"].get(key)) for key in columns]
        row += [format_value(r["metrics"].get("avg_strict"))] if strict else []
        row += [format_value(r["extra"].get(key), 1 if key == "completion_tokens" else 3) for key in extras]
        rows.append(row)
    return markdown_table(header, rows)


def render_summary(summary: Mapping[str, Any]) -> str:
    """The text ``eapo summary`` prints."""
    lines = [f"run directory: {summary['run_dir']}"]
    runtime = summary.get("runtime_s")
    took = f", training {runtime / 60:.1f} min" if runtime is not None else ""
    lines.append(f"  {summary['steps']} steps{took}")
    width = max((len(name) for name, _ in summary.get("look_at", [])), default=0)
    for name, what in summary.get("look_at", []):
        lines.append(f"  {name:<{width}}  {what}")
    trends = summary["trends"]
    if trends:
        any_trend = next(iter(trends.values()))
        k, n = any_trend["k"], any_trend["n"]
        lines.append("")
        lines.append(f"training, mean of the first {k} -> the last {k} of {n} steps:")
        for trend in trends.values():
            digits = 1 if trend["label"].startswith("length") else 3
            delta = trend["last"] - trend["first"]
            lines.append(
                f"  {trend['label']:<16} {trend['first']:.{digits}f} -> {trend['last']:.{digits}f}"
                f"  ({delta:+.{digits}f})"
            )
    entropy = summary["entropy"]
    if entropy["H0"] is not None and entropy["last"] is not None:
        lines.append(
            f"  {'entropy H_t':<16} H_0 = {entropy['H0']:.3f} -> {entropy['last']:.3f} (last step), nats/token"
        )
    w_pos = summary.get("w_pos")
    if w_pos:
        lines.append(
            f"  {'w+':<16} range [{w_pos['min']:.3f}, {w_pos['max']:.3f}]"
            f" (first {w_pos['first']:.3f}, last {w_pos['last']:.3f})"
        )
    evals = summary.get("evals") or []
    if evals:
        lines += ["", "evaluation: " + _eval_settings(evals[-1][1]), eval_table(evals).rstrip("\n")]
        header = lines[-1].splitlines()[0]
        lines += _table_notes(header, [results for _, results in evals])
        differing = [
            f"{name}: {_eval_settings(results)}"
            for name, results in evals[:-1]
            if _eval_settings(results) != _eval_settings(evals[-1][1])
        ]
        if differing:
            lines.append("warning: the rows were evaluated differently; " + "; ".join(differing))
    answers = summary.get("answers") or []
    if answers:
        from eapo.evaluation.report import answer_shape_note, answer_shape_table

        rows = [
            (f"{name}: {r.get('display_name') or r.get('model')}", shape)
            for (name, r), (_, shape) in zip(evals, answers, strict=True)
        ]
        lines += ["", "answer shape:", answer_shape_table(rows).rstrip("\n")]
        lines.append(answer_shape_note([shape for _, shape in answers]))
    return "\n".join(lines) + "\n"


def _table_notes(header: str, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines under :func:`eval_table`: what the strict Avg is (the gate's registration,
    :class:`eapo.rewards.StrictGate`) and what a † marks (each stand-in scorer's registration)."""
    from eapo.rewards.registry import eval_scorers

    scorers = eval_scorers()
    lines = []
    if "Avg (strict)" in header:
        lines += [s.gate.summary_note for s in scorers.values() if s.gate is not None]
    if "†" in header:
        flagged = {
            name
            for r in results
            for name, label in (r.get("labels") or {}).items()
            if "stand-in" in label and name in scorers and scorers[name].columns
        }
        lines += list(
            dict.fromkeys(scorers[n].stand_in_summary for n in sorted(flagged) if scorers[n].stand_in_summary)
        )
    return lines


def _eval_settings(results: Mapping[str, Any]) -> str:
    settings = results.get("settings", {})
    return (
        f"{results.get('data')}, {results.get('n_prompts')} prompts, k = {results.get('k')}, "
        f"temperature {settings.get('temperature')}, max_new_tokens {settings.get('max_new_tokens')}, "
        f"prompt {settings.get('prompt')}"
    )
