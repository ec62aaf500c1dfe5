"""What the evaluated answers of the controls study look like, per configuration (3 seeds pooled).

    .venv/bin/python docs/results/study-cpu-controls/answers.py

From each run's ``eval/samples.jsonl`` (40 MedQuAD dev prompts × 4 answers): the share of answers cut at
the 160-token cap, the share that closed ``</advice>`` and then went on writing (more than 20 characters
after it), the share of an answer's characters after ``</advice>``, and the distinct-4-gram ratio of
the words (unique 4-grams over all 4-grams, per answer, averaged): low when an answer repeats itself.
No model is run; these are counts over the committed samples.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLOSE = "</advice>"


def distinct_4(text: str) -> float | None:
    words = text.split()
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    return len(set(grams)) / len(grams) if grams else None


def main() -> None:
    manifest = json.loads((HERE / "sweep.json").read_text(encoding="utf-8"))
    by_label: dict[str, list[dict]] = {}
    base = HERE / "base" / "samples.jsonl"
    if base.exists():
        by_label["Base model (before training)"] = [
            json.loads(line) for line in base.read_text().splitlines()
        ]
    for name, record in manifest["runs"].items():
        samples = HERE / "runs" / name / "eval" / "samples.jsonl"
        if samples.exists():
            rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
            by_label.setdefault(record["label"], []).extend(rows)
    print(
        "| Configuration | Answers | Cut at the cap | Wrote on after `</advice>` | Characters after it | Distinct 4-grams |"
    )
    print("|---|---|---|---|---|---|")
    for label, rows in by_label.items():
        texts = [row["completion"] for row in rows]
        cut = statistics.mean(not row["finished"] for row in rows)
        after = [len(t.split(CLOSE, 1)[1]) if CLOSE in t else 0 for t in texts]
        went_on = statistics.mean(a > 20 for a in after)
        share = statistics.mean(a / len(t) if t else 0.0 for a, t in zip(after, texts, strict=True))
        distinct = statistics.mean(d for d in map(distinct_4, texts) if d is not None)
        print(f"| {label} | {len(rows)} | {cut:.2f} | {went_on:.2f} | {share:.2f} | {distinct:.2f} |")


if __name__ == "__main__":
    main()
