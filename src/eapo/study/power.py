"""How large a difference each verdict of ``eapo study`` can detect with S seeds, from a finished study.

Every verdict compares 95% intervals (:mod:`eapo.study.stats`; the claims: the paper's claims file,
``configs/paper.claims.yaml``, judged by :mod:`eapo.study.claims`). From a study's ``claims.json`` (its per-method intervals) this module takes
each quantity's standard error for one seed and scales it to S seeds, then asks, per verdict, how large
the true difference must be:

* the *threshold*: the smallest observed difference the rule calls held (the rule's bar);
* the *minimum detectable difference* (MDD): the smallest true difference that the rule calls held
  with probability ``power`` (default 80%), the estimate being normal around the truth.

Rules and their bars (z = 1.96, z_p = the power's normal quantile, e.g. 0.84 for 80%):

* two intervals that must not overlap (lowers / raises, NSR above PSR, best on Avg, rises faster,
  EAPO closer than a comparator): threshold ``z·(SE_a + SE_b)``; MDD ``threshold + z_p·√(SE_a² + SE_b²)``;
* an interval on a difference that must clear 0 (approaches the best fixed, tuning-free): threshold
  ``z·SE_D``; MDD ``(z + z_p)·SE_D``;
* an interval that must lie inside ``1 ± band`` (near H_0, stable entropy): the largest true
  deviation ``|r − 1|`` held with that power, ``band − (z + z_p)·SE_r`` (negative: cannot hold).

Standard errors with S seeds: a window's or a slope's ``SE_S = SE_1/√S`` (``SE_1``: one seed's,
recovered from a study with S₀ seeds as ``SE_pooled·√S₀``). An Avg's ``SE_S² = (SE_prompts² + sd²_seeds)/S``
(:func:`eapo.study.stats.avg_interval`'s pooling): a one-seed study says nothing of ``sd_seeds``, so it
is a parameter (``--seed-sd``; default: equal to ``SE_prompts``, stated in the output).

Approximations, stated: quantities a study did not run are taken from a stand-in (W-REINFORCE w+=0.2's
entropy from W-REINFORCE w+=0.1's; a comparator's entropy deviation from EAPO's); a Range of three
Avgs has ``SE ≈ √2·SE_Avg`` (max − min of two of them), a difference of two Ranges ``SE ≈ 2·SE_Avg``.

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

from eapo.study.claims_file import PACKAGED, load_claims

__all__ = ["Detectable", "minimum_detectable", "power_markdown", "main"]

#: "Approaches the best fixed" within this share: the paper claims file's ``margin``.
APPROACH_MARGIN: float = load_claims(PACKAGED / "paper.claims.yaml").params["margin"]

_Z95 = 1.959963984540054


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


def _se(interval: Mapping[str, Any] | None) -> float | None:
    if not interval:
        return None
    return (float(interval["high"]) - float(interval["low"])) / (2 * _Z95)


def _mean(interval: Mapping[str, Any] | None) -> float | None:
    return None if not interval else float(interval["mean"])


def minimum_detectable(
    claims: Mapping[str, Any],
    seeds: int,
    *,
    seed_sd: float | None = None,
    power: float = 0.8,
    entropy_band: float | None = None,
) -> list[Detectable]:
    """Each verdict's bar with ``seeds`` seeds, from a study's ``claims.json`` payload.

    Args:
        claims: the parsed ``claims.json`` (its ``methods`` per-method intervals, ``settings``).
        seeds: S, the seeds per configuration of the planned study.
        seed_sd: the seed-to-seed standard deviation of an Avg (default: from the study when it had
            two or more seeds, else equal to each run's prompt SE).
        power: the probability of "held" the MDD is computed for.
        entropy_band: the band of "near H_0" / "stable" (default: the study's setting).
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    z_p = NormalDist().inv_cdf(power)
    methods: Mapping[str, Any] = claims.get("methods") or {}
    band = (
        entropy_band
        if entropy_band is not None
        else float((claims.get("settings") or {}).get("entropy_band", 0.1))
    )
    out: list[Detectable] = []

    def one_seed(method: str, key: str) -> tuple[float | None, float | None]:
        row = methods.get(method) or {}
        interval = row.get(key)
        se = _se(interval)
        pooled_seeds = max(1, int(row.get("seeds") or 1))
        return _mean(interval), None if se is None else se * math.sqrt(pooled_seeds)

    def avg_se(method: str) -> tuple[float | None, float | None, str]:
        row = methods.get(method) or {}
        interval = row.get("avg")
        se = _se(interval)
        if se is None:
            return None, None, ""
        pooled = max(1, int(row.get("seeds") or 1))
        if pooled > 1:  # the pooled interval already holds the seed spread: its per-seed variance
            return _mean(interval), se * math.sqrt(pooled), "per-seed SE from the pooled interval"
        sd = se if seed_sd is None else seed_sd
        note = "seed sd assumed = prompt SE" if seed_sd is None else f"seed sd = {seed_sd:g}"
        return _mean(interval), math.sqrt(se**2 + sd**2), note

    def disjoint(claim: str, compares: str, a: tuple, b: tuple, note: str = "") -> None:
        (mean_a, se_a), (mean_b, se_b) = a, b
        if se_a is None or se_b is None:
            return
        sa, sb = se_a / math.sqrt(seeds), se_b / math.sqrt(seeds)
        threshold = _Z95 * (sa + sb)
        mdd = threshold + z_p * math.sqrt(sa**2 + sb**2)
        observed = None if mean_a is None or mean_b is None else abs(mean_a - mean_b)
        held = None if observed is None else observed > threshold
        out.append(
            Detectable(claim, compares, "disjoint", observed, (se_a, se_b), threshold, mdd, held, note)
        )

    def difference(
        claim: str, compares: str, observed: float | None, se_one: float | None, note: str = ""
    ) -> None:
        if se_one is None:
            return
        se = se_one / math.sqrt(seeds)
        threshold = _Z95 * se
        held = None if observed is None else observed > threshold
        out.append(
            Detectable(
                claim, compares, "difference", observed, (se_one,), threshold, (_Z95 + z_p) * se, held, note
            )
        )

    def in_band(claim: str, compares: str, ratio: float | None, se_one: float | None, note: str = "") -> None:
        if se_one is None:
            return
        se = se_one / math.sqrt(seeds)
        threshold = band - _Z95 * se
        observed = None if ratio is None else abs(ratio - 1)
        held = None if observed is None else observed < threshold
        out.append(
            Detectable(
                claim, compares, "band", observed, (se_one,), threshold, band - (_Z95 + z_p) * se, held, note
            )
        )

    # The first eight claims (paper.claims.yaml, group claims).
    for claim, method, what in (
        ("PSR lowers entropy", "psr", "entropy"),
        ("PSR shortens answers", "psr", "length"),
        ("NSR raises entropy", "nsr", "entropy"),
        ("GRPO lowers entropy", "grpo", "entropy"),
        ("NSR lengthens answers", "nsr", "length"),
    ):
        disjoint(
            claim,
            f"{method} {what}: end vs start window",
            one_seed(method, f"{what}_start"),
            one_seed(method, f"{what}_end"),
        )
    ratio = _ratio_of(claims, "eapo_holds_entropy")
    if ratio is not None:
        pooled = max(1, int((methods.get("eapo") or {}).get("seeds") or 1))
        in_band(
            "EAPO holds entropy near H_0", "eapo end/H_0 in 1 ± band", ratio[0], ratio[1] * math.sqrt(pooled)
        )
    eapo_avg = avg_se("eapo")
    for other in ("grpo", "psr", "nsr", "w_reinforce"):
        m, se, note = avg_se(other)
        disjoint("EAPO scores best on Avg", f"Avg: eapo vs {other}", eapo_avg[:2], (m, se), note)
    disjoint(
        "NSR's reward rises faster than PSR's",
        "reward slope: nsr vs psr",
        one_seed("nsr", "reward_slope"),
        one_seed("psr", "reward_slope"),
    )

    # The paper's claims (paper.claims.yaml, group paper_claims).
    disjoint(
        "NSR keeps a higher entropy than PSR",
        "end-window entropy: nsr vs psr",
        one_seed("nsr", "entropy_end"),
        one_seed("psr", "entropy_end"),
    )
    disjoint(
        "Fixed w+ = 0.2, w− = 1 raises entropy",
        "w_reinforce w+=0.2 entropy: end vs start",
        one_seed("w_reinforce", "entropy_start"),
        one_seed("w_reinforce", "entropy_end"),
        "stand-in: W-REINFORCE (w+=0.1)'s spreads",
    )
    (start, se_start), (end, se_end) = one_seed("eapo", "entropy_start"), one_seed("eapo", "entropy_end")
    if start and se_start is not None and se_end is not None and end is not None:
        r = end / start
        se_r = math.sqrt(se_end**2 + r**2 * se_start**2) / abs(start)
        in_band("EAPO keeps a stable entropy level", "eapo end/start in 1 ± band", r, se_r)
        disjoint(
            "EAPO holds its entropy closer to its start than a comparator",
            "|end/start − 1|: eapo vs comparator",
            (abs(r - 1), se_r),
            (None, se_r),
            "stand-in: the comparator's spread = EAPO's",
        )
    for other in ("psr", "nsr"):
        disjoint(
            "EAPO confines response length (a: between PSR and NSR)",
            f"end-window length: eapo vs {other}",
            one_seed("eapo", "length_end"),
            one_seed(other, "length_end"),
        )
    fixed = {m: avg_se(m) for m in ("grpo", "psr", "nsr", "w_reinforce") if avg_se(m)[1] is not None}
    if fixed and eapo_avg[1] is not None:
        best = max(fixed, key=lambda m: fixed[m][0])  # type: ignore[arg-type,return-value]
        m_best, se_best, note = fixed[best]
        se_d = math.sqrt(eapo_avg[1] ** 2 + ((1 - APPROACH_MARGIN) * se_best) ** 2)  # type: ignore[operator]
        observed = eapo_avg[0] - (1 - APPROACH_MARGIN) * m_best  # type: ignore[operator]
        difference(
            "EAPO approaches the best fixed-weight configuration",
            f"Avg(eapo) − (1 − {APPROACH_MARGIN:.1%})·Avg({best})",
            observed,
            se_d,
            note,
        )
        difference(
            "EAPO is tuning-free (Range over w0 < Range over w+)",
            "Range_W-REINFORCE − Range_EAPO of Avg",
            None,
            2 * eapo_avg[1],
            "SE of a difference of two Ranges ≈ 2·SE_Avg (no sensitivity runs in this study)",
        )
    return out


def _ratio_of(claims: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    for claim in claims.get("claims") or []:
        if claim.get("key") == key:
            ratio = (claim.get("numbers") or {}).get("ratio")
            if ratio:
                return float(ratio["mean"]), _se(ratio)  # type: ignore[return-value]
    return None


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
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)
    path = args.study / "claims.json" if args.study.is_dir() else args.study
    if not path.exists():
        print(f"error: {path} does not exist; pass a directory written by eapo study", file=sys.stderr)
        return 2
    payload = json.loads(path.read_text(encoding="utf-8"))
    rows = minimum_detectable(payload, args.seeds, seed_sd=args.seed_sd, power=args.power)
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
    else:
        print(power_markdown(rows, seeds=args.seeds, power=args.power, source=str(path)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
