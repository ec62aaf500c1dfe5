"""How large a difference each verdict of ``eapo study`` can detect with S seeds, from a finished study.

Every verdict compares 95% intervals (:mod:`eapo.study.stats`, judged by :mod:`eapo.study.claims` from a
claims file). From a study's ``claims.json`` (its per-role intervals) this module takes each quantity's
standard error for one seed and scales it to S seeds, then asks, per row, how large the true difference
must be:

* the *threshold*: the smallest observed difference the rule calls held (the rule's bar);
* the *minimum detectable difference* (MDD): the smallest true difference that the rule calls held
  with probability ``power`` (default 80%), the estimate being normal around the truth.

Which rows, in which order, comparing what, is data: the ``power:`` section of the study's claims file
(the one its config's ``study.claims`` names, or ``--claims``); nothing here names a claim. It holds::

    power:
      table: methods          # claims.json's per-role table: {role: {seeds, column: interval, ...}}
      rows:
        - claim: PSR lowers entropy                       # the row's label (a template over params)
          compares: "psr entropy: end vs start window"    # what it compares (a template; {best} too)
          rule: disjoint                                  # disjoint (a, b) | difference (a[, b]) | band (value, width)
          a: {window: psr.entropy_start}
          b: {window: psr.entropy_end}
          note: ...                                       # optional; default: its sources' notes

Rules and their bars (z = 1.96, z_p = the power's normal quantile, e.g. 0.84 for 80%):

* ``disjoint``: two intervals that must not overlap: threshold ``z·(SE_a + SE_b)``; MDD
  ``threshold + z_p·√(SE_a² + SE_b²)``;
* ``difference``: an interval on ``a − b`` (or ``a``) that must clear 0: threshold ``z·SE_D``; MDD
  ``(z + z_p)·SE_D``;
* ``band``: an interval that must lie inside ``1 ± width`` (``width``: a number or a parameter, e.g.
  ``entropy_band``): the largest true deviation ``|r − 1|`` held with that power, ``width − (z +
  z_p)·SE_r`` (negative: cannot hold).

Sources (each a mapping with one of these keys); a row whose source is missing from the study is left out:

* ``window: ROLE.COLUMN``: an interval of the table (a window's or a slope's): ``SE_1 = SE_pooled·√S₀``
  (S₀: the seeds the study pooled), ``SE_S = SE_1/√S``;
* ``avg: ROLE.COLUMN``: an Avg, ``SE_S² = (SE_prompts² + sd²_seeds)/S`` (:func:`eapo.study.stats.avg_interval`'s
  pooling): a one-seed study says nothing of ``sd_seeds``, so it is a parameter (``--seed-sd``; default:
  equal to ``SE_prompts``, stated in the note);
* ``number: CLAIM.NUMBER`` with ``seeds_of: ROLE``: a number of a claim in claims.json, its SE scaled by
  that role's pooled seeds;
* ``ratio: [A, B]``: A ÷ B of two sources, its SE by the delta method;
* ``deviation: SOURCE``: ``|mean − 1|`` with the source's SE;
* ``spread: SOURCE`` (``times: k`` optional): the source's SE (× k) without its mean: a stand-in;
* ``highest: [SOURCE, ...]`` with ``scale`` (optional, a number or ``1 - param``): the one with the
  highest mean, scaled; ``{best}`` in ``compares`` names its role.

    python -m eapo.study.power docs/results/study-cpu-smollm2-medquad --seeds 3
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

from eapo.study.claims import ClaimsFile
from eapo.study.claims_file import PACKAGED, STUDY_DEFAULTS, ClaimsError, load_claims, resolve_claims
from eapo.study.quantities import Reading

__all__ = ["Detectable", "PowerError", "minimum_detectable", "power_markdown", "study_claims_file", "main"]

_Z95 = 1.959963984540054
_RULES = {"disjoint": ("a", "b"), "difference": ("a",), "band": ("value", "width")}
_ROW = ("claim", "compares", "rule", "a", "b", "value", "width", "note")
_SOURCES = ("window", "avg", "number", "ratio", "deviation", "spread", "highest")


class PowerError(ValueError):
    """A power section that cannot be used, or a study whose claims file cannot be found."""


@dataclass(frozen=True)
class Detectable:
    """One verdict's detection bar with S seeds."""

    claim: str
    compares: str
    rule: str  # "disjoint" | "difference" | "band"
    observed: float | None  # the study's observed difference (or deviation |r − 1| for a band)
    se_one_seed: tuple[float, ...]  # the standard errors for one seed behind it
    threshold: float  # the bar an observed difference must pass (band: the largest deviation held)
    mdd: float  # the minimum detectable true difference at the given power (band: largest deviation)
    held_at_observed: bool | None  # would the observed difference pass the bar with S seeds
    note: str = ""


@dataclass(frozen=True)
class _Value:
    mean: float | None
    se: float  # for one seed
    note: str = ""
    role: str = ""
    best: str = ""  # a ``highest`` source: the role it picked ({best} in texts)


def _se(interval: Mapping[str, Any] | None) -> float | None:
    if not interval:
        return None
    return (float(interval["high"]) - float(interval["low"])) / (2 * _Z95)


def _mean(interval: Mapping[str, Any] | None) -> float | None:
    return None if not interval else float(interval["mean"])


class _Sources:
    """The sources of a power section over one claims.json payload."""

    def __init__(
        self, payload: Mapping[str, Any], table: str, seed_sd: float | None, reading: Reading, where: str
    ):
        self.payload = payload
        self.rows: Mapping[str, Any] = payload.get(table) or {}
        self.seed_sd = seed_sd
        self.reading = reading
        self.where = where

    def fail(self, where: str, message: str) -> PowerError:
        return PowerError(f"{self.where}: {where}: {message}")

    def _cell(self, ref: Any, where: str) -> tuple[str, Mapping[str, Any], Any]:
        if not isinstance(ref, str) or "." not in ref:
            raise self.fail(where, f"expected ROLE.COLUMN, got {ref!r}")
        role, column = ref.rsplit(".", 1)
        row = self.rows.get(role) or {}
        return role, row, row.get(column)

    def _pooled(self, row: Mapping[str, Any]) -> int:
        return max(1, int(row.get("seeds") or 1))

    def value(self, spec: Any, where: str) -> _Value | None:
        if not isinstance(spec, Mapping):
            raise self.fail(where, f"expected a source ({', '.join(_SOURCES)}), got {spec!r}")
        kinds = [key for key in spec if key in _SOURCES]
        if len(kinds) != 1:
            raise self.fail(
                where, f"a source holds exactly one of {', '.join(_SOURCES)}, got {', '.join(spec)}"
            )
        kind = kinds[0]
        allowed = {"number": ("seeds_of",), "spread": ("times",), "highest": ("scale",)}.get(kind, ())
        unknown = [key for key in spec if key != kind and key not in allowed]
        if unknown:
            raise self.fail(where, f"unknown key {unknown[0]!r} of a {kind} source")
        return getattr(self, f"_{kind}")(spec, f"{where}.{kind}")

    def _window(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        role, row, interval = self._cell(spec["window"], where)
        se = _se(interval)
        if se is None:
            return None
        return _Value(_mean(interval), se * math.sqrt(self._pooled(row)), role=role)

    def _avg(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        role, row, interval = self._cell(spec["avg"], where)
        se = _se(interval)
        if se is None:
            return None
        pooled = self._pooled(row)
        if pooled > 1:  # the pooled interval already holds the seed spread: its per-seed variance
            return _Value(
                _mean(interval), se * math.sqrt(pooled), "per-seed SE from the pooled interval", role
            )
        sd = se if self.seed_sd is None else self.seed_sd
        note = "seed sd assumed = prompt SE" if self.seed_sd is None else f"seed sd = {self.seed_sd:g}"
        return _Value(_mean(interval), math.sqrt(se**2 + sd**2), note, role)

    def _number(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        ref = spec["number"]
        if not isinstance(ref, str) or "." not in ref:
            raise self.fail(where, f"expected CLAIM.NUMBER, got {ref!r}")
        key, name = ref.rsplit(".", 1)
        role = spec.get("seeds_of")
        for group in self.payload.values():
            for claim in group if isinstance(group, list) else ():
                if isinstance(claim, Mapping) and claim.get("key") == key:
                    interval = (claim.get("numbers") or {}).get(name)
                    se = _se(interval) if isinstance(interval, Mapping) else None
                    if se is None:
                        return None
                    pooled = self._pooled(self.rows.get(role) or {}) if role else 1
                    return _Value(_mean(interval), se * math.sqrt(pooled), role=role or "")
        return None

    def _ratio(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        parts = spec["ratio"]
        if not isinstance(parts, list) or len(parts) != 2:
            raise self.fail(where, f"expected [A, B], got {parts!r}")
        end, start = (self.value(part, f"{where}[{i}]") for i, part in enumerate(parts))
        if end is None or start is None or not start.mean or end.mean is None:
            return None
        r = end.mean / start.mean
        se_r = math.sqrt(end.se**2 + r**2 * start.se**2) / abs(start.mean)
        return _Value(r, se_r, role=end.role)

    def _deviation(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        source = self.value(spec["deviation"], where)
        if source is None or source.mean is None:
            return None
        return _Value(abs(source.mean - 1), source.se, source.note, source.role)

    def _spread(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        source = self.value(spec["spread"], where)
        if source is None:
            return None
        se = source.se * self.reading.number(spec["times"]) if "times" in spec else source.se
        return _Value(None, se, source.note, source.role)

    def _highest(self, spec: Mapping[str, Any], where: str) -> _Value | None:
        if not isinstance(spec["highest"], list) or not spec["highest"]:
            raise self.fail(where, "expected a list of sources")
        found = [self.value(s, f"{where}[{i}]") for i, s in enumerate(spec["highest"])]
        found = [v for v in found if v is not None and v.mean is not None]
        if not found:
            return None
        best = max(found, key=lambda v: v.mean)  # type: ignore[arg-type,return-value]
        if "scale" not in spec:
            return _Value(best.mean, best.se, best.note, best.role, best.role)
        scale = self.reading.number(spec["scale"])
        return _Value(scale * best.mean, scale * best.se, best.note, best.role, best.role)  # type: ignore[operator]


def _notes(*values: _Value | None) -> str:
    return "; ".join(dict.fromkeys(v.note for v in values if v is not None and v.note))


def minimum_detectable(
    claims: Mapping[str, Any],
    seeds: int,
    *,
    claims_file: ClaimsFile | str | Path | None = None,
    seed_sd: float | None = None,
    power: float = 0.8,
    params: Mapping[str, Any] | None = None,
) -> list[Detectable]:
    """Each row's bar with ``seeds`` seeds, from a study's ``claims.json`` payload.

    Args:
        claims: the parsed ``claims.json`` (its per-role table, ``settings``, claims).
        seeds: S, the seeds per configuration of the planned study.
        claims_file: the claims file whose ``power:`` section lists the rows (a :class:`ClaimsFile`, a path
            or a packaged name); default: the study's (:func:`study_claims_file`).
        seed_sd: the seed-to-seed standard deviation of an Avg (default: from the study when it had
            two or more seeds, else equal to each run's prompt SE).
        power: the probability of "held" the MDD is computed for.
        params: numbers the rows read, over the study's (its ``settings``: ``entropy_band``, ...) and the
            claims file's ``params``.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if claims_file is None:
        claims_file = study_claims_file(claims)
    elif not isinstance(claims_file, ClaimsFile):
        claims_file = load_claims(resolve_claims(str(claims_file)))
    section = claims_file.power
    where = f"{claims_file.path}: power"
    if not section:
        raise PowerError(f"{claims_file.path} has no power: section (the rows eapo.study.power computes)")
    rows = section.get("rows")
    if not isinstance(rows, list) or not rows:
        raise PowerError(f"{where}.rows: expected a non-empty list of rows")
    settings = claims.get("settings") or {}
    study = {k: settings[k] for k in ("window", *STUDY_DEFAULTS) if settings.get(k) is not None}
    values = {**claims_file.params, **study, **(params or {})}
    reading = Reading({}, {}, values)
    sources = _Sources(claims, str(section.get("table", "methods")), seed_sd, reading, where)
    z_p = NormalDist().inv_cdf(power)
    out: list[Detectable] = []
    for index, row in enumerate(rows):
        here = f"rows[{index}]"
        if not isinstance(row, Mapping):
            raise sources.fail(here, f"expected a mapping with keys {', '.join(_ROW)}")
        unknown = [key for key in row if key not in _ROW]
        if unknown:
            raise sources.fail(here, f"unknown key {unknown[0]!r}; valid keys: {', '.join(_ROW)}")
        rule = row.get("rule")
        if rule not in _RULES:
            raise sources.fail(f"{here}.rule", f"{rule!r} is not one of {', '.join(_RULES)}")
        for key in ("claim", "compares", *_RULES[rule]):
            if key not in row:
                raise sources.fail(here, f"no {key!r} (a {rule} row needs it)")
        found = {key: sources.value(row[key], f"{here}.{key}") for key in ("a", "b", "value") if key in row}
        if any(value is None for value in found.values()):
            continue  # a source the study did not measure
        names = {**values, "best": next((v.best for v in found.values() if v and v.best), "")}
        try:
            claim = str(row["claim"]).format(**names)
            compares = str(row["compares"]).format(**names)
        except (KeyError, ValueError, IndexError) as error:
            raise sources.fail(here, f"a text names what it cannot read ({error})") from None
        note = str(row["note"]) if "note" in row else _notes(*found.values())
        if rule == "disjoint":
            a, b = found["a"], found["b"]
            assert a is not None and b is not None
            sa, sb = a.se / math.sqrt(seeds), b.se / math.sqrt(seeds)
            threshold = _Z95 * (sa + sb)
            mdd = threshold + z_p * math.sqrt(sa**2 + sb**2)
            observed = None if a.mean is None or b.mean is None else abs(a.mean - b.mean)
            held = None if observed is None else observed > threshold
            out.append(Detectable(claim, compares, rule, observed, (a.se, b.se), threshold, mdd, held, note))
        elif rule == "difference":
            a, b = found["a"], found.get("b")
            assert a is not None
            if b is None:
                observed, se_one = a.mean, a.se
            else:
                observed = None if a.mean is None or b.mean is None else a.mean - b.mean
                se_one = math.sqrt(a.se**2 + b.se**2)
            se = se_one / math.sqrt(seeds)
            threshold = _Z95 * se
            held = None if observed is None else observed > threshold
            out.append(
                Detectable(
                    claim, compares, rule, observed, (se_one,), threshold, (_Z95 + z_p) * se, held, note
                )
            )
        else:
            ratio = found["value"]
            assert ratio is not None
            band = float(reading.number(row["width"]))
            se = ratio.se / math.sqrt(seeds)
            threshold = band - _Z95 * se
            observed = None if ratio.mean is None else abs(ratio.mean - 1)
            held = None if observed is None else observed < threshold
            out.append(
                Detectable(
                    claim,
                    compares,
                    rule,
                    observed,
                    (ratio.se,),
                    threshold,
                    band - (_Z95 + z_p) * se,
                    held,
                    note,
                )
            )
    return out


def study_claims_file(payload: Mapping[str, Any]) -> ClaimsFile:
    """The claims file of the study that wrote ``payload`` (its claims.json): the one its config's
    ``study.claims`` names now (the config as recorded, a path from here, else the packaged config of that
    name), else the one its ``settings.claims`` recorded."""
    from eapo.study.run import read_study_config
    from eapo.sweep.plan import SweepError

    config = payload.get("config")
    problems = []
    if isinstance(config, str):
        for candidate in (Path(config), PACKAGED / Path(config).name):
            if candidate.is_file():
                try:
                    settings, _ = read_study_config(candidate)
                    return load_claims(resolve_claims(str(settings.claims), candidate))
                except (SweepError, ClaimsError) as error:
                    problems.append(str(error))
                break
    recorded = (payload.get("settings") or {}).get("claims")
    if isinstance(recorded, str):
        try:
            return load_claims(resolve_claims(recorded, config if isinstance(config, str) else None))
        except ClaimsError as error:
            problems.append(str(error))
    raise PowerError(
        "cannot tell which claims file this study judged (its claims.json's config and settings.claims)"
        + (f": {'; '.join(problems)}" if problems else "")
        + "; pass --claims FILE"
    )


def power_markdown(rows: Sequence[Detectable], *, seeds: int, power: float, source: str) -> str:
    """A Markdown table of :func:`minimum_detectable`'s rows."""
    lines = [
        f"# Minimum detectable differences with {seeds} seed(s), from {source}",
        "",
        f"Threshold: the smallest observed difference the rule calls held; MDD: the smallest true difference "
        f"held with probability {power:.0%}. Band rules: the largest deviation |r − 1| that is held (negative: "
        "cannot hold).",
        "",
        "| Claim | Compares | Rule | Observed | SE (1 seed) | Threshold | MDD | Held at observed? | Note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        observed = "–" if row.observed is None else f"{row.observed:.4g}"
        held = "–" if row.held_at_observed is None else ("yes" if row.held_at_observed else "no")
        ses = ", ".join(f"{se:.4g}" for se in row.se_one_seed)
        cells = [
            row.claim,
            row.compares,
            row.rule,
            observed,
            ses,
            f"{row.threshold:.4g}",
            f"{row.mdd:.4g}",
            held,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in [*cells, row.note]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eapo.study.power",
        description="Minimum detectable difference of each eapo study verdict with S seeds, from a study's claims.json.",
    )
    parser.add_argument("study", type=Path, help="a study directory (with claims.json) or a claims.json file")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration of the planned study")
    parser.add_argument(
        "--seed-sd", type=float, default=None, help="seed-to-seed sd of an Avg (default: = prompt SE)"
    )
    parser.add_argument(
        "--power", type=float, default=0.8, help="probability of 'held' for the MDD (default 0.8)"
    )
    parser.add_argument(
        "--claims",
        default=None,
        help="the claims file whose power: section lists the rows (a path or a packaged name; default: the study's)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)
    path = args.study / "claims.json" if args.study.is_dir() else args.study
    if not path.exists():
        print(f"error: {path} does not exist; pass a directory written by eapo study", file=sys.stderr)
        return 2
    payload = json.loads(path.read_text(encoding="utf-8"))
    try:
        rows = minimum_detectable(
            payload, args.seeds, claims_file=args.claims, seed_sd=args.seed_sd, power=args.power
        )
    except (PowerError, ClaimsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
    else:
        print(power_markdown(rows, seeds=args.seeds, power=args.power, source=str(path)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
