"""The evaluation metrics of the EAPO paper's tables, and bootstrap confidence intervals over prompts.

Each prompt gets ``k`` sampled responses, each scored by the reward components (the same scorers
as training). Per prompt:

* ``rouge_l`` / ``reranker`` / ``laaj`` — the mean over its ``k`` samples (single-generation quality);
* ``rl_at_k`` / ``rr_at_k`` — the best of its ``k`` samples' Rouge-L / reranker scores (the paper's
  RL@8 and RR@8: "the best Rouge-L score among 8 inference samples").

A table column is the mean of the per-prompt values over prompts. The paper's tables use two
different Avg columns, so there are two, each over a fixed set of columns (:data:`AVG_COLUMNS`):

* ``avg`` — the mean of Rouge-L, Reranker, RL@k and RR@k (its Table "Performance comparison" and
  the fixed-weight and cross-model tables: GRPO on RJUA, (0.312 + 0.976 + 0.344 + 0.987) / 4 = 0.655);
* ``avg_laaj`` — the mean of Rouge-L, Reranker and LAAJ (its per-dataset RL-paradigm tables: GRPO on
  RJUA, (0.312 + 0.976 + 0.744) / 3 = 0.677), null when no judge ran.

An Avg is null when any of its columns is null (e.g. ``--scorers rouge_l``): a mean over fewer
columns would be a number no table of the paper reports.

Strict variants (ours, not the paper's): ``rouge_l_strict``, ``reranker_strict``, ``rl_at_k_strict``,
``rr_at_k_strict`` and their mean ``avg_strict`` (:data:`STRICT_COLUMNS`, :data:`STRICT_AVG_COLUMNS`).
Rouge-L and the reranker read the ``<advice>`` part of a response, and when it has none they fall
back to the text after ``</think>`` or the whole response (:func:`eapo.rewards.extract_answer`): a
model that stopped writing ``<advice>`` still has its whole answer scored. The strict columns score
such an answer as the empty answer it is: a sample whose ``format`` score is not 1 — the format
reward's own check, :meth:`eapo.rewards.FormatReward.check` (by default the ``<think>`` and
``<advice>`` blocks present, in order, non-empty) — scores 0 on Rouge-L and the reranker; a sample
that passes keeps its score. Without a ``format`` score (``--scorers rouge_l,reranker``) the strict
columns are null; a sample whose format score is ``None`` is left out, like any unscored sample.

A sample a scorer could not score (``None``) is left out of its prompt's mean and max; a prompt
with no scored sample is left out of that column (the count is reported as ``n_scored``).

Confidence intervals: a percentile bootstrap over prompts. One set of resampled prompt indices is
shared by every column, so each Avg's interval accounts for the columns' correlation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "AVG_COLUMNS",
    "COLUMNS",
    "FORMAT_SCORER",
    "METRIC_KEYS",
    "SCORE_COLUMNS",
    "STRICT_AVG_COLUMNS",
    "STRICT_COLUMNS",
    "average_columns",
    "per_prompt_values",
    "unscored_counts",
    "aggregate",
    "bootstrap_ci",
]

#: The table's score columns in the paper's order (the Avg columns are derived from them).
COLUMNS = ("rouge_l", "reranker", "rl_at_k", "rr_at_k", "laaj")
#: Each Avg and the columns it averages (see the module docstring).
AVG_COLUMNS: dict[str, tuple[str, ...]] = {
    "avg": ("rouge_l", "reranker", "rl_at_k", "rr_at_k"),
    "avg_laaj": ("rouge_l", "reranker", "laaj"),
}
#: The scorer whose per-sample score (1: the tags are there) gates the strict columns.
FORMAT_SCORER = "format"
#: Strict column -> the column it gates with the format check (see the module docstring).
STRICT_COLUMNS: dict[str, str] = {
    "rouge_l_strict": "rouge_l",
    "reranker_strict": "reranker",
    "rl_at_k_strict": "rl_at_k",
    "rr_at_k_strict": "rr_at_k",
}
#: The strict Avg and its columns (the paper's ``avg`` with every column strict).
STRICT_AVG_COLUMNS: dict[str, tuple[str, ...]] = {"avg_strict": tuple(STRICT_COLUMNS)}
#: Every key of ``results.json``'s ``metrics`` and ``ci95``.
METRIC_KEYS = (*COLUMNS, *AVG_COLUMNS, *STRICT_COLUMNS, *STRICT_AVG_COLUMNS)
#: Every per-prompt column (plain and strict) and every Avg with its columns.
_ALL_COLUMNS = (*COLUMNS, *STRICT_COLUMNS)
_ALL_AVGS: dict[str, tuple[str, ...]] = {**AVG_COLUMNS, **STRICT_AVG_COLUMNS}


#: scorer name -> (column of the mean over k samples, column of the best of k samples or None).
SCORE_COLUMNS: dict[str, tuple[str, str | None]] = {
    "rouge_l": ("rouge_l", "rl_at_k"),
    "reranker": ("reranker", "rr_at_k"),
    "laaj": ("laaj", None),
}


def _as_float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def per_prompt_values(scores: Sequence[Mapping[str, Sequence[float | None]]]) -> dict[str, np.ndarray]:
    """Per-prompt column values from each prompt's per-sample scores.

    Args:
        scores: one mapping per prompt, ``{scorer name: [score of sample 0, ..., sample k-1]}``;
            names outside :data:`SCORE_COLUMNS` (e.g. ``format``) are ignored.

    Returns:
        ``{column: (n_prompts,) float array}`` for every column whose scorer appears in any prompt,
        NaN where a prompt had no scored sample; with a ``format`` score, also the strict variant of
        each Rouge-L / reranker column (:data:`STRICT_COLUMNS`).
    """
    names = [name for name in SCORE_COLUMNS if any(name in prompt for prompt in scores)]
    gated = any(FORMAT_SCORER in prompt for prompt in scores)
    out: dict[str, np.ndarray] = {}
    for name in names:
        mean_column, best_column = SCORE_COLUMNS[name]
        strict = gated and f"{mean_column}_strict" in STRICT_COLUMNS
        variants = [(mean_column, best_column, False)]
        if strict:
            variants.append((f"{mean_column}_strict", f"{best_column}_strict", True))
        for mean_key, best_key, is_strict in variants:
            means = np.full(len(scores), np.nan)
            bests = np.full(len(scores), np.nan)
            for index, prompt in enumerate(scores):
                values = np.array([_as_float(v) for v in prompt.get(name, [])], dtype=float)  # [k]
                if is_strict:
                    values = _gate(values, prompt.get(FORMAT_SCORER))
                values = values[~np.isnan(values)]
                if values.size:
                    means[index] = values.mean()
                    bests[index] = values.max()
            out[mean_key] = means
            if best_key is not None:
                out[best_key] = bests
    return out


def _gate(values: np.ndarray, format_scores: Sequence[float | None] | None) -> np.ndarray:
    """One prompt's ``[k]`` scores with the format check applied: 0 where the sample failed the
    check (its answer counts as empty), NaN where its format was not scored, unchanged otherwise."""
    if format_scores is None:
        return np.full(values.shape, np.nan)
    passed = np.array([_as_float(v) for v in format_scores], dtype=float)  # [k]
    if passed.shape != values.shape:
        raise ValueError(
            f"a prompt has {passed.size} format scores for {values.size} samples; every scorer scores every sample"
        )
    return np.where(np.isnan(passed), np.nan, np.where(passed == 1.0, values, 0.0))


def unscored_counts(scores: Sequence[Mapping[str, Sequence[float | None]]]) -> dict[str, int]:
    """Per scorer, how many samples it could not score (``None`` or NaN), over every prompt.

    Args:
        scores: one mapping per prompt, ``{scorer name: [score of sample 0, ..., sample k-1]}``
            (every scorer, ``format`` included).
    """
    counts: dict[str, int] = {}
    for prompt in scores:
        for name, values in prompt.items():
            missing = sum(1 for value in values if value is None or math.isnan(float(value)))
            counts[name] = counts.get(name, 0) + missing
    return counts


def _nanmean(values: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices -> NaN, on purpose
        return np.nanmean(values, axis=axis)


def aggregate(per_prompt: Mapping[str, np.ndarray]) -> dict[str, float | None]:
    """Point estimates: every key of :data:`METRIC_KEYS`, ``None`` for a column nobody scored.

    Each Avg of :data:`AVG_COLUMNS` / :data:`STRICT_AVG_COLUMNS` is the mean of its columns, ``None``
    when one of them is ``None``.
    """
    metrics: dict[str, float | None] = {}
    for column in _ALL_COLUMNS:
        values = per_prompt.get(column)
        mean = float(_nanmean(values)) if values is not None and values.size else math.nan
        metrics[column] = None if math.isnan(mean) else mean
    metrics.update(average_columns(metrics))
    return metrics


def average_columns(metrics: Mapping[str, float | None]) -> dict[str, float | None]:
    """``{avg key: mean of its columns}`` for :data:`AVG_COLUMNS` and :data:`STRICT_AVG_COLUMNS`;
    ``None`` where a column is missing or null."""
    out: dict[str, float | None] = {}
    for key, columns in _ALL_AVGS.items():
        values = [metrics.get(column) for column in columns]
        out[key] = None if any(v is None for v in values) else math.fsum(values) / len(values)  # type: ignore[arg-type]
    return out


def bootstrap_ci(
    per_prompt: Mapping[str, np.ndarray],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float] | None]:
    """Percentile-bootstrap intervals over prompts for every key of :data:`METRIC_KEYS`.

    Args:
        per_prompt: ``{column: (n_prompts,) array}`` as from :func:`per_prompt_values` (NaN = unscored).
        n_resamples: bootstrap replicates R.
        confidence: the interval's coverage (0.95 for ``ci95``).
        seed: seeds the resampling (the same inputs and seed give the same interval).

    Returns:
        ``{key: (low, high)}``; ``None`` where the point estimate is ``None``.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    point = aggregate(per_prompt)
    lengths = {len(values) for values in per_prompt.values()}
    if len(lengths) > 1:
        raise ValueError(f"every column needs one value per prompt; got lengths {sorted(lengths)}")
    n_prompts = lengths.pop() if lengths else 0
    out: dict[str, tuple[float, float] | None] = dict.fromkeys(METRIC_KEYS)
    if n_prompts == 0:
        return out
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n_prompts, size=(n_resamples, n_prompts))  # [R, n_prompts]
    low_q, high_q = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2
    replicates: dict[str, np.ndarray] = {}
    for column in _ALL_COLUMNS:
        if point[column] is None:
            continue
        replicates[column] = _nanmean(per_prompt[column][indices], axis=1)  # [R]
    for key, columns in _ALL_AVGS.items():
        if point[key] is None:
            continue
        # A replicate that drew only unscored prompts for a column is NaN there, and so is its Avg
        # (dropped below, like that column's own NaN replicates).
        replicates[key] = np.stack([replicates[column] for column in columns]).mean(axis=0)  # [R]
    for key, values in replicates.items():
        values = values[~np.isnan(values)]
        if values.size:
            out[key] = (float(np.percentile(values, low_q)), float(np.percentile(values, high_q)))
    return out
