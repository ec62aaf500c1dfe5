"""The quantities a claim reads: each one statistic of :mod:`eapo.study.stats` over a configuration's runs.

A claims file (:mod:`eapo.study.claims`) names each quantity it reads and says what it is, e.g.::

    start: {stat: window, at: start, metric: entropy/rollout, role: psr}
    ratio: {stat: window, at: end, metric: entropy/rollout, divide: H0, role: eapo}
    avgs: {stat: avg, metric: avg_strict, roles: [grpo, psr, nsr]}

``stat`` picks an entry of :data:`STATISTICS` (a new statistic is one :func:`register_statistic`); the
other keys are that statistic's options, plus ``role`` (the configuration it reads, by
:func:`eapo.study.roles.run_role`), ``roles`` (one value per role: a list, or ``{methods: [...],
evaluated: true}`` for every configuration of those methods with an evaluation) and ``except`` (roles
for which the value is left out, ``None``). In a table, a quantity without ``role`` reads the row's.

A number in an option is a literal, the name of a parameter (the study's ``window``, ``entropy_band``,
``max_clipped_share``, ``min_window_steps``, the claims file's ``params``, a table row's constants), or
``a + b`` / ``a - b`` / ``-a`` of those: ``1 - entropy_band``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eapo.study.roles import MethodData
from eapo.study.stats import (
    Interval,
    avg_interval,
    deviation_interval,
    difference_interval,
    range_difference_interval,
    ratio_interval,
    slope_interval,
    window_interval,
)

__all__ = [
    "STATISTICS",
    "Statistic",
    "Quantity",
    "Reading",
    "NotApplicable",
    "register_statistic",
    "parse_number",
]

#: ``divide: H0``: each seed's series over that run's logged H_0 (``eapo/H0``); seeds without one are left out.
H0 = "H0"


class NotApplicable(LookupError):
    """A number names a table-row constant this row does not have: the quantity is ``None`` here."""


@dataclass(frozen=True)
class Statistic:
    """One registered statistic: how to compute it, and which options it takes."""

    name: str
    compute: Callable[[Quantity, Reading], Any]
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    references: tuple[str, ...] = ()  # options that name other quantities
    series: bool = False  # reads the per-step series of its ``metric`` option
    help: str = ""


#: name -> statistic. ``stat:`` in a claims file picks one.
STATISTICS: dict[str, Statistic] = {}


def register_statistic(
    name: str,
    *,
    required: Sequence[str] = (),
    optional: Sequence[str] = (),
    references: Sequence[str] = (),
    series: bool = False,
) -> Callable[[Callable[[Quantity, Reading], Any]], Callable[[Quantity, Reading], Any]]:
    """Register ``compute(quantity, reading) -> value`` as ``stat: name`` (its docstring is its help)."""

    def register(compute: Callable[[Quantity, Reading], Any]) -> Callable[[Quantity, Reading], Any]:
        STATISTICS[name] = Statistic(
            name,
            compute,
            tuple(required),
            tuple(optional),
            tuple(references),
            series,
            " ".join((compute.__doc__ or "").split()),
        )
        return compute

    return register


@dataclass(frozen=True)
class Quantity:
    """A quantity as a claims file declares it (checked by :func:`eapo.study.claims.load_claims`)."""

    name: str
    stat: str
    options: Mapping[str, Any] = field(default_factory=dict)
    role: str | None = None
    roles: tuple[str, ...] | Mapping[str, Any] | None = None
    exclude: tuple[str, ...] = ()  # ``except``


_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_TERM = rf"(?:[A-Za-z_]\w*|{_NUMBER})"
_EXPRESSION = re.compile(rf"^\s*(-)?\s*({_TERM})\s*(?:([+-])\s*({_TERM}))?\s*$")


def parse_number(value: Any) -> tuple[str | None, tuple[str, ...]] | None:
    """``(sign, terms)`` of a number option, or ``None`` when it is not one (a bool, a malformed string).
    A literal number: ``(None, ())``; else the names it uses are in ``terms``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return None, ()
    if not isinstance(value, str):
        return None
    match = _EXPRESSION.match(value)
    if match is None:
        return None
    names = tuple(t for t in (match.group(2), match.group(4)) if t is not None and not re.match(_NUMBER, t))
    return match.group(1), names


class Reading:
    """A claim's (or a table row's) quantities over the study's data, each computed once, on demand.

    Args:
        quantities: name -> its declaration.
        data: role -> its runs (:class:`MethodData`).
        params: the numbers a claim may name.
        role: the table row's role (quantities without ``role`` read it).
        seed: ``(seed, index)`` of a per-seed table row: the series read are that run's only.
        row: the table row's constants (``with:``), numbers too.
    """

    def __init__(
        self,
        quantities: Mapping[str, Quantity],
        data: Mapping[str, MethodData],
        params: Mapping[str, Any],
        *,
        role: str | None = None,
        seed: tuple[int | None, int] | None = None,
        row: Mapping[str, Any] | None = None,
        cache: dict[Any, Any] | None = None,
    ):
        self.quantities = quantities
        self.data = data
        self.params = params
        self.role = role
        self.seed = seed
        self.row = dict(row or {})
        self.cache = {} if cache is None else cache  # shared across a claims file's readings
        self._values: dict[str, Any] = {}
        self._reading: str | None = role  # the role the quantity being computed reads

    # -- values ------------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            self._values[name] = self._evaluate(self.quantities[name])
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self.quantities

    def _evaluate(self, quantity: Quantity) -> Any:
        if quantity.roles is not None:
            return {role: self._one(quantity, role) for role in self.roles_of(quantity.roles)}
        return self._one(quantity, quantity.role or self.role)

    def _one(self, quantity: Quantity, role: str | None) -> Any:
        if role is not None and role in quantity.exclude:
            return None
        outer, self._reading = self._reading, role
        try:
            return STATISTICS[quantity.stat].compute(quantity, self)
        except NotApplicable:
            return None
        finally:
            self._reading = outer

    def roles_of(self, roles: tuple[str, ...] | Mapping[str, Any]) -> list[str]:
        """A ``roles:`` list as is; ``{methods: [...], evaluated: true}``: the study's configurations of those
        methods (in the data's order), with an evaluation when ``evaluated``."""
        if not isinstance(roles, Mapping):
            return list(roles)
        methods = set(roles["methods"])
        return [
            role
            for role, d in self.data.items()
            if role.split(":")[0] in methods and (d.results or not roles.get("evaluated", False))
        ]

    # -- what a statistic reads --------------------------------------------------------------------

    @property
    def reading(self) -> str | None:
        """The role the statistic being computed reads."""
        return self._reading

    def runs(self, role: str | None = None) -> MethodData:
        """The runs of ``role`` (default: the one being read); none: an empty :class:`MethodData`."""
        role = self._reading if role is None else role
        return self.data.get(role, MethodData()) if role is not None else MethodData()

    def number(self, value: Any) -> Any:
        """A number option's value (see the module docstring)."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        match = _EXPRESSION.match(str(value))
        if match is None:
            raise ValueError(f"not a number: {value!r}")
        first = self._term(match.group(2))
        first = -first if match.group(1) else first
        if match.group(3) is None:
            return first
        second = self._term(match.group(4))
        return first + second if match.group(3) == "+" else first - second

    def _term(self, term: str) -> Any:
        if re.fullmatch(_NUMBER, term):
            return float(term) if any(c in term for c in ".eE") else int(term)
        if term in self.row:
            return self.row[term]
        if term in self.params:
            return self.params[term]
        raise NotApplicable(term)

    def series(
        self, metric: str, *, divide: Any = None, minus: str | None = None
    ) -> list[list[float | None]]:
        """Per seed, ``metric`` over the steps (``divide``: ``H0`` or a number; ``minus``: the same series
        of another role, paired by seed at each step both logged); a per-seed row: that seed's only."""
        pairs = self._seeded(self.runs(), metric, divide)
        if minus is not None:
            other = {seed: values for seed, _, values in self._seeded(self.runs(minus), metric, divide)}
            mine = {seed: values for seed, _, values in pairs if seed is not None}
            pairs = [  # the steps both runs reached
                (
                    seed,
                    index,
                    [None if u is None or v is None else u - v for u, v in zip(x, other[seed], strict=False)],
                )
                for index, (seed, x) in enumerate(
                    sorted((s, mine[s]) for s in set(mine) & set(other) - {None})
                )
            ]
        if self.seed is not None:
            seed, index = self.seed
            pairs = [p for p in pairs if (p[0] == seed if seed is not None else p[1] == index)]
        return [values for _, _, values in pairs]

    def _seeded(
        self, d: MethodData, metric: str, divide: Any
    ) -> list[tuple[int | None, int, list[float | None]]]:
        values = d.series.get(metric, [])
        seeds = list(d.seeds) if len(d.seeds) == len(values) else [None] * len(values)
        triples = [(seed, index, list(v)) for index, (seed, v) in enumerate(zip(seeds, values, strict=True))]
        if divide is None or not values:
            return triples
        if divide == H0:
            anchors = d.h0
            return [
                (seed, index, [None if x is None else x / h for x in v])
                for (seed, index, v), h in zip(triples, anchors, strict=True)
                if h is not None and h > 0
            ]
        scale = self.number(divide)
        return [(seed, index, [None if x is None else x / scale for x in v]) for seed, index, v in triples]


def _map(value: Any, compute: Callable[[Any], Any]) -> Any:
    """``compute`` of a value, or of each value of a ``roles:`` quantity."""
    if isinstance(value, dict):
        return {role: compute(v) for role, v in value.items()}
    return compute(value)


# --------------------------------------------------------------------------------------------
# The statistics
# --------------------------------------------------------------------------------------------


@register_statistic(
    "window",
    required=("metric", "at"),
    optional=("fraction", "divide", "times", "minus", "value"),
    series=True,
)
def _window(q: Quantity, at: Reading) -> Interval | float | None:
    """The mean of ``metric`` over the first (``at: start``) or last (``at: end``) ``fraction`` of each run's
    steps (default ``window``), seeds pooled, with its 95% interval (:func:`eapo.study.stats.window_interval`);
    ``value: mean``: the mean alone, multiplied by ``times`` when given."""
    o = q.options
    fraction = at.number(o.get("fraction", "window"))
    interval = window_interval(
        at.series(o["metric"], divide=o.get("divide"), minus=o.get("minus")),
        fraction=fraction,
        end=o["at"] == "end",
    )
    if o.get("value", "interval") == "interval":
        return interval
    if interval is None:
        return None
    return interval.mean if "times" not in o else at.number(o["times"]) * interval.mean


@register_statistic("slope", required=("metric",), optional=("divide",), series=True)
def _slope(q: Quantity, at: Reading) -> Interval | None:
    """The least-squares slope of ``metric`` per step, seeds pooled (:func:`eapo.study.stats.slope_interval`)."""
    return slope_interval(at.series(q.options["metric"], divide=q.options.get("divide")))


@register_statistic("ratio", required=("metric",), optional=("fraction", "divide"), series=True)
def _ratio(q: Quantity, at: Reading) -> Interval | None:
    """End-window ÷ start-window of ``metric`` per seed, pooled (:func:`eapo.study.stats.ratio_interval`)."""
    o = q.options
    series = at.series(o["metric"], divide=o.get("divide"))
    return ratio_interval(series, fraction=at.number(o.get("fraction", "window")))


@register_statistic("avg", optional=("metric",))
def _avg(q: Quantity, at: Reading) -> Interval | None:
    """``metric`` (``avg``, the default, or ``avg_strict``) of the evaluations, seeds pooled
    (:func:`eapo.study.stats.avg_interval`)."""
    return avg_interval(at.runs().results, q.options.get("metric", "avg"))


@register_statistic("h0")
def _h0(q: Quantity, at: Reading) -> list[float]:
    """Each run's logged H_0 (``eapo/H0``)."""
    return [h for h in at.runs().h0 if h is not None]


@register_statistic("runs")
def _runs(q: Quantity, at: Reading) -> list[str]:
    """The names of the runs read."""
    return list(at.runs().runs)


@register_statistic("seeds")
def _seeds(q: Quantity, at: Reading) -> int:
    """How many runs were read."""
    return len(at.runs().runs)


@register_statistic("steps")
def _steps(q: Quantity, at: Reading) -> int:
    """The most steps a run logged."""
    return at.runs().steps


@register_statistic("role")
def _role(q: Quantity, at: Reading) -> str | None:
    """The role read (a table row's)."""
    return at.reading


@register_statistic("seed")
def _seed(q: Quantity, at: Reading) -> int | None:
    """A per-seed table row's seed."""
    return None if at.seed is None else at.seed[0]


@register_statistic("constant", required=("number",))
def _constant(q: Quantity, at: Reading) -> Any:
    """A number: ``number`` (a table row's constant, a parameter or a literal)."""
    return at.number(q.options["number"])


@register_statistic("deviation", required=("of",), references=("of",))
def _deviation(q: Quantity, at: Reading) -> Any:
    """``|r − 1|`` of the interval ``of`` names (:func:`eapo.study.stats.deviation_interval`)."""
    return _map(at[q.options["of"]], deviation_interval)


@register_statistic("difference", required=("of",), optional=("scale",), references=("of",))
def _difference(q: Quantity, at: Reading) -> Any:
    """``a − scale·b`` of the two intervals ``of: [a, b]`` names (:func:`eapo.study.stats.difference_interval`;
    ``b`` may be a ``roles:`` quantity: one difference per role)."""
    first, second = q.options["of"]
    scale = at.number(q.options.get("scale", 1.0))
    return _map(at[second], lambda other: difference_interval(at[first], other, scale))


@register_statistic("range", required=("first", "second", "part"), optional=("metric", "resamples", "seed"))
def _range(q: Quantity, at: Reading) -> Interval | None:
    """Range = max − min of ``metric`` over the configurations ``first`` and over ``second``, and their
    difference (``part``: ``difference``, ``first`` or ``second``), bootstrapped over prompts and seeds
    (:func:`eapo.study.stats.range_difference_interval`)."""
    o = q.options
    first, second, metric = tuple(o["first"]), tuple(o["second"]), o.get("metric", "avg")
    resamples, seed = int(at.number(o.get("resamples", 2000))), int(at.number(o.get("seed", 0)))
    key = ("range", first, second, metric, resamples, seed)
    if key not in at.cache:
        at.cache[key] = range_difference_interval(
            [at.runs(role).results for role in first],
            [at.runs(role).results for role in second],
            key=metric,
            n_resamples=resamples,
            seed=seed,
        )
    found = at.cache[key]
    return None if found is None else found[("difference", "first", "second").index(o["part"])]


@register_statistic("ranking", required=("of",), references=("of",))
def _ranking(q: Quantity, at: Reading) -> list[str]:
    """The roles of the quantities ``of`` names, by mean, highest first (those measured)."""
    measured = [name for name in q.options["of"] if at[name] is not None]
    ranked = sorted(measured, key=lambda name: -at[name].mean)
    return [at.quantities[name].role or name for name in ranked]


@register_statistic("highest", required=("of",), references=("of",))
def _highest(q: Quantity, at: Reading) -> str | None:
    """The role with the highest mean in the ``roles:`` quantity ``of`` names."""
    values = at[q.options["of"]] or {}
    return max((r for r in values if values[r] is not None), key=lambda r: values[r].mean, default=None)
