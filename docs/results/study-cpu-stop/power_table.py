"""The stop study's power table, computed before its first run from its pilot's runs and the controls study.

    .venv/bin/python docs/results/study-cpu-stop/power_table.py

Noise model (stated in plan.md): one seed's per-step entropy ratio r_t = H_t / H_0 scatters around its
trend with the stop pilot's GRPO residual standard deviation and lag-1 autocorrelation (least-squares
line over its 20 steps); every configuration is given that noise (a stand-in: only GRPO and PSR were
piloted). A window of n steps then has SE_1 = sigma / sqrt(n_eff), n_eff = n (1 - rho) / (1 + rho), as
eapo.study.stats; three seeds pool to SE_1 / sqrt(3). An Avg's SE for three seeds is the controls
study's (its claims.json, the same regime without the stop string), the largest of its seven
configurations'. z = 1.96 (95% intervals), z_p = 0.84 (80% power).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEEDS = 3
STEPS = 40
END_WINDOW = 4  # 10% of 40 steps
SECOND_HALF = 20  # steps 21-40
BAND = 0.10
ENGAGED = 0.20
Z, ZP = 1.959963984540054, 0.8416212335729143


def pilot_noise(method: str) -> tuple[float, float, float]:
    rows = [json.loads(line) for line in (HERE / "pilot" / method / "metrics.jsonl").open()]
    r = np.array([row["entropy/rollout"] / row["eapo/H0"] for row in rows])
    t = np.arange(1, len(r) + 1)
    slope, intercept = np.polyfit(t, r, 1)
    residual = r - (intercept + slope * t)
    rho = float((residual[1:] * residual[:-1]).sum() / (residual**2).sum())
    return float(residual.std(ddof=2)), min(max(rho, 0.0), 0.9), float(rows[0]["eapo/H0"])


def window_se(sigma: float, rho: float, steps: int, seeds: int = SEEDS) -> float:
    n_eff = max(1.0, steps * (1 - rho) / (1 + rho))
    return sigma / math.sqrt(n_eff) / math.sqrt(seeds)


def disjoint(se_a: float, se_b: float) -> tuple[float, float]:
    """Two intervals that must not overlap: the bar on the observed difference, and the MDD at 80%."""
    threshold = Z * (se_a + se_b)
    return threshold, threshold + ZP * math.hypot(se_a, se_b)


def main() -> None:
    sigma, rho, h0 = pilot_noise("grpo")
    sigma_psr, rho_psr, _ = pilot_noise("psr")
    se_end = window_se(sigma, rho, END_WINDOW)
    se_half = window_se(sigma, rho, SECOND_HALF)
    controls = json.loads((HERE.parent / "study-cpu-controls" / "claims.json").read_text())
    claims = {claim["key"]: claim["numbers"] for claim in controls["claims"]}
    se_avg = {
        key: max(
            (v["high"] - v["low"]) / (2 * Z)
            for v in claims[f"eapo_best_{key}"].values()
            if isinstance(v, dict) and "high" in v
        )
        for key in ("avg", "avg_strict")
    }

    print(f"Pilot GRPO: residual sd of r = {sigma:.3f}, lag-1 rho = {rho:.2f}, H_0 = {h0:.3f} nats "
          f"(PSR: sd {sigma_psr:.3f}, rho {rho_psr:.2f}).")
    print(f"SE of r for {SEEDS} seeds: end window ({END_WINDOW} steps) {se_end:.4f}; "
          f"second half ({SECOND_HALF} steps) {se_half:.4f}; Avg {se_avg['avg']:.4f}, strict {se_avg['avg_strict']:.4f}.")
    print()
    print("| Claim | Rule | Bar on the observed value | Detectable with 80% power |")
    print("|---|---|---|---|")
    inside = ENGAGED - (Z + ZP) * se_end
    print(f"| Controller engaged (per w0) | end-window w+/w0 interval outside 1 ± {ENGAGED:.0%} | "
          f"\\|w+/w0 − 1\\| > {ENGAGED + Z * se_end:.3f} | a true \\|w+/w0 − 1\\| ≥ {ENGAGED + (Z + ZP) * se_end:.3f} "
          f"is called engaged; ≤ {inside:.3f} is called not engaged |")
    threshold, mdd = disjoint(se_end, se_end)
    print(f"| GRPO / PSR collapse | end-window entropy interval below the start window's | "
          f"a fall > {threshold:.3f} H_0 | a true fall ≥ {mdd:.3f} H_0 ({mdd * h0:.3f} nats) |")
    print(f"| NSR keeps a higher entropy than PSR | NSR's end-window r interval above PSR's | "
          f"a gap > {threshold:.3f} | a true gap in end-window r ≥ {mdd:.3f} |")
    print(f"| EAPO closer to H_0 than GRPO / PSR | EAPO's \\|end/H_0 − 1\\| interval below the comparator's | "
          f"a gap > {threshold:.3f} | a true gap in \\|end/H_0 − 1\\| ≥ {mdd:.3f} |")
    for w_low, w_high in ((0.2, 1.0),):
        threshold, mdd = disjoint(w_low * se_end, w_high * se_end)
        print(f"| Operating regime: end-window w+ agree (w0 {w_low} vs {w_high}) | the two intervals overlap "
              f"(agree); disjoint: did not hold | a gap ≤ {threshold:.3f} can overlap | a true gap ≥ {mdd:.3f} "
              f"is called a disagreement (the runs start {w_high - w_low:.1f} apart) |")
    se_diff = math.sqrt(2) * se_half
    print(f"| Similar entropy trajectory (w0 0.2 vs 1.0) | second-half mean of r(1.0) − r(0.2) inside ± {BAND:.0%} | "
          f"\\|D\\| < {BAND - Z * se_diff:.3f} | a true \\|D\\| ≤ {BAND - (Z + ZP) * se_diff:.3f} is called similar; "
          f"≥ {BAND + (Z + ZP) * se_diff:.3f} not similar |")
    print(f"| EntroPIC / EAPO + integral (/ adaptive bonus) hold ± {BAND:.0%} | second-half mean of r inside "
          f"1 ± {BAND:.0%} | \\|r − 1\\| < {BAND - Z * se_half:.3f} | a true \\|r − 1\\| ≤ {BAND - (Z + ZP) * se_half:.3f} "
          f"is called held; ≥ {BAND + (Z + ZP) * se_half:.3f} not held |")
    for key, name in (("avg", "Avg"), ("avg_strict", "strict Avg")):
        threshold, mdd = disjoint(se_avg[key], se_avg[key])
        print(f"| EAPO best on {name} | its interval above every other configuration's | a lead > {threshold:.3f} | "
              f"a true lead ≥ {mdd:.3f} over the runner-up |")


if __name__ == "__main__":
    main()
