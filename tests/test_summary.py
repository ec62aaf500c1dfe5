"""``eapo summary``: first/last-third trends, entropy, w+ and the base-vs-trained evaluation table,
on a hand-written run directory (numbers chosen so every printed value is checkable by hand), the
strict Avg beside the lenient one for the base and the trained model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eapo.summary import (
    eval_table,
    first_last_thirds,
    read_answer_shape,
    render_summary,
    summarize_run,
)

#: The line under the table that says what the strict Avg is (the format check's registration holds it).
STRICT_AVG_NOTE = (
    "Avg (strict): the same mean, but an answer without its <advice> block scores 0 "
    "(Avg scores the text after </think>, or the whole response, instead)"
)

# Six steps: thirds are steps 1-2 and 5-6. Step 4 reused step 3's generation (rollout/fresh false)
# and is left out of the trends, so the thirds are over the 5 fresh steps: k = 5 // 3 = 1.
ROWS = [
    {
        "step": 1,
        "reward/mean": 0.10,
        "reward/format/mean": 0.00,
        "entropy/rollout": 2.0,
        "eapo/H0": 2.0,
        "eapo/w_pos": 0.20,
        "completion/mean_length": 120.0,
        "completions/clipped_ratio": 0.75,
        "completions/stopped_by_cap": 0.75,
    },
    {
        "step": 2,
        "reward/mean": 0.20,
        "reward/format/mean": 0.25,
        "entropy/rollout": 1.8,
        "eapo/H0": 2.0,
        "eapo/w_pos": 0.18,
        "completion/mean_length": 110.0,
        "completions/clipped_ratio": 0.50,
        "completions/stopped_by_cap": 0.50,
    },
    {
        "step": 3,
        "reward/mean": 0.30,
        "reward/format/mean": 0.50,
        "entropy/rollout": 1.6,
        "eapo/H0": 2.0,
        "eapo/w_pos": 0.16,
        "completion/mean_length": 100.0,
        "completions/clipped_ratio": 0.25,
        "completions/stopped_by_cap": 0.25,
    },
    {
        "step": 5,
        "reward/mean": 0.40,
        "reward/format/mean": 0.75,
        "entropy/rollout": 2.2,
        "eapo/H0": 2.0,
        "eapo/w_pos": 0.22,
        "completion/mean_length": 90.0,
        "completions/clipped_ratio": 0.00,
        "completions/stopped_by_cap": 0.00,
    },
    {
        "step": 6,
        "reward/mean": 0.50,
        "reward/format/mean": 1.00,
        "entropy/rollout": 1.5,
        "eapo/H0": 2.0,
        "eapo/w_pos": 0.15,
        "completion/mean_length": 80.0,
        "completions/clipped_ratio": 0.00,
        "completions/stopped_by_cap": 0.00,
    },
]
# step 4 carries step 3's generation: the same values, marked as reused
ROWS.insert(3, {**ROWS[2], "step": 4, "rollout/fresh": False})


def _shape(
    cut: float, no_close: float, after: float, wrote_on: float, chars: float, share: float, distinct: float
):
    """``results.json["answers"]`` of 28 answers (7 prompts × k = 4) at ``</advice>``."""
    return {
        "n": 28,
        "cut_at_cap": cut,
        "no_close_tag": no_close,
        "text_after_close": after,
        "wrote_on": wrote_on,
        "chars_after_close": chars,
        "share_after_close": share,
        "distinct_ngrams": distinct,
        "text_after_last_close": after,
        "chars_after_last_close": chars,
        "close_tag": "</advice>",
        "split": "first",
        "ngram": 4,
        "wrote_on_chars": 20,
    }


def _results(
    name: str,
    rouge: float,
    reranker: float,
    fmt: float,
    truncated: float,
    strict: tuple | None = None,
    answers: dict | None = None,
) -> dict:
    """An ``eapo eval`` results.json; ``strict``: the four strict columns (Rouge-L, reranker, RL@k, RR@k
    with an answer that fails the format check scored 0), absent as in results from before them;
    ``answers``: the answers' shape (default: none after ``</advice>``, ``truncated`` cut at the cap)."""
    metrics = {
        "rouge_l": rouge,
        "reranker": reranker,
        "rl_at_k": rouge + 0.1,
        "rr_at_k": reranker + 0.1,
        "laaj": None,
    }
    metrics["avg"] = (rouge + reranker + metrics["rl_at_k"] + metrics["rr_at_k"]) / 4
    if strict is not None:
        keys = ("rouge_l_strict", "reranker_strict", "rl_at_k_strict", "rr_at_k_strict")
        metrics.update(zip(keys, strict, strict=True))
        metrics["avg_strict"] = sum(strict) / 4
    return {
        "metrics": metrics,
        "ci95": {key: None for key in metrics},
        "k": 4,
        "n_prompts": 7,
        "model": name,
        "data": "demo (dev)",
        "display_name": name,
        "labels": {
            "rouge_l": "Rouge-L (word)",
            "reranker": "bi-encoder stand-in (all-MiniLM-L6-v2)",
            "format": "format",
        },
        "extra": {"format": fmt, "completion_tokens": 97.25, "truncated_frac": truncated},
        "answers": answers or _shape(truncated, 1.0 - fmt, 0.0, 0.0, 0.0, 0.0, 0.9),
        "settings": {"temperature": 1.0, "max_new_tokens": 128, "prompt": "en_fewshot"},
    }


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (run / "summary.json").write_text(json.dumps({"train_runtime_s": 312.0}), encoding="utf-8")
    (run / "dynamics.png").write_bytes(b"png")
    for sub, results in (
        # trained: a quarter of its answers lack the tags, so its strict columns are lower than the lenient
        # ones: (0.15 + 0.35 + 0.25 + 0.45) / 4 = 0.300 against Avg 0.400
        # and a quarter closed </advice> and wrote on (more than 20 characters after it)
        (
            "eval",
            _results(
                "run/final",
                0.2,
                0.5,
                0.75,
                0.125,
                strict=(0.15, 0.35, 0.25, 0.45),
                answers=_shape(0.75, 0.0, 0.5, 0.25, 123.45, 0.4, 0.7),
            ),
        ),
        # base: format 0, no answer has its <advice> block: every strict column is 0, Avg 0.300
        ("base-eval", _results("smollm2-135m-instruct", 0.1, 0.4, 0.0, 0.5, strict=(0.0, 0.0, 0.0, 0.0))),
    ):
        (run / sub).mkdir()
        (run / sub / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return run


def test_first_last_thirds():
    assert first_last_thirds([1, 2, 3, 4, 5, 6]) == (1.5, 5.5, 2)
    assert first_last_thirds([1, 2, 3, 4, 5, 6, 7, 8]) == (1.5, 7.5, 2)
    assert first_last_thirds([0.25, 0.75]) == (0.25, 0.75, 1)
    assert first_last_thirds([3.0]) == (3.0, 3.0, 1)
    with pytest.raises(ValueError, match="at least one value"):
        first_last_thirds([])


def test_summary_numbers(run_dir):
    summary = summarize_run(run_dir, base_eval_dir=run_dir / "base-eval")
    assert summary["steps"] == 6
    reward = summary["trends"]["reward/mean"]
    # fresh steps 1, 2, 3, 5, 6 -> k = 1: the first and the last fresh step
    assert (reward["first"], reward["last"], reward["k"], reward["n"]) == (0.10, 0.50, 1, 5)
    assert summary["trends"]["reward/format/mean"]["first"] == 0.0
    assert summary["trends"]["reward/format/mean"]["last"] == 1.0
    assert summary["trends"]["completions/stopped_by_cap"]["first"] == 0.75
    assert "reward/rouge_l/mean" not in summary["trends"]  # not logged by this run
    assert summary["entropy"] == {"H0": 2.0, "last": 1.5}
    assert summary["w_pos"] == {"min": 0.15, "max": 0.22, "first": 0.20, "last": 0.15}
    assert summary["runtime_s"] == 312.0
    assert [name for name, _ in summary["evals"]] == ["base", "trained"]
    assert [name for name, _ in summary["look_at"]] == [
        "metrics.jsonl",
        "dynamics.png",
        "base-eval/results.md",
        "eval/results.md",
    ]


def test_rendered_summary(run_dir):
    text = render_summary(summarize_run(run_dir, base_eval_dir=run_dir / "base-eval"))
    lines = text.splitlines()
    assert lines[0] == f"run directory: {run_dir}"
    assert "  6 steps, training 5.2 min" in lines
    assert "training, mean of the first 1 -> the last 1 of 5 steps:" in lines
    assert "  reward           0.100 -> 0.500  (+0.400)" in lines
    assert "    format         0.000 -> 1.000  (+1.000)" in lines
    assert "  length (tokens)  120.0 -> 80.0  (-40.0)" in lines
    assert "  truncated frac   0.750 -> 0.000  (-0.750)" in lines
    assert "  entropy H_t      H_0 = 2.000 -> 1.500 (last step), nats/token" in lines
    assert "  w+               range [0.150, 0.220] (first 0.200, last 0.150)" in lines
    table = [line for line in lines if line.startswith("| ")]
    assert (
        table[0]
        == "| Model | Rouge-L | Reranker† | RL@4 | RR@4† | Avg | Avg (strict) | Format | Tokens | Truncated |"
    )
    assert (
        table[2]
        == "| base: smollm2-135m-instruct | 0.100 | 0.400 | 0.200 | 0.500 | 0.300 | 0.000 | 0.000 | 97.2 | 0.500 |"
    )
    assert (
        table[3]
        == "| trained: run/final | 0.200 | 0.500 | 0.300 | 0.600 | 0.400 | 0.300 | 0.750 | 97.2 | 0.125 |"
    )
    # one line under the table says what the strict Avg is
    assert lines[lines.index(table[3]) + 1] == STRICT_AVG_NOTE
    # under it, each evaluation's answers' shape (results.json["answers"])
    shape = lines.index("answer shape:")
    assert lines[shape + 1] == (
        "| Model | Answers | Cut at the cap | No `</advice>` | Text after `</advice>` | Wrote on (> 20 chars) "
        "| Chars after it | Share of chars after it | Distinct 4-grams |"
    )
    assert lines[shape + 3 : shape + 5] == [
        "| base: smollm2-135m-instruct | 28 | 0.50 | 1.00 | 0.00 | 0.00 | 0.0 | 0.00 | 0.90 |",
        "| trained: run/final | 28 | 0.75 | 0.00 | 0.50 | 0.25 | 123.5 | 0.40 | 0.70 |",
    ]
    assert lines[shape + 5].startswith("Answer shape (shares of the answers): Cut at the cap")
    assert "warning" not in text


def test_results_without_strict_columns_show_no_strict_avg(run_dir):
    """An evaluation from before the strict columns (or without the format scorer): the lenient table only."""
    for sub in ("eval", "base-eval"):
        path = run_dir / sub / "results.json"
        results = json.loads(path.read_text())
        results["metrics"] = {k: v for k, v in results["metrics"].items() if "strict" not in k}
        path.write_text(json.dumps(results))
    text = render_summary(summarize_run(run_dir, base_eval_dir=run_dir / "base-eval"))
    assert "Avg (strict)" not in text
    assert "| Model | Rouge-L | Reranker† | RL@4 | RR@4† | Avg | Format | Tokens | Truncated |" in text


def test_results_without_the_answers_shape_are_a_clear_error(run_dir):
    """A results.json written before eapo eval recorded the answers' shape is not made up for from its
    samples.jsonl (issue 48): the summary names the file and says what to do."""
    summary = summarize_run(run_dir, base_eval_dir=run_dir / "base-eval")
    (base_name, base_shape), (trained_name, trained_shape) = summary["answers"]
    trained = json.loads((run_dir / "eval" / "results.json").read_text())
    assert (base_name, trained_name) == ("base", "trained") and trained_shape == trained["answers"]
    base = json.loads((run_dir / "base-eval" / "results.json").read_text())
    del base["answers"]
    (run_dir / "base-eval" / "results.json").write_text(json.dumps(base))
    message = r"base-eval/results.json has no 'answers' \(written by an older eapo eval.*fresh --output-dir"
    with pytest.raises(ValueError, match=message):
        summarize_run(run_dir, base_eval_dir=run_dir / "base-eval")
    with pytest.raises(ValueError, match=message):
        read_answer_shape(run_dir / "base-eval", base)


def test_differently_evaluated_rows_are_flagged(run_dir):
    base = json.loads((run_dir / "base-eval" / "results.json").read_text())
    base["settings"]["max_new_tokens"] = 48
    (run_dir / "base-eval" / "results.json").write_text(json.dumps(base))
    text = render_summary(summarize_run(run_dir, base_eval_dir=run_dir / "base-eval"))
    assert (
        "warning: the rows were evaluated differently; base: demo (dev), 7 prompts, k = 4, temperature 1.0, "
        "max_new_tokens 48" in text
    )


def test_eval_table_without_extras():
    results = _results("m", 0.25, 0.5, 0.0, 0.0)
    results["extra"] = {}
    results["labels"] = {"rouge_l": "Rouge-L"}
    assert (
        eval_table([("trained", results)]).splitlines()[0]
        == "| Model | Rouge-L | Reranker | RL@4 | RR@4 | Avg |"
    )


def test_missing_pieces_are_clear_errors(tmp_path, run_dir):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl does not exist"):
        summarize_run(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"missing/results.json does not exist: run `eapo eval"):
        summarize_run(run_dir, base_eval_dir=tmp_path / "missing")
    (run_dir / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="has no steps"):
        summarize_run(run_dir)


def test_summary_without_an_evaluation(run_dir):
    import shutil

    shutil.rmtree(run_dir / "eval")
    summary = summarize_run(run_dir)
    assert summary["evals"] == []
    assert "evaluation" not in render_summary(summary)


def test_cli(run_dir):
    command = [
        sys.executable,
        "-m",
        "eapo.cli",
        "summary",
        str(run_dir),
        "--base",
        str(run_dir / "base-eval"),
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "  reward           0.100 -> 0.500  (+0.400)" in out
    assert (
        "| trained: run/final | 0.200 | 0.500 | 0.300 | 0.600 | 0.400 | 0.300 | 0.750 | 97.2 | 0.125 |" in out
    )
    assert STRICT_AVG_NOTE in out
    as_json = json.loads(
        subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout
    )
    assert as_json["w_pos"]["max"] == 0.22
    missing = subprocess.run(
        [sys.executable, "-m", "eapo.cli", "summary", str(run_dir / "nope")], capture_output=True, text=True
    )
    assert missing.returncode == 1 and "metrics.jsonl does not exist" in missing.stderr


def test_the_truncated_share_is_the_caps_not_trls_clipped_ratio_under_stop_strings(tmp_path):
    """With stop strings TRL's clipped_ratio counts every rollout a stop string ended (no EOS): the
    summary, the study's claims and the plots read eapo's stopped_by_cap where it was logged."""
    from eapo.run_dir import cap_share

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "step": step,
            "reward/mean": 0.1,
            "completions/clipped_ratio": 1.0,
            "completions/stopped_by_cap": cap,
        }
        for step, cap in ((1, 0.25), (2, 0.0), (3, 0.0))
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    trend = summarize_run(run)["trends"]["completions/stopped_by_cap"]
    assert (trend["first"], trend["last"]) == (0.25, 0.0)
    path = run / "metrics.jsonl"
    assert cap_share({"completions/clipped_ratio": 0.5, "completions/stopped_by_cap": 0.0}, path) == 0.0
    assert cap_share({"completions/stopped_by_cap": 0.25}, path) == 0.25
    assert cap_share({"step": 1}, path) is None  # a row that logged no rollouts' ends


def test_a_run_logged_before_the_stop_reasons_is_a_clear_error(run_dir):
    """A metrics.jsonl with TRL's clipped_ratio but not eapo's stopped_by_cap (written before eapo logged
    why each rollout ended) is not read as the cap's share (issue 48): the summary, the study's claims
    and the seed bands name the file."""
    from eapo.plot import plot_seed_bands

    rows = [{k: v for k, v in row.items() if k != "completions/stopped_by_cap"} for row in ROWS]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    message = r"run/metrics.jsonl: step 1 has completions/clipped_ratio but no completions/stopped_by_cap .*train it again"
    with pytest.raises(ValueError, match=message):
        summarize_run(run_dir)
    with pytest.raises(ValueError, match=message):
        plot_seed_bands({"EAPO": [run_dir]})
