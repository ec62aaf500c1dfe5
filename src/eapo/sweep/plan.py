"""Planning a sweep: the ``--grid`` axes, every (method, weights, seed) configuration they make, and the
options every ``eapo eval`` of the sweep runs with."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eapo.core import METHODS, WEIGHTING_SCHEMES, method_scheme
from eapo.evaluation.labels import method_label

#: Weights a grid can vary.
GRID_KEYS = ("w_pos", "w_neg", "w0", "w_min", "w_max")
#: Every per-method weighting key of ``algorithm`` (dropped for methods that do not take them).
WEIGHT_KEYS = (*GRID_KEYS, "anchor_steps")
#: The methods an unscoped ``--grid KEY=...`` varies (see :mod:`eapo.sweep`).
GRID_TARGETS: dict[str, tuple[str, ...]] = {
    "w_pos": ("w_reinforce",),
    "w_neg": ("w_reinforce",),
    "w0": ("eapo",),
    "w_min": ("eapo",),
    "w_max": ("eapo",),
}


class SweepError(ValueError):
    """The sweep cannot start (bad grid, bad config, a run directory with another configuration)."""


@dataclass(frozen=True)
class GridAxis:
    """One ``--grid``: a weight, its values, and the methods it varies."""

    key: str
    values: tuple[float, ...]
    methods: tuple[str, ...]
    scoped: bool = False


def parse_grid(spec: str) -> GridAxis:
    """``"w_pos=0.05,0.1"`` or ``"eapo.w_neg=0.5,1"`` -> :class:`GridAxis`."""
    if "=" not in spec:
        raise SweepError(
            f"--grid {spec!r} must look like KEY=V1,V2 (e.g. w_pos=0.05,0.1,0.2 or eapo.w0=0.1,0.2)"
        )
    target, _, raw = spec.partition("=")
    target = target.strip()
    method, _, key = target.rpartition(".")
    if key not in GRID_KEYS:
        raise SweepError(f"--grid {spec!r}: {key!r} is not a grid key; valid: {', '.join(GRID_KEYS)}")
    try:
        values = tuple(float(v) for v in raw.split(",") if v.strip())
    except ValueError:
        raise SweepError(f"--grid {spec!r}: values must be comma-separated numbers") from None
    if not values:
        raise SweepError(f"--grid {spec!r} has no values")
    if len(set(values)) != len(values):
        raise SweepError(f"--grid {spec!r} repeats a value")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise SweepError(f"--grid {spec!r}: weights must be finite and >= 0")
    if method:
        if method not in METHODS:
            raise SweepError(f"--grid {spec!r}: unknown method {method!r}; valid: {', '.join(METHODS)}")
        accepted = WEIGHTING_SCHEMES[method_scheme(method)][1]
        if key not in accepted:
            raise SweepError(
                f"--grid {spec!r}: method {method!r} does not take {key}; it accepts {', '.join(accepted)}"
            )
        return GridAxis(key, values, (method,), scoped=True)
    return GridAxis(key, values, GRID_TARGETS[key])


@dataclass(frozen=True)
class SweepRun:
    """One configuration of the sweep: a method, the grid weights it overrides, and a seed."""

    method: str
    weights: tuple[tuple[str, float], ...] = ()
    seed: int | None = None

    @property
    def name(self) -> str:
        parts = [self.method] + [f"{key}{value:g}" for key, value in self.weights]
        if self.seed is not None:
            parts.append(f"seed{self.seed}")
        return "-".join(parts)

    @property
    def overrides(self) -> list[str]:
        items = [f"algorithm.method={self.method}"] + [
            f"algorithm.{key}={value!r}" for key, value in self.weights
        ]
        if self.seed is not None:
            items.append(f"train.seed={self.seed}")
        return items

    @property
    def label(self) -> str:
        return method_label(self.method, dict(self.weights))


def plan_runs(
    methods: Sequence[str], grids: Sequence[GridAxis | str] = (), seeds: Sequence[int] | None = None
) -> list[SweepRun]:
    """Every configuration: per method, the product of the grid axes that vary it, times the seeds."""
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise SweepError("--methods is empty; e.g. --methods grpo,psr,nsr,w_reinforce,eapo")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SweepError(f"--methods: unknown {unknown}; valid: {', '.join(METHODS)}")
    axes = [parse_grid(g) if isinstance(g, str) else g for g in grids]
    for axis in axes:
        if not set(axis.methods) & set(methods):
            raise SweepError(
                f"--grid {axis.key}=... varies {', '.join(axis.methods)}, which is not in --methods {','.join(methods)}"
            )
    seen_keys: dict[tuple[str, str], GridAxis] = {}
    for axis in axes:
        for method in axis.methods:
            if (method, axis.key) in seen_keys:
                raise SweepError(
                    f"two --grid options vary {axis.key} of {method}; give all its values in one --grid"
                )
            seen_keys[(method, axis.key)] = axis
    seed_list: list[int | None] = list(dict.fromkeys(seeds)) if seeds else [None]
    runs = []
    for method in methods:
        mine = [axis for axis in axes if method in axis.methods]
        for values in itertools.product(*[axis.values for axis in mine]):
            weights = tuple(sorted(zip([axis.key for axis in mine], values, strict=True)))
            for seed in seed_list:
                runs.append(SweepRun(method, weights, seed))
    return runs


@dataclass
class EvalOptions:
    """What ``eapo eval`` is run with for every configuration (and the base model)."""

    k: int = 8
    limit: int | None = None
    split: str = "dev"
    temperature: float | None = None
    max_new_tokens: int | None = None
    batch_size: int | None = None
    backend: str = "auto"
    scorers: str | None = None
    reranker_backend: str | None = None
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key_env: str | None = None
    seed: int = 0

    def cli_args(self) -> list[str]:
        args = [
            "--k",
            str(self.k),
            "--split",
            self.split,
            "--backend",
            self.backend,
            "--seed",
            str(self.seed),
        ]
        optional = {
            "--limit": self.limit,
            "--temperature": self.temperature,
            "--max-new-tokens": self.max_new_tokens,
            "--batch-size": self.batch_size,
            "--scorers": self.scorers,
            "--reranker-backend": self.reranker_backend,
            "--judge-base-url": self.judge_base_url,
            "--judge-model": self.judge_model,
            "--judge-api-key-env": self.judge_api_key_env,
        }
        for flag, value in optional.items():
            if value is not None:
                args += [flag, str(value)]
        return args

    def matches(self, results: Mapping[str, Any]) -> bool:
        """Whether an existing ``results.json`` was produced with these options (then it is reused)."""
        settings = results.get("settings", {})
        checks = [
            # results.json from before the explicit Avg column sets (no avg_laaj) is recomputed from
            # its stored samples (nothing is generated again)
            "avg_laaj" in results.get("metrics", {}),
            results.get("k") == self.k,
            settings.get("split") == self.split,
            settings.get("limit") == self.limit,
        ]
        if self.temperature is not None:
            checks.append(settings.get("temperature") == self.temperature)
        if self.max_new_tokens is not None:
            checks.append(settings.get("max_new_tokens") == self.max_new_tokens)
        labels = results.get("labels", {})
        requested = [
            name.strip() for name in (self.scorers or "rouge_l,reranker,format").split(",") if name.strip()
        ]
        if self.judge_base_url is not None:
            requested.append("laaj")
        checks.append(all(name in labels for name in requested))
        if self.reranker_backend == "cross-encoder" and "reranker" in labels:
            checks.append("stand-in" not in labels["reranker"])
        return all(checks)
