"""What the evaluated answers of the controls study look like, per configuration (3 seeds pooled).

    .venv/bin/python docs/results/study-cpu-controls/answers.py

From each run's ``eval/samples.jsonl`` (40 MedQuAD dev prompts × 4 answers), by
:func:`eapo.evaluation.answer_shape_of_samples` (what ``eapo eval`` now writes to ``results.json["answers"]``):
the share of answers cut at the 160-token cap, the share that closed ``</advice>`` and then went on
writing (more than 20 characters after the first ``</advice>``), the share of an answer's characters
after it, and the distinct-4-gram ratio of the words (unique 4-grams over all 4-grams, per answer,
averaged): low when an answer repeats itself. No model is run; these are counts over the committed samples.
"""

from __future__ import annotations

import json
from pathlib import Path

from eapo.evaluation import answer_shape_of_samples

HERE = Path(__file__).resolve().parent


def samples_by_label() -> dict[str, list[dict]]:
    """The base model's samples, then each configuration's (its seeds pooled), in the manifest's order."""
    manifest = json.loads((HERE / "sweep.json").read_text(encoding="utf-8"))
    by_label: dict[str, list[dict]] = {}
    base = HERE / "base" / "samples.jsonl"
    if base.exists():
        by_label["Base model (before training)"] = [
            json.loads(line) for line in base.read_text(encoding="utf-8").splitlines()
        ]
    for name, record in manifest["runs"].items():
        samples = HERE / "runs" / name / "eval" / "samples.jsonl"
        if samples.exists():
            rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
            by_label.setdefault(record["label"], []).extend(rows)
    return by_label


def table() -> str:
    """The table the README quotes (split at the first ``</advice>``, as it was measured)."""
    lines = [
        "| Configuration | Answers | Cut at the cap | Wrote on after `</advice>` | Characters after it | Distinct 4-grams |",
        "|---|---|---|---|---|---|",
    ]
    for label, rows in samples_by_label().items():
        shape = answer_shape_of_samples(
            rows, close_tag="</advice>", split="first", ngram=4, wrote_on_chars=20
        )
        lines.append(
            f"| {label} | {shape['n']} | {shape['cut_at_cap']:.2f} | {shape['wrote_on']:.2f} | "
            f"{shape['share_after_close']:.2f} | {shape['distinct_ngrams']:.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")
