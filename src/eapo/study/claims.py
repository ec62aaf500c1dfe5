"""The claims engine: a study's claims are data (a claims file), judged here by one set of rules.

A claims file (``configs/paper.claims.yaml``, ``configs/study_cpu_controls.claims.yaml``; read and checked by
:func:`eapo.study.claims_file.load_claims`) lists each claim: its id, its statement, the paper's sentence
it quotes (``quote``, ``section``) and the rule written from it, the quantities it reads
(:mod:`eapo.study.quantities`), how they are compared, and the sentences that report the numbers::

    - id: psr_lowers_entropy
      statement: PSR lowers entropy
      quantities:
        start: {stat: window, at: start, metric: entropy/rollout, role: psr}
        end: {stat: window, at: end, metric: entropy/rollout, role: psr}
      compare: lowers
      evidence: "PSR entropy: start {start} → end {end} nats/token"
      missing: {why: steps, roles: [psr], what: entropy}

:func:`assess` judges every claim of a file over the study's runs and computes its tables. A verdict is
one of :data:`~eapo.study.stats.HELD`, :data:`~eapo.study.stats.NOT_HELD`,
:data:`~eapo.study.stats.WITHIN_NOISE`, :data:`~eapo.study.stats.NOT_MEASURED`, decided by a registered
comparison (:data:`COMPARISONS`: ``lowers``, ``inside``, ``above_all``, ...; a new kind is one
:func:`register_comparison`) of the intervals of :mod:`eapo.study.stats`; a claim of several ``parts``
combines its parts' verdicts (:func:`~eapo.study.stats.combine_verdicts`). The evidence is the claim's
template filled with its quantities; a claim not measured says why instead (``missing``: a template, or
a registered reason of :data:`REASONS`).

The texts are templates over the claim's quantities (:mod:`eapo.study.templates`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eapo.study.quantities import STATISTICS, Quantity, Reading
from eapo.study.roles import MethodData
from eapo.study.stats import (
    HELD,
    MIN_WINDOW_STEPS,
    NOT_HELD,
    NOT_MEASURED,
    Interval,
    approach_verdict,
    avg_interval,
    band_verdict,
    below_verdict,
    best_verdict,
    between_verdict,
    change_verdict,
    combine_verdicts,
    lower_verdict,
)
from eapo.study.templates import Layered, Template, TemplateFormatter, Values

__all__ = [
    "COMPARISONS",
    "REASONS",
    "Comparison",
    "Reason",
    "register_comparison",
    "register_reason",
    "Compare",
    "Missing",
    "Part",
    "ClaimSpec",
    "TableSpec",
    "ClaimsFile",
    "Claim",
    "Assessment",
    "assess",
    "interval_text",
    "missing_runs",
]


# --------------------------------------------------------------------------------------------
# Comparisons: how a claim's quantities decide its verdict
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """A registered comparison: ``decide(**arguments) -> verdict``. ``quantities``: the arguments that name
    quantities (a name, or a list of names); ``numbers``: those that are numbers (or ``[low, high]``)."""

    name: str
    decide: Callable[..., str]
    quantities: tuple[str, ...]
    numbers: tuple[str, ...] = ()
    help: str = ""


#: name -> comparison. ``compare:`` in a claims file picks one.
COMPARISONS: dict[str, Comparison] = {}


def register_comparison(
    name: str, *, quantities: Sequence[str], numbers: Sequence[str] = ()
) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register ``decide`` as ``compare: name`` (its docstring's first line is its help)."""

    def register(decide: Callable[..., str]) -> Callable[..., str]:
        doc = (decide.__doc__ or "").strip()
        COMPARISONS[name] = Comparison(name, decide, tuple(quantities), tuple(numbers), " ".join(doc.split()))
        return decide

    return register


@register_comparison("lowers", quantities=("start", "end"))
def _lowers(start: Interval | None, end: Interval | None) -> str:
    """Held if ``end`` lies entirely below ``start``; did not hold if entirely above."""
    return change_verdict(start, end, "decrease")


@register_comparison("raises", quantities=("start", "end"))
def _raises(start: Interval | None, end: Interval | None) -> str:
    """Held if ``end`` lies entirely above ``start``; did not hold if entirely below."""
    return change_verdict(start, end, "increase")


@register_comparison("inside", quantities=("value",), numbers=("band",))
def _inside(value: Interval | None, band: Sequence[float]) -> str:
    """Held if ``value`` lies inside ``band: [low, high]``; did not hold if entirely outside."""
    return band_verdict(value, band[0], band[1])


@register_comparison("outside", quantities=("value",), numbers=("band",))
def _outside(value: Interval | None, band: Sequence[float]) -> str:
    """Held if ``value`` lies entirely outside ``band: [low, high]``; did not hold if inside."""
    inside = band_verdict(value, band[0], band[1])
    return {HELD: NOT_HELD, NOT_HELD: HELD}.get(inside, inside)


@register_comparison("above_all", quantities=("target", "others"))
def _above_all(target: Interval | None, others: Mapping[str, Interval | None]) -> str:
    """Held if ``target`` lies entirely above every one of ``others``; did not hold if one lies entirely
    above it."""
    return best_verdict(target, others)


@register_comparison("below", quantities=("target", "other"))
def _below(target: Interval | None, other: Interval | None) -> str:
    """Held if ``target`` lies entirely below ``other``; did not hold if entirely above."""
    return lower_verdict(target, other)


@register_comparison("below_value", quantities=("value",), numbers=("threshold",))
def _below_value(value: Interval | None, threshold: float) -> str:
    """Held if ``value`` lies entirely below ``threshold``; did not hold if entirely above."""
    return below_verdict(value, threshold)


@register_comparison("between", quantities=("target", "bounds"))
def _between(target: Interval | None, bounds: Mapping[str, Interval | None]) -> str:
    """Held if ``target`` lies entirely above the lower (by mean) of the two ``bounds`` and entirely below the
    higher; did not hold if entirely below the lower or above the higher."""
    one, other = bounds.values()
    return between_verdict(target, one, other)


@register_comparison("overlap", quantities=("a", "b"))
def _overlap(a: Interval | None, b: Interval | None) -> str:
    """Held if ``a`` and ``b`` overlap; did not hold if they are disjoint (no "within noise")."""
    if a is None or b is None:
        return NOT_MEASURED
    return NOT_HELD if a.high < b.low or b.high < a.low else HELD


@register_comparison("all_above_zero", quantities=("value",))
def _all_above_zero(value: Mapping[str, Interval | None]) -> str:
    """Held if every interval of the ``roles:`` quantity ``value`` lies entirely above 0; did not hold if one
    lies entirely below 0."""
    return approach_verdict(value)


# --------------------------------------------------------------------------------------------
# Reasons: why a claim is not measured
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    """A registered reason: ``explain(missing, reading, names) -> text`` (``{why}`` in ``missing.text``)."""

    name: str
    explain: Callable[[Missing, Reading, Mapping[str, str]], str]
    options: tuple[str, ...] = ()  # the keys of ``missing:`` it reads
    help: str = ""


#: name -> reason. ``missing: {why: ...}`` in a claims file picks one.
REASONS: dict[str, Reason] = {}


def register_reason(
    name: str, *, options: Sequence[str] = ()
) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register ``explain(missing, reading, names) -> text`` as ``missing: {why: name}`` (``options``: the keys
    of ``missing:`` it reads; its docstring is its help)."""

    def register(explain: Callable[..., str]) -> Callable[..., str]:
        REASONS[name] = Reason(name, explain, tuple(options), " ".join((explain.__doc__ or "").split()))
        return explain

    return register


def missing_runs(
    data: Mapping[str, MethodData], roles: Sequence[str], what: str, names: Mapping[str, str]
) -> str:
    """Why a claim over ``roles`` is not measured: the configurations (by ``names``) with no run, else
    the metric ``what`` not logged often enough."""
    absent = [names.get(r, r) for r in roles if r not in data or not data[r].runs]
    if absent:
        return "no finished run of " + ", ".join(absent)
    return f"{what} not measured (too few logged steps, or not logged)"


@register_reason("runs", options=("roles", "what"))
def _why_runs(missing: Missing, reading: Reading, names: Mapping[str, str]) -> str:
    """ "no finished run of <the roles without one>", else "<what> not measured (too few logged steps, or not
    logged)"."""
    return missing_runs(reading.data, missing.roles, missing.what, names)


def _why_steps_of(d: MethodData | None, what: str) -> str:
    if d is None or not d.runs:
        return "no finished run"
    if d.steps < 2 * MIN_WINDOW_STEPS:
        return (
            f"{d.steps} logged steps of {what}: too few for start and end windows of {MIN_WINDOW_STEPS} "
            "steps each"
        )
    return f"{what} not logged"


@register_reason("steps", options=("roles", "what"))
def _why_steps(missing: Missing, reading: Reading, names: Mapping[str, str]) -> str:
    """One role: "no finished run", "<n> logged steps of <what>: too few ..." or "<what> not logged". Several:
    "<name>: ..." for each role whose quantity (the claim's quantity named as the role) is not measured."""
    if len(missing.roles) == 1:
        return _why_steps_of(reading.data.get(missing.roles[0]), missing.what)
    unmeasured = [r for r in missing.roles if r not in reading or reading[r] is None]
    return "; ".join(
        f"{names.get(r, r)}: {_why_steps_of(reading.data.get(r), missing.what)}" for r in unmeasured
    )


@register_reason("unevaluated", options=("roles", "metric", "names"))
def _why_unevaluated(missing: Missing, reading: Reading, names: Mapping[str, str]) -> str:
    """The roles (by name, or as written with ``names: false``) without an evaluation of ``metric``, joined."""
    absent = [r for r in missing.roles if avg_interval(reading.runs(r).results, missing.metric) is None]
    return ", ".join(names.get(r, r) if missing.names else r for r in absent)


# --------------------------------------------------------------------------------------------
# A claims file, as load_claims checks it
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compare:
    """``compare:``: a comparison of :data:`COMPARISONS` and its arguments."""

    kind: str
    quantities: Mapping[str, str | tuple[str, ...]]
    numbers: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Missing:
    """One way to say why a claim (or part) is not measured: ``text`` (with ``{why}``: the reason ``why``
    explains), used when the quantity ``when`` names was not measured (``None``: always)."""

    text: Template
    why: str | None = None
    roles: tuple[str, ...] = ()
    what: str = ""
    metric: str = "avg"
    names: bool = True
    when: str | None = None


@dataclass(frozen=True)
class Part:
    """A comparison with the sentences that report it (the whole claim, or one part of it)."""

    compare: Compare
    evidence: Template
    missing: tuple[Missing, ...] = ()


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of a claims file."""

    id: str
    statement: str
    quantities: Mapping[str, Quantity]
    parts: tuple[Part, ...]
    numbers: tuple[tuple[str, str], ...] = ()  # (key in claims.json, quantity or parameter)
    constants: Mapping[str, Any] = field(default_factory=dict)
    quote: str | None = None
    section: str = ""
    rule: str = ""  # the id of one of the file's rules
    basis: str = "paper"  # "paper": the paper's sentence; "beyond": a question the paper does not ask


@dataclass(frozen=True)
class TableSpec:
    """A table of numbers per configuration (``per_seed``: per run), in claims.json and claims.md."""

    name: str
    rows: tuple[str, ...]
    quantities: Mapping[str, Quantity]
    columns: tuple[str, ...]
    per_seed: bool = False
    constants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # role -> its row's constants


@dataclass(frozen=True)
class ClaimsFile:
    """A checked claims file (:func:`eapo.study.claims_file.load_claims`)."""

    path: Path
    title: str
    names: Mapping[str, str]
    params: Mapping[str, Any]
    rules: Mapping[str, str]
    groups: Mapping[str, tuple[ClaimSpec, ...]]
    tables: Mapping[str, TableSpec]
    layout: Mapping[str, Any]  # claims.json: key -> a group, a table, or a mapping of those
    markdown: tuple[Mapping[str, Any], ...]
    plot: Mapping[str, Any] = field(default_factory=dict)  # {bands: {panel: [number, ...]}}
    power: Mapping[str, Any] = field(default_factory=dict)  # eapo.study.power's rows, unparsed
    study_params: frozenset[str] = frozenset()  # the study's numbers (STUDY_PARAMS) its texts and rules name

    @property
    def metrics(self) -> list[str]:
        """Every metric key its quantities read (the runs' series to collect)."""
        quantities = [q for g in self.groups.values() for c in g for q in c.quantities.values()]
        quantities += [q for t in self.tables.values() for q in t.quantities.values()]
        return list(dict.fromkeys(q.options["metric"] for q in quantities if STATISTICS[q.stat].series))


# --------------------------------------------------------------------------------------------
# Assessing
# --------------------------------------------------------------------------------------------


@dataclass
class Claim:
    """One claim and what this study's numbers say about it."""

    key: str
    statement: str
    verdict: str
    evidence: str
    numbers: dict[str, Any] = field(default_factory=dict)
    quote: str | None = None  # the paper's sentence (None: the claim quotes none)
    section: str = ""
    rule: str = ""
    basis: str = "paper"

    def record(self) -> dict[str, Any]:
        """The claim as claims.json holds it (the quote, section, rule and basis when it quotes a sentence)."""
        out = {
            "key": self.key,
            "statement": self.statement,
            "verdict": self.verdict,
            "evidence": self.evidence,
            "numbers": self.numbers,
        }
        if self.quote is not None:
            out.update(quote=self.quote, section=self.section, rule=self.rule, basis=self.basis)
        return out


@dataclass
class Assessment:
    """Every claim of a claims file, by group, and its tables (per role, or a list of per-seed rows)."""

    claims: dict[str, list[Claim]]
    tables: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)  # the numbers the claims were judged with
    row_roles: dict[str, list[str | None]] = field(default_factory=dict)  # per-seed tables: each row's role

    def all_claims(self) -> list[Claim]:
        return [claim for group in self.claims.values() for claim in group]


def interval_text(interval: Interval | None, digits: int = 3) -> str:
    """An interval as ``mean [low, high]``, or ``–`` when it was not measured."""
    return "–" if interval is None else interval.text(digits)


def _decide(compare: Compare, reading: Reading, params: Mapping[str, Any]) -> str:
    comparison = COMPARISONS[compare.kind]
    arguments: dict[str, Any] = {}
    for name in comparison.quantities:
        ref = compare.quantities.get(name, name)
        arguments[name] = reading[ref] if isinstance(ref, str) else {r: reading[r] for r in ref}
    for name in comparison.numbers:
        value = compare.numbers[name]
        arguments[name] = (
            [reading.number(v) for v in value] if isinstance(value, list | tuple) else reading.number(value)
        )
    return comparison.decide(**arguments)


def _explain(
    part: Part, verdict: str, reading: Reading, values: Mapping[str, Any], names: Mapping[str, str]
) -> str:
    if verdict == NOT_MEASURED:
        for missing in part.missing:
            if missing.when is None or reading[missing.when] is None:
                why = REASONS[missing.why].explain(missing, reading, names) if missing.why else ""
                return missing.text.render(Layered({"why": why}, values), reading, names)
    return part.evidence.render(Layered({"verdict": verdict}, values), reading, names)


def _assess_claim(
    spec: ClaimSpec,
    claims: ClaimsFile,
    data: Mapping[str, MethodData],
    params: Mapping[str, Any],
    cache: dict,
) -> Claim:
    reading = Reading(spec.quantities, data, params, cache=cache)
    values = Layered(Values(reading), spec.constants, params)
    verdicts, texts = [], []
    for part in spec.parts:
        verdict = _decide(part.compare, reading, params)
        verdicts.append(verdict)
        texts.append(_explain(part, verdict, reading, values, claims.names))
    numbers = {key: values[name] for key, name in spec.numbers} | dict(spec.constants)
    formatter = TemplateFormatter(claims.names)
    claim = Claim(
        spec.id,
        formatter.vformat(spec.statement, (), params),
        combine_verdicts(verdicts),
        "; ".join(texts),
        numbers,
    )
    if spec.quote is not None:
        claim.quote, claim.section, claim.basis = spec.quote, spec.section, spec.basis
        claim.rule = formatter.vformat(claims.rules[spec.rule], (), params)
    return claim


def _assess_table(
    table: TableSpec, data: Mapping[str, MethodData], params: Mapping[str, Any], cache: dict
) -> tuple[Any, list[str | None]]:
    def row(reading: Reading) -> dict[str, Any]:
        return {column: reading[column] for column in table.columns}

    if not table.per_seed:
        rows = {
            role: row(
                Reading(table.quantities, data, params, role=role, row=table.constants.get(role), cache=cache)
            )
            for role in table.rows
        }
        return rows, list(table.rows)
    runs, roles = [], []
    for role in table.rows:
        d = data.get(role, MethodData())
        for index, seed in enumerate(d.seeds):
            reading = Reading(
                table.quantities,
                data,
                params,
                role=role,
                seed=(seed, index),
                row=table.constants.get(role),
                cache=cache,
            )
            runs.append(row(reading))
            roles.append(role)
    return runs, roles


def assess(
    claims: ClaimsFile, data: Mapping[str, MethodData], params: Mapping[str, Any] | None = None
) -> Assessment:
    """Every claim of ``claims`` judged over ``data`` (role -> its runs), and its tables.

    Args:
        params: the study's numbers (``window``, ``entropy_band``, ...), beside the file's own ``params``
            (a study number the file's ``params`` defaults, :data:`~eapo.study.claims_file.STUDY_DEFAULTS`,
            takes the study's value).
    """
    values = {**claims.params, **(params or {})}
    cache: dict[Any, Any] = {}
    groups = {
        name: [_assess_claim(spec, claims, data, values, cache) for spec in specs]
        for name, specs in claims.groups.items()
    }
    tables, roles = {}, {}
    for name, table in claims.tables.items():
        tables[name], roles[name] = _assess_table(table, data, values, cache)
    return Assessment(groups, tables, values, roles)
