"""The stop study's seed bands, from each run's ``metrics.jsonl``: what the README's dynamics table prints.

    .venv/bin/python docs/results/study-cpu-stop/seed_bands.py

Per configuration and seed: ``H_0`` (``eapo/H0``, or the step-1 ``entropy/rollout`` for a run that does not log
it), and the mean of ``r_t = entropy/rollout / H_0`` over the start window (steps 1-4), the second half (steps
21-40) and the end window (steps 37-40), plan.md's windows; the end-window value of the run's controller, if it
has one (``eapo/w_pos`` for EAPO, EntroPIC's ``entropic/alpha``, the adaptive bonus's ``entropy_control/coef``);
and its end-window completion length and share of rollouts stopped at ``</advice>``. The row
"lowest-highest" is the band the figure draws. No interval and no verdict: those are claims.md's.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = 40
START, SECOND_HALF, END = range(1, 5), range(21, 41), range(37, 41)
#: The controller each method logs, by the method's name in sweep.json.
CONTROLLER = {
    "eapo": "eapo/w_pos",
    "eapo_pi": "eapo/w_pos",
    "entropic": "entropic/alpha",
    "adaptive_entropy": "entropy_control/coef",
}


def _mean(rows: dict[int, dict], steps: range, key: str) -> float | None:
    values = [rows[s][key] for s in steps if rows[s].get(key) is not None]
    return statistics.fmean(values) if values else None


def _cell(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def main() -> None:
    manifest = json.loads((HERE / "sweep.json").read_text(encoding="utf-8"))
    by_label: dict[str, list[tuple]] = {}
    for name, record in manifest["runs"].items():
        metrics = HERE / "runs" / name / "metrics.jsonl"
        if not metrics.exists():
            continue
        rows = {
            row["step"]: row
            for row in (
                json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()
            )
        }
        if sorted(rows) != list(range(1, STEPS + 1)):
            continue  # unfinished: not in a band
        h0 = rows[1].get("eapo/H0", rows[1]["entropy/rollout"])
        for row in rows.values():
            row["r"] = row["entropy/rollout"] / h0
        by_label.setdefault(record["label"], []).append(
            (
                record["seed"],
                h0,
                _mean(rows, START, "r"),
                _mean(rows, SECOND_HALF, "r"),
                _mean(rows, END, "r"),
                _mean(rows, END, CONTROLLER[record["method"]]) if record["method"] in CONTROLLER else None,
                _mean(rows, END, "completions/mean_length"),
                _mean(rows, END, "completions/stopped_by_string"),
            )
        )
    print(
        "| Configuration | Seed | H_0 (nats) | r, steps 1–4 | r, steps 21–40 | r, steps 37–40 | Controller, steps 37–40 | Length, steps 37–40 | Stopped at `</advice>`, steps 37–40 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, runs in by_label.items():
        for seed, h0, start, half, end, controller, length, stopped in sorted(runs):
            print(
                f"| {label} | {seed} | {h0:.3f} | {_cell(start)} | {_cell(half)} | {_cell(end)} | {_cell(controller)} | "
                f"{_cell(length, 1)} | {_cell(stopped, 2)} |"
            )
        if len(runs) > 1:
            columns = list(zip(*(run[1:] for run in runs), strict=True))  # H_0 .. stop share, across seeds
            cells = [
                "–" if None in column else f"{min(column):.{digits}f}–{max(column):.{digits}f}"
                for column, digits in zip(columns, (3, 3, 3, 3, 3, 1, 2), strict=True)
            ]
            print(f"| {label} | lowest–highest | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
