"""The paper's metrics on hand-built samples, and the bootstrap intervals over prompts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eapo.evaluation.metrics import (
    COLUMNS,
    METRIC_KEYS,
    aggregate,
    bootstrap_ci,
    bootstrap_interval,
    per_prompt_values,
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


def test_avg_is_the_mean_of_the_reported_columns():
    metrics = aggregate(per_prompt_values(SCORES))
    assert metrics["laaj"] is None  # no judge: null, and not part of Avg
    assert metrics["avg"] == pytest.approx((0.35 + 0.55 + 0.65 + 0.80) / 4, abs=1e-12)
    with_judge = [dict(prompt, laaj=[0.7, 0.9, 0.8]) for prompt in SCORES]
    metrics = aggregate(per_prompt_values(with_judge))
    assert metrics["laaj"] == pytest.approx(0.8, abs=1e-12)
    assert metrics["avg"] == pytest.approx((0.35 + 0.55 + 0.65 + 0.80 + 0.8) / 5, abs=1e-12)


def test_paper_avg_reproduces_its_table():
    # Table "Performance comparison", GRPO row: 0.312, 0.976, 0.344, 0.987 -> Avg 0.655
    per_prompt = {"rouge_l": np.array([0.312]), "reranker": np.array([0.976])}
    per_prompt |= {"rl_at_k": np.array([0.344]), "rr_at_k": np.array([0.987])}
    assert round(aggregate(per_prompt)["avg"], 3) == 0.655


def test_unscored_samples_are_left_out_and_unscored_prompts_too():
    scores = [{"rouge_l": [None, 0.4]}, {"rouge_l": [None, None]}, {"rouge_l": [0.2, 0.0]}]
    per_prompt = per_prompt_values(scores)
    assert per_prompt["rouge_l"][0] == pytest.approx(0.4) and math.isnan(per_prompt["rouge_l"][1])
    metrics = aggregate(per_prompt)
    assert metrics["rouge_l"] == pytest.approx((0.4 + 0.1) / 2)
    assert metrics["rl_at_k"] == pytest.approx((0.4 + 0.2) / 2)
    assert metrics["reranker"] is None and metrics["rr_at_k"] is None
    assert metrics["avg"] == pytest.approx((0.25 + 0.3) / 2)


def test_bootstrap_interval_contains_the_point_estimate_and_is_seeded():
    rng = np.random.default_rng(0)
    scores = [
        {"rouge_l": list(rng.uniform(0, 1, 4)), "reranker": list(rng.uniform(0, 1, 4))} for _ in range(60)
    ]
    per_prompt = per_prompt_values(scores)
    point = aggregate(per_prompt)
    ci = bootstrap_ci(per_prompt, n_resamples=500, seed=3)
    assert set(ci) == set(METRIC_KEYS) and ci["laaj"] is None
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


def test_results_markdown_marks_the_bi_encoder_stand_in():
    per_prompt = per_prompt_values(SCORES)
    results = {
        "metrics": aggregate(per_prompt),
        "ci95": bootstrap_ci(per_prompt, n_resamples=50),
        "k": 3,
        "n_prompts": 2,
        "model": "m",
        "data": "demo:dev",
        "avg_of": list(COLUMNS[:4]),
        "labels": {
            "rouge_l": "Rouge-L F1 (char level, answer = <advice>)",
            "reranker": "bi-encoder stand-in (all-MiniLM-L6-v2 cosine, clamped to [0, 1])",
        },
        "settings": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8},
    }
    assert stand_in_columns(results["labels"]) == {"reranker", "rr_at_k"}
    markdown = results_markdown(results)
    assert "| Model | Rouge-L | Reranker† | RL@3 | RR@3† | Avg |" in markdown
    assert "bi-encoder stand-in (all-MiniLM-L6-v2" in markdown
    assert "LAAJ |" not in markdown  # a null column is not shown
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
