"""A study's wall times, from what each run logged (the controls study's; the stop study's with its folder).

    .venv/bin/python docs/results/study-cpu-controls/wall_times.py [STUDY_DIR]

``STUDY_DIR`` defaults to this folder; a run whose ``metrics.jsonl`` is still empty (restarted from step 0)
is left out.

Per run: the training's logged ``step_time`` (its sum, median and largest step) and the evaluation's
wall time (the eval log's first timestamp to ``eval/results.json``'s ``created``). The study ran in
sittings on a 2-core machine that other work sometimes shared, and twice it was paused (SIGSTOP) for
quiet measurements. A pause or a busy machine shows in the sum and the largest step, hardly in the
median, so the per-configuration figure is 40 × the median step: what a run's training takes alone.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.MULTILINE)


def _eval_seconds(study: Path, run: str) -> float | None:
    log = study / "logs" / f"{run}.eval.log"
    results = study / "runs" / run / "eval" / "results.json"
    if not log.exists() or not results.exists():
        return None
    first = STAMP.search(log.read_text(encoding="utf-8"))
    if first is None:
        return None
    start = dt.datetime.fromisoformat(first.group(1)).replace(tzinfo=dt.UTC)
    done = dt.datetime.fromisoformat(json.loads(results.read_text(encoding="utf-8"))["created"])
    return (done - start).total_seconds()


def main(study: Path = HERE) -> None:
    manifest = json.loads((study / "sweep.json").read_text(encoding="utf-8"))
    by_label: dict[str, list[tuple[float, float]]] = {}
    print("| Run | Trained (UTC) | Steps | Step time: median | largest | sum | Evaluation |")
    print("|---|---|---|---|---|---|---|")
    for name, record in manifest["runs"].items():
        metrics = study / "runs" / name / "metrics.jsonl"
        if not metrics.exists():
            continue
        rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not rows:
            continue
        times = [row["step_time"] for row in rows]
        span = " – ".join(
            dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M")
            for t in (rows[0]["time"] - rows[0]["step_time"], rows[-1]["time"])
        )
        median = statistics.median(times)
        evaluation = _eval_seconds(study, name)
        shown = "–" if evaluation is None else f"{evaluation / 60:.1f} min"
        print(
            f"| {name} | {span} | {len(times)} | {median:.1f} s | {max(times):.0f} s | {sum(times) / 60:.1f} min | {shown} |"
        )
        if evaluation is not None:
            by_label.setdefault(record["label"], []).append((median, evaluation))
    print()
    print("| Configuration | Runs | Median step | 40 × median step | Evaluation (median) |")
    print("|---|---|---|---|---|")
    for label, rows in by_label.items():
        step = statistics.median(m for m, _ in rows)
        evaluation = statistics.median(e for _, e in rows)
        print(
            f"| {label} | {len(rows)} | {step:.1f} s | {40 * step / 60:.1f} min | {evaluation / 60:.1f} min |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
