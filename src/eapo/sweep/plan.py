"""Planning a sweep: the ``--grid`` axes and every (method, weights, seed) configuration they make. What
every ``eapo eval`` of the sweep runs with is an :class:`~eapo.evaluation.settings.EvalSettings`."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eapo.core import WEIGHT_SETTINGS, WEIGHTING_SCHEMES, method_scheme
from eapo.core import methods as registered_methods
from eapo.evaluation.labels import method_label

#: Every per-method weighting key of ``algorithm`` (dropped for methods that do not take them):
#: :data:`eapo.core.WEIGHT_SETTINGS`.
WEIGHT_KEYS: tuple[str, ...] = tuple(WEIGHT_SETTINGS)
#: Weights a grid can vary: the float weights (``anchor_steps`` counts steps, not a weight).
GRID_KEYS: tuple[str, ...] = tuple(key for key, spec in WEIGHT_SETTINGS.items() if spec.type is float)


def grid_targets(key: str) -> tuple[str, ...]:
    """The methods an unscoped ``--grid KEY=...`` varies: the schemes whose registration lists ``KEY`` in its
    :attr:`eapo.core.Scheme.grid` (see :mod:`eapo.sweep`)."""
    return tuple(name for name, scheme in WEIGHTING_SCHEMES.items() if key in scheme.grid)


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
        if method not in registered_methods():
            raise SweepError(
                f"--grid {spec!r}: unknown method {method!r}; valid: {', '.join(registered_methods())}"
            )
        accepted = WEIGHTING_SCHEMES[method_scheme(method)].accepts
        if key not in accepted:
            raise SweepError(
                f"--grid {spec!r}: method {method!r} does not take {key}; it accepts {', '.join(accepted)}"
            )
        return GridAxis(key, values, (method,), scoped=True)
    targets = grid_targets(key)
    if not targets:
        raise SweepError(
            f"--grid {spec!r}: no method varies {key} unscoped; scope it to a method that takes it "
            f"(e.g. --grid {next(n for n, s in WEIGHTING_SCHEMES.items() if key in s.accepts)}.{target}=...)"
        )
    return GridAxis(key, values, targets)


@dataclass(frozen=True)
class SweepRun:
    """One configuration of the sweep: a method, the grid weights it overrides, and a seed.

    A labelled run (a study's ``runs:`` entry) also carries ``tag`` — its label, which then names the
    run directory (``<tag>-seed<N>``) and its table row — and ``extra``: further ``key=value``
    overrides of the training config (dotted keys, e.g. ``("algorithm.epsilon_high", 0.28)``).
    """

    method: str
    weights: tuple[tuple[str, float], ...] = ()
    seed: int | None = None
    tag: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        if self.tag is not None:
            parts = [_slug(self.tag)]
        else:
            parts = [self.method] + [f"{key}{value:g}" for key, value in self.weights]
        if self.seed is not None:
            parts.append(f"seed{self.seed}")
        return "-".join(parts)

    @property
    def overrides(self) -> list[str]:
        items = [f"algorithm.method={self.method}"] + [
            f"algorithm.{key}={value!r}" for key, value in self.weights
        ]
        items += [f"{key}={_override_value(value)}" for key, value in self.extra]
        if self.seed is not None:
            items.append(f"train.seed={self.seed}")
        return items

    @property
    def label(self) -> str:
        return self.tag if self.tag is not None else method_label(self.method, dict(self.weights))


def _slug(tag: str) -> str:
    """A directory-safe form of a run label: ``"W-REINFORCE w+=0.05"`` -> ``"W-REINFORCE_w+=0.05"``."""
    return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", tag).strip("_") or "run"


def _override_value(value: Any) -> str:
    """A ``key=value`` override's value, read back as YAML by :func:`eapo.config.parse_overrides`."""
    return value if isinstance(value, str) else json.dumps(value)


def plan_runs(
    methods: Sequence[str], grids: Sequence[GridAxis | str] = (), seeds: Sequence[int] | None = None
) -> list[SweepRun]:
    """Every configuration: per method, the product of the grid axes that vary it, times the seeds."""
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise SweepError("--methods is empty; e.g. --methods grpo,psr,nsr,w_reinforce,eapo")
    unknown = [m for m in methods if m not in registered_methods()]
    if unknown:
        raise SweepError(f"--methods: unknown {unknown}; valid: {', '.join(registered_methods())}")
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
