"""``eapo study``: the EAPO paper's comparison in one command, and a verdict on each of its claims.

The study trains GRPO, PSR, NSR, W-REINFORCE (w+ = 0.1) and EAPO (w0 = 0.2) from the same base model
and seed(s), evaluates each on a held-out split with k samples per prompt, and writes — besides the
sweep's ``comparison.md`` table and ``dynamics.png`` figure (it *is* an ``eapo sweep``: same runner,
tables and skip-if-finished) — ``claims.md`` and ``claims.json``: for each claim of the paper,

1. PSR lowers entropy;
2. PSR shortens answers;
3. NSR raises entropy;
4. EAPO holds entropy near H_0;
5. EAPO scores best on Avg;
6. GRPO lowers entropy ("PSR and GRPO suffer from entropy collapse", the EAPO-vs-baselines dynamics);
7. NSR lengthens answers ("NSR produce longer ones", Figure 2c);
8. NSR's reward rises faster than PSR's ("NSR leads to faster reward gains", Figure 2b),

whether it *held*, *did not hold*, or is *within noise* in this run, with the numbers. The rules
(:data:`VERDICT_RULES`, written into ``claims.md``):

* **start / end** of a run: the mean of a metric over its first / last ``window`` fraction of
  optimisation steps (at least :data:`MIN_WINDOW_STEPS` steps, at most half the run, so the two never
  overlap; a run shorter than twice that is *not measured*), with a 95% interval
  ``mean ± 1.96·SE``. Consecutive steps are correlated, so ``SE² = s² / n_eff`` with the AR(1)
  effective sample size ``n_eff = n·(1−ρ)/(1+ρ)`` (ρ: the window's lag-1 autocorrelation, clipped to
  [0, 0.9]). With several seeds the start and end of each seed are paired (the same runs), so the
  pooled mean is the mean over seeds and ``SE² = Σ SE_s² / S²``.
* **lowers / raises / shortens / lengthens** (claims 1–3, 6, 7): *held* when the end interval lies entirely below
  (above) the start interval; *did not hold* when it lies entirely on the other side; otherwise
  *within noise* (the intervals overlap).
* **near H_0** (claim 4): the end-window entropy of each seed divided by that run's ``H_0`` (the
  ``eapo/H0`` it logged); *held* when the interval of that ratio lies inside ``1 ± band``
  (:data:`ENTROPY_BAND`, 10%); *did not hold* when it lies entirely outside; otherwise *within noise*.
* **rises faster** (claim 8): each run's reward slope, the ordinary least-squares slope of
  ``reward/mean`` against the step over every step, with ``SE² = σ²_res / Σ(t − t̄)² · (1+ρ)/(1−ρ)``
  (ρ: the residuals' lag-1 autocorrelation, clipped to [0, 0.9]); several seeds: the mean slope,
  ``SE² = Σ SE_s²/S²``. *held* when NSR's interval lies entirely above PSR's, *did not hold* when
  entirely below, *within noise* otherwise (a run with fewer than ``2·MIN_WINDOW_STEPS`` steps: *not
  measured*).
* **best on Avg** (claim 5): each method's Avg with its 95% bootstrap interval over prompts (from
  ``eapo eval``); with several seeds the mean over seeds and ``SE² = Σ SE_i²/S² + s²_seeds/S``
  (conservative: the evaluation noise is counted twice). *held* when EAPO's interval lies entirely
  above every other method's; *did not hold* when some method's interval lies entirely above
  EAPO's; otherwise *within noise*.

A claim whose runs are missing (failed, not finished, a metric not logged) is *not measured*, with
the reason. Nothing else decides a verdict: the wording in ``claims.md`` is generated from these rules.

``study.runs`` replaces the five methods with labelled runs (:func:`study_runs`), e.g.::

    study:
      seeds: [0, 1, 2]
      runs:
        - {label: W-REINFORCE w+=0.1, method: w_reinforce, overrides: {w_pos: 0.1}}
        - {label: W-REINFORCE w+=0.05, method: w_reinforce, overrides: {w_pos: 0.05}, seeds: [0, 1]}
        - {label: Clip-higher, method: clip_higher, overrides: {algorithm.epsilon_high: 0.28}, seeds: [0, 1]}

The claims find runs by method and effective weights (:func:`run_role`), so the eight claims above
read the w+ = 0.1 / w0 = 0.2 runs whatever they are labelled. With such runs, ``claims.md`` also judges
the paper's own sentences (:mod:`eapo.study_paper`), ``sensitivity.md`` shows every metric and both
Avgs, and ``dynamics.png`` draws each configuration's mean over seeds with a band across them
(:func:`write_study_tables`). A run whose weights are gone but whose committed small outputs are
complete counts as finished (:func:`eapo.run_dir.training_finished`, :mod:`eapo.sweep.run`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from eapo.run_dir import SUMMARY_FILE, atomic_write_text, read_metrics, training_finished
from eapo.sweep.manifest import MANIFEST, read_json
from eapo.sweep.plan import WEIGHT_KEYS, EvalOptions, SweepError, SweepRun, plan_runs
from eapo.sweep.run import SweepReport, run_sweep

__all__ = [
    "STUDY_METHODS",
    "STUDY_GRIDS",
    "HELD",
    "NOT_HELD",
    "WITHIN_NOISE",
    "NOT_MEASURED",
    "ENTROPY_BAND",
    "MIN_WINDOW_STEPS",
    "StudySettings",
    "Interval",
    "Claim",
    "StudyReport",
    "read_study_config",
    "plan_study",
    "window_interval",
    "avg_interval",
    "change_verdict",
    "slope_interval",
    "band_verdict",
    "best_verdict",
    "assess_claims",
    "claims_markdown",
    "run_study",
]

#: The five methods of the paper's comparison, in its table order.
STUDY_METHODS = ("grpo", "psr", "nsr", "w_reinforce", "eapo")
#: Their weights, set explicitly (not left to defaults): W-REINFORCE w+ = 0.1, EAPO w0 = 0.2.
STUDY_GRIDS = ("w_reinforce.w_pos=0.1", "eapo.w0=0.2")

HELD = "held"
NOT_HELD = "did not hold"
WITHIN_NOISE = "within noise"
NOT_MEASURED = "not measured"

#: Claim 4: "near H_0" means within ±10% of H_0.
ENTROPY_BAND = 0.10
#: "Not cut at the cap": at most 10% of the end window's completions hit max_completion_tokens.
CUT_SHARE = 0.10
#: A start/end window has at least this many steps (when the run has them).
MIN_WINDOW_STEPS = 3
_Z95 = 1.959963984540054

ENTROPY_KEY = "entropy/rollout"
LENGTH_KEY = "completion/mean_length"
REWARD_KEY = "reward/mean"
H0_KEY = "eapo/H0"
#: TRL's share of a step's completions that hit max_completion_tokens (kept in metrics.jsonl as logged).
CLIPPED_KEY = "completions/clipped_ratio"

VERDICT_RULES = (
    "- **start / end**: mean of the metric over the first / last {window:.0%} of optimisation steps (at least "
    f"{MIN_WINDOW_STEPS} steps, at most half the run; shorter runs: not measured), with a 95% interval mean ± 1.96·SE, SE² = s²/n_eff, n_eff = n·(1−ρ)/(1+ρ) "
    "(ρ: lag-1 autocorrelation of the window, clipped to [0, 0.9]). Several seeds: mean over seeds, "
    "SE² = Σ SE_s²/S² (start and end of a seed are paired).\n"
    "- **lowers / raises / shortens / lengthens**: held if the end interval lies entirely below (above) the start interval; "
    "did not hold if it lies entirely on the other side; within noise if the intervals overlap.\n"
    "- **near H_0**: end-window entropy ÷ the run's logged H_0 (eapo/H0); held if its interval lies inside "
    "1 ± {band:.0%}; did not hold if entirely outside; within noise otherwise.\n"
    "- **rises faster**: each run's reward slope per step (least squares of reward/mean on the step, every step) "
    "with a 95% interval b ± 1.96·SE, SE² = σ²_res/Σ(t−t̄)²·(1+ρ)/(1−ρ) (ρ: lag-1 autocorrelation of the "
    "residuals, clipped to [0, 0.9]); several seeds: mean slope, SE² = Σ SE_s²/S². Held if NSR's interval lies "
    "entirely above PSR's; did not hold if entirely below; within noise otherwise.\n"
    "- **best on Avg**: Avg with its 95% bootstrap interval over prompts (eapo eval); several seeds: mean over "
    "seeds, SE² = Σ SE_i²/S² + s²_seeds/S (conservative). Held if EAPO's interval lies entirely above every "
    "other method's; did not hold if another method's lies entirely above EAPO's; within noise otherwise.\n"
    "- **not measured**: a run the claim needs is missing, failed, or did not log the metric."
)


# --------------------------------------------------------------------------------------------
# Settings and plan
# --------------------------------------------------------------------------------------------


@dataclass
class StudySettings:
    """The ``study:`` section of a study config (every field can also be given on the command line)."""

    seeds: list[int] = field(default_factory=lambda: [0])  # training seeds; results are pooled per method
    jobs: int = 5  # configurations trained/evaluated at once (they share one GPU)
    k: int = 8  # samples per prompt in evaluation (RL@k, RR@k)
    eval_split: str = "dev"  # the held-out split
    eval_limit: int | None = 100  # prompts evaluated (None: the whole split)
    eval_max_new_tokens: int | None = None  # response cap in evaluation (None: the run's)
    eval_batch_size: int | None = None  # prompts per generation call (None: eapo eval's default)
    backend: str = "auto"  # eval generation backend
    window: float = 0.1  # fraction of steps in the start / end windows
    entropy_band: float = ENTROPY_BAND  # claim 4's tolerance around H_0 (and the stable-entropy band)
    max_clipped_share: float = (
        CUT_SHARE  # "not cut at the cap": at most this share of completions hit the cap
    )
    # labelled runs, each {label, method, overrides, seeds}; None: the paper's five methods x seeds
    runs: list[dict[str, Any]] | None = None

    def validate(self, where: str = "study") -> StudySettings:
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in self.seeds):
            raise SweepError(f"{where}.seeds must be a non-empty list of integers, got {self.seeds!r}")
        if self.jobs < 1 or self.k < 1:
            raise SweepError(f"{where}.jobs and {where}.k must be >= 1 (got {self.jobs}, {self.k})")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise SweepError(f"{where}.eval_limit must be >= 1 or null, got {self.eval_limit}")
        if not 0 < self.window <= 0.5:
            raise SweepError(f"{where}.window must be in (0, 0.5], got {self.window}")
        if not 0 < self.entropy_band < 1:
            raise SweepError(f"{where}.entropy_band must be in (0, 1), got {self.entropy_band}")
        if not 0 < self.max_clipped_share < 1:
            raise SweepError(f"{where}.max_clipped_share must be in (0, 1), got {self.max_clipped_share}")
        if self.runs is not None:
            study_runs(self.runs, self.seeds, where=f"{where}.runs")  # raises on a bad entry
        return self


def read_study_config(path: str | os.PathLike) -> tuple[StudySettings, dict[str, Any]]:
    """Split a study config into its ``study:`` settings and the training config every run starts from."""
    from eapo.config import ConfigError, read_config_tree

    path = Path(path)
    if not path.exists():
        raise SweepError(f"study config {path} does not exist (the preset is configs/study.yaml)")
    try:
        tree = read_config_tree(path)
    except ConfigError as error:
        raise SweepError(str(error)) from None
    section = tree.pop("study", None) or {}
    if not isinstance(section, dict):
        raise SweepError(
            f"{path}: 'study' must be a mapping of {', '.join(f.name for f in fields(StudySettings))}"
        )
    known = {f.name for f in fields(StudySettings)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise SweepError(f"{path}: unknown key study.{unknown[0]}; valid keys: {', '.join(sorted(known))}")
    if isinstance(section.get("seeds"), int):
        section["seeds"] = [section["seeds"]]
    return StudySettings(**section).validate(f"{path}: study"), tree


def plan_study(seeds: Sequence[int], runs: Sequence[Mapping[str, Any]] | None = None) -> list[SweepRun]:
    """The study's runs: without ``runs``, the five methods × ``seeds``, every method from the same
    base and seed; with ``runs`` (the ``study.runs`` entries), those labelled runs (:func:`study_runs`)."""
    if runs is not None:
        return study_runs(runs, seeds)
    return plan_runs(STUDY_METHODS, STUDY_GRIDS, list(seeds))


_RUN_FIELDS = ("label", "method", "overrides", "seeds")


def study_runs(
    entries: Sequence[Mapping[str, Any]], seeds: Sequence[int], *, where: str = "study.runs"
) -> list[SweepRun]:
    """The labelled runs of a study config's ``runs:`` list, each × its seeds (default: ``study.seeds``).

    Each entry: ``label`` (names the run directory ``<label>-seed<N>`` and its table row; distinct),
    ``method`` (an ``algorithm.method``), ``overrides`` (optional mapping: a weight — ``w_pos``,
    ``w_neg``, ``w0``, ``w_min``, ``w_max``, ``anchor_steps``, bare or as ``algorithm.KEY`` — or any
    dotted config key, e.g. ``algorithm.epsilon_high: 0.28``) and ``seeds`` (optional list of ints).
    Two entries of the same method with different weights are two configurations (the sensitivity
    points); the claims find runs by method and effective weights (:func:`run_role`), not by label.
    """
    from eapo.core import METHODS

    if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
        raise SweepError(f"{where} must be a non-empty list of {{label, method, overrides, seeds}} mappings")
    planned: list[SweepRun] = []
    labels: set[str] = set()
    for index, entry in enumerate(entries):
        here = f"{where}[{index}]"
        if not isinstance(entry, Mapping):
            raise SweepError(f"{here} must be a mapping with keys {', '.join(_RUN_FIELDS)}, got {entry!r}")
        unknown = sorted(set(entry) - set(_RUN_FIELDS))
        if unknown:
            raise SweepError(f"{here}: unknown key {unknown[0]!r}; valid keys: {', '.join(_RUN_FIELDS)}")
        label, method = entry.get("label"), entry.get("method")
        if not isinstance(label, str) or not label.strip():
            raise SweepError(f"{here}.label must be a non-empty string (it names the run directory)")
        if label in labels:
            raise SweepError(f"{here}.label {label!r} is used twice; every run needs its own label")
        labels.add(label)
        if method not in METHODS:
            raise SweepError(f"{here}.method {method!r} is not a method; valid: {', '.join(METHODS)}")
        overrides = entry.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise SweepError(f"{here}.overrides must be a mapping like {{w_pos: 0.05}}, got {overrides!r}")
        weights: dict[str, float] = {}
        extra: list[tuple[str, Any]] = []
        for key, value in overrides.items():
            bare = key.removeprefix("algorithm.")
            if bare in WEIGHT_KEYS:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise SweepError(f"{here}.overrides.{key} must be a number, got {value!r}")
                weights[bare] = float(value)
            elif "." in key:
                extra.append((key, value))
            else:
                raise SweepError(
                    f"{here}.overrides.{key}: not a weight ({', '.join(WEIGHT_KEYS)}); write other settings "
                    f"as dotted config keys, e.g. algorithm.{key}"
                )
        run_seeds = entry.get("seeds", list(seeds))
        if isinstance(run_seeds, int) and not isinstance(run_seeds, bool):
            run_seeds = [run_seeds]
        if not run_seeds or not all(isinstance(v, int) and not isinstance(v, bool) for v in run_seeds):
            raise SweepError(f"{here}.seeds must be a non-empty list of integers, got {run_seeds!r}")
        for seed in dict.fromkeys(run_seeds):
            planned.append(SweepRun(method, tuple(sorted(weights.items())), seed, label, tuple(extra)))
    return planned


#: The weights the study's main rows run with (the paper's table): W-REINFORCE w+ = 0.1, EAPO w0 = 0.2.
STUDY_WEIGHTS: dict[str, dict[str, float]] = {"w_reinforce": {"w_pos": 0.1}, "eapo": {"w0": 0.2}}


def run_role(method: str, weights: Mapping[str, float] | None = None) -> str:
    """The name the claims know a configuration by: the method alone for its study weights
    (:data:`STUDY_WEIGHTS`, else the method's defaults), else ``method:key=value,...`` with the
    effective weights that differ from them: ``w_reinforce:w_pos=0.2``, ``eapo:w0=0.05``."""
    from eapo.evaluation.labels import effective_weights

    try:
        actual = effective_weights(method, dict(weights or {}))
        reference = effective_weights(method, STUDY_WEIGHTS.get(method))
    except ValueError:
        return method
    differ = {key: value for key, value in actual.items() if value != reference.get(key)}
    if not differ:
        return method
    return method + ":" + ",".join(f"{key}={value:g}" for key, value in sorted(differ.items()))


# --------------------------------------------------------------------------------------------
# Intervals and verdicts (pure functions)
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
    """The per-step slope of a metric, pooled over seeds (see the module docstring, claim 8).

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


# --------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------


@dataclass
class Claim:
    """One claim of the paper and what this study's numbers say about it."""

    key: str
    statement: str
    verdict: str
    evidence: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodData:
    """What the claims read for one method: per seed, the metric series and the evaluation results."""

    series: dict[str, list[list[float | None]]] = field(default_factory=dict)  # key -> per seed
    h0: list[float | None] = field(default_factory=list)  # per seed: the logged H_0
    results: list[dict[str, Any]] = field(default_factory=list)  # per seed: results.json
    runs: list[str] = field(default_factory=list)


def _ratio_series(entropy: list[list[float | None]], h0: list[float | None]) -> list[list[float | None]]:
    out = []
    for values, anchor in zip(entropy, h0, strict=True):
        if anchor is None or not anchor > 0:
            continue
        out.append([None if v is None else v / anchor for v in values])
    return out


def assess_claims(
    data: Mapping[str, MethodData], *, window: float = 0.1, entropy_band: float = ENTROPY_BAND
) -> tuple[list[Claim], dict[str, dict[str, Any]]]:
    """The five verdicts from each method's dynamics and evaluations. Returns ``(claims, per-method numbers)``."""
    empty = MethodData()
    table: dict[str, dict[str, Any]] = {}
    for method in STUDY_METHODS:
        d = data.get(method, empty)
        entropy, length = d.series.get(ENTROPY_KEY, []), d.series.get(LENGTH_KEY, [])
        table[method] = {
            "runs": list(d.runs),
            "seeds": len(d.runs),
            "entropy_start": window_interval(entropy, fraction=window, end=False),
            "entropy_end": window_interval(entropy, fraction=window, end=True),
            "length_start": window_interval(length, fraction=window, end=False),
            "length_end": window_interval(length, fraction=window, end=True),
            "avg": avg_interval(d.results),
            "avg_strict": avg_interval(d.results, "avg_strict"),
            "reward_slope": slope_interval(d.series.get(REWARD_KEY, [])),
            "steps": max((len(s) for s in entropy), default=0),
        }

    def change(method: str, what: str, expect: str, statement: str, key: str) -> Claim:
        start, end = table[method][f"{what}_start"], table[method][f"{what}_end"]
        verdict = change_verdict(start, end, expect)
        unit = "nats/token" if what == "entropy" else "tokens"
        if start is None or end is None:
            evidence = _missing(data.get(method), what, table[method]["steps"])
        else:
            evidence = f"{_SHORT[method]} {what}: start {start.text()} → end {end.text()} {unit}"
        return Claim(key, statement, verdict, evidence, {"start": start, "end": end})

    claims = [
        change("psr", "entropy", "decrease", "PSR lowers entropy", "psr_lowers_entropy"),
        change("psr", "length", "decrease", "PSR shortens answers", "psr_shortens_answers"),
        change("nsr", "entropy", "increase", "NSR raises entropy", "nsr_raises_entropy"),
    ]

    eapo = data.get("eapo", empty)
    ratio = window_interval(
        _ratio_series(eapo.series.get(ENTROPY_KEY, []), eapo.h0), fraction=window, end=True
    )
    h0_values = [h for h in eapo.h0 if h is not None]
    verdict = band_verdict(ratio, 1 - entropy_band, 1 + entropy_band)
    if ratio is None:
        evidence = _missing(data.get("eapo"), "entropy and H_0", table["eapo"]["steps"])
    else:
        h0_text = ", ".join(f"{h:.3f}" for h in h0_values)
        evidence = (
            f"EAPO end entropy {table['eapo']['entropy_end'].text()} nats/token vs H_0 = {h0_text}: "
            f"end/H_0 = {ratio.text()} (band 1 ± {entropy_band:.0%})"
        )
    claims.append(
        Claim(
            "eapo_holds_entropy",
            "EAPO holds entropy near H_0",
            verdict,
            evidence,
            {"ratio": ratio, "h0": h0_values},
        )
    )

    others = {m: table[m]["avg"] for m in STUDY_METHODS if m != "eapo"}
    verdict = best_verdict(table["eapo"]["avg"], others)
    if table["eapo"]["avg"] is None or any(v is None for v in others.values()):
        missing = [m for m in STUDY_METHODS if table[m]["avg"] is None]
        evidence = f"no evaluation for {', '.join(missing)}"
    else:
        evidence = "Avg: " + "; ".join(f"{_SHORT[m]} {table[m]['avg'].text()}" for m in STUDY_METHODS)
    claims.append(
        Claim(
            "eapo_best_avg",
            "EAPO scores best on Avg",
            verdict,
            evidence,
            {m: table[m]["avg"] for m in STUDY_METHODS},
        )
    )
    claims += [
        change("grpo", "entropy", "decrease", "GRPO lowers entropy", "grpo_lowers_entropy"),
        change("nsr", "length", "increase", "NSR lengthens answers", "nsr_lengthens_answers"),
    ]

    nsr, psr = table["nsr"]["reward_slope"], table["psr"]["reward_slope"]
    verdict = best_verdict(nsr, {"psr": psr})
    if nsr is None or psr is None:
        missing = [m for m, v in (("nsr", nsr), ("psr", psr)) if v is None]
        evidence = "; ".join(
            f"{_SHORT[m]}: {_missing(data.get(m), 'reward', table[m]['steps'])}" for m in missing
        )
    else:
        evidence = f"reward slope per step: NSR {nsr.text(5)} vs PSR {psr.text(5)}"
    claims.append(
        Claim(
            "nsr_reward_rises_faster",
            "NSR's reward rises faster than PSR's",
            verdict,
            evidence,
            {"nsr": nsr, "psr": psr},
        )
    )
    return claims, table


def _missing(data: MethodData | None, what: str, steps: int) -> str:
    if data is None or not data.runs:
        return "no finished run"
    if steps < 2 * MIN_WINDOW_STEPS:
        return f"{steps} logged steps of {what}: too few for start and end windows of {MIN_WINDOW_STEPS} steps each"
    return f"{what} not logged"


_SHORT = {"grpo": "GRPO", "psr": "PSR", "nsr": "NSR", "w_reinforce": "W-REINFORCE", "eapo": "EAPO"}
_LABELS = {
    "grpo": "GRPO",
    "psr": "PSR",
    "nsr": "NSR",
    "w_reinforce": "W-REINFORCE (w+=0.1)",
    "eapo": "EAPO (w0=0.2)",
}


def _cell(interval: Interval | None) -> str:
    return "–" if interval is None else interval.text()


def claims_markdown(
    claims: Sequence[Claim],
    table: Mapping[str, Mapping[str, Any]],
    *,
    window: float,
    entropy_band: float,
    context: Sequence[str] = (),
) -> str:
    """``claims.md``: the verdicts, the numbers behind them, and the rules that decided them."""
    lines = ["# Does EAPO do what the paper says? Verdicts of this study", ""]
    lines += [f"{line}" for line in context]
    if context:
        lines.append("")
    lines += ["| Claim | Verdict | Numbers |", "|---|---|---|"]
    for claim in claims:
        lines.append(f"| {claim.statement} | **{claim.verdict}** | {claim.evidence} |")
    lines += [
        "",
        "## Per method",
        "",
        "Entropy in nats/token, length in tokens: start / end = first / last window of steps with a 95% "
        "interval; Avg with its 95% interval (strict: an answer without its <advice> block scores 0).",
        "",
        "| Method | Seeds | Steps | Entropy start | Entropy end | Length start | Length end | Reward slope /step | Avg | Avg (strict) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in STUDY_METHODS:
        row = table[method]
        slope = row.get("reward_slope")
        lines.append(
            f"| {_LABELS[method]} | {row['seeds']} | {row['steps']} | {_cell(row['entropy_start'])} | "
            f"{_cell(row['entropy_end'])} | {_cell(row['length_start'])} | {_cell(row['length_end'])} | "
            f"{'–' if slope is None else slope.text(5)} | {_cell(row['avg'])} | {_cell(row.get('avg_strict'))} |"
        )
    lines += [
        "",
        "## How each verdict is decided",
        "",
        VERDICT_RULES.format(window=window, band=entropy_band),
        "",
        "The verdicts say what these runs show at this scale (model, data, steps, seeds); they are not a "
        "statement about the paper's setting.",
        "",
    ]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Interval):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class StudyReport:
    output_dir: Path
    sweep: SweepReport
    claims: list[Claim]
    files: list[Path]
    wall_time_s: float
    paper_claims: list[Claim] = field(default_factory=list)  # eapo.study_paper: the paper's sentences


def collect_method_data(output_dir: Path, runs: Sequence[SweepRun]) -> dict[str, MethodData]:
    """Read each planned run's metrics.jsonl and eval/results.json, grouped by configuration
    (:func:`run_role`: ``"eapo"``, ``"w_reinforce:w_pos=0.2"``, ...; seeds pooled).

    An evaluation counts once its run's training finished (:func:`eapo.run_dir.training_finished`:
    ``final/`` exists, or — the weights gone — ``metrics.jsonl`` reached ``train.max_steps``)."""
    data: dict[str, MethodData] = {}
    for run in runs:
        run_dir = output_dir / "runs" / run.name
        rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
        results = read_json(run_dir / "eval" / "results.json")
        if not rows and results is None:
            continue
        d = data.setdefault(run_role(run.method, dict(run.weights)), MethodData())
        d.runs.append(run.name)
        if rows:
            for key in (ENTROPY_KEY, LENGTH_KEY, "reward/mean", "eapo/w_pos", CLIPPED_KEY):
                d.series.setdefault(key, []).append([row.get(key) for row in rows])
            d.h0.append(next((row[H0_KEY] for row in rows if row.get(H0_KEY) is not None), None))
        if results is not None and training_finished(run_dir):
            d.results.append(results)
    return data


#: The metric columns of the study's sensitivity.md (the paper's layout, every metric, both Avgs).
SENSITIVITY_COLUMNS = ("rouge_l", "reranker", "rl_at_k", "rr_at_k", "avg", "avg_strict")


def write_study_tables(output_dir: Path, runs: Sequence[SweepRun]) -> list[Path]:
    """The study's versions of the sweep's sensitivity table and figure (they replace the sweep's):
    ``sensitivity.md`` / ``.csv`` with every metric and both Avgs (:data:`SENSITIVITY_COLUMNS`), and
    ``dynamics.png`` / ``.svg`` with one line per configuration (the mean over its seeds) and a band
    from its lowest to its highest seed."""
    from eapo.plot import plot_seed_bands
    from eapo.sweep.manifest import update_manifest
    from eapo.sweep.tables import collect_entries, sensitivity_table

    manifest = update_manifest(output_dir / MANIFEST, {}, {})
    written: list[Path] = []
    markdown, table_csv = sensitivity_table(
        collect_entries(output_dir, manifest, include_base=False), columns=SENSITIVITY_COLUMNS
    )
    for name, text in (("sensitivity.md", markdown), ("sensitivity.csv", table_csv)):
        atomic_write_text(output_dir / name, text)
        written.append(output_dir / name)
    groups: dict[str, list[Path]] = {}
    for run in runs:
        run_dir = output_dir / "runs" / run.name
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and metrics.stat().st_size:
            groups.setdefault(run.label, []).append(run_dir)
    if groups:
        plot_seed_bands(groups, output_dir / "dynamics.png", title="Training dynamics")
        written += [output_dir / "dynamics.png", output_dir / "dynamics.svg"]
    return written


def _engines(output_dir: Path, runs: Sequence[SweepRun]) -> list[str]:
    engines = []
    for run in runs:
        summary = read_json(output_dir / "runs" / run.name / SUMMARY_FILE) or {}
        if summary.get("rollout/engine"):
            engines.append(str(summary["rollout/engine"]))
    return engines


def run_study(
    config: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    settings: StudySettings | None = None,
    overrides: Sequence[str] = (),
    runner: Any = None,
    echo: Callable[[str], None] = print,
) -> StudyReport:
    """Run (or finish) the study and write the sweep's tables and figure plus ``claims.md`` / ``claims.json``.

    Args:
        config: a study config: a training config with an optional ``study:`` section.
        settings: replaces the config's ``study:`` section (the CLI merges its flags into it).
        overrides: ``key=value`` applied to every run's training config.
        runner: how train/eval are executed (default: subprocesses, as ``eapo sweep``).
    """
    started = time.time()
    output_dir = Path(output_dir)
    from_file, tree = read_study_config(config)
    settings = (settings or from_file).validate()
    runs = plan_study(settings.seeds, settings.runs)

    # The training config every run starts from: the study config without its study section, checked
    # (with the overrides) before anything is written.
    from eapo.config import ConfigError, config_from_tree

    try:
        config_from_tree(copy.deepcopy(tree), list(overrides), source=config)
    except ConfigError as error:
        raise SweepError(str(error)) from None
    output_dir.mkdir(parents=True, exist_ok=True)
    base = output_dir / "study-base.yaml"
    text = f"# The training part of {config} (written by eapo study)\n" + yaml.safe_dump(
        tree, sort_keys=False, allow_unicode=True
    )
    if not base.exists() or base.read_text(encoding="utf-8") != text:
        atomic_write_text(base, text)

    eval_options = EvalOptions(
        k=settings.k,
        limit=settings.eval_limit,
        split=settings.eval_split,
        max_new_tokens=settings.eval_max_new_tokens,
        batch_size=settings.eval_batch_size,
        backend=settings.backend,
        scorers="rouge_l,reranker,format",
    )
    sweep = run_sweep(
        base,
        output_dir,
        methods=STUDY_METHODS,
        planned=runs,
        overrides=list(overrides),
        eval_options=eval_options,
        include_base=True,
        runner=runner,
        echo=echo,
        jobs=settings.jobs,
    )

    from eapo.study_paper import assess_paper_claims, paper_claims_markdown

    data = collect_method_data(output_dir, runs)
    claims, table = assess_claims(data, window=settings.window, entropy_band=settings.entropy_band)
    paper_claims, paper_tables = assess_paper_claims(
        data,
        window=settings.window,
        entropy_band=settings.entropy_band,
        max_clipped_share=settings.max_clipped_share,
    )
    study_files = write_study_tables(output_dir, runs)
    wall = time.time() - started
    engines = _engines(output_dir, runs)
    context = [
        f"Study config: `{config}`; seeds: {', '.join(map(str, settings.seeds))}; evaluation: split "
        f"`{settings.eval_split}`, {settings.eval_limit or 'all'} prompts, k = {settings.k}. "
        f"Runs: {output_dir / 'runs'}; tables: comparison.md; figure: dynamics.png.",
        f"Rollout engine(s): {', '.join(sorted(set(engines))) or 'unknown'}. "
        f"This invocation of eapo study took {wall:.0f} s (finished runs are skipped, not retimed).",
    ]
    if sweep.failures:
        context.append(f"Failed runs (their claims are not measured): {', '.join(sorted(sweep.failures))}.")
    markdown = claims_markdown(
        claims, table, window=settings.window, entropy_band=settings.entropy_band, context=context
    )
    markdown += "\n" + paper_claims_markdown(paper_claims, paper_tables)
    atomic_write_text(output_dir / "claims.md", markdown)
    payload = {
        "config": str(config),
        "settings": asdict(settings),
        "wall_time_s": wall,
        "engines": engines,
        "claims": [_jsonable(asdict(claim)) for claim in claims],
        "methods": _jsonable(table),
        "paper_claims": [_jsonable(asdict(claim)) for claim in paper_claims],
        "entropy_controls": _jsonable(paper_tables["entropy_controls"]),
        "configurations": {role: list(d.runs) for role, d in data.items()},
        "manifest": MANIFEST,
    }
    atomic_write_text(output_dir / "claims.json", json.dumps(payload, indent=2, default=str) + "\n")
    files = [*sweep.files, *study_files, output_dir / "claims.md", output_dir / "claims.json"]
    echo(f"wrote {output_dir / 'claims.md'}")
    return StudyReport(output_dir, sweep, claims, files, wall, list(paper_claims))
