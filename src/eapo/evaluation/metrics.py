"""The evaluation metrics of the EAPO paper's tables, and bootstrap confidence intervals over prompts.

Each prompt gets ``k`` sampled responses, each scored by the reward components (the same scorers
as training). The columns are the components' own: each registration declares the columns its
scores fill (:class:`eapo.rewards.EvalColumn`), and this module reads them from the registry
(:func:`table_columns`), naming none. Per prompt, a column is the ``mean`` of the ``k`` scores
(single-generation quality: the built-in ``rouge_l``, ``reranker``, ``laaj``) or the ``best`` of them
(the paper's RL@8 and RR@8, ``rl_at_k`` / ``rr_at_k``: "the best Rouge-L score among 8 inference
samples").

A table column is the mean of the per-prompt values over prompts. Each Avg is the mean of the columns
that name it (:func:`avg_columns`). The paper's tables use two different Avg columns:

* ``avg`` (:data:`MAIN_AVG`) — the mean of Rouge-L, Reranker, RL@k and RR@k (its Table "Performance
  comparison" and the fixed-weight and cross-model tables: GRPO on RJUA,
  (0.312 + 0.976 + 0.344 + 0.987) / 4 = 0.655);
* ``avg_laaj`` — the Avg of the judge's table (:class:`eapo.rewards.EvalTable`): the mean of Rouge-L,
  Reranker and LAAJ (its per-dataset RL-paradigm tables: GRPO on RJUA, (0.312 + 0.976 + 0.744) / 3 =
  0.677), null when no judge ran.

An Avg is null when any of its columns is null (e.g. ``--scorers rouge_l``): a mean over fewer
columns would be a number no table of the paper reports.

Strict variants (ours, not the paper's): each column registered ``strict`` has ``<key>_strict``
(``rouge_l_strict``, ``reranker_strict``, ``rl_at_k_strict``, ``rr_at_k_strict``), and their mean is
``avg_strict`` (:func:`strict_columns`, :func:`strict_avg_columns`). Rouge-L and the reranker read the
``<advice>`` part of a response, and when it has none they fall back to the text after ``</think>`` or
the whole response (:func:`eapo.rewards.extract_answer`): a model that stopped writing ``<advice>``
still has its whole answer scored. The strict columns score such an answer as the empty answer it
is: a sample whose gate score (:func:`strict_gate`: the scorer registered with a
:class:`eapo.rewards.StrictGate`, the format reward's own check :meth:`eapo.rewards.FormatReward.check`,
by default the ``<think>`` and ``<advice>`` blocks present, in order, non-empty) is not 1 scores 0 in
them; a sample that passes keeps its score. Without a gate score (``--scorers rouge_l,reranker``) the
strict columns are null; a sample whose gate score is ``None`` is left out, like any unscored sample.

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

from eapo.rewards.registry import EvalColumn, eval_columns, eval_scorers

__all__ = [
    "MAIN_AVG",
    "STRICT_AVG",
    "table_columns",
    "avg_columns",
    "strict_gate",
    "strict_columns",
    "strict_avg_columns",
    "metric_keys",
    "scorer_columns",
    "average_columns",
    "per_prompt_values",
    "unscored_counts",
    "aggregate",
    "bootstrap_ci",
]

#: The Avg of the main table (the paper's "Performance comparison" table); the columns whose
#: registration (:class:`eapo.rewards.EvalColumn`) names it in ``averages`` are its columns.
MAIN_AVG = "avg"
#: The strict Avg: the mean of every strict column.
STRICT_AVG = "avg_strict"


def table_columns() -> tuple[str, ...]:
    """The table's score columns, in the registered column order (the Avg columns are derived from them)."""
    return tuple(column.key for _, column in eval_columns())


def avg_columns() -> dict[str, tuple[str, ...]]:
    """Each Avg and the columns it averages: :data:`MAIN_AVG`, then the Avg of each table a scorer adds
    (:class:`eapo.rewards.EvalTable`), each over the columns that name it, in column order."""
    listed = eval_columns()
    avgs = [MAIN_AVG, *(table.avg for scorer in eval_scorers().values() for table in scorer.tables)]
    return {avg: tuple(column.key for _, column in listed if avg in column.averages) for avg in avgs}


def strict_gate() -> str | None:
    """The scorer whose per-sample score (1: the answer is there) gates the strict columns (the format
    check, :class:`eapo.rewards.StrictGate`), or None when none is registered."""
    return next((name for name, scorer in eval_scorers().items() if scorer.gate is not None), None)


def strict_columns() -> dict[str, str]:
    """Strict column -> the column it gates with :func:`strict_gate`'s check (see the module docstring)."""
    return {f"{column.key}_strict": column.key for _, column in eval_columns() if column.strict}


def strict_avg_columns() -> dict[str, tuple[str, ...]]:
    """The strict Avg and its columns (every strict column)."""
    return {STRICT_AVG: tuple(strict_columns())}


def metric_keys() -> tuple[str, ...]:
    """Every key of ``results.json``'s ``metrics`` and ``ci95``: the columns, the Avgs, the strict
    columns and the strict Avg."""
    return (*table_columns(), *avg_columns(), *strict_columns(), *strict_avg_columns())


def scorer_columns() -> dict[str, tuple[EvalColumn, ...]]:
    """Scorer name -> the table columns its scores fill, for the scorers that fill any (others, e.g. the
    format check, are reported beside the table)."""
    return {name: scorer.columns for name, scorer in eval_scorers().items() if scorer.columns}


def _all_columns() -> tuple[str, ...]:
    """Every per-prompt column, plain and strict."""
    return (*table_columns(), *strict_columns())


def _all_avgs() -> dict[str, tuple[str, ...]]:
    """Every Avg with its columns."""
    return {**avg_columns(), **strict_avg_columns()}


def _as_float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def per_prompt_values(scores: Sequence[Mapping[str, Sequence[float | None]]]) -> dict[str, np.ndarray]:
    """Per-prompt column values from each prompt's per-sample scores.

    Args:
        scores: one mapping per prompt, ``{scorer name: [score of sample 0, ..., sample k-1]}``;
            names that fill no column (:func:`scorer_columns`, e.g. ``format``) are ignored.

    Returns:
        ``{column: (n_prompts,) float array}`` for every column whose scorer appears in any prompt,
        NaN where a prompt had no scored sample; with a score of the gate (:func:`strict_gate`), also
        the strict variant of each column that has one (:func:`strict_columns`).
    """
    gate = strict_gate()
    gated = gate is not None and any(gate in prompt for prompt in scores)
    out: dict[str, np.ndarray] = {}
    for name, columns in scorer_columns().items():
        if not any(name in prompt for prompt in scores):
            continue
        variants = [False] + ([True] if gated and any(column.strict for column in columns) else [])
        for is_strict in variants:
            shown = [column for column in columns if column.strict or not is_strict]
            values_of = {column.key: np.full(len(scores), np.nan) for column in shown}
            for index, prompt in enumerate(scores):
                values = np.array([_as_float(v) for v in prompt.get(name, [])], dtype=float)  # [k]
                if is_strict:
                    values = _gate(values, prompt.get(gate))  # type: ignore[arg-type]
                values = values[~np.isnan(values)]
                if values.size:
                    for column in shown:
                        values_of[column.key][index] = (
                            values.mean() if column.per_prompt == "mean" else values.max()
                        )
            for column in shown:
                out[f"{column.key}_strict" if is_strict else column.key] = values_of[column.key]
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
    """Point estimates: every key of :func:`metric_keys`, ``None`` for a column nobody scored.

    Each Avg of :func:`avg_columns` / :func:`strict_avg_columns` is the mean of its columns, ``None``
    when one of them is ``None``.
    """
    metrics: dict[str, float | None] = {}
    for column in _all_columns():
        values = per_prompt.get(column)
        mean = float(_nanmean(values)) if values is not None and values.size else math.nan
        metrics[column] = None if math.isnan(mean) else mean
    metrics.update(average_columns(metrics))
    return metrics


def average_columns(metrics: Mapping[str, float | None]) -> dict[str, float | None]:
    """``{avg key: mean of its columns}`` for :func:`avg_columns` and :func:`strict_avg_columns`;
    ``None`` where a column is missing or null."""
    out: dict[str, float | None] = {}
    for key, columns in _all_avgs().items():
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
    """Percentile-bootstrap intervals over prompts for every key of :func:`metric_keys`.

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
    out: dict[str, tuple[float, float] | None] = dict.fromkeys(metric_keys())
    if n_prompts == 0:
        return out
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n_prompts, size=(n_resamples, n_prompts))  # [R, n_prompts]
    low_q, high_q = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2
    replicates: dict[str, np.ndarray] = {}
    for column in _all_columns():
        if point[column] is None:
            continue
        replicates[column] = _nanmean(per_prompt[column][indices], axis=1)  # [R]
    for key, columns in _all_avgs().items():
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
