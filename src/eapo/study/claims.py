"""The first eight claims of ``eapo study``: what the paper says of its five methods, judged from their runs.

For each claim,

1. PSR lowers entropy;
2. PSR shortens answers;
3. NSR raises entropy;
4. EAPO holds entropy near H_0;
5. EAPO scores best on Avg;
6. GRPO lowers entropy ("PSR and GRPO suffer from entropy collapse", the EAPO-vs-baselines dynamics);
7. NSR lengthens answers ("NSR produce longer ones", Figure 2c);
8. NSR's reward rises faster than PSR's ("NSR leads to faster reward gains", Figure 2b),

:func:`assess_claims` says whether it *held*, *did not hold*, or is *within noise* in this study, with
the numbers; :func:`claims_markdown` writes them into ``claims.md``. The rules (:data:`VERDICT_RULES`,
written into ``claims.md``), on the intervals of :mod:`eapo.study.stats`:

* **start / end** of a run: the window intervals over its first / last ``window`` fraction of
  optimisation steps (at least :data:`~eapo.study.stats.MIN_WINDOW_STEPS` steps, at most half the run;
  a run shorter than twice that is *not measured*), seeds pooled.
* **lowers / raises / shortens / lengthens** (claims 1–3, 6, 7): *held* when the end interval lies entirely below
  (above) the start interval; *did not hold* when it lies entirely on the other side; otherwise
  *within noise* (the intervals overlap).
* **near H_0** (claim 4): the end-window entropy of each seed divided by that run's ``H_0`` (the
  ``eapo/H0`` it logged); *held* when the interval of that ratio lies inside ``1 ± band``
  (:data:`ENTROPY_BAND`, 10%); *did not hold* when it lies entirely outside; otherwise *within noise*.
* **rises faster** (claim 8): each run's reward slope (``reward/mean`` against the step, every step);
  *held* when NSR's interval lies entirely above PSR's, *did not hold* when entirely below, *within
  noise* otherwise (a run with fewer than ``2·MIN_WINDOW_STEPS`` steps: *not measured*).
* **best on Avg** (claim 5): each method's Avg with its 95% bootstrap interval over prompts (from
  ``eapo eval``), seeds pooled. *held* when EAPO's interval lies entirely above every other method's;
  *did not hold* when some method's interval lies entirely above EAPO's; otherwise *within noise*.

A claim whose runs are missing (failed, not finished, a metric not logged) is *not measured*, with
the reason. Nothing else decides a verdict: the wording in ``claims.md`` is generated from these rules.

The claims find runs by method and effective weights (:func:`run_role`), so they read the
w+ = 0.1 / w0 = 0.2 runs whatever a study labels them. :class:`MethodData` is what they read per
configuration (:func:`eapo.study.run.collect_method_data` fills it from the run directories).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eapo.study.stats import (
    MIN_WINDOW_STEPS,
    Interval,
    avg_interval,
    band_verdict,
    best_verdict,
    change_verdict,
    slope_interval,
    window_interval,
)

__all__ = [
    "STUDY_METHODS",
    "STUDY_WEIGHTS",
    "ENTROPY_BAND",
    "CUT_SHARE",
    "ENTROPY_KEY",
    "LENGTH_KEY",
    "REWARD_KEY",
    "H0_KEY",
    "CLIPPED_KEY",
    "VERDICT_RULES",
    "Claim",
    "MethodData",
    "run_role",
    "assess_claims",
    "claims_markdown",
    "interval_text",
    "missing_runs",
]

#: The five methods of the paper's comparison, in its table order.
STUDY_METHODS = ("grpo", "psr", "nsr", "w_reinforce", "eapo")

#: The weights the study's main rows run with (the paper's table): W-REINFORCE w+ = 0.1, EAPO w0 = 0.2.
STUDY_WEIGHTS: dict[str, dict[str, float]] = {"w_reinforce": {"w_pos": 0.1}, "eapo": {"w0": 0.2}}

#: Claim 4: "near H_0" means within ±10% of H_0.
ENTROPY_BAND = 0.10
#: "Not cut at the cap": at most 10% of the end window's completions hit max_completion_tokens.
CUT_SHARE = 0.10

#: The metrics the claims read from each run's metrics.jsonl.
ENTROPY_KEY = "entropy/rollout"
LENGTH_KEY = "completion/mean_length"
REWARD_KEY = "reward/mean"
H0_KEY = "eapo/H0"
#: TRL's share of a step's completions that hit max_completion_tokens (kept in metrics.jsonl as logged).
CLIPPED_KEY = "completions/clipped_ratio"

#: The rules as written into claims.md ({window} and {band} filled from the settings).
VERDICT_RULES = (
    "- **start / end**: mean of the metric over the first / last {window:.0%} of optimisation steps (at least "
    f"{MIN_WINDOW_STEPS} steps, at most half the run; shorter runs: not measured), with a 95% interval mean ± 1.96·SE, SE² = s²/n_eff, n_eff = n·(1−ρ)/(1+ρ) "
    "(ρ: lag-1 autocorrelation of the window, clipped to [0, 0.9]). Several seeds: mean over seeds, "
    "SE² = Σ SE_s²/S² (start and end of a seed are paired).\n"
    "- **lowers / raises / shortens / lengthens**: held if the end interval lies entirely below (above) the start interval; "
    "did not hold if it lies entirely on the other side; within noise if the intervals overlap.\n"
    "- **near H_0**: end-window entropy ÷ the run's logged H_0 (eapo/H0); held if its interval lies inside "
    "1 ± {band:.0%}; did not hold if entirely outside; within noise otherwise.\n"
    "- **rises faster**: each run's reward slope per step (least squares of reward/mean on the step, every step) "
    "with a 95% interval b ± 1.96·SE, SE² = σ²_res/Σ(t−t̄)²·(1+ρ)/(1−ρ) (ρ: lag-1 autocorrelation of the "
    "residuals, clipped to [0, 0.9]); several seeds: mean slope, SE² = Σ SE_s²/S². Held if NSR's interval lies "
    "entirely above PSR's; did not hold if entirely below; within noise otherwise.\n"
    "- **best on Avg**: Avg with its 95% bootstrap interval over prompts (eapo eval); several seeds: mean over "
    "seeds, SE² = Σ SE_i²/S² + s²_seeds/S (conservative). Held if EAPO's interval lies entirely above every "
    "other method's; did not hold if another method's lies entirely above EAPO's; within noise otherwise.\n"
    "- **not measured**: a run the claim needs is missing, failed, or did not log the metric."
)


# --------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------


@dataclass
class Claim:
    """One claim of the paper and what this study's numbers say about it."""

    key: str
    statement: str
    verdict: str
    evidence: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodData:
    """What the claims read for one method: per seed, the metric series and the evaluation results."""

    series: dict[str, list[list[float | None]]] = field(default_factory=dict)  # key -> per seed
    h0: list[float | None] = field(default_factory=list)  # per seed: the logged H_0
    results: list[dict[str, Any]] = field(default_factory=list)  # per seed: results.json
    runs: list[str] = field(default_factory=list)
    seeds: list[int | None] = field(
        default_factory=list
    )  # per seed with metrics: its seed (aligned with series, h0)


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


def _ratio_series(entropy: list[list[float | None]], h0: list[float | None]) -> list[list[float | None]]:
    out = []
    for values, anchor in zip(entropy, h0, strict=True):
        if anchor is None or not anchor > 0:
            continue
        out.append([None if v is None else v / anchor for v in values])
    return out


def assess_claims(
    data: Mapping[str, MethodData], *, window: float = 0.1, entropy_band: float = ENTROPY_BAND
) -> tuple[list[Claim], dict[str, dict[str, Any]]]:
    """The eight verdicts from each method's dynamics and evaluations. Returns ``(claims, per-method numbers)``."""
    empty = MethodData()
    table: dict[str, dict[str, Any]] = {}
    for method in STUDY_METHODS:
        d = data.get(method, empty)
        entropy, length = d.series.get(ENTROPY_KEY, []), d.series.get(LENGTH_KEY, [])
        table[method] = {
            "runs": list(d.runs),
            "seeds": len(d.runs),
            "entropy_start": window_interval(entropy, fraction=window, end=False),
            "entropy_end": window_interval(entropy, fraction=window, end=True),
            "length_start": window_interval(length, fraction=window, end=False),
            "length_end": window_interval(length, fraction=window, end=True),
            "avg": avg_interval(d.results),
            "avg_strict": avg_interval(d.results, "avg_strict"),
            "reward_slope": slope_interval(d.series.get(REWARD_KEY, [])),
            "steps": max((len(s) for s in entropy), default=0),
        }

    def change(method: str, what: str, expect: str, statement: str, key: str) -> Claim:
        start, end = table[method][f"{what}_start"], table[method][f"{what}_end"]
        verdict = change_verdict(start, end, expect)
        unit = "nats/token" if what == "entropy" else "tokens"
        if start is None or end is None:
            evidence = _missing(data.get(method), what, table[method]["steps"])
        else:
            evidence = f"{_SHORT[method]} {what}: start {start.text()} → end {end.text()} {unit}"
        return Claim(key, statement, verdict, evidence, {"start": start, "end": end})

    claims = [
        change("psr", "entropy", "decrease", "PSR lowers entropy", "psr_lowers_entropy"),
        change("psr", "length", "decrease", "PSR shortens answers", "psr_shortens_answers"),
        change("nsr", "entropy", "increase", "NSR raises entropy", "nsr_raises_entropy"),
    ]

    eapo = data.get("eapo", empty)
    ratio = window_interval(
        _ratio_series(eapo.series.get(ENTROPY_KEY, []), eapo.h0), fraction=window, end=True
    )
    h0_values = [h for h in eapo.h0 if h is not None]
    verdict = band_verdict(ratio, 1 - entropy_band, 1 + entropy_band)
    if ratio is None:
        evidence = _missing(data.get("eapo"), "entropy and H_0", table["eapo"]["steps"])
    else:
        h0_text = ", ".join(f"{h:.3f}" for h in h0_values)
        evidence = (
            f"EAPO end entropy {table['eapo']['entropy_end'].text()} nats/token vs H_0 = {h0_text}: "
            f"end/H_0 = {ratio.text()} (band 1 ± {entropy_band:.0%})"
        )
    claims.append(
        Claim(
            "eapo_holds_entropy",
            "EAPO holds entropy near H_0",
            verdict,
            evidence,
            {"ratio": ratio, "h0": h0_values},
        )
    )

    others = {m: table[m]["avg"] for m in STUDY_METHODS if m != "eapo"}
    verdict = best_verdict(table["eapo"]["avg"], others)
    if table["eapo"]["avg"] is None or any(v is None for v in others.values()):
        missing = [m for m in STUDY_METHODS if table[m]["avg"] is None]
        evidence = f"no evaluation for {', '.join(missing)}"
    else:
        evidence = "Avg: " + "; ".join(f"{_SHORT[m]} {table[m]['avg'].text()}" for m in STUDY_METHODS)
    claims.append(
        Claim(
            "eapo_best_avg",
            "EAPO scores best on Avg",
            verdict,
            evidence,
            {m: table[m]["avg"] for m in STUDY_METHODS},
        )
    )
    claims += [
        change("grpo", "entropy", "decrease", "GRPO lowers entropy", "grpo_lowers_entropy"),
        change("nsr", "length", "increase", "NSR lengthens answers", "nsr_lengthens_answers"),
    ]

    nsr, psr = table["nsr"]["reward_slope"], table["psr"]["reward_slope"]
    verdict = best_verdict(nsr, {"psr": psr})
    if nsr is None or psr is None:
        missing = [m for m, v in (("nsr", nsr), ("psr", psr)) if v is None]
        evidence = "; ".join(
            f"{_SHORT[m]}: {_missing(data.get(m), 'reward', table[m]['steps'])}" for m in missing
        )
    else:
        evidence = f"reward slope per step: NSR {nsr.text(5)} vs PSR {psr.text(5)}"
    claims.append(
        Claim(
            "nsr_reward_rises_faster",
            "NSR's reward rises faster than PSR's",
            verdict,
            evidence,
            {"nsr": nsr, "psr": psr},
        )
    )
    return claims, table


def interval_text(interval: Interval | None, digits: int = 3) -> str:
    """An interval as ``mean [low, high]``, or ``–`` when it was not measured."""
    return "–" if interval is None else interval.text(digits)


def missing_runs(
    data: Mapping[str, MethodData], roles: Sequence[str], what: str, names: Mapping[str, str]
) -> str:
    """Why a claim over ``roles`` is not measured: the configurations (by ``names``) with no run, else
    the metric ``what`` not logged often enough."""
    absent = [names.get(r, r) for r in roles if r not in data or not data[r].runs]
    if absent:
        return "no finished run of " + ", ".join(absent)
    return f"{what} not measured (too few logged steps, or not logged)"


def _missing(data: MethodData | None, what: str, steps: int) -> str:
    if data is None or not data.runs:
        return "no finished run"
    if steps < 2 * MIN_WINDOW_STEPS:
        return f"{steps} logged steps of {what}: too few for start and end windows of {MIN_WINDOW_STEPS} steps each"
    return f"{what} not logged"


_SHORT = {"grpo": "GRPO", "psr": "PSR", "nsr": "NSR", "w_reinforce": "W-REINFORCE", "eapo": "EAPO"}
_LABELS = {
    "grpo": "GRPO",
    "psr": "PSR",
    "nsr": "NSR",
    "w_reinforce": "W-REINFORCE (w+=0.1)",
    "eapo": "EAPO (w0=0.2)",
}


def _cell(interval: Interval | None) -> str:
    return "–" if interval is None else interval.text()


def claims_markdown(
    claims: Sequence[Claim],
    table: Mapping[str, Mapping[str, Any]],
    *,
    window: float,
    entropy_band: float,
    context: Sequence[str] = (),
) -> str:
    """``claims.md``: the verdicts, the numbers behind them, and the rules that decided them."""
    lines = ["# Does EAPO do what the paper says? Verdicts of this study", ""]
    lines += [f"{line}" for line in context]
    if context:
        lines.append("")
    lines += ["| Claim | Verdict | Numbers |", "|---|---|---|"]
    for claim in claims:
        lines.append(f"| {claim.statement} | **{claim.verdict}** | {claim.evidence} |")
    lines += [
        "",
        "## Per method",
        "",
        "Entropy in nats/token, length in tokens: start / end = first / last window of steps with a 95% "
        "interval; Avg with its 95% interval (strict: an answer without its <advice> block scores 0).",
        "",
        "| Method | Seeds | Steps | Entropy start | Entropy end | Length start | Length end | Reward slope /step | Avg | Avg (strict) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in STUDY_METHODS:
        row = table[method]
        slope = row.get("reward_slope")
        lines.append(
            f"| {_LABELS[method]} | {row['seeds']} | {row['steps']} | {_cell(row['entropy_start'])} | "
            f"{_cell(row['entropy_end'])} | {_cell(row['length_start'])} | {_cell(row['length_end'])} | "
            f"{'–' if slope is None else slope.text(5)} | {_cell(row['avg'])} | {_cell(row.get('avg_strict'))} |"
        )
    lines += [
        "",
        "## How each verdict is decided",
        "",
        VERDICT_RULES.format(window=window, band=entropy_band),
        "",
        "The verdicts say what these runs show at this scale (model, data, steps, seeds); they are not a "
        "statement about the paper's setting.",
        "",
    ]
    return "\n".join(lines)
