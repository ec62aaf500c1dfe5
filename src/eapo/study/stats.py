"""The statistics of ``eapo study``: 95% intervals and the verdict rules, pure functions over numbers.

No runs, files or settings here: every function takes per-step series or ``results.json`` dicts and
returns an :class:`Interval` (``None`` when there is too little to measure), and every verdict compares
intervals and returns :data:`HELD`, :data:`NOT_HELD`, :data:`WITHIN_NOISE` or :data:`NOT_MEASURED`.
A verdict can only say *held* when an interval clears its rule: noise alone gives *within noise* (or,
with intervals that clear the other way, *did not hold*). The claims that use them are in
the claims engine (:mod:`eapo.study.claims`), which judges the claims files.

Intervals (95%):

* a *window* (:func:`window_interval`): the mean of a metric over the first / last ``fraction`` of a
  run's optimisation steps (at least :data:`MIN_WINDOW_STEPS` steps, at most half the run, so the two
  never overlap; a run shorter than twice that: ``None``), ``mean ± 1.96·SE``. Consecutive steps are
  correlated, so ``SE² = s² / n_eff`` with the AR(1) effective sample size ``n_eff = n·(1−ρ)/(1+ρ)``
  (ρ: the window's lag-1 autocorrelation, clipped to [0, 0.9]). With several seeds the start and end of
  each seed are paired (the same runs), so the pooled mean is the mean over seeds and
  ``SE² = Σ SE_s² / S²``;
* a *slope* (:func:`slope_interval`): the ordinary least-squares slope of a metric against the step over
  every step, ``SE² = σ²_res / Σ(t − t̄)² · (1+ρ)/(1−ρ)`` (ρ: the residuals' lag-1 autocorrelation,
  clipped to [0, 0.9]); several seeds: the mean slope, ``SE² = Σ SE_s²/S²``;
* an *Avg* (:func:`avg_interval`): one evaluation's 95% bootstrap interval over prompts (from
  ``eapo eval``); several seeds: the mean over seeds and ``SE² = Σ SE_i²/S² + s²_seeds/S``
  (conservative: the evaluation noise is counted twice);
* the *end/start ratio* of a run (:func:`ratio_interval`): per seed ``r = end / start`` of the windows,
  ``SE_r² = (SE_end² + r²·SE_start²) / start²`` (delta method, the windows disjoint); several seeds: the
  mean ratio, ``SE² = Σ SE_r²/S²``; its *deviation* ``|r − 1|`` (:func:`deviation_interval`) has the
  interval of ``|x − 1|`` over the ratio's interval (0 at its low end when the interval holds 1);
* a *difference* ``a − c·b`` of two methods' intervals (:func:`difference_interval`; separate runs,
  independent): ``SE² = SE_a² + c²·SE_b²``, ``SE`` = half-width / 1.96;
* a *difference of Ranges* (:func:`range_difference_interval`, the tuning-free claim): a bootstrap of
  ``Range_first − Range_second``: each replicate draws the evaluation prompts with replacement (one draw
  shared by every run, as every run was evaluated on the same prompts; from ``results.json``'s
  ``per_prompt``) and, per configuration, its seeds with replacement; the 2.5 / 97.5 percentiles. Runs
  whose ``results.json`` has no ``per_prompt`` are drawn from a normal with their bootstrap interval's SE
  instead (prompts not shared: wider, so never easier to call held).

Verdicts: :func:`change_verdict` (lowers / raises), :func:`band_verdict` (inside a band),
:func:`best_verdict` (above every other), :func:`between_verdict`, :func:`below_verdict` (under a
threshold), :func:`lower_verdict` (below another), :func:`approach_verdict` (every difference above 0)
and :func:`combine_verdicts` (a claim of several parts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eapo.evaluation.metrics import avg_columns, strict_avg_columns

__all__ = [
    "HELD",
    "NOT_HELD",
    "WITHIN_NOISE",
    "NOT_MEASURED",
    "MIN_WINDOW_STEPS",
    "Interval",
    "window_interval",
    "slope_interval",
    "avg_interval",
    "ratio_interval",
    "deviation_interval",
    "difference_interval",
    "range_difference_interval",
    "change_verdict",
    "band_verdict",
    "best_verdict",
    "between_verdict",
    "below_verdict",
    "lower_verdict",
    "approach_verdict",
    "combine_verdicts",
]

HELD = "held"
NOT_HELD = "did not hold"
WITHIN_NOISE = "within noise"
NOT_MEASURED = "not measured"

#: A start/end window has at least this many steps (when the run has them).
MIN_WINDOW_STEPS = 3
_Z95 = 1.959963984540054


# --------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% interval; ``n``: the values (steps × seeds, or seeds) behind it."""

    mean: float
    low: float
    high: float
    n: int = 1

    def text(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _window_size(num_steps: int, fraction: float) -> int:
    """``max(MIN_WINDOW_STEPS, ceil(fraction·T))``, at most ``T // 2`` (start and end never overlap)."""
    return min(num_steps // 2, max(MIN_WINDOW_STEPS, math.ceil(fraction * num_steps)))


def _mean_and_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and AR(1)-corrected standard error of one seed's window."""
    n = len(values)
    mean = float(values.mean())
    if n < 2:
        return mean, 0.0
    variance = float(values.var(ddof=1))
    centred = values - mean
    denominator = float((centred**2).sum())
    rho = float((centred[1:] * centred[:-1]).sum() / denominator) if denominator > 0 else 0.0
    rho = min(max(rho, 0.0), 0.9)
    n_eff = max(1.0, n * (1 - rho) / (1 + rho))
    return mean, math.sqrt(variance / n_eff)


def window_interval(
    series: Sequence[Sequence[float | None]], *, fraction: float, end: bool
) -> Interval | None:
    """The start (``end=False``) or end window of a metric, pooled over seeds (see the module docstring).

    Args:
        series: one list per seed of the metric's per-step values (``None``/NaN: not logged that step).
        fraction: the window as a fraction of each seed's steps.
    Returns ``None`` when no seed logged ``2·MIN_WINDOW_STEPS`` values (too short for a start and an
    end window that do not overlap).
    """
    means, errors, count = [], [], 0
    for values in series:
        clean = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
        if clean.size < 2 * MIN_WINDOW_STEPS:
            continue
        size = _window_size(clean.size, fraction)
        window = clean[-size:] if end else clean[:size]
        mean, se = _mean_and_se(window)
        means.append(mean)
        errors.append(se)
        count += size
    if not means:
        return None
    mean = float(np.mean(means))
    se = math.sqrt(sum(e * e for e in errors)) / len(means)
    return Interval(mean, mean - _Z95 * se, mean + _Z95 * se, count)


def slope_interval(series: Sequence[Sequence[float | None]]) -> Interval | None:
    """The per-step slope of a metric, pooled over seeds (see the module docstring).

    Args:
        series: one list per seed of the metric's per-step values (``None``/NaN: not logged that step;
            the step index still counts).
    Returns ``None`` when no seed logged ``2·MIN_WINDOW_STEPS`` values.
    """
    slopes, errors, count = [], [], 0
    for values in series:
        points = [(t, v) for t, v in enumerate(values) if v is not None and math.isfinite(v)]
        if len(points) < 2 * MIN_WINDOW_STEPS:
            continue
        t = np.array([p[0] for p in points], dtype=float)
        y = np.array([p[1] for p in points], dtype=float)
        centred = t - t.mean()
        sxx = float((centred**2).sum())
        slope = float((centred * (y - y.mean())).sum() / sxx)
        residuals = y - y.mean() - slope * centred
        sigma2 = float((residuals**2).sum()) / (len(y) - 2)
        denominator = float((residuals**2).sum())
        rho = float((residuals[1:] * residuals[:-1]).sum() / denominator) if denominator > 0 else 0.0
        rho = min(max(rho, 0.0), 0.9)
        slopes.append(slope)
        errors.append(math.sqrt(sigma2 / sxx * (1 + rho) / (1 - rho)))
        count += len(y)
    if not slopes:
        return None
    mean = float(np.mean(slopes))
    se = math.sqrt(sum(e * e for e in errors)) / len(slopes)
    return Interval(mean, mean - _Z95 * se, mean + _Z95 * se, count)


def avg_interval(results: Sequence[Mapping[str, Any]], key: str = "avg") -> Interval | None:
    """A method's ``key`` (default Avg) over its evaluations: one seed -> its bootstrap interval; several
    -> the mean over seeds with ``SE² = Σ SE_i²/S² + s²_seeds/S`` (SE_i from each bootstrap interval)."""
    pairs = []
    for result in results:
        value = (result.get("metrics") or {}).get(key)
        if value is not None:
            pairs.append((float(value), (result.get("ci95") or {}).get(key)))
    if not pairs:
        return None
    if len(pairs) == 1:
        value, ci = pairs[0]
        return Interval(value, float(ci[0]) if ci else value, float(ci[1]) if ci else value, 1)
    values = [value for value, _ in pairs]
    errors = [(ci[1] - ci[0]) / (2 * _Z95) if ci else 0.0 for _, ci in pairs]
    count = len(values)
    mean = sum(values) / count
    between = sum((v - mean) ** 2 for v in values) / (count - 1)
    se = math.sqrt(sum(e * e for e in errors) / count**2 + between / count)
    return Interval(mean, mean - _Z95 * se, mean + _Z95 * se, count)


def _se(interval: Interval) -> float:
    return (interval.high - interval.low) / (2 * _Z95)


def ratio_interval(series: Sequence[Sequence[float | None]], *, fraction: float) -> Interval | None:
    """End-window ÷ start-window of a metric per seed, pooled (see the module docstring).

    Returns ``None`` when no seed has ``2·MIN_WINDOW_STEPS`` values or a start window of mean 0."""
    ratios, errors, count = [], [], 0
    for values in series:
        clean = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
        if clean.size < 2 * MIN_WINDOW_STEPS:
            continue
        size = _window_size(clean.size, fraction)
        start, se_start = _mean_and_se(clean[:size])
        end, se_end = _mean_and_se(clean[-size:])
        if start == 0:
            continue
        ratio = end / start
        ratios.append(ratio)
        errors.append(math.sqrt(se_end**2 + ratio**2 * se_start**2) / abs(start))
        count += 2 * size
    if not ratios:
        return None
    mean = float(np.mean(ratios))
    se = math.sqrt(sum(e * e for e in errors)) / len(ratios)
    return Interval(mean, mean - _Z95 * se, mean + _Z95 * se, count)


def deviation_interval(ratio: Interval | None) -> Interval | None:
    """``|r − 1|`` over the interval of ``r``: ``[0, max]`` when it holds 1, else ``[min, max]``."""
    if ratio is None:
        return None
    ends = (abs(ratio.low - 1), abs(ratio.high - 1))
    low = 0.0 if ratio.low <= 1 <= ratio.high else min(ends)
    return Interval(abs(ratio.mean - 1), low, max(ends), ratio.n)


def difference_interval(a: Interval | None, b: Interval | None, scale: float = 1.0) -> Interval | None:
    """``a − scale·b`` of two independent intervals, ``SE² = SE_a² + scale²·SE_b²``."""
    if a is None or b is None:
        return None
    mean = a.mean - scale * b.mean
    se = math.sqrt(_se(a) ** 2 + (scale * _se(b)) ** 2)
    return Interval(mean, mean - _Z95 * se, mean + _Z95 * se, a.n + b.n)


# --------------------------------------------------------------------------------------------
# The tuning-free bootstrap: a difference of Ranges over prompts and seeds
# --------------------------------------------------------------------------------------------


def _per_prompt(result: Mapping[str, Any], columns: Sequence[str]) -> tuple[list[str], np.ndarray] | None:
    """``(prompt ids, [n_prompts, len(columns)] values)`` from ``results.json``'s ``per_prompt`` (None if absent)."""
    stored = result.get("per_prompt")
    if not isinstance(stored, Mapping) or not all(c in (stored.get("columns") or {}) for c in columns):
        return None
    ids = [str(i) for i in stored.get("ids") or []]
    values = np.array(
        [[math.nan if v is None else float(v) for v in stored["columns"][c]] for c in columns], dtype=float
    ).T  # [n_prompts, columns]
    if values.shape[0] != len(ids) or not ids:
        return None
    return ids, values


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def range_difference_interval(
    first: Sequence[Sequence[Mapping[str, Any]]],
    second: Sequence[Sequence[Mapping[str, Any]]],
    *,
    key: str = "avg",
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[Interval, Interval, Interval] | None:
    """``Range(first) − Range(second)`` of ``key`` with a bootstrap over prompts and seeds.

    Args:
        first, second: per configuration, its evaluations (one ``results.json`` dict per seed).
        key: ``avg`` or ``avg_strict``.
    Returns ``(difference, range of first, range of second)`` intervals (point: the Ranges of the
    per-configuration means over seeds), or ``None`` when a configuration has no value of ``key``.
    """
    configs = [list(group) for group in (*first, *second)]
    columns = {**avg_columns(), **strict_avg_columns()}[key]
    values: list[list[float]] = []
    for group in configs:
        found = [r["metrics"][key] for r in group if (r.get("metrics") or {}).get(key) is not None]
        if not found:
            return None
        values.append(found)
    runs = [r for group in configs for r in group if (r.get("metrics") or {}).get(key) is not None]
    stored = [_per_prompt(r, columns) for r in runs]
    rng = np.random.default_rng(seed)
    shared = all(s is not None for s in stored) and len({tuple(s[0]) for s in stored}) == 1  # type: ignore[index]
    replicates: list[np.ndarray] = []  # per run: [R]
    if shared:
        n_prompts = len(stored[0][0])  # type: ignore[index]
        indices = rng.integers(0, n_prompts, size=(n_resamples, n_prompts))  # [R, n_prompts]
        for _, table in stored:  # type: ignore[misc]
            column_means = np.stack([_nanmean(table[:, c][indices], axis=1) for c in range(len(columns))])
            replicates.append(column_means.mean(axis=0))  # [R]
    else:
        for run in runs:
            value = float(run["metrics"][key])
            ci = (run.get("ci95") or {}).get(key)
            se = (ci[1] - ci[0]) / (2 * _Z95) if ci else 0.0
            replicates.append(value + se * rng.standard_normal(n_resamples))
    # per configuration: its seeds drawn with replacement, each replicate
    per_config: list[np.ndarray] = []
    position = 0
    for found in values:
        block = np.stack(replicates[position : position + len(found)])  # [S, R]
        position += len(found)
        draws = rng.integers(0, len(found), size=(n_resamples, len(found)))  # [R, S]
        per_config.append(block[draws, np.arange(n_resamples)[:, None]].mean(axis=1))  # [R]
    split = len(first)
    stacked = np.stack(per_config)  # [configs, R]
    range_first = stacked[:split].max(axis=0) - stacked[:split].min(axis=0)
    range_second = stacked[split:].max(axis=0) - stacked[split:].min(axis=0)
    means = [float(np.mean(found)) for found in values]
    point_first = max(means[:split]) - min(means[:split])
    point_second = max(means[split:]) - min(means[split:])
    low_q, high_q = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2
    count = len(runs)

    def interval(point: float, draws: np.ndarray) -> Interval:
        return Interval(point, float(np.percentile(draws, low_q)), float(np.percentile(draws, high_q)), count)

    return (
        interval(point_first - point_second, range_first - range_second),
        interval(point_first, range_first),
        interval(point_second, range_second),
    )


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------


def change_verdict(start: Interval | None, end: Interval | None, expect: str) -> str:
    """``expect="decrease"``: held if ``end`` lies entirely below ``start``; did not hold if entirely
    above; within noise if they overlap (``"increase"``: the mirror image)."""
    if expect not in ("decrease", "increase"):
        raise ValueError(f"expect must be 'decrease' or 'increase', got {expect!r}")
    if start is None or end is None:
        return NOT_MEASURED
    below, above = end.high < start.low, end.low > start.high
    if expect == "decrease":
        return HELD if below else NOT_HELD if above else WITHIN_NOISE
    return HELD if above else NOT_HELD if below else WITHIN_NOISE


def band_verdict(interval: Interval | None, low: float, high: float) -> str:
    """Held if ``interval`` lies inside ``[low, high]``; did not hold if it lies entirely outside."""
    if interval is None:
        return NOT_MEASURED
    if low <= interval.low and interval.high <= high:
        return HELD
    if interval.high < low or interval.low > high:
        return NOT_HELD
    return WITHIN_NOISE


def best_verdict(target: Interval | None, others: Mapping[str, Interval | None]) -> str:
    """Held if ``target`` lies entirely above every other interval; did not hold if another lies
    entirely above it; within noise otherwise. Any missing interval: not measured."""
    if target is None or not others or any(other is None for other in others.values()):
        return NOT_MEASURED
    if any(other.low > target.high for other in others.values()):  # type: ignore[union-attr]
        return NOT_HELD
    if all(target.low > other.high for other in others.values()):  # type: ignore[union-attr]
        return HELD
    return WITHIN_NOISE


def between_verdict(target: Interval | None, one: Interval | None, other: Interval | None) -> str:
    """Held if ``target`` lies entirely above the lower (by mean) of ``one``/``other`` and entirely below
    the higher; did not hold if it lies entirely below the lower or entirely above the higher."""
    if target is None or one is None or other is None:
        return NOT_MEASURED
    lower, higher = sorted((one, other), key=lambda interval: interval.mean)
    if target.high < lower.low or target.low > higher.high:
        return NOT_HELD
    if target.low > lower.high and target.high < higher.low:
        return HELD
    return WITHIN_NOISE


def below_verdict(interval: Interval | None, threshold: float) -> str:
    """Held if ``interval`` lies entirely below ``threshold``; did not hold if entirely above."""
    if interval is None:
        return NOT_MEASURED
    if interval.high < threshold:
        return HELD
    if interval.low > threshold:
        return NOT_HELD
    return WITHIN_NOISE


def lower_verdict(target: Interval | None, other: Interval | None) -> str:
    """Held if ``target`` lies entirely below ``other``; did not hold if entirely above."""
    if target is None or other is None:
        return NOT_MEASURED
    if target.high < other.low:
        return HELD
    if target.low > other.high:
        return NOT_HELD
    return WITHIN_NOISE


def approach_verdict(differences: Mapping[str, Interval | None]) -> str:
    """Held if every ``D_F`` lies entirely above 0; did not hold if one lies entirely below 0."""
    if not differences or any(d is None for d in differences.values()):
        return NOT_MEASURED
    if any(d.high < 0 for d in differences.values()):  # type: ignore[union-attr]
        return NOT_HELD
    if all(d.low > 0 for d in differences.values()):  # type: ignore[union-attr]
        return HELD
    return WITHIN_NOISE


def combine_verdicts(parts: Sequence[str]) -> str:
    """A claim of several parts: did not hold if one part did not hold; not measured if one part could
    not be measured; held if every part held; within noise otherwise."""
    if NOT_HELD in parts:
        return NOT_HELD
    if NOT_MEASURED in parts:
        return NOT_MEASURED
    return HELD if all(p == HELD for p in parts) else WITHIN_NOISE
