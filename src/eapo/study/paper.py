"""The EAPO paper's claims in its own words, each with a rule fixed before the data (issue 26).

``eapo study`` judges, besides the eight claims of :mod:`eapo.study.claims` (kept as they were), the
sentences below, quoted with their section. Each rule was written from the sentence before any run of
the study it judges, and can only say *held* when an interval clears it: noise alone gives *within
noise* (or, with intervals that clear the other way, *did not hold*). Runs are found by method and
effective weights (:func:`eapo.study.claims.run_role`): ``eapo`` is EAPO with w0 = 0.2, ``w_reinforce`` is
W-REINFORCE with w+ = 0.1, ``eapo:w0=0.05`` / ``w_reinforce:w_pos=0.2`` the sensitivity points.

Every Avg claim is judged twice: on the paper's ``avg`` and on ``avg_strict`` (an answer without its
``<advice>`` block scores 0; :mod:`eapo.evaluation.metrics`).

The intervals (a run's window and end/start ratio with its deviation ``|r − 1|``, an Avg, a difference
of two methods' intervals, the bootstrap of a difference of Ranges) and the verdicts that compare them
are :mod:`eapo.study.stats`'s; this module holds the sentences, the rules written from them, and which
runs each rule reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eapo.study.claims import (
    CLIPPED_KEY,
    ENTROPY_KEY,
    LENGTH_KEY,
    Claim,
    MethodData,
    interval_text,
    missing_runs,
)
from eapo.study.stats import (
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
    deviation_interval,
    difference_interval,
    lower_verdict,
    range_difference_interval,
    ratio_interval,
    window_interval,
)

__all__ = [
    "APPROACH_MARGIN",
    "COMPARATORS",
    "EAPO_SENSITIVITY",
    "FIXED_WEIGHT_METHODS",
    "PAPER_RULES",
    "W_REINFORCE_SENSITIVITY",
    "PaperClaim",
    "assess_paper_claims",
    "paper_claims_markdown",
]

#: "Approaches the optimum": EAPO's Avg at least (1 − 1.2%) × every fixed-weight configuration's. From
#: the paper's own numbers, before any data: its EAPO trails the best fixed configuration by 0.008 on
#: RJUA (0.664 vs W-REINFORCE w+=0.2's 0.672: 1.19%) and by 0.005 on CMD (0.516 vs NSR's 0.521: 0.96%),
#: and it calls both "approaching the optimum"; 1.2% is the larger shortfall, rounded up.
APPROACH_MARGIN = 0.012
#: The field's entropy controls EAPO is held against (``algorithm.method`` presets).
COMPARATORS = ("adaptive_entropy", "clip_higher", "clip_cov")
#: The sensitivity points (the paper's Table "Sensitivity"): (role, value) of EAPO's w0 and W-REINFORCE's w+.
EAPO_SENSITIVITY = (("eapo:w0=0.05", 0.05), ("eapo:w0=0.1", 0.1), ("eapo", 0.2))
W_REINFORCE_SENSITIVITY = (
    ("w_reinforce:w_pos=0.05", 0.05),
    ("w_reinforce", 0.1),
    ("w_reinforce:w_pos=0.2", 0.2),
)
#: Methods whose weights are fixed (the candidates for "the best fixed-weight configuration").
FIXED_WEIGHT_METHODS = ("grpo", "psr", "nsr", "w_reinforce")

_AVG_KEYS = (("avg", ""), ("avg_strict", " (strict Avg)"))

#: Each rule, verbatim in claims.md ({band}, {cut}, {margin} filled from the settings).
PAPER_RULES: dict[str, str] = {
    "nsr_entropy_above_psr": (
        "NSR's end-window entropy against PSR's (pooled over seeds): held if NSR's interval lies entirely "
        "above PSR's; did not hold if entirely below; within noise if they overlap."
    ),
    "w_reinforce_0.2_raises_entropy": (
        "W-REINFORCE with w+ = 0.2, w− = 1 (the paper's PSR0.2-NSR1): the 'raises' rule of the first claims — "
        "held if its end-window entropy interval lies entirely above its start-window interval; did not hold "
        "if entirely below; within noise if they overlap. (The paper says 'explosion'; the rule tests the "
        "direction, the measurable part.)"
    ),
    "eapo_stable_entropy": (
        "EAPO's end-window entropy ÷ its start-window entropy (the start WINDOW, not the first step: one "
        "step's entropy is one batch's), per seed, pooled: held if the interval lies inside 1 ± {band:.0%}; "
        "did not hold if entirely outside; within noise otherwise. The band is study.entropy_band, the one "
        "'near H_0' uses, fixed before this study: 'stable' must be tighter than what the paper calls "
        "collapse or explosion, which the first study measured at −35% (PSR) and +19% (NSR)."
    ),
    "eapo_confines_length": (
        "Two parts, both needed. (a) EAPO's end-window response length lies between PSR's and NSR's: held if "
        "its interval lies entirely above the lower one's and entirely below the higher one's; did not hold "
        "if it lies entirely below the lower or entirely above the higher; within noise otherwise. (b) Its "
        "answers are not cut at the cap: the end-window mean of completions/clipped_ratio (TRL: the share of "
        "a step's completions that hit max_completion_tokens) — held if its interval lies entirely below "
        "{cut:.0%}; did not hold if entirely above; within noise otherwise. Held if (a) and (b) held; did not "
        "hold if either did not hold; else within noise (not measured if a part could not be measured)."
    ),
    "eapo_tuning_free": (
        "Range = max − min of the Avg over EAPO's w0 ∈ {{0.05, 0.1, 0.2}} and over W-REINFORCE's w+ ∈ "
        "{{0.05, 0.1, 0.2}} (each configuration's Avg: the mean over its seeds). The difference "
        "Range_EAPO − Range_W-REINFORCE with a 95% bootstrap interval over prompts and seeds: held if the "
        "interval lies entirely below 0; did not hold if entirely above 0; within noise otherwise. Judged on "
        "avg and on avg_strict."
    ),
    "eapo_approaches_best_fixed": (
        "For every fixed-weight configuration F in the study (GRPO, PSR, NSR, each W-REINFORCE w+): "
        "D_F = Avg(EAPO) − (1 − {margin:.1%})·Avg(F), with the interval of a difference. Held if every D_F "
        "interval lies entirely above 0 (EAPO within {margin:.1%} of, or above, every fixed configuration — "
        "the best included); did not hold if some D_F interval lies entirely below 0; within noise "
        "otherwise. The margin is the paper's: its EAPO trails its best fixed configuration by 1.19% "
        "(RJUA) and 0.96% (CMD) and it calls that 'approaching'. Judged on avg and on avg_strict."
    ),
    "eapo_best_overall_strict": (
        "The 'best on Avg' rule of the first claims on avg_strict: held if EAPO's interval lies entirely "
        "above GRPO's, PSR's, NSR's and W-REINFORCE's; did not hold if one lies entirely above EAPO's; "
        "within noise otherwise."
    ),
    "eapo_entropy_closer": (
        "Deviation |end/start − 1| of each run's entropy (the end/start ratio above): held if EAPO's "
        "deviation interval lies entirely below the comparator's; did not hold if entirely above; within "
        "noise otherwise."
    ),
}


@dataclass
class PaperClaim(Claim):
    """A claim quoted from the paper: its sentence, section and the rule that decides it."""

    quote: str = ""
    section: str = ""
    rule: str = ""
    basis: str = "paper"  # "paper": the paper's sentence; "beyond": a question the paper does not ask


# --------------------------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------------------------

_NAMES = {
    "grpo": "GRPO",
    "psr": "PSR",
    "nsr": "NSR",
    "w_reinforce": "W-REINFORCE (w+=0.1)",
    "eapo": "EAPO (w0=0.2)",
    "w_reinforce:w_pos=0.05": "W-REINFORCE (w+=0.05)",
    "w_reinforce:w_pos=0.2": "W-REINFORCE (w+=0.2)",
    "eapo:w0=0.05": "EAPO (w0=0.05)",
    "eapo:w0=0.1": "EAPO (w0=0.1)",
    "adaptive_entropy": "Adaptive entropy",
    "clip_higher": "Clip-higher",
    "clip_cov": "Clip-Cov",
}


def _name(role: str) -> str:
    return _NAMES.get(role, role)


_text = interval_text


def _missing(data: Mapping[str, MethodData], roles: Sequence[str], what: str) -> str:
    return missing_runs(data, roles, what, _NAMES)


def assess_paper_claims(
    data: Mapping[str, MethodData],
    *,
    window: float = 0.1,
    entropy_band: float = 0.10,
    max_clipped_share: float = 0.10,
    margin: float = APPROACH_MARGIN,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[list[PaperClaim], dict[str, Any]]:
    """The paper's claims of the module docstring, from each configuration's dynamics and evaluations.

    Args:
        data: configuration role (:func:`eapo.study.claims.run_role`) -> its runs' series and results.
    Returns ``(claims, tables)``: ``tables`` holds the entropy-control comparison (per method: entropy
    ratio, deviation, Avg and Avg strict with intervals) for claims.md.
    """
    empty = MethodData()

    def get(role: str) -> MethodData:
        return data.get(role, empty)

    def end(role: str, key: str) -> Interval | None:
        return window_interval(get(role).series.get(key, []), fraction=window, end=True)

    def start(role: str, key: str) -> Interval | None:
        return window_interval(get(role).series.get(key, []), fraction=window, end=False)

    rules = {
        key: text.format(band=entropy_band, cut=max_clipped_share, margin=margin)
        for key, text in PAPER_RULES.items()
    }
    claims: list[PaperClaim] = []

    # 1. NSR keeps a higher entropy than PSR (Section 2.5)
    nsr_end, psr_end = end("nsr", ENTROPY_KEY), end("psr", ENTROPY_KEY)
    claims.append(
        PaperClaim(
            "nsr_entropy_above_psr",
            "NSR keeps a higher entropy than PSR",
            best_verdict(nsr_end, {"psr": psr_end}),
            f"end-window entropy: NSR {nsr_end.text()} vs PSR {psr_end.text()} nats/token"
            if nsr_end and psr_end
            else _missing(data, ("nsr", "psr"), "entropy"),
            {"nsr_end": nsr_end, "psr_end": psr_end},
            quote="PSR causes the model entropy to drop rapidly, whereas NSR maintains a higher entropy",
            section="Section 2.5, Different Training Dynamics of Positive and Negative Sample Reinforcement",
            rule=rules["nsr_entropy_above_psr"],
        )
    )

    # 2. Fixed w+ = 0.2, w- = 1 raises entropy (Section 5.2)
    role = "w_reinforce:w_pos=0.2"
    first, last = start(role, ENTROPY_KEY), end(role, ENTROPY_KEY)
    claims.append(
        PaperClaim(
            "w_reinforce_0.2_raises_entropy",
            "Fixed w+ = 0.2, w− = 1 (W-REINFORCE) raises entropy",
            change_verdict(first, last, "increase"),
            f"W-REINFORCE (w+=0.2) entropy: start {first.text()} → end {last.text()} nats/token"
            if first and last
            else _missing(data, (role,), "entropy"),
            {"start": first, "end": last},
            quote="NSR and PSR0.2-NSR1 exhibit entropy explosion",
            section="Section 5.2, Main Results",
            rule=rules["w_reinforce_0.2_raises_entropy"],
        )
    )

    # 3. EAPO keeps a stable entropy level (Section 5.2)
    ratios = {
        r: ratio_interval(get(r).series.get(ENTROPY_KEY, []), fraction=window) for r in ("eapo", *COMPARATORS)
    }
    eapo_ratio = ratios["eapo"]
    claims.append(
        PaperClaim(
            "eapo_stable_entropy",
            "EAPO keeps a stable entropy level",
            _band(eapo_ratio, entropy_band),
            f"EAPO entropy end/start = {eapo_ratio.text()} (band 1 ± {entropy_band:.0%}); start "
            f"{_text(start('eapo', ENTROPY_KEY))} → end {_text(end('eapo', ENTROPY_KEY))} nats/token"
            if eapo_ratio
            else _missing(data, ("eapo",), "entropy"),
            {"ratio": eapo_ratio},
            quote="EAPO maintains a stable entropy level",
            section="Section 5.2, Main Results",
            rule=rules["eapo_stable_entropy"],
        )
    )

    # 4. EAPO confines response length within a reasonable range (Section 5.2)
    eapo_len, psr_len, nsr_len = end("eapo", LENGTH_KEY), end("psr", LENGTH_KEY), end("nsr", LENGTH_KEY)
    clipped = end("eapo", CLIPPED_KEY)
    between = between_verdict(eapo_len, psr_len, nsr_len)
    uncut = below_verdict(clipped, max_clipped_share)
    parts = []
    if eapo_len and psr_len and nsr_len:
        parts.append(
            f"(a) end-window length: EAPO {eapo_len.text()} vs PSR {psr_len.text()}, NSR {nsr_len.text()} "
            f"tokens: {between}"
        )
    else:
        parts.append("(a) " + _missing(data, ("eapo", "psr", "nsr"), "length"))
    parts.append(
        f"(b) share cut at the cap {clipped.text()} (limit {max_clipped_share:.0%}): {uncut}"
        if clipped
        else f"(b) {CLIPPED_KEY} not logged: not measured"
    )
    claims.append(
        PaperClaim(
            "eapo_confines_length",
            "EAPO confines response length within a reasonable range",
            combine_verdicts([between, uncut]),
            "; ".join(parts),
            {"eapo_end": eapo_len, "psr_end": psr_len, "nsr_end": nsr_len, "clipped_end": clipped},
            quote="EAPO maintains a stable entropy level and confines the response length within a reasonable range",
            section="Section 5.2, Main Results",
            rule=rules["eapo_confines_length"],
        )
    )

    # 5. EAPO is tuning-free (appendix "Different Fixed Weighting Configurations")
    for key, suffix in _AVG_KEYS:
        eapo_groups = [get(r).results for r, _ in EAPO_SENSITIVITY]
        wr_groups = [get(r).results for r, _ in W_REINFORCE_SENSITIVITY]
        found = range_difference_interval(eapo_groups, wr_groups, key=key, n_resamples=n_resamples, seed=seed)
        if found is None:
            verdict = NOT_MEASURED
            missing = [
                _name(r)
                for r, _ in (*EAPO_SENSITIVITY, *W_REINFORCE_SENSITIVITY)
                if avg_interval(get(r).results, key) is None
            ]
            evidence = "no evaluation (" + key + ") for " + ", ".join(missing)
            numbers: dict[str, Any] = {}
        else:
            difference, eapo_range, wr_range = found
            verdict = below_verdict(difference, 0.0)
            evidence = (
                f"Range of {key}: EAPO (w0 ∈ {{0.05, 0.1, 0.2}}) {eapo_range.text()}, W-REINFORCE "
                f"(w+ ∈ {{0.05, 0.1, 0.2}}) {wr_range.text()}; difference {difference.text()}"
            )
            numbers = {"difference": difference, "eapo_range": eapo_range, "w_reinforce_range": wr_range}
        claims.append(
            PaperClaim(
                "eapo_tuning_free" + ("_strict" if key == "avg_strict" else ""),
                "EAPO is tuning-free: its Avg varies less over w0 than W-REINFORCE's over w+" + suffix,
                verdict,
                evidence,
                numbers,
                quote="the choice of w0 has only a marginal influence on the final performance",
                section='Appendix "Different Fixed Weighting Configurations"',
                rule=rules["eapo_tuning_free"],
            )
        )

    # 6. EAPO approaches the best fixed-weight configuration (Section 5.2)
    fixed = [r for r in data if r.split(":")[0] in FIXED_WEIGHT_METHODS and data[r].results]
    for key, suffix in _AVG_KEYS:
        eapo_avg = avg_interval(get("eapo").results, key)
        others = {r: avg_interval(data[r].results, key) for r in fixed}
        differences = {
            r: difference_interval(eapo_avg, interval, 1 - margin) for r, interval in others.items()
        }
        verdict = approach_verdict(differences) if eapo_avg is not None else NOT_MEASURED
        if eapo_avg is None or not others:
            evidence = (
                "no evaluation (" + key + ") of " + ("EAPO" if eapo_avg is None else "a fixed-weight run")
            )
        else:
            best = max(
                (r for r in others if others[r] is not None), key=lambda r: others[r].mean, default=None
            )  # type: ignore[union-attr]
            evidence = f"{key}: EAPO {eapo_avg.text()}; " + "; ".join(
                f"{_name(r)} {_text(others[r])} (D {_text(differences[r])})" for r in sorted(others)
            )
            if best is not None:
                evidence += f"; best fixed: {_name(best)}"
        claims.append(
            PaperClaim(
                "eapo_approaches_best_fixed" + ("_strict" if key == "avg_strict" else ""),
                f"EAPO approaches the best fixed-weight configuration (within {margin:.1%})" + suffix,
                verdict,
                evidence,
                {"eapo": eapo_avg, "fixed": others, "differences": differences, "margin": margin},
                quote="EAPO approaches the optimum on every metric and achieves the best overall performance",
                section='Section 5.2, Main Results; appendix "Different Fixed Weighting Configurations"',
                rule=rules["eapo_approaches_best_fixed"],
            )
        )

    # 7. EAPO achieves the best overall performance, on the strict Avg (the lenient one is claim 5 of eapo.study.claims)
    main = ("grpo", "psr", "nsr", "w_reinforce")
    eapo_strict = avg_interval(get("eapo").results, "avg_strict")
    others_strict = {r: avg_interval(get(r).results, "avg_strict") for r in main}
    verdict = best_verdict(eapo_strict, others_strict)
    claims.append(
        PaperClaim(
            "eapo_best_overall_strict",
            "EAPO scores best on Avg (strict Avg)",
            verdict,
            "avg_strict: "
            + "; ".join(f"{_name(r)} {_text(v)}" for r, v in {**others_strict, "eapo": eapo_strict}.items()),
            {"eapo": eapo_strict, **others_strict},
            quote="EAPO approaches the optimum on every metric and achieves the best overall performance",
            section="Section 5.2, Main Results",
            rule=rules["eapo_best_overall_strict"],
        )
    )

    # 8. Beyond the paper: EAPO against the field's entropy controls
    deviations = {r: deviation_interval(ratio) for r, ratio in ratios.items()}
    for comparator in COMPARATORS:
        verdict = lower_verdict(deviations["eapo"], deviations[comparator])
        if deviations["eapo"] is None or deviations[comparator] is None:
            evidence = _missing(data, ("eapo", comparator), "entropy")
        else:
            evidence = (
                f"|end/start − 1| of entropy: EAPO {deviations['eapo'].text()} (ratio {ratios['eapo'].text()}) vs "  # type: ignore[union-attr]
                f"{_name(comparator)} {deviations[comparator].text()} (ratio {ratios[comparator].text()})"  # type: ignore[union-attr]
            )
        claims.append(
            PaperClaim(
                f"eapo_entropy_closer_than_{comparator}",
                f"EAPO holds its entropy closer to its start than {_name(comparator)}",
                verdict,
                evidence,
                {"eapo": deviations["eapo"], comparator: deviations[comparator]},
                quote="(beyond the paper: the field's entropy controls)",
                section="—",
                rule=rules["eapo_entropy_closer"],
                basis="beyond",
            )
        )
    controls: dict[str, Any] = {}
    for r in ("eapo", *COMPARATORS):
        row: dict[str, Any] = {"runs": list(get(r).runs), "ratio": ratios[r], "deviation": deviations[r]}
        for key, _ in _AVG_KEYS:
            row[key] = avg_interval(get(r).results, key)
            row[f"{key}_eapo_minus"] = (
                None if r == "eapo" else difference_interval(avg_interval(get("eapo").results, key), row[key])
            )
        controls[r] = row
    return claims, {"entropy_controls": controls}


def _band(interval: Interval | None, band: float) -> str:
    return band_verdict(interval, 1 - band, 1 + band)


def _cell(text: str) -> str:
    """Text for a Markdown table cell (a ``|`` would end the cell)."""
    return text.replace("|", "\\|")


def paper_claims_markdown(claims: Sequence[PaperClaim], tables: Mapping[str, Any]) -> str:
    """The claims.md section: the verdict table, each rule verbatim, and the entropy-control comparison."""
    lines = [
        "## The paper's claims, in its words",
        "",
        "Each rule was written from the paper's sentence before the study ran; noise alone cannot make a "
        "claim hold (held needs an interval that clears the rule). Avg claims are judged on the paper's Avg "
        "and on the strict Avg (an answer without its <advice> block scores 0).",
        "",
        "| Claim | The paper says (where) | Verdict | Numbers |",
        "|---|---|---|---|",
    ]
    for claim in claims:
        said = claim.quote if claim.basis == "beyond" else f'"{claim.quote}" — {claim.section}'
        cells = [_cell(claim.statement), _cell(said), f"**{claim.verdict}**", _cell(claim.evidence)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "### The rules (fixed before the data)", ""]
    seen: set[str] = set()
    for claim in claims:
        if claim.rule in seen:
            continue
        seen.add(claim.rule)
        lines.append(f"- **{claim.statement}**: {claim.rule}")
    controls = tables.get("entropy_controls") or {}
    if controls:
        lines += [
            "",
            "### EAPO and the field's entropy controls (beyond the paper)",
            "",
            "Entropy end/start ratio and its deviation |end/start − 1|; Avg and strict Avg with 95% intervals; "
            "EAPO − method: the difference with its interval (positive: EAPO higher).",
            "",
            "| Method | Runs | Entropy end/start | \\|end/start − 1\\| | Avg | EAPO − method | Avg (strict) | EAPO − method (strict) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for role, row in controls.items():
            lines.append(
                f"| {_name(role)} | {len(row['runs'])} | {_text(row['ratio'])} | {_text(row['deviation'])} | "
                f"{_text(row['avg'])} | {_text(row['avg_eapo_minus'])} | {_text(row['avg_strict'])} | "
                f"{_text(row['avg_strict_eapo_minus'])} |"
            )
    return "\n".join(lines) + "\n"
