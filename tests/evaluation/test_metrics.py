"""The paper's metrics on hand-built samples, and the bootstrap intervals over prompts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eapo.evaluation.answers import answer_shape
from eapo.evaluation.metrics import (
    aggregate,
    avg_columns,
    bootstrap_ci,
    metric_keys,
    per_prompt_values,
    strict_avg_columns,
    strict_columns,
    unscored_counts,
)
from eapo.evaluation.report import results_csv, results_markdown, stand_in_columns

# Two prompts, k = 3 samples each.
SCORES = [
    {"rouge_l": [0.1, 0.5, 0.3], "reranker": [0.9, 0.2, 0.4], "format": [1.0, 0.0, 1.0]},
    {"rouge_l": [0.2, 0.2, 0.8], "reranker": [0.6, 0.7, 0.5], "format": [0.0, 0.0, 0.0]},
]


def test_mean_columns_average_the_k_samples_then_the_prompts():
    metrics = aggregate(per_prompt_values(SCORES))
    assert metrics["rouge_l"] == pytest.approx((0.3 + 0.4) / 2, abs=1e-12)
    assert metrics["reranker"] == pytest.approx((0.5 + 0.6) / 2, abs=1e-12)


def test_best_of_k_is_a_max_over_each_prompts_samples():
    per_prompt = per_prompt_values(SCORES)
    np.testing.assert_allclose(per_prompt["rl_at_k"], [0.5, 0.8])
    np.testing.assert_allclose(per_prompt["rr_at_k"], [0.9, 0.7])
    metrics = aggregate(per_prompt)
    assert metrics["rl_at_k"] == pytest.approx(0.65, abs=1e-12)
    assert metrics["rr_at_k"] == pytest.approx(0.80, abs=1e-12)
    # the max is over samples, never over the prompt means
    assert metrics["rl_at_k"] > metrics["rouge_l"] and metrics["rr_at_k"] > metrics["reranker"]


def test_avg_is_the_four_column_mean_and_avg_laaj_the_judge_tables():
    metrics = aggregate(per_prompt_values(SCORES))
    assert metrics["laaj"] is None and metrics["avg_laaj"] is None  # no judge: null
    assert metrics["avg"] == pytest.approx((0.35 + 0.55 + 0.65 + 0.80) / 4, abs=1e-12)
    with_judge = [dict(prompt, laaj=[0.7, 0.9, 0.8]) for prompt in SCORES]
    metrics = aggregate(per_prompt_values(with_judge))
    assert metrics["laaj"] == pytest.approx(0.8, abs=1e-12)
    # a judge does not change avg (the old code made it a 5-column mean: 0.63)
    assert metrics["avg"] == pytest.approx((0.35 + 0.55 + 0.65 + 0.80) / 4, abs=1e-12)
    assert metrics["avg_laaj"] == pytest.approx((0.35 + 0.55 + 0.8) / 3, abs=1e-12)
    assert avg_columns() == {
        "avg": ("rouge_l", "reranker", "rl_at_k", "rr_at_k"),
        "avg_laaj": ("rouge_l", "reranker", "laaj"),
    }


def _constant(values: dict[str, float]) -> dict[str, np.ndarray]:
    return {key: np.array([value]) for key, value in values.items()}


def test_paper_avg_reproduces_its_tables():
    # Table "Performance comparison", GRPO on RJUA: 0.312, 0.976, 0.344, 0.987 -> Avg 0.655
    grpo_rjua = {"rouge_l": 0.312, "reranker": 0.976, "rl_at_k": 0.344, "rr_at_k": 0.987}
    assert round(aggregate(_constant(grpo_rjua))["avg"], 3) == 0.655
    # Table "RL paradigms on RJUA" (Rouge-L, Reranker, LAAJ, Avg): GRPO -> 0.677, PSR -> 0.657, NSR -> 0.667
    for (rouge, reranker, laaj), expected in [
        ((0.312, 0.976, 0.744), 0.677),
        ((0.293, 0.940, 0.738), 0.657),
        ((0.327, 0.971, 0.702), 0.667),
    ]:
        per_prompt = _constant(grpo_rjua | {"rouge_l": rouge, "reranker": reranker, "laaj": laaj})
        metrics = aggregate(per_prompt)
        assert round(metrics["avg_laaj"], 3) == expected
        # with RL@8 / RR@8 too, the 4-column Avg is unchanged by LAAJ
        assert metrics["avg"] == pytest.approx((rouge + reranker + 0.344 + 0.987) / 4, abs=1e-12)
    # Table "RL paradigms on CMD": GRPO 0.186, 0.783, 0.649 -> 0.539; NSR 0.194, 0.792, 0.544 -> 0.510
    for (rouge, reranker, laaj), expected in [((0.186, 0.783, 0.649), 0.539), ((0.194, 0.792, 0.544), 0.510)]:
        metrics = aggregate(_constant({"rouge_l": rouge, "reranker": reranker, "laaj": laaj}))
        assert round(metrics["avg_laaj"], 3) == expected
        assert metrics["avg"] is None  # no RL@k / RR@k: the 4-column Avg is not computed
    # the cross-model table (Qwen2.5-7B-Instruct, RJUA), EAPO: 0.341, 0.977, 0.388, 0.994 -> 0.675
    eapo = _constant({"rouge_l": 0.341, "reranker": 0.977, "rl_at_k": 0.388, "rr_at_k": 0.994})
    assert round(aggregate(eapo)["avg"], 3) == 0.675


def test_unscored_counts_per_scorer():
    scores = [
        {"rouge_l": [0.1, 0.2], "laaj": [None, 0.5], "format": [1.0, 0.0]},
        {"rouge_l": [0.3, None], "laaj": [float("nan"), None], "format": [1.0, 1.0]},
    ]
    assert unscored_counts(scores) == {"rouge_l": 1, "laaj": 3, "format": 0}


def test_unscored_samples_are_left_out_and_unscored_prompts_too():
    scores = [{"rouge_l": [None, 0.4]}, {"rouge_l": [None, None]}, {"rouge_l": [0.2, 0.0]}]
    per_prompt = per_prompt_values(scores)
    assert per_prompt["rouge_l"][0] == pytest.approx(0.4) and math.isnan(per_prompt["rouge_l"][1])
    metrics = aggregate(per_prompt)
    assert metrics["rouge_l"] == pytest.approx((0.4 + 0.1) / 2)
    assert metrics["rl_at_k"] == pytest.approx((0.4 + 0.2) / 2)
    assert metrics["reranker"] is None and metrics["rr_at_k"] is None
    # Avg needs all four of its columns: a 2-column mean is a number no table reports
    assert metrics["avg"] is None and metrics["avg_laaj"] is None


def bootstrap_interval(values, **options) -> tuple[float, float] | None:
    """The interval :func:`bootstrap_ci` gives the mean of one per-prompt column."""
    return bootstrap_ci({"rouge_l": np.asarray(values, dtype=float)}, **options)["rouge_l"]


def test_bootstrap_interval_contains_the_point_estimate_and_is_seeded():
    rng = np.random.default_rng(0)
    scores = [
        {"rouge_l": list(rng.uniform(0, 1, 4)), "reranker": list(rng.uniform(0, 1, 4))} for _ in range(60)
    ]
    per_prompt = per_prompt_values(scores)
    point = aggregate(per_prompt)
    ci = bootstrap_ci(per_prompt, n_resamples=500, seed=3)
    assert set(ci) == set(metric_keys()) and ci["laaj"] is None
    for key in ("rouge_l", "reranker", "rl_at_k", "rr_at_k", "avg"):
        low, high = ci[key]
        assert low < point[key] < high, key
        assert high - low < 0.3
    assert bootstrap_ci(per_prompt, n_resamples=500, seed=3) == ci
    assert bootstrap_ci(per_prompt, n_resamples=500, seed=4) != ci


def test_bootstrap_interval_narrows_with_more_prompts():
    rng = np.random.default_rng(1)
    values = rng.uniform(0, 1, 1600)
    widths = []
    for n in (25, 100, 400, 1600):
        low, high = bootstrap_interval(values[:n], n_resamples=1000, seed=0)
        assert low <= values[:n].mean() <= high
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True)
    # the width of a mean's interval shrinks like 1/sqrt(n): 64x the prompts, about an eighth the width
    assert widths[-1] / widths[0] == pytest.approx(1 / 8, rel=0.25)
    # uniform(0, 1): sd = 1/sqrt(12); a 95% interval of the mean of 1600 is about 2 * 1.96 * sd / 40
    assert widths[-1] == pytest.approx(2 * 1.96 / math.sqrt(12) / 40, rel=0.15)


def test_a_single_prompt_has_a_degenerate_interval():
    assert bootstrap_interval([0.42]) == pytest.approx((0.42, 0.42))


def _results(scores, **fields):
    per_prompt = per_prompt_values(scores)
    results = {
        "metrics": aggregate(per_prompt),
        "ci95": bootstrap_ci(per_prompt, n_resamples=50),
        "k": 3,
        "n_prompts": len(scores),
        "model": "m",
        "data": "demo:dev",
        "avg_of": {key: list(columns) for key, columns in avg_columns().items()},
        "labels": {
            "rouge_l": "Rouge-L F1 (char level, answer = <advice>)",
            "reranker": "bi-encoder stand-in (all-MiniLM-L6-v2 cosine, clamped to [0, 1], answer = <advice>)",
        },
        "extract": {"rouge_l": "advice", "reranker": "advice"},
        "n_samples": 3 * len(scores),
        "unscored": unscored_counts(scores),
        "answers": answer_shape(
            ["<think>x</think><advice>y</advice> and on"] * 3 * len(scores), [False] * 3 * len(scores)
        ),
        "settings": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8},
    }
    return results | fields


def test_results_markdown_marks_the_bi_encoder_stand_in():
    results = _results(SCORES)
    assert stand_in_columns(results["labels"]) == {"reranker", "rr_at_k"}
    markdown = results_markdown(results)
    assert "| Model | Rouge-L | Reranker† | RL@3 | RR@3† | Avg |" in markdown
    assert "bi-encoder stand-in (all-MiniLM-L6-v2" in markdown
    assert "LAAJ" not in markdown.split("Rouge-L / Reranker")[0]  # no judge: no LAAJ column or table
    assert "Avg: mean of Rouge-L, Reranker, RL@3 and RR@3" in markdown
    # under the scores, the answers' shape: every answer wrote " and on" after </advice>
    assert "\n## Answer shape: what no score sees\n" in markdown
    assert "| m | 6 | 0.00 | 0.00 | 1.00 | 0.00 | 7.0 | 0.17 | – |" in markdown
    # the footnotes name what was scored and how many samples each scorer could not score
    assert "Scored text: Rouge-L: the <advice> part (extract=advice); Reranker: the <advice> part" in markdown
    assert (
        "could not score (None/NaN, left out of its means): Rouge-L 0/6, Reranker 0/6, Format 0/6."
        in markdown
    )
    header, row = results_csv(results).strip().splitlines()
    assert header.split(",")[:7] == [
        "model",
        "data",
        "k",
        "n_prompts",
        "rouge_l",
        "rouge_l_ci_low",
        "rouge_l_ci_high",
    ]
    assert float(row.split(",")[4]) == pytest.approx(0.35)
    csv_row = dict(zip(header.split(","), row.split(","), strict=True))
    assert csv_row["avg_laaj"] == "" and csv_row["unscored_format"] == "0"


def test_results_without_the_answers_shape_are_not_reported_without_it():
    """results.md always carries the answers' shape (issue 48: no table left out for results written
    before the key; eapo eval writes results.md from the results it has just computed)."""
    results = _results(SCORES)
    del results["answers"]
    with pytest.raises(KeyError, match="answers"):
        results_markdown(results)


def test_with_a_judge_results_md_has_both_of_the_papers_tables():
    scores = [dict(prompt, laaj=[0.7, 0.9, None]) for prompt in SCORES]
    results = _results(scores, extract={"rouge_l": "whole", "reranker": "advice", "laaj": "advice"})
    markdown = results_markdown(results)
    first, second = markdown.split("## With LLM-as-a-Judge")
    assert "| Model | Rouge-L | Reranker† | RL@3 | RR@3† | Avg |" in first
    assert "| Model | Rouge-L | Reranker† | LAAJ | Avg |" in second
    avg, avg_laaj = results["metrics"]["avg"], results["metrics"]["avg_laaj"]
    assert avg_laaj == pytest.approx((0.35 + 0.55 + 0.8) / 3, abs=1e-12) and avg != pytest.approx(avg_laaj)
    assert first.split("| Model |")[1].splitlines()[2].split(" | ")[-1].startswith(f"{avg:.3f} [")
    assert second.split("| Model |")[1].splitlines()[2].split(" | ")[-1].startswith(f"{avg_laaj:.3f} [")
    assert "With LLM-as-a-Judge: Avg: mean of Rouge-L, Reranker and LAAJ" in markdown
    assert "Rouge-L: the whole response (extract=whole); Reranker: the <advice> part" in markdown
    assert "LAAJ 2/6" in markdown  # the two samples the judge did not score


def test_both_avgs_get_intervals_from_the_shared_resampling():
    rng = np.random.default_rng(2)
    scores = [
        {name: list(rng.uniform(0, 1, 4)) for name in ("rouge_l", "reranker", "laaj")} for _ in range(50)
    ]
    per_prompt = per_prompt_values(scores)
    point = aggregate(per_prompt)
    ci = bootstrap_ci(per_prompt, n_resamples=400, seed=5)
    for key in ("avg", "avg_laaj"):
        low, high = ci[key]
        assert low < point[key] < high, key
    # each Avg's replicates are the mean of its columns' replicates over the same resampled prompts
    indices = np.random.default_rng(5).integers(0, 50, size=(400, 50))
    replicates = {c: per_prompt[c][indices].mean(axis=1) for c in ("rouge_l", "reranker", "laaj")}
    expected = (replicates["rouge_l"] + replicates["reranker"] + replicates["laaj"]) / 3
    assert ci["avg_laaj"] == pytest.approx(
        (np.percentile(expected, 2.5), np.percentile(expected, 97.5)), abs=1e-12
    )
    # drop the reranker: neither Avg can be formed, so neither has an interval
    without = {key: values for key, values in per_prompt.items() if key not in ("reranker", "rr_at_k")}
    ci = bootstrap_ci(without, n_resamples=50)
    assert ci["avg"] is None and ci["avg_laaj"] is None and ci["rouge_l"] is not None


# --------------------------------------------------------------------------------------------
# The strict columns: an answer that fails the format check scores 0 (it has no <advice> to score)
# --------------------------------------------------------------------------------------------


def test_strict_columns_score_a_sample_that_failed_the_format_check_as_empty():
    # SCORES: prompt 1's format [1, 0, 1] -> Rouge-L [0.1, 0, 0.3], reranker [0.9, 0, 0.4];
    # prompt 2's format [0, 0, 0] -> all zero.
    per_prompt = per_prompt_values(SCORES)
    np.testing.assert_allclose(per_prompt["rouge_l_strict"], [0.4 / 3, 0.0], atol=1e-12)
    np.testing.assert_allclose(per_prompt["reranker_strict"], [1.3 / 3, 0.0], atol=1e-12)
    np.testing.assert_allclose(per_prompt["rl_at_k_strict"], [0.3, 0.0], atol=1e-12)
    np.testing.assert_allclose(per_prompt["rr_at_k_strict"], [0.9, 0.0], atol=1e-12)
    metrics = aggregate(per_prompt)
    assert metrics["rouge_l_strict"] == pytest.approx(0.4 / 6, abs=1e-12)
    assert metrics["reranker_strict"] == pytest.approx(1.3 / 6, abs=1e-12)
    assert metrics["rl_at_k_strict"] == pytest.approx(0.15, abs=1e-12)
    assert metrics["rr_at_k_strict"] == pytest.approx(0.45, abs=1e-12)
    assert metrics["avg_strict"] == pytest.approx((0.4 / 6 + 1.3 / 6 + 0.15 + 0.45) / 4, abs=1e-12)
    # the lenient columns are untouched
    assert metrics["avg"] == pytest.approx((0.35 + 0.55 + 0.65 + 0.80) / 4, abs=1e-12)
    assert strict_avg_columns() == {
        "avg_strict": ("rouge_l_strict", "reranker_strict", "rl_at_k_strict", "rr_at_k_strict")
    }
    assert set(metric_keys()) >= {
        "rouge_l_strict",
        "reranker_strict",
        "rl_at_k_strict",
        "rr_at_k_strict",
        "avg_strict",
    }


def test_strict_columns_need_the_format_score():
    without = [{k: v for k, v in prompt.items() if k != "format"} for prompt in SCORES]
    metrics = aggregate(per_prompt_values(without))
    assert all(metrics[key] is None for key in (*strict_columns(), "avg_strict"))
    assert metrics["avg"] == pytest.approx((0.35 + 0.55 + 0.65 + 0.80) / 4, abs=1e-12)
    # a sample whose format was not scored is left out; an unscored Rouge-L that failed the format check is a 0
    scores = [{"rouge_l": [0.6, None, 0.2], "format": [None, 0.0, 1.0]}]
    per_prompt = per_prompt_values(scores)
    assert per_prompt["rouge_l_strict"][0] == pytest.approx(0.1)  # mean of [0, 0.2]
    assert per_prompt["rl_at_k_strict"][0] == pytest.approx(0.2)
    assert per_prompt["rouge_l"][0] == pytest.approx(0.4)  # lenient: mean of [0.6, 0.2]
    with pytest.raises(ValueError, match="format scores"):
        per_prompt_values([{"rouge_l": [0.1, 0.2], "format": [1.0]}])


def test_strict_avg_gets_its_interval_from_the_shared_resampling():
    rng = np.random.default_rng(4)
    scores = [
        {
            "rouge_l": list(rng.uniform(0, 1, 4)),
            "reranker": list(rng.uniform(0, 1, 4)),
            "format": list(rng.integers(0, 2, 4).astype(float)),
        }
        for _ in range(40)
    ]
    per_prompt = per_prompt_values(scores)
    point = aggregate(per_prompt)
    ci = bootstrap_ci(per_prompt, n_resamples=300, seed=7)
    indices = np.random.default_rng(7).integers(0, 40, size=(300, 40))
    replicates = [per_prompt[column][indices].mean(axis=1) for column in strict_columns()]
    expected = np.mean(replicates, axis=0)
    assert ci["avg_strict"] == pytest.approx(
        (np.percentile(expected, 2.5), np.percentile(expected, 97.5)), abs=1e-12
    )
    assert ci["avg_strict"][0] < point["avg_strict"] < ci["avg_strict"][1]
    assert point["avg_strict"] < point["avg"]  # zeroing samples can only lower the scores


def test_results_markdown_and_csv_carry_the_strict_table():
    results = _results(SCORES)
    markdown = results_markdown(results)
    lenient, strict = markdown.split("## Strict: an answer without its <advice> block scores 0")
    header = "| Model | Rouge-L | Reranker† | RL@3 | RR@3† | Avg |"
    assert header in lenient and header in strict
    row = strict.split(header)[1].splitlines()[2]
    avg_strict = (0.4 / 6 + 1.3 / 6 + 0.15 + 0.45) / 4
    assert row.startswith("| m | 0.067 [") and row.split(" | ")[-1].startswith(f"{avg_strict:.3f} [")
    assert "Strict: a sample that fails the format reward's check" in markdown
    header_csv, row_csv = results_csv(results).strip().splitlines()
    csv_row = dict(zip(header_csv.split(","), row_csv.split(","), strict=True))
    assert float(csv_row["avg_strict"]) == pytest.approx(avg_strict, abs=1e-12)
    assert float(csv_row["avg_strict_ci_low"]) <= avg_strict <= float(csv_row["avg_strict_ci_high"])
