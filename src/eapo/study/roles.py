"""What a study's claims read: each configuration's *role*, and its runs' series and evaluations.

A claim names configurations by role, not by label: the method alone for the paper's study weights
(:data:`STUDY_WEIGHTS`, else the method's defaults), else ``method:key=value,...`` with the effective
weights that differ from them (:func:`run_role`): ``eapo`` is EAPO with w0 = 0.2, ``eapo:w0=1`` EAPO
with w0 = 1, ``w_reinforce:w_pos=0.2`` W-REINFORCE with w+ = 0.2. :class:`MethodData` holds one role's
runs, seeds pooled (:func:`eapo.study.run.collect_method_data` fills it from the run directories).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "STUDY_METHODS",
    "STUDY_WEIGHTS",
    "ENTROPY_KEY",
    "LENGTH_KEY",
    "REWARD_KEY",
    "H0_KEY",
    "CLIPPED_KEY",
    "SERIES_KEYS",
    "MethodData",
    "run_role",
]

#: The five methods of the paper's comparison, in its table order (the default plan of ``eapo study``).
STUDY_METHODS = ("grpo", "psr", "nsr", "w_reinforce", "eapo")

#: The weights the study's main rows run with (the paper's table): W-REINFORCE w+ = 0.1, EAPO w0 = 0.2.
STUDY_WEIGHTS: dict[str, dict[str, float]] = {"w_reinforce": {"w_pos": 0.1}, "eapo": {"w0": 0.2}}

#: Metric keys of each run's metrics.jsonl that the committed claims files read.
ENTROPY_KEY = "entropy/rollout"
LENGTH_KEY = "completion/mean_length"
REWARD_KEY = "reward/mean"
H0_KEY = "eapo/H0"
#: The share of a step's completions cut at max_completion_tokens (:func:`eapo.run_dir.cap_share`).
CLIPPED_KEY = "completions/clipped_ratio"

#: The per-step metrics read from every run (a claims file may name more: they are read too).
SERIES_KEYS = (
    ENTROPY_KEY,
    LENGTH_KEY,
    REWARD_KEY,
    "eapo/w_pos",
    CLIPPED_KEY,
    "entropic/alpha",
    "entropy_control/coef",
    "eapo/integral",
)


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
