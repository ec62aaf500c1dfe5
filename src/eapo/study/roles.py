"""What a study's claims read: each configuration's *role*, and its runs' series and evaluations.

A claim names configurations by role, not by label: the method alone at its registered default weights
(:func:`eapo.evaluation.labels.effective_weights`), else ``method:key=value,...`` with the effective
weights that differ from them (:func:`run_role`): ``eapo`` is EAPO at its default w0 (0.2), ``eapo:w0=1``
EAPO with w0 = 1, ``w_reinforce:w_pos=0.2`` W-REINFORCE with w+ = 0.2 (its default: 0.1). :class:`MethodData` holds one role's
runs, seeds pooled (:func:`eapo.study.run.collect_method_data` fills it from the run directories).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENTROPY_KEY",
    "LENGTH_KEY",
    "REWARD_KEY",
    "H0_KEY",
    "CLIPPED_KEY",
    "SERIES_KEYS",
    "MethodData",
    "run_role",
]

#: Metric keys of each run's metrics.jsonl (the library's own names).
ENTROPY_KEY = "entropy/rollout"
LENGTH_KEY = "completion/mean_length"
REWARD_KEY = "reward/mean"
H0_KEY = "eapo/H0"
#: The share of a step's completions cut at max_completion_tokens (:func:`eapo.run_dir.cap_share`).
CLIPPED_KEY = "completions/clipped_ratio"

#: The per-step metrics read from every run, whatever its study (every metric a claims file names is read
#: too: :attr:`eapo.study.claims.ClaimsFile.metrics`).
SERIES_KEYS = (ENTROPY_KEY, LENGTH_KEY, REWARD_KEY, CLIPPED_KEY)


@dataclass
class MethodData:
    """One configuration's runs: per run with metrics, each metric's series, its logged H_0 and its seed
    (aligned); per finished and evaluated run, its ``results.json``."""

    series: dict[str, list[list[float | None]]] = field(default_factory=dict)  # key -> per seed
    h0: list[float | None] = field(default_factory=list)  # per seed: the logged H_0
    results: list[dict[str, Any]] = field(default_factory=list)  # per seed: results.json
    runs: list[str] = field(default_factory=list)
    seeds: list[int | None] = field(default_factory=list)  # per seed with metrics (aligned with series, h0)

    @property
    def steps(self) -> int:
        """The most steps any of its runs logged."""
        return max((len(values) for series in self.series.values() for values in series), default=0)


def run_role(method: str, weights: Mapping[str, float] | None = None) -> str:
    """The name the claims know a configuration by: the method alone at its registered default weights,
    else ``method:key=value,...`` with the effective weights that differ from them:
    ``w_reinforce:w_pos=0.2``, ``eapo:w0=0.05``."""
    from eapo.evaluation.labels import effective_weights

    try:
        actual = effective_weights(method, dict(weights or {}))
        reference = effective_weights(method)
    except ValueError:
        return method
    differ = {key: value for key, value in actual.items() if value != reference.get(key)}
    if not differ:
        return method
    return method + ":" + ",".join(f"{key}={value:g}" for key, value in sorted(differ.items()))
