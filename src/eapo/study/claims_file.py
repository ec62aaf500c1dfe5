"""Reading a claims file: YAML in, a checked :class:`~eapo.study.claims.ClaimsFile` out.

Every problem is a :class:`ClaimsError` that names the file, the claim (by its id) and the field, e.g.
``configs/x.claims.yaml: groups.claims[2] (psr_lowers_entropy).quantities.end.at: 'last' is not one of
start, end``. A claims file holds::

    title: the first line of claims.md
    names: {role: the name claims.md gives it}          # optional
    params: {name: number}                               # the rules' numbers (optional)
    rules: {id: the rule, as claims.md states it}        # a claim's rule: one of these ids
    groups: {name: [claim, ...]}                         # each group: a list of claims in claims.json
    tables: {name: {rows: [role, ...], quantities: {...}, columns: [...], per_seed: false, with: {...}}}
    json: {key: group or table, ...}                     # claims.json's layout (default: groups, tables)
    markdown: [block, ...]                               # claims.md's layout (eapo.study.render)
    plot: {bands: {panel key: [low, high]}}              # lines drawn on dynamics.png (optional)
    power: {table: ..., rows: [...]}                     # eapo.study.power's rows (optional)

A claim: ``id``, ``statement``, ``quantities`` (:mod:`eapo.study.quantities`), ``compare`` (a
comparison of :data:`eapo.study.claims.COMPARISONS` and its arguments), ``evidence`` (a template),
``missing`` (why it may not be measured), or ``parts`` (a list of ``{compare, evidence, missing}``
whose verdicts combine); optionally ``quote``, ``section``, ``rule``, ``basis`` (``paper`` or
``beyond``), ``numbers`` (what claims.json keeps: names, or ``{key: name}``; default every quantity) and
``constants`` (more entries of it).

``params`` may also give :data:`STUDY_DEFAULTS` (``entropy_band``, ``max_clipped_share``): the
thresholds its rules were written with, used when the study config's ``study:`` section does not set them
(a study config's value wins). ``plot.bands`` names, per panel of a study's ``dynamics.png``
(:data:`eapo.plot.BAND_PANELS`), the dotted lines drawn on it (numbers, or ``1 ± param`` expressions);
``power`` is read by :mod:`eapo.study.power` (its docstring describes it).

``study.claims`` in a study config names its claims file (:func:`resolve_claims`): a path relative to
the config, or a packaged one by name (``paper``: ``configs/paper.claims.yaml``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml

from eapo.study.claims import (
    COMPARISONS,
    REASONS,
    ClaimsFile,
    ClaimSpec,
    Compare,
    Missing,
    Part,
    TableSpec,
)
from eapo.study.quantities import STATISTICS, Quantity, parse_number
from eapo.study.render import BLOCKS
from eapo.study.stats import MIN_WINDOW_STEPS
from eapo.study.templates import Each, Template

__all__ = [
    "ClaimsError",
    "STUDY_PARAMS",
    "STUDY_DEFAULTS",
    "PACKAGED",
    "load_claims",
    "resolve_claims",
    "study_params",
]

#: The numbers every claims file may name, set by the study (``study:`` settings of its config).
STUDY_PARAMS = ("window", "entropy_band", "max_clipped_share", "min_window_steps")
#: Those a claims file's ``params`` may give a default for (its rules' thresholds; the study config's
#: ``study:`` value, when it sets one, wins).
STUDY_DEFAULTS = ("entropy_band", "max_clipped_share")
#: Where ``study.claims: NAME`` finds ``NAME.claims.yaml``: the packaged presets (configs/ links here).
PACKAGED = Path(str(resources.files("eapo") / "configs"))
SUFFIX = ".claims.yaml"

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP = ("title", "names", "params", "rules", "groups", "tables", "json", "markdown", "plot", "power")
_CLAIM = (
    "id",
    "statement",
    "quote",
    "section",
    "rule",
    "basis",
    "quantities",
    "compare",
    "evidence",
    "missing",
    "parts",
    "numbers",
    "constants",
)
_PART = ("compare", "evidence", "missing")
_MISSING = ("text", "why", "roles", "what", "metric", "names", "when")
_EACH = ("each", "item", "sep", "order", "skip")
_TABLE = ("rows", "per_seed", "with", "quantities", "columns")
_NUMBER_OPTIONS = ("fraction", "divide", "times", "scale", "resamples", "seed", "number")
_CHOICES = {"at": ("start", "end"), "value": ("interval", "mean"), "part": ("difference", "first", "second")}


class ClaimsError(ValueError):
    """A claims file that cannot be used (the message names the file, the claim and the field)."""


def study_params(
    window: float, entropy_band: float | None, max_clipped_share: float | None
) -> dict[str, Any]:
    """The study's numbers a claims file may name (:data:`STUDY_PARAMS`); one the study leaves unset
    (``None``: the claims file's default applies, :data:`STUDY_DEFAULTS`) is left out."""
    values = {
        "window": window,
        "entropy_band": entropy_band,
        "max_clipped_share": max_clipped_share,
        "min_window_steps": MIN_WINDOW_STEPS,
    }
    return {name: value for name, value in values.items() if value is not None}


def resolve_claims(setting: str, config: str | Path | None = None) -> Path:
    """``study.claims``: a ``.yaml`` path (relative to the study config's folder, or absolute), or the name
    of a packaged claims file (``paper`` -> ``configs/paper.claims.yaml``)."""
    where = f"{config}: study.claims" if config is not None else "study.claims"
    if setting.endswith((".yaml", ".yml")) or "/" in setting:
        path = Path(setting)
        if not path.is_absolute() and config is not None:
            path = Path(config).parent / path
        if not path.is_file():
            raise ClaimsError(f"{where}: no claims file {path}")
        return path
    path = PACKAGED / f"{setting}{SUFFIX}"
    if not path.is_file():
        known = sorted(p.name.removesuffix(SUFFIX) for p in PACKAGED.glob(f"*{SUFFIX}"))
        raise ClaimsError(
            f"{where}: {setting!r} is neither a path to a .yaml file nor a packaged claims file "
            f"({', '.join(known)})"
        )
    return path


def load_claims(path: str | Path) -> ClaimsFile:
    """The claims file at ``path``, checked (see the module docstring); raises :class:`ClaimsError`."""
    path = Path(path)
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ClaimsError(f"{path}: cannot be read ({error})") from None
    except yaml.YAMLError as error:
        raise ClaimsError(f"{path}: not valid YAML ({error})") from None
    return _Checker(path).file(tree)


class _Checker:
    def __init__(self, path: Path):
        self.path = path
        self.params: set[str] = set(STUDY_PARAMS)
        self.named: set[str] = set()  # the parameters its texts and numbers name

    def fail(self, where: str, message: str) -> NoReturn:
        raise ClaimsError(f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}")

    def mapping(self, value: Any, where: str, keys: Sequence[str] | None = None) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(where, f"expected a mapping, got {type(value).__name__}")
        if keys is not None:
            unknown = [k for k in value if k not in keys]
            if unknown:
                self.fail(where, f"unknown key {unknown[0]!r}; valid keys: {', '.join(keys)}")
        return dict(value)

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(where, f"expected a list of names, got {value!r}")
        return tuple(value)

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def identifier(self, name: Any, where: str) -> str:
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            self.fail(
                where, f"{name!r} is not a name (letters, digits and _; it is written {{{name}}} in texts)"
            )
        return name

    def number(self, value: Any, where: str, known: set[str]) -> Any:
        parsed = parse_number(value)
        if parsed is None:
            self.fail(where, f"{value!r} is not a number, a parameter, or 'a ± b' of those")
        for name in parsed[1]:
            if name not in known:
                self.fail(where, f"{name!r} is not a parameter; known: {', '.join(sorted(known))}")
            self.named.add(name)
        return value

    def fields(self, text: str, where: str, known: set[str]) -> None:
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as error:
            self.fail(where, f"not a valid template ({error}): {text!r}")
        for _, field, _, _ in parsed:
            if field is None:
                continue
            head = re.split(r"[.\[]", field, maxsplit=1)[0]
            self.named.add(head)
            if head not in known:
                self.fail(
                    where, f"{{{field}}} names nothing this text can read; known: {', '.join(sorted(known))}"
                )

    # -- the file ----------------------------------------------------------------------------------

    def file(self, tree: Any) -> ClaimsFile:
        tree = self.mapping(tree, "", _TOP)
        for key in ("title", "groups"):
            if key not in tree:
                self.fail("", f"no {key!r}; a claims file holds {', '.join(_TOP)}")
        title = self.string(tree["title"], "title")
        names = self.mapping(tree.get("names") or {}, "names")
        for role, name in names.items():
            self.string(name, f"names.{role}")
        params = self.mapping(tree.get("params") or {}, "params")
        for name, value in params.items():
            self.identifier(name, f"params.{name}")
            if name in STUDY_PARAMS and name not in STUDY_DEFAULTS:
                self.fail(f"params.{name}", "is set by the study config (study.window, ...), not here")
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(f"params.{name}", f"expected a number, got {value!r}")
        self.params |= set(params)
        rules = self.mapping(tree.get("rules") or {}, "rules")
        for rule_id, text in rules.items():
            self.fields(self.string(text, f"rules.{rule_id}"), f"rules.{rule_id}", self.params)
        self.rules = rules
        groups: dict[str, tuple[ClaimSpec, ...]] = {}
        ids: set[str] = set()
        for group, claims in self.mapping(tree["groups"], "groups").items():
            if not isinstance(claims, list) or not claims:
                self.fail(f"groups.{group}", "expected a non-empty list of claims")
            specs = []
            for index, claim in enumerate(claims):
                spec = self.claim(claim, f"groups.{group}[{index}]")
                if spec.id in ids:
                    self.fail(f"groups.{group}[{index}].id", f"{spec.id!r} is used twice")
                ids.add(spec.id)
                specs.append(spec)
            groups[group] = tuple(specs)
        tables = {
            name: self.table(name, table, f"tables.{name}")
            for name, table in self.mapping(tree.get("tables") or {}, "tables").items()
        }
        clash = set(groups) & set(tables)
        if clash:
            self.fail("tables", f"{sorted(clash)[0]!r} names a group and a table")
        layout = self.layout(
            tree.get("json") or {**{g: g for g in groups}, **{t: t for t in tables}}, "json", groups, tables
        )
        plot = self.plot(tree.get("plot") or {})
        power = self.mapping(tree.get("power") or {}, "power")
        claims = ClaimsFile(self.path, title, names, params, rules, groups, tables, layout, ())
        default = [
            block
            for group, specs in groups.items()
            for block in (
                {
                    "verdicts": group,
                    "columns": {"Claim": "{statement}", "Verdict": "**{verdict}**", "Numbers": "{evidence}"},
                },
                *([{"rules": group}] if all(spec.rule for spec in specs) else []),
            )
        ]
        markdown = tree.get("markdown", default)
        if not isinstance(markdown, list):
            self.fail("markdown", "expected a list of blocks")
        for index, block in enumerate(markdown):
            self.block(block, f"markdown[{index}]", claims)
        return ClaimsFile(
            self.path,
            title,
            names,
            params,
            rules,
            groups,
            tables,
            layout,
            tuple(markdown),
            plot,
            power,
            frozenset(self.named & set(STUDY_PARAMS)),
        )

    def plot(self, raw: Any) -> dict[str, Any]:
        raw = self.mapping(raw, "plot", ("bands",))
        bands = self.mapping(raw.get("bands") or {}, "plot.bands")
        for panel, lines in bands.items():
            if not isinstance(lines, list) or not lines:
                self.fail(f"plot.bands.{panel}", f"expected a list of numbers, got {lines!r}")
            for line in lines:
                self.number(line, f"plot.bands.{panel}", self.params)
        return {"bands": bands}

    def layout(self, layout: Any, where: str, groups: Mapping, tables: Mapping) -> dict[str, Any]:
        out = {}
        for key, name in self.mapping(layout, where).items():
            if isinstance(name, Mapping):
                out[key] = self.layout(name, f"{where}.{key}", groups, tables)
            elif name in groups or name in tables:
                out[key] = name
            else:
                known = ", ".join([*groups, *tables])
                self.fail(f"{where}.{key}", f"{name!r} is not a group or a table ({known})")
        return out

    def block(self, block: Any, where: str, claims: ClaimsFile) -> None:
        if not isinstance(block, Mapping):
            self.fail(where, f"expected a mapping with one of {', '.join(BLOCKS)}")
        kinds = [key for key in block if key in BLOCKS]
        if len(kinds) != 1:
            self.fail(where, f"a block holds exactly one of {', '.join(BLOCKS)}, got {', '.join(block)}")
        entry = BLOCKS[kinds[0]]
        self.mapping(block, where, entry.keys)
        problem = entry.check(block, claims)
        if problem:
            self.fail(where, problem)

    # -- a claim -----------------------------------------------------------------------------------

    def claim(self, claim: Any, where: str) -> ClaimSpec:
        raw = self.mapping(claim, where)
        claim_id = raw.get("id")
        here = f"{where} ({claim_id})" if isinstance(claim_id, str) else where
        self.mapping(raw, here, _CLAIM)
        claim_id = self.string(claim_id, f"{here}.id")
        statement = self.string(raw.get("statement"), f"{here}.statement")
        self.fields(statement, f"{here}.statement", self.params)
        quantities = self.quantities(raw.get("quantities"), f"{here}.quantities", set())
        constants = self.mapping(raw.get("constants") or {}, f"{here}.constants")
        for name in constants:
            self.identifier(name, f"{here}.constants.{name}")
            if name in quantities:
                self.fail(f"{here}.constants.{name}", "is also a quantity")
        known = {*quantities, *constants, *self.params}
        families = set(quantities)  # an ``each:`` loop may run over any of them that holds one value per role
        if "parts" in raw:
            if any(key in raw for key in _PART):
                self.fail(here, "has parts: its compare, evidence and missing belong in each part")
            if not isinstance(raw["parts"], list) or not raw["parts"]:
                self.fail(f"{here}.parts", "expected a non-empty list of {compare, evidence, missing}")
            parts = tuple(
                self.part(
                    self.mapping(part, f"{here}.parts[{i}]", _PART),
                    f"{here}.parts[{i}]",
                    quantities,
                    known,
                    families,
                )
                for i, part in enumerate(raw["parts"])
            )
        else:
            parts = (self.part(raw, here, quantities, known, families),)
        numbers = raw.get("numbers", list(quantities))
        if isinstance(numbers, Mapping):
            pairs = tuple((str(key), name) for key, name in numbers.items())
        elif isinstance(numbers, list):
            pairs = tuple((name, name) for name in numbers)
        else:
            self.fail(f"{here}.numbers", "expected a list of names or a mapping of key -> name")
        for key, name in pairs:
            if name not in quantities and name not in self.params:
                self.fail(f"{here}.numbers.{key}", f"{name!r} is not a quantity or a parameter of this claim")
        quote = raw.get("quote")
        if quote is not None:
            self.string(quote, f"{here}.quote")
            if "rule" not in raw:
                self.fail(here, "quotes a sentence, so it needs a rule (one of the file's rules)")
        rule = raw.get("rule", "")
        if rule and rule not in self.rules:
            self.fail(
                f"{here}.rule", f"{rule!r} is not one of the file's rules ({', '.join(self.rules) or 'none'})"
            )
        basis = raw.get("basis", "paper")
        if basis not in ("paper", "beyond"):
            self.fail(f"{here}.basis", f"{basis!r} is not paper or beyond")
        section = raw.get("section", "")
        if not isinstance(section, str):
            self.fail(f"{here}.section", f"expected a string, got {section!r}")
        return ClaimSpec(
            claim_id, statement, quantities, parts, pairs, constants, quote, section, rule, basis
        )

    def part(
        self,
        raw: Mapping[str, Any],
        where: str,
        quantities: Mapping[str, Quantity],
        known: set[str],
        families: set[str],
    ) -> Part:
        for key in ("compare", "evidence"):
            if key not in raw:
                self.fail(where, f"no {key!r}")
        compare = self.compare(raw["compare"], f"{where}.compare", quantities, known)
        evidence = self.template(
            raw["evidence"], f"{where}.evidence", known | {"verdict"}, families, quantities
        )
        missing = raw.get("missing", [])
        missing = [missing] if isinstance(missing, Mapping) else missing
        if not isinstance(missing, list):
            self.fail(f"{where}.missing", "expected a mapping or a list of them")
        return Part(
            compare,
            evidence,
            tuple(self.missing(m, f"{where}.missing[{i}]", quantities, known) for i, m in enumerate(missing)),
        )

    def compare(self, raw: Any, where: str, quantities: Mapping[str, Quantity], known: set[str]) -> Compare:
        raw = {"kind": raw} if isinstance(raw, str) else self.mapping(raw, where)
        kind = raw.get("kind")
        if kind not in COMPARISONS:
            self.fail(f"{where}.kind", f"{kind!r} is not a comparison; valid: {', '.join(COMPARISONS)}")
        comparison = COMPARISONS[kind]
        self.mapping(raw, where, ("kind", *comparison.quantities, *comparison.numbers))
        refs: dict[str, str | tuple[str, ...]] = {}
        for name in comparison.quantities:
            ref = raw.get(name, name)
            names = [ref] if isinstance(ref, str) else self.strings(ref, f"{where}.{name}")
            for q in names:
                if q not in quantities:
                    self.fail(
                        f"{where}.{name}", f"{q!r} is not a quantity of this claim ({', '.join(quantities)})"
                    )
            refs[name] = ref if isinstance(ref, str) else tuple(ref)
        numbers: dict[str, Any] = {}
        for name in comparison.numbers:
            if name not in raw:
                self.fail(where, f"{kind} needs {name!r}")
            value = raw[name]
            if isinstance(value, list):
                if len(value) != 2:
                    self.fail(f"{where}.{name}", f"expected [low, high], got {value!r}")
                numbers[name] = tuple(self.number(v, f"{where}.{name}", self.params) for v in value)
            else:
                numbers[name] = self.number(value, f"{where}.{name}", self.params)
        return Compare(kind, refs, numbers)

    def missing(self, raw: Any, where: str, quantities: Mapping[str, Quantity], known: set[str]) -> Missing:
        raw = self.mapping(raw, where, _MISSING)
        why = raw.get("why")
        if why is not None and why not in REASONS:
            self.fail(f"{where}.why", f"{why!r} is not a reason; valid: {', '.join(REASONS)}")
        if why is None and "text" not in raw:
            self.fail(where, "needs a text, or a reason (why) to say")
        roles = self.strings(raw["roles"], f"{where}.roles") if "roles" in raw else ()
        if why is not None and not roles:
            self.fail(where, f"the reason {why!r} needs the roles it is about")
        when = raw.get("when")
        if when is not None and when not in quantities:
            self.fail(f"{where}.when", f"{when!r} is not a quantity of this claim")
        text = self.template(raw.get("text", "{why}"), f"{where}.text", known | {"why"}, set(), quantities)
        return Missing(
            text,
            why,
            roles,
            str(raw.get("what", "")),
            str(raw.get("metric", "avg")),
            bool(raw.get("names", True)),
            when,
        )

    def template(
        self, raw: Any, where: str, known: set[str], families: set[str], quantities: Mapping[str, Quantity]
    ) -> Template:
        pieces: list[str | Each] = []
        for index, piece in enumerate(
            [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else [None]
        ):
            here = where if isinstance(raw, str) else f"{where}[{index}]"
            if isinstance(piece, str):
                self.fields(piece, here, known)
                pieces.append(piece)
                continue
            piece = self.mapping(piece, here, _EACH)
            over = piece.get("each")
            if isinstance(over, str):
                if over not in families:
                    self.fail(
                        f"{here}.each", f"{over!r} is not a quantity of this claim ({', '.join(families)})"
                    )
            else:
                over = self.strings(over, f"{here}.each")
                for name in over:
                    if name not in quantities:
                        self.fail(f"{here}.each", f"{name!r} is not a quantity of this claim")
            item = self.string(piece.get("item"), f"{here}.item")
            self.fields(item, f"{here}.item", known | families | {"name", "role", "value"})
            order = piece.get("order", "declared")
            if order not in ("declared", "sorted", "ranked"):
                self.fail(f"{here}.order", f"{order!r} is not declared, sorted or ranked")
            skip = self.strings(piece["skip"], f"{here}.skip") if "skip" in piece else ()
            pieces.append(Each(over, item, str(piece.get("sep", "; ")), order, skip))
        return Template(tuple(pieces))

    # -- quantities --------------------------------------------------------------------------------

    def quantities(self, raw: Any, where: str, row_constants: set[str]) -> dict[str, Quantity]:
        raw = self.mapping(raw, where)
        if not raw:
            self.fail(where, "expected at least one quantity")
        out = {}
        for name, spec in raw.items():
            self.identifier(name, f"{where}.{name}")
            if name in self.params:
                self.fail(f"{where}.{name}", "is also a parameter's name")
            out[name] = self.quantity(name, spec, f"{where}.{name}", row_constants)
        for name, quantity in out.items():  # references, and no cycle among them
            for option in STATISTICS[quantity.stat].references:
                value = quantity.options[option]
                for ref in [value] if isinstance(value, str) else value:
                    if ref not in out:
                        self.fail(
                            f"{where}.{name}.{option}", f"{ref!r} is not a quantity here ({', '.join(out)})"
                        )
        self._acyclic(out, where)
        return out

    def _acyclic(self, quantities: Mapping[str, Quantity], where: str) -> None:
        def refs(q: Quantity) -> list[str]:
            found: list[str] = []
            for option in STATISTICS[q.stat].references:
                value = q.options[option]
                found += [value] if isinstance(value, str) else list(value)
            return found

        state: dict[str, int] = {}

        def visit(name: str, trail: tuple[str, ...]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                self.fail(f"{where}.{name}", "refers to itself: " + " -> ".join((*trail, name)))
            state[name] = 1
            for ref in refs(quantities[name]):
                visit(ref, (*trail, name))
            state[name] = 2

        for name in quantities:
            visit(name, ())

    def quantity(self, name: str, spec: Any, where: str, row_constants: set[str]) -> Quantity:
        spec = self.mapping(spec, where)
        stat = spec.get("stat")
        if stat not in STATISTICS:
            self.fail(f"{where}.stat", f"{stat!r} is not a statistic; valid: {', '.join(STATISTICS)}")
        entry = STATISTICS[stat]
        self.mapping(spec, where, ("stat", "role", "roles", "except", *entry.required, *entry.optional))
        for key in entry.required:
            if key not in spec:
                self.fail(where, f"stat {stat} needs {key!r}")
        if "role" in spec and "roles" in spec:
            self.fail(where, "has role and roles: one configuration, or one value per role")
        role = self.string(spec["role"], f"{where}.role") if "role" in spec else None
        roles: Any = None
        if "roles" in spec:
            if isinstance(spec["roles"], Mapping):
                query = self.mapping(spec["roles"], f"{where}.roles", ("methods", "evaluated"))
                roles = {
                    "methods": self.strings(query.get("methods"), f"{where}.roles.methods"),
                    "evaluated": bool(query.get("evaluated", False)),
                }
            else:
                roles = self.strings(spec["roles"], f"{where}.roles")
        exclude = self.strings(spec["except"], f"{where}.except") if "except" in spec else ()
        options = {k: v for k, v in spec.items() if k not in ("stat", "role", "roles", "except")}
        known = self.params | row_constants
        for key, value in options.items():
            here = f"{where}.{key}"
            if key in _CHOICES:
                if value not in _CHOICES[key]:
                    self.fail(here, f"{value!r} is not one of {', '.join(_CHOICES[key])}")
            elif key in _NUMBER_OPTIONS:
                if not (key == "divide" and value == "H0"):
                    self.number(value, here, known)
            elif key in ("first", "second"):
                self.strings(value, here)
            elif key == "of":
                if stat == "difference":
                    if len(self.strings(value, here)) != 2:
                        self.fail(here, "expected [a, b]: the difference a − scale·b")
                elif stat == "ranking":
                    self.strings(value, here)
                else:
                    self.string(value, here)
            else:  # metric, minus
                self.string(value, here)
        if "times" in options and options.get("value") != "mean":
            self.fail(where, "times multiplies the mean: it needs value: mean")
        return Quantity(name, stat, options, role, roles, exclude)

    # -- tables ------------------------------------------------------------------------------------

    def table(self, name: str, raw: Any, where: str) -> TableSpec:
        self.identifier(name, where)
        raw = self.mapping(raw, where, _TABLE)
        rows = self.strings(raw.get("rows"), f"{where}.rows")
        per_seed = raw.get("per_seed", False)
        if not isinstance(per_seed, bool):
            self.fail(f"{where}.per_seed", f"expected true or false, got {per_seed!r}")
        constants = {}
        for role, values in self.mapping(raw.get("with") or {}, f"{where}.with").items():
            if role not in rows:
                self.fail(f"{where}.with.{role}", "is not one of the table's rows")
            values = self.mapping(values, f"{where}.with.{role}")
            for key, value in values.items():
                self.identifier(key, f"{where}.with.{role}.{key}")
                self.number(value, f"{where}.with.{role}.{key}", self.params)
            constants[role] = values
        row_constants = {key for values in constants.values() for key in values}
        quantities = self.quantities(raw.get("quantities"), f"{where}.quantities", row_constants)
        columns = raw.get("columns", list(quantities))
        for column in self.strings(columns, f"{where}.columns"):
            if column not in quantities:
                self.fail(f"{where}.columns", f"{column!r} is not a quantity of the table")
        return TableSpec(name, rows, quantities, tuple(columns), per_seed, constants)
