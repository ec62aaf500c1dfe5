"""bench/step.py runs in CI in its short mode: it must work (timings are not checked, only errors and
the arithmetic it reports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_step_bench_quick_reports_every_phase_against_its_floor(tmp_path):
    """`python bench/step.py --quick`: the tiny model with LoRA, 2 steps, TRL's and eapo's log-probs.
    Each run reports the phases the step is made of with their arithmetic and floor; both variants
    compute the same first step (loss and H_t), and eapo's policy pass shares the frozen layer."""
    out = tmp_path / "step.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "step.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    ceilings = report["ceilings"]  # the roofline's two rates, measured in the same run
    rates = [v for k, v in ceilings["detail"].items() if k.endswith("_gflops")]
    assert ceilings["flops_per_s"] == max(rates) * 1e9 > 0
    bandwidths = [ceilings["detail"]["copy_gbytes_per_s"], ceilings["detail"]["sum_gbytes_per_s"]]
    assert ceilings["bytes_per_s"] == max(bandwidths) * 1e9 > 0
    flops_s, bytes_s = ceilings["flops_per_s"], ceilings["bytes_per_s"]
    runs = {run["variant"]: run for run in report["runs"]}
    assert set(runs) == {"trl", "eapo"} and all(run["backend_ran"] == "generate" for run in runs.values())
    for run in runs.values():
        phases = run["phases"]
        for name in (
            "generation",
            "reward",
            "reference log-probs",
            "policy forward",
            "backward",
            "optimizer",
        ):
            assert phases[name]["s"] > 0, name
        for name in ("generation", "reference log-probs", "policy forward", "backward", "optimizer"):
            phase = phases[name]
            assert phase["gflop"] > 0 and phase["gb"] > 0 and phase["floor_s"] > 0, name
            assert phase["ratio"] == phase["s"] / phase["floor_s"]
            # a roofline: no less than either side (generation sums each decoding step's larger side)
            roof = max(phase["gflop"] * 1e9 / flops_s, phase["gb"] * 1e9 / bytes_s)
            if name == "generation":
                assert phase["floor_s"] >= roof * (1 - 1e-9)
            else:
                assert phase["floor_s"] == pytest.approx(roof, rel=1e-9)
                assert phase["bound"] == (
                    "compute" if phase["gflop"] * 1e9 / flops_s >= phase["gb"] * 1e9 / bytes_s else "memory"
                )
        # decoding the tiny model at this batch reads every weight once a step: bound by memory
        assert phases["generation"]["gb"] * 1e9 / bytes_s > phases["generation"]["gflop"] * 1e9 / flops_s
        # LoRA on 1 of 2 layers: the backward is the input gradient through one layer and the LM head,
        # less than a whole forward. TRL's policy pass does the reference's arithmetic; eapo's starts from
        # the reference pass's hidden states above the frozen layer: one layer and the LM head
        assert phases["backward"]["gflop"] < phases["reference log-probs"]["gflop"]
        if run["variant"] == "trl":
            assert phases["reference log-probs"]["gflop"] == phases["policy forward"]["gflop"]
        else:
            assert phases["policy forward"]["gflop"] == pytest.approx(phases["backward"]["gflop"])
            assert phases["policy forward"]["gb"] < phases["reference log-probs"]["gb"]
        assert run["step"]["floor_s"] == pytest.approx(sum(p["floor_s"] or 0 for p in phases.values()))
        assert run["step_ratio"] == pytest.approx(run["step"]["s"] / run["step"]["floor_s"])
        assert sum(p["s"] for p in phases.values()) == pytest.approx(run["step"]["s"], rel=1e-6)
    assert runs["eapo"]["losses"][0] == pytest.approx(runs["trl"]["losses"][0], abs=1e-5)
    assert runs["eapo"]["entropies"][0] == pytest.approx(runs["trl"]["entropies"][0], abs=1e-5)
    assert "whole step: time / floor" in proc.stdout and "| **step**" in proc.stdout


@pytest.mark.slow
def test_step_bench_arms_compare_stop_strings_side_by_side(tmp_path):
    """`--arms`: each override one run in the same invocation; stopping the tiny model's random bytes at
    any lowercase letter leaves shorter completions than no stop strings, and the table says so."""
    out = tmp_path / "arms.json"
    letters = "rollout.stop=[" + ",".join(repr(c) for c in "abcdefghijklmnopqrstuvwxyz") + "]"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, str(ROOT / "bench" / "step.py"), "--quick", "--variants", "eapo"]
    proc = subprocess.run(
        [*command, "--arms", "rollout.stop=[]", letters, "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert [run["arm"] for run in runs] == ["rollout.stop=[]", letters]
    assert runs[1]["tokens"]["completion_mean"] < runs[0]["tokens"]["completion_mean"]
    assert "## against rollout.stop=[]" in proc.stdout
