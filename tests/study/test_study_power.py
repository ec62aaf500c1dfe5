"""eapo.study.power: the detection bar of each verdict with S seeds, by hand, and its command line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist

import pytest

from eapo.study.power import main, minimum_detectable

Z = 1.959963984540054
Z80 = NormalDist().inv_cdf(0.8)
ROOT = Path(__file__).resolve().parents[2]


def _interval(mean: float, se: float) -> dict:
    return {"mean": mean, "low": mean - Z * se, "high": mean + Z * se, "n": 4}


def _payload(seeds: int = 1) -> dict:
    row = {
        "seeds": seeds,
        "entropy_start": _interval(3.0, 0.2),
        "entropy_end": _interval(2.0, 0.1),
        "length_start": _interval(100.0, 10.0),
        "length_end": _interval(60.0, 2.0),
        "avg": _interval(0.45, 0.02),
        "reward_slope": _interval(0.001, 0.0005),
    }
    methods = {m: dict(row) for m in ("grpo", "psr", "nsr", "w_reinforce")}
    methods["eapo"] = dict(row, avg=_interval(0.5, 0.01))
    claims = [{"key": "eapo_holds_entropy", "numbers": {"ratio": _interval(1.05, 0.02)}}]
    return {"methods": methods, "claims": claims, "settings": {"entropy_band": 0.1}}


def test_disjoint_intervals_bar_by_hand():
    rows = {(r.claim, r.compares): r for r in minimum_detectable(_payload(), seeds=4, claims_file="paper")}
    psr = rows[("PSR lowers entropy", "psr entropy: end vs start window")]
    # one seed: SE 0.2 (start), 0.1 (end); four seeds: 0.1, 0.05
    assert psr.se_one_seed == pytest.approx((0.2, 0.1))
    assert psr.threshold == pytest.approx(Z * 0.15)
    assert psr.mdd == pytest.approx(Z * 0.15 + Z80 * math.sqrt(0.1**2 + 0.05**2))
    assert psr.observed == pytest.approx(1.0) and psr.held_at_observed is True


def test_avg_bar_counts_the_seed_spread():
    rows = {(r.claim, r.compares): r for r in minimum_detectable(_payload(), seeds=2, claims_file="paper")}
    best = rows[("EAPO scores best on Avg", "Avg: eapo vs grpo")]
    # one seed: SE² = prompt SE² + seed sd² with sd = prompt SE (the stated default)
    assert best.se_one_seed == pytest.approx((math.sqrt(2) * 0.01, math.sqrt(2) * 0.02))
    assert best.threshold == pytest.approx(Z * (0.01 + 0.02))  # two seeds: / sqrt(2)
    assert best.observed == pytest.approx(0.05) and best.held_at_observed is False
    assert "seed sd assumed = prompt SE" in best.note
    given = {
        (r.claim, r.compares): r
        for r in minimum_detectable(_payload(), seeds=2, seed_sd=0.0, claims_file="paper")
    }
    assert given[("EAPO scores best on Avg", "Avg: eapo vs grpo")].threshold == pytest.approx(
        Z * 0.03 / math.sqrt(2)
    )
    # a study with 3 seeds: its pooled interval already holds the seed spread
    pooled = {
        (r.claim, r.compares): r for r in minimum_detectable(_payload(seeds=3), seeds=3, claims_file="paper")
    }
    assert pooled[("PSR lowers entropy", "psr entropy: end vs start window")].threshold == pytest.approx(
        Z * 0.3
    )


def test_band_and_difference_bars_by_hand():
    rows = {(r.claim, r.compares): r for r in minimum_detectable(_payload(), seeds=4, claims_file="paper")}
    near = rows[("EAPO holds entropy near H_0", "eapo end/H_0 in 1 ± band")]
    assert near.threshold == pytest.approx(0.1 - Z * 0.01) and near.mdd == pytest.approx(
        0.1 - (Z + Z80) * 0.01
    )
    assert near.observed == pytest.approx(0.05) and near.held_at_observed is True
    approach = next(
        r for r in rows.values() if r.claim == "EAPO approaches the best fixed-weight configuration"
    )
    se_d = math.sqrt(2 * 0.01**2 + 0.988**2 * 2 * 0.02**2)  # one seed each, seed sd = prompt SE
    assert approach.se_one_seed == pytest.approx((se_d,))
    assert approach.threshold == pytest.approx(Z * se_d / 2) and approach.mdd == pytest.approx(
        (Z + Z80) * se_d / 2
    )
    assert approach.observed == pytest.approx(0.5 - 0.988 * 0.45)
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        minimum_detectable(_payload(), seeds=0, claims_file="paper")


def test_command_line_on_the_first_study(capsys):
    assert main([str(ROOT / "docs" / "results" / "study-cpu-smollm2-medquad"), "--seeds", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Minimum detectable differences with 3 seed(s)")
    assert "| PSR lowers entropy | psr entropy: end vs start window | disjoint | 1.073 |" in out
    assert main([str(ROOT / "docs" / "results" / "study-cpu-smollm2-medquad"), "--seeds", "3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["claim"] for row in rows} >= {
        "NSR keeps a higher entropy than PSR",
        "EAPO keeps a stable entropy level",
    }


def test_python_dash_m_runs_the_module_as_documented(capsys):
    """`python -m eapo.study.power DIR --seeds 3` (docs/guide/evaluation.md) prints what main() prints,
    with nothing on stderr (eapo.study does not import its power module, so runpy has nothing to warn of)."""
    study = ROOT / "docs" / "results" / "study-cpu-smollm2-medquad"
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, "-m", "eapo.study.power", str(study), "--seeds", "3"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert main([str(study), "--seeds", "3"]) == 0
    assert done.stdout == capsys.readouterr().out


def test_the_3seed_readme_holds_the_table_the_module_prints(capsys):
    """docs/results/study-cpu-smollm2-medquad-3seeds/README.md's table, computed before that study's launch
    by the code of its time, is what the rows of configs/paper.claims.yaml's power: section print now."""
    assert main([str(ROOT / "docs" / "results" / "study-cpu-smollm2-medquad"), "--seeds", "3"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    readme = (ROOT / "docs" / "results" / "study-cpu-smollm2-medquad-3seeds" / "README.md").read_text()
    committed = [line for line in readme.splitlines() if line.startswith("| ") and "Compares" in readme]
    start = committed.index(printed[0])
    assert committed[start : start + len(printed)] == printed and len(printed) == 20


def test_the_rows_are_the_claims_files_and_a_study_without_them_is_told_so(tmp_path, capsys):
    """The rows come from the study's claims file (its config's study.claims): the controls study's has no
    power: section, so the module says so; --claims names another file; a bad row names its field."""
    controls = str(ROOT / "docs" / "results" / "study-cpu-controls")
    assert main([controls, "--seeds", "3"]) == 2
    assert "study_cpu_controls.claims.yaml has no power: section" in capsys.readouterr().err
    assert main([controls, "--seeds", "3", "--claims", "paper"]) == 0
    assert capsys.readouterr().out.startswith("# Minimum detectable differences with 3 seed(s)")
    bad = tmp_path / "bad.claims.yaml"
    text = (ROOT / "configs" / "paper.claims.yaml").read_text()
    bad.write_text(text.replace("rule: band,", "rule: inside,", 1))
    with pytest.raises(ValueError, match=r"power: rows\[5\]\.rule: 'inside' is not one of disjoint"):
        minimum_detectable(_payload(), seeds=3, claims_file=bad)
    with pytest.raises(ValueError, match="cannot tell which claims file"):
        minimum_detectable(_payload(), seeds=3)
