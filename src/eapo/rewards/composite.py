"""The composite reward ``r(x, y) = α1·r_fmt + α2·r_rouge + α3·r_rerank + α4·r_llm`` (Section 2.3 of the EAPO paper).

``total = Σ_k α_k · r_k`` over the configured components. A weighted component that returns
``None`` for a sample (it could not score it: a failed judge call) is handled by ``missing``:

* ``"unscorable"`` (the default): the sample's total is ``None``. Every total of a group is then on
  one scale; the trainer gives such a rollout no advantage and leaves it out of its group's mean and
  std (TRL's treatment of a ``None`` reward), and ``reward/<c>/none_frac`` counts it.
* ``"renormalize"``: the component is dropped for that sample and the remaining weights rescaled to
  the full weight, ``total = (Σ_avail α_k r_k) · (Σ_all α_k / Σ_avail α_k)``. The sample keeps the
  range of a fully-scored one but is scored on different criteria than the rest of its group, which
  can flip its polarity.

With every weighted component ``None`` the total is ``None`` in both modes. Components with α = 0
are computed and logged but never enter the total.

Penalties. Every α is >= 0; a penalty carries its sign in its range: ``overlong`` scores in
[-1, 0], ``repetition`` in [max_penalty, 0] (default [-1, 0]), against [0, 1] for ``format``,
``rouge_l``, ``reranker`` and ``llm_judge``. The total's range is ``[Σ α_k·min_k, Σ α_k·max_k]``:
format 0.5 + rouge_l 0.25 + reranker 0.25 + overlong 0.2 gives a total in [-0.2, 1] (1 for a
tagged, perfect answer well under the cap; -0.2 for an untagged, unrelated one cut at the cap).
GRPO centres each group at its mean (and, scaling by group, divides by its std: ``(r - mean) / std``
over a prompt's rollouts) and EAPO splits it at the group mean, so only differences *within a group*
matter: a penalty that every rollout of a group
pays alike changes nothing, and one paid by some pulls those below the others by ``α·|r|``. So the
size of a penalty's α is read against the other weights (0.2 against a 0.5 format check: running to
the cap costs less than losing the tags), not against 0.

Metric keys (the contract the trainer logs and the plots read), per component ``<c>``:

* ``reward/<c>/mean``, ``reward/<c>/std`` (population std over the non-``None`` scores; NaN when
  all are ``None``) and ``reward/<c>/none_frac``;
* ``reward/mean``, ``reward/std``, ``reward/none_frac`` over the totals;
* for components with per-sample ``last_details`` (the LLM judge), ``reward/<c>/<field>/mean`` for
  each numeric field, e.g. ``reward/llm_judge/think/logical_coherence/mean``;
* for components with batch-level ``last_metrics``, ``reward/<c>/<key>``, e.g.
  ``reward/llm_judge/injection_frac``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from eapo.rewards.base import RewardFunction

__all__ = ["CompositeReward", "CompositeResult", "combine", "summarize", "check_weights", "MISSING_MODES"]

#: What :func:`combine` does with a weighted component that returned ``None`` (module docstring).
MISSING_MODES: tuple[str, ...] = ("unscorable", "renormalize")


@dataclass
class CompositeResult:
    """One batch scored by :meth:`CompositeReward.score`."""

    rewards: list[float | None]
    """The weighted totals, one per completion (``None``: no weighted component could score it)."""
    components: dict[str, list[float | None]]
    """Each component's raw scores, by component name."""
    metrics: dict[str, float]
    """The ``reward/...`` metrics described in the module docstring."""
    details: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    """Per-sample details of components that expose ``last_details`` (the LLM judge's dimensions)."""


def combine(
    components: Mapping[str, Sequence[float | None]],
    weights: Mapping[str, float],
    *,
    missing: str = "unscorable",
) -> list[float | None]:
    """Weighted sum with ``None`` handled by ``missing`` (see the module docstring); all lists have one length."""
    if missing not in MISSING_MODES:
        raise ValueError(f"missing={missing!r} is invalid; valid: {', '.join(MISSING_MODES)}")
    lengths = {name: len(scores) for name, scores in components.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"components returned different numbers of scores: {lengths}")
    n = next(iter(lengths.values()), 0)
    weighted = [name for name in components if weights[name] > 0]
    full_weight = sum(weights[name] for name in weighted)
    totals: list[float | None] = []
    for index in range(n):
        available = [name for name in weighted if components[name][index] is not None]
        if not available or (missing == "unscorable" and len(available) < len(weighted)):
            totals.append(None)
            continue
        available_weight = sum(weights[name] for name in available)
        partial = sum(weights[name] * components[name][index] for name in available)  # type: ignore[operator]
        totals.append(
            partial if len(available) == len(weighted) else partial * full_weight / available_weight
        )
    return totals


def summarize(scores: Sequence[float | None]) -> tuple[float, float, float]:
    """``(mean, population std, none fraction)`` of a score list; mean and std are NaN when nothing was scored."""
    values = [float(value) for value in scores if value is not None]
    none_frac = (len(scores) - len(values)) / len(scores) if scores else 0.0
    if not values:
        return math.nan, math.nan, none_frac
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / len(values))
    return mean, std, none_frac


def check_weights(weights: Mapping[str, float]) -> None:
    """Raise a ValueError unless every α is a finite number >= 0 and at least one is > 0."""
    if not weights:
        raise ValueError("a composite reward needs at least one component, e.g. {'rouge_l': 1.0}")
    for name, alpha in weights.items():
        if (
            not isinstance(alpha, int | float)
            or isinstance(alpha, bool)
            or not math.isfinite(alpha)
            or alpha < 0
        ):
            raise ValueError(f"reward weight for {name!r} must be a finite number >= 0, got {alpha!r}")
    if not any(alpha > 0 for alpha in weights.values()):
        raise ValueError(f"at least one reward weight must be > 0, got {dict(weights)}")


def _detail_metrics(name: str, details: Sequence[dict[str, Any] | None]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for detail in details:
        for key, value in (detail or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                sums.setdefault(key, []).append(float(value))
    return {f"reward/{name}/{key}/mean": math.fsum(values) / len(values) for key, values in sums.items()}


class CompositeReward:
    """``Σ α_k r_k`` over named reward components; call it like any reward, or :meth:`score` for everything.

    Args:
        weights: component name → α (finite, >= 0, not all 0).
        components: component name → reward function (same keys as ``weights``).
        parallel: run the components on threads at once (the judge's network wait overlaps the
            reranker's forward passes); exceptions propagate either way.
        missing: ``"unscorable"`` or ``"renormalize"``: the total of a sample a weighted component
            could not score (see the module docstring).
    """

    name = "composite"

    def __init__(
        self,
        weights: Mapping[str, float],
        components: Mapping[str, RewardFunction],
        *,
        parallel: bool = True,
        missing: str = "unscorable",
    ) -> None:
        check_weights(weights)
        if missing not in MISSING_MODES:
            raise ValueError(f"missing={missing!r} is invalid; valid: {', '.join(MISSING_MODES)}")
        if set(weights) != set(components):
            raise ValueError(
                f"weights {sorted(weights)} and components {sorted(components)} must name the same rewards"
            )
        self.weights = {name: float(alpha) for name, alpha in weights.items()}
        self.components = dict(components)
        self.parallel = parallel
        self.missing = missing
        self.label = " + ".join(
            f"{alpha:g}·{self.components[name].label}" for name, alpha in self.weights.items()
        )
        self._executor: ThreadPoolExecutor | None = None
        self.__name__ = self.name

    def _run(
        self, prompts: Any, completions: Any, references: Any, kwargs: dict[str, Any]
    ) -> dict[str, list[float | None]]:
        if not self.parallel or len(self.components) == 1:
            return {
                name: fn(prompts, completions, references, **kwargs) for name, fn in self.components.items()
            }
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=len(self.components), thread_name_prefix="eapo-reward"
            )
        futures = {
            name: self._executor.submit(fn, prompts, completions, references, **kwargs)
            for name, fn in self.components.items()
        }
        return {name: future.result() for name, future in futures.items()}

    def score(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> CompositeResult:
        """Score a batch: totals, every component's scores, the metrics and per-sample details."""
        components = self._run(prompts, completions, references, kwargs)
        for name, scores in components.items():
            if len(scores) != len(completions):
                raise ValueError(
                    f"reward {name!r} returned {len(scores)} scores for {len(completions)} completions"
                )
        totals = combine(components, self.weights, missing=self.missing)
        metrics: dict[str, float] = {}
        details: dict[str, list[dict[str, Any] | None]] = {}
        for name, scores in components.items():
            mean, std, none_frac = summarize(scores)
            metrics[f"reward/{name}/mean"] = mean
            metrics[f"reward/{name}/std"] = std
            metrics[f"reward/{name}/none_frac"] = none_frac
            component_details = getattr(self.components[name], "last_details", None)
            if component_details is not None and len(component_details) == len(completions):
                details[name] = list(component_details)
                metrics.update(_detail_metrics(name, component_details))
            for key, value in (getattr(self.components[name], "last_metrics", None) or {}).items():
                metrics[f"reward/{name}/{key}"] = value
        mean, std, none_frac = summarize(totals)
        metrics.update({"reward/mean": mean, "reward/std": std, "reward/none_frac": none_frac})
        return CompositeResult(rewards=totals, components=components, metrics=metrics, details=details)

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]:
        return self.score(prompts, completions, references, **kwargs).rewards

    def close(self) -> None:
        """Shut down the worker threads and every component that has a ``close()`` (the judge's client)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        for component in self.components.values():
            close = getattr(component, "close", None)
            if callable(close):
                close()

    def __repr__(self) -> str:
        return f"CompositeReward(weights={self.weights}, components={list(self.components)}, missing={self.missing!r})"
