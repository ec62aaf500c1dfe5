"""The paper's claims in its words (configs/paper.claims.yaml, group paper_claims): intervals and verdicts by
hand, the tuning-free bootstrap on hand-built evaluations, and every claim on synthetic dynamics."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from eapo.study import MethodData, assess, claims_markdown, load_claims, study_params
from eapo.study.stats import (
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    WITHIN_NOISE,
    Interval,
    approach_verdict,
    below_verdict,
    between_verdict,
    deviation_interval,
    difference_interval,
    lower_verdict,
    range_difference_interval,
    ratio_interval,
)

Z = 1.959963984540054
PAPER = load_claims(Path(__file__).resolve().parents[2] / "configs" / "paper.claims.yaml")
APPROACH_MARGIN = PAPER.params["margin"]


def assess_paper_claims(data, *, n_resamples=2000):
    """The file's paper_claims and its tables (the tuning-free bootstrap with ``n_resamples`` draws)."""
    claims = dataclasses.replace(PAPER, params={**PAPER.params, "resamples": n_resamples})
    for d in data.values():  # the first group's "near H_0" reads a logged H_0 per run: none here
        d.h0 = d.h0 or [None] * len(d.runs)
    assessment = assess(claims, data, study_params(0.1, 0.1, 0.1))
    return assessment.claims["paper_claims"], assessment


def paper_claims_markdown(claims, assessment):
    return claims_markdown(PAPER, assessment)


def test_ratio_interval_by_hand():
    # 10 steps: windows of 3. start [1, 2, 3]: mean 2, var 1, rho 0 -> SE² = 1/3; end [8, 9, 10]: mean 9, SE² = 1/3
    got = ratio_interval([[float(v) for v in range(1, 11)]], fraction=0.1)
    se = math.sqrt(1 / 3 + 4.5**2 / 3) / 2  # delta method: sqrt(SE_end² + r²·SE_start²) / start
    assert (got.mean, got.low, got.high, got.n) == pytest.approx((4.5, 4.5 - Z * se, 4.5 + Z * se, 6))
    # two seeds: the mean ratio, SE² = Σ SE_r² / S²
    flat = [2.0] * 10
    pooled = ratio_interval([[float(v) for v in range(1, 11)], flat], fraction=0.1)
    assert pooled.mean == pytest.approx((4.5 + 1.0) / 2)
    assert pooled.high - pooled.mean == pytest.approx(Z * se / 2)
    assert ratio_interval([[1.0, 2.0, 3.0, 4.0, 5.0]], fraction=0.1) is None  # too short


def test_deviation_and_difference_intervals_by_hand():
    got = deviation_interval(Interval(1.05, 0.95, 1.15))
    assert (got.mean, got.low, got.high) == pytest.approx((0.05, 0.0, 0.15))
    got = deviation_interval(Interval(0.7, 0.6, 0.8))
    assert (got.mean, got.low, got.high) == pytest.approx((0.3, 0.2, 0.4))
    assert deviation_interval(None) is None
    a = Interval(0.5, 0.5 - Z * 0.01, 0.5 + Z * 0.01)
    b = Interval(0.4, 0.4 - Z * 0.02, 0.4 + Z * 0.02)
    got = difference_interval(a, b, 1 - APPROACH_MARGIN)
    se = math.sqrt(0.01**2 + (0.988 * 0.02) ** 2)
    assert (got.mean, got.low, got.high) == pytest.approx(
        (0.5 - 0.988 * 0.4, 0.1048 - Z * se, 0.1048 + Z * se)
    )
    assert APPROACH_MARGIN == 0.012  # the paper's 0.008 / 0.672 = 1.19%, rounded up


def test_verdicts_cannot_hold_on_overlapping_intervals():
    low, mid, high = Interval(100, 90, 110), Interval(130, 125, 135), Interval(160, 150, 170)
    assert between_verdict(mid, low, high) == HELD
    assert between_verdict(mid, high, low) == HELD  # the order of the references does not matter
    assert between_verdict(Interval(80, 70, 85), low, high) == NOT_HELD
    assert between_verdict(Interval(160, 158, 162), low, high) == WITHIN_NOISE  # overlaps the higher one
    assert between_verdict(None, low, high) == NOT_MEASURED
    assert below_verdict(Interval(0.05, 0.02, 0.08), 0.1) == HELD
    assert below_verdict(Interval(0.5, 0.4, 0.6), 0.1) == NOT_HELD
    assert below_verdict(Interval(0.09, 0.05, 0.13), 0.1) == WITHIN_NOISE
    assert lower_verdict(Interval(0.1, 0.0, 0.2), Interval(0.5, 0.3, 0.7)) == HELD
    assert lower_verdict(Interval(0.5, 0.3, 0.7), Interval(0.1, 0.0, 0.2)) == NOT_HELD
    assert lower_verdict(Interval(0.1, 0.0, 0.35), Interval(0.5, 0.3, 0.7)) == WITHIN_NOISE
    assert approach_verdict({"a": Interval(0.01, 0.005, 0.02), "b": Interval(0.02, 0.01, 0.03)}) == HELD
    assert (
        approach_verdict({"a": Interval(0.01, 0.005, 0.02), "b": Interval(-0.02, -0.03, -0.01)}) == NOT_HELD
    )
    assert approach_verdict({"a": Interval(0.01, -0.005, 0.02)}) == WITHIN_NOISE
    assert approach_verdict({"a": None}) == approach_verdict({}) == NOT_MEASURED


def _result(per_prompt: list[float] | None, value: float | None = None, half: float = 0.0, key: str = "avg"):
    """A results.json whose four Avg columns all equal ``per_prompt`` (so the per-prompt Avg is it)."""
    value = float(np.mean(per_prompt)) if value is None else value
    columns = ("rouge_l", "reranker", "rl_at_k", "rr_at_k")
    if key == "avg_strict":
        columns = tuple(f"{c}_strict" for c in columns)
    out = {"metrics": {key: value}, "ci95": {key: [value - half, value + half]}}
    if per_prompt is not None:
        out["per_prompt"] = {
            "ids": [f"p{i}" for i in range(len(per_prompt))],
            "columns": dict.fromkeys(columns, per_prompt),
        }
    return out


def test_range_difference_shares_the_prompt_draw_across_runs():
    # Every replicate draws the same prompts for every run: three identical EAPO runs have a Range of
    # exactly 0 in every replicate, and W-REINFORCE's B run sits exactly 0.1 above A and C.
    eapo = [[_result([0.4, 0.6])], [_result([0.4, 0.6])], [_result([0.4, 0.6])]]
    w_reinforce = [[_result([0.4, 0.6])], [_result([0.5, 0.7])], [_result([0.4, 0.6])]]
    difference, eapo_range, wr_range = range_difference_interval(eapo, w_reinforce, n_resamples=500)
    assert (eapo_range.mean, eapo_range.low, eapo_range.high) == pytest.approx((0.0, 0.0, 0.0), abs=1e-12)
    assert (wr_range.mean, wr_range.low, wr_range.high) == pytest.approx((0.1, 0.1, 0.1), abs=1e-12)
    assert (difference.mean, difference.low, difference.high) == pytest.approx((-0.1, -0.1, -0.1), abs=1e-12)
    assert below_verdict(difference, 0.0) == HELD


def test_range_difference_resamples_seeds():
    # Constant prompts, two seeds per configuration. W-REINFORCE A: seeds 0.40, 0.44 -> its resampled mean is
    # 0.40, 0.42 or 0.44 (probabilities 1/4, 1/2, 1/4); B: 0.50; C: 0.45 -> Range = 0.50 − A's mean.
    flat = lambda v: _result([v, v, v])  # noqa: E731
    eapo = [[flat(0.5), flat(0.5)]] * 3
    w_reinforce = [[flat(0.40), flat(0.44)], [flat(0.5), flat(0.5)], [flat(0.45), flat(0.45)]]
    difference, _, wr_range = range_difference_interval(eapo, w_reinforce, n_resamples=2000, seed=1)
    assert wr_range.mean == pytest.approx(0.08, abs=1e-12)  # point: 0.50 − mean(0.40, 0.44)
    assert (difference.mean, difference.low, difference.high) == pytest.approx(
        (-0.08, -0.10, -0.06), abs=1e-12
    )
    # without per-prompt values: each run drawn from a normal of its interval's SE (here 0: the same numbers)
    bare = lambda v: {"metrics": {"avg": v}, "ci95": {"avg": [v, v]}}  # noqa: E731
    eapo = [[bare(0.5), bare(0.5)]] * 3
    w_reinforce = [[bare(0.40), bare(0.44)], [bare(0.5), bare(0.5)], [bare(0.45), bare(0.45)]]
    difference, _, _ = range_difference_interval(eapo, w_reinforce, n_resamples=2000, seed=1)
    assert (difference.mean, difference.low, difference.high) == pytest.approx(
        (-0.08, -0.10, -0.06), abs=1e-12
    )
    assert range_difference_interval([[]], w_reinforce) is None


# --------------------------------------------------------------------------------------------
# Every claim on synthetic dynamics
# --------------------------------------------------------------------------------------------


def _wiggle(level: float, n: int = 40, amplitude: float = 0.01) -> list[float]:
    return [level + (amplitude if i % 2 else -amplitude) for i in range(n)]


def _ramp(a: float, b: float, n: int = 40) -> list[float]:
    return [a + (b - a) * i / (n - 1) for i in range(n)]


def _method(entropy, length=None, clipped=None, avg=None, avg_strict=None, seeds=1, half=0.005):
    d = MethodData(runs=[f"r{s}" for s in range(seeds)])
    for _ in range(seeds):
        d.series.setdefault("entropy/rollout", []).append(entropy)
        d.series.setdefault("completion/mean_length", []).append(length or [100.0] * len(entropy))
        d.series.setdefault("completions/clipped_ratio", []).append(clipped or [0.0] * len(entropy))
        if avg is not None:
            results = {
                "metrics": {"avg": avg, "avg_strict": avg_strict},
                "ci95": {"avg": [avg - half, avg + half]},
            }
            if avg_strict is not None:
                results["ci95"]["avg_strict"] = [avg_strict - half, avg_strict + half]
            d.results.append(results)
    return d


def _all_held() -> dict[str, MethodData]:
    return {
        "grpo": _method(_ramp(1.5, 1.0), avg=0.40, avg_strict=0.35),
        "psr": _method(_ramp(1.5, 0.5), length=_wiggle(60, amplitude=1), avg=0.35, avg_strict=0.30),
        "nsr": _method(_ramp(1.5, 2.5), length=_wiggle(160, amplitude=1), avg=0.45, avg_strict=0.20),
        "w_reinforce": _method(_wiggle(1.5), avg=0.46, avg_strict=0.25),
        "w_reinforce:w_pos=0.05": _method(_wiggle(1.5), avg=0.36, avg_strict=0.15),
        "w_reinforce:w_pos=0.2": _method(_ramp(1.5, 2.2), avg=0.44, avg_strict=0.30),
        "eapo": _method(_wiggle(1.5), length=_wiggle(110, amplitude=1), avg=0.47, avg_strict=0.42),
        "eapo:w0=0.05": _method(_wiggle(1.5), avg=0.465, avg_strict=0.415),
        "eapo:w0=0.1": _method(_wiggle(1.5), avg=0.47, avg_strict=0.42),
        "adaptive_entropy": _method(_ramp(1.5, 2.0), avg=0.44, avg_strict=0.40),
        "clip_higher": _method(_ramp(1.5, 1.0), avg=0.43, avg_strict=0.41),
        "clip_cov": _method(_ramp(1.5, 1.8), avg=0.42, avg_strict=0.40),
    }


def test_every_paper_claim_held_on_scripted_dynamics():
    claims, assessment = assess_paper_claims(_all_held(), n_resamples=300)
    assert [(c.key, c.verdict) for c in claims] == [
        ("nsr_entropy_above_psr", HELD),
        ("w_reinforce_0.2_raises_entropy", HELD),
        ("eapo_stable_entropy", HELD),
        ("eapo_confines_length", HELD),
        ("eapo_tuning_free", HELD),
        ("eapo_tuning_free_strict", HELD),
        ("eapo_approaches_best_fixed", HELD),
        ("eapo_approaches_best_fixed_strict", HELD),
        ("eapo_best_overall_strict", HELD),
        ("eapo_entropy_closer_than_adaptive_entropy", HELD),
        ("eapo_entropy_closer_than_clip_higher", HELD),
        ("eapo_entropy_closer_than_clip_cov", HELD),
    ]
    by_key = {c.key: c for c in claims}
    # Ranges by hand: EAPO 0.47 − 0.465 = 0.005; W-REINFORCE 0.46 − 0.36 = 0.10
    tuning = by_key["eapo_tuning_free"].numbers
    assert tuning["eapo_range"].mean == pytest.approx(0.005) and tuning[
        "w_reinforce_range"
    ].mean == pytest.approx(0.10)
    assert tuning["difference"].mean == pytest.approx(-0.095)
    # approaches: D = 0.47 − 0.988 × 0.46 (W-REINFORCE, the best fixed) = 0.01552 > 0 with SE = 0.005/Z·√(1 + 0.988²)
    difference = by_key["eapo_approaches_best_fixed"].numbers["differences"]["w_reinforce"]
    assert difference.mean == pytest.approx(0.47 - 0.988 * 0.46)
    assert difference.low == pytest.approx(0.47 - 0.988 * 0.46 - 0.005 * math.sqrt(1 + 0.988**2))
    assert "best fixed: W-REINFORCE (w+=0.1)" in by_key["eapo_approaches_best_fixed"].evidence
    # the quotes and sections are the paper's
    assert by_key["nsr_entropy_above_psr"].quote.endswith("whereas NSR maintains a higher entropy")
    assert by_key["eapo_tuning_free"].section == 'Appendix "Different Fixed Weighting Configurations"'
    assert "1 ± 10%" in by_key["eapo_stable_entropy"].rule
    controls = assessment.tables["entropy_controls"]
    assert controls["adaptive_entropy"]["avg_eapo_minus"].mean == pytest.approx(0.03)
    markdown = paper_claims_markdown(claims, assessment)
    assert (
        '| EAPO keeps a stable entropy level | "EAPO maintains a stable entropy level" — Section 5.2, Main Results |'
        in markdown
    )
    assert "\\|end/start − 1\\|" in markdown and "### The rules (fixed before the data)" in markdown


def test_paper_claims_not_held_within_noise_and_not_measured():
    data = _all_held()
    data["nsr"] = _method(
        _ramp(1.5, 0.4), length=_wiggle(50, amplitude=1), avg=0.45, avg_strict=0.2
    )  # NSR collapses
    data["eapo"] = _method(
        _ramp(1.5, 0.9), length=_wiggle(160, amplitude=1), clipped=[0.9] * 40, avg=0.30, avg_strict=0.10
    )  # collapses, runs into the cap, scores low
    claims = {c.key: c for c in assess_paper_claims(data, n_resamples=300)[0]}
    assert claims["nsr_entropy_above_psr"].verdict == NOT_HELD  # NSR 0.4 below PSR 0.5 at the end
    assert claims["eapo_stable_entropy"].verdict == NOT_HELD  # end/start ≈ 0.6
    assert claims["eapo_confines_length"].verdict == NOT_HELD  # above both, and 90% cut at the cap
    assert claims["eapo_approaches_best_fixed"].verdict == NOT_HELD
    assert claims["eapo_best_overall_strict"].verdict == NOT_HELD
    # EAPO w0 now spans 0.47 − 0.30 = 0.17 > W-REINFORCE's 0.10
    assert claims["eapo_tuning_free"].verdict == NOT_HELD
    # wide intervals: within noise, never held
    noisy = _all_held()
    noisy["eapo"] = _method(
        _wiggle(1.5), length=_wiggle(110, amplitude=1), avg=0.47, avg_strict=0.42, half=0.2
    )
    noisy["w_reinforce:w_pos=0.2"] = _method(_wiggle(1.5, amplitude=0.6), avg=0.44, avg_strict=0.30)
    claims = {c.key: c for c in assess_paper_claims(noisy, n_resamples=300)[0]}
    assert claims["w_reinforce_0.2_raises_entropy"].verdict == WITHIN_NOISE
    assert claims["eapo_approaches_best_fixed"].verdict == WITHIN_NOISE
    assert claims["eapo_best_overall_strict"].verdict == WITHIN_NOISE
    assert claims["eapo_tuning_free"].verdict == WITHIN_NOISE
    # missing runs: not measured, naming them
    for role in ("clip_cov", "eapo:w0=0.1", "w_reinforce:w_pos=0.2"):
        del noisy[role]
    noisy["eapo"].series.pop("completions/clipped_ratio")
    claims = {c.key: c for c in assess_paper_claims(noisy, n_resamples=300)[0]}
    assert claims["eapo_entropy_closer_than_clip_cov"].verdict == NOT_MEASURED
    assert (
        claims["eapo_tuning_free"].verdict == NOT_MEASURED
        and "EAPO (w0=0.1)" in claims["eapo_tuning_free"].evidence
    )
    assert claims["w_reinforce_0.2_raises_entropy"].evidence == "no finished run of W-REINFORCE (w+=0.2)"
    assert claims["eapo_confines_length"].verdict == NOT_MEASURED
    assert "completions/clipped_ratio not logged" in claims["eapo_confines_length"].evidence
