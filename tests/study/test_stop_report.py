"""The stop study's report (``docs/results/study-cpu-stop/report.py``, issue 47): plan.md's claim 2 (NSR keeps
a higher entropy than PSR), claim 8's ranking, answer shape and premise check, and claim 9 (the 15 rows set
beside the controls study's) on small synthetic study directories whose verdicts follow by hand; malformed
files are errors that name the file; and the script on the committed, partial study directory."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from eapo.study import HELD, NOT_HELD, NOT_MEASURED, WITHIN_NOISE
from eapo.sweep.plan import SweepRun

ROOT = Path(__file__).resolve().parents[2]
STOP = ROOT / "docs" / "results" / "study-cpu-stop"
SCRIPT = STOP / "report.py"
STEPS = 40
END = 4  # plan.md: the end window is steps 37-40 (10% of 40)


def _load():
    spec = importlib.util.spec_from_file_location("stop_study_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load()

#: plan.md's configurations: label -> (method, weights, w0 for eapo/w_pos).
CONFIGS = {
    "GRPO": ("grpo", {}, None),
    "PSR": ("psr", {}, None),
    "NSR": ("nsr", {}, None),
    "EAPO w0=0.2": ("eapo", {"integral_gain": 0.0, "w0": 0.2}, 0.2),
    "EAPO w0=1.0": ("eapo", {"integral_gain": 0.0, "w0": 1.0}, 1.0),
    "EAPO w0=0.2 + integral": ("eapo_pi", {"integral_gain": 0.2, "w0": 0.2}, 0.2),
    "EntroPIC": ("entropic", {}, None),
    "Adaptive entropy": ("adaptive_entropy", {}, None),
}

CLEAN = "It is rare.</think>\n<advice>See a doctor about it.</advice>"
TRAILING = CLEAN + " And then more text after the tag."


def _flat(level: float, scale: float = 0.01):
    return lambda seed: np.full(STEPS, level) + np.random.default_rng(seed).normal(0.0, scale, STEPS)


def _fall(to: float):
    return lambda seed: np.linspace(1.0, to, STEPS) + np.random.default_rng(seed).normal(0.0, 0.01, STEPS)


class Study:
    """A synthetic study directory: sweep.json and, per run, config.yaml, metrics.jsonl, eval/results.json
    and eval/samples.jsonl as ``eapo study`` leaves them."""

    def __init__(self, root: Path):
        self.root = root
        self.records: dict[str, dict] = {}
        self.ratios: dict[str, list[np.ndarray]] = {}

    def add(
        self,
        label: str,
        ratio,
        *,
        avg=(0.3, 0.2),
        half: float = 0.01,
        seeds=(0, 1, 2),
        steps_of=None,
        completions=None,
        h0: float = 1.2,
    ) -> Study:
        """``label``'s runs; ``ratio(seed)``: its r_t; ``steps_of(seed)``: steps trained (40: finished and
        evaluated); ``completions(seed)``: its evaluation's answers."""
        method, weights, w0 = CONFIGS[label]
        for seed in seeds:
            run = SweepRun(method, tuple(sorted(weights.items())), seed, label)
            self.records[run.name] = {
                "method": method,
                "weights": weights,
                "seed": seed,
                "label": label,
                "run_dir": f"runs/{run.name}",
                "extra": {},
            }
            run_dir = self.root / "runs" / run.name
            (run_dir / "eval").mkdir(parents=True)
            (run_dir / "config.yaml").write_text(f"train:\n  max_steps: {STEPS}\n")
            r = np.asarray(ratio(seed), dtype=float)
            steps = STEPS if steps_of is None else steps_of(seed)
            rows = []
            for t in range(steps):
                row = {"step": t + 1, "entropy/rollout": float(h0 * r[t]), "eapo/H0": h0, "reward/mean": 0.5}
                if w0 is not None:
                    row["eapo/w_pos"] = float(w0 * r[t])
                rows.append(json.dumps(row))
            (run_dir / "metrics.jsonl").write_text("\n".join(rows) + "\n")
            if steps < STEPS:
                continue
            self.ratios.setdefault(label, []).append(r)
            a, s = avg
            results = {
                "metrics": {"avg": a, "avg_strict": s},
                "ci95": {"avg": [a - half, a + half], "avg_strict": [s - half, s + half]},
                "k": 4,
                "n_prompts": 2,
            }
            (run_dir / "eval" / "results.json").write_text(json.dumps(results))
            texts = completions(seed) if completions else [CLEAN] * 4
            samples = [
                {
                    "id": f"q{i // 2}",
                    "sample": i % 2,
                    "completion": text,
                    "finished": True,
                    "stop_reason": "string",
                }
                for i, text in enumerate(texts)
            ]
            (run_dir / "eval" / "samples.jsonl").write_text("\n".join(json.dumps(x) for x in samples) + "\n")
        return self

    def done(self) -> Path:
        (self.root / "sweep.json").write_text(json.dumps({"runs": self.records}))
        return self.root

    def end_ratio(self, label: str) -> float:
        """The pooled end-window mean of r_t by hand: the mean over seeds of each seed's last 4 steps."""
        return float(np.mean([r[-END:].mean() for r in self.ratios[label]]))


def _controls(path: Path, verdicts: dict[str, str], numbers: dict[str, dict] | None = None) -> Path:
    claims = [
        {"key": key, "verdict": v, "numbers": (numbers or {}).get(key, {})} for key, v in verdicts.items()
    ]
    path.write_text(json.dumps({"claims": claims}))
    return path


ALL_HELD = {key: HELD for _, key in report.COMPARED}


def _rows(built: dict) -> dict[str, dict]:
    return {row["key"]: row for row in built["claims"]}


# --------------------------------------------------------------------------------------------
# Claim 2
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nsr", "psr", "verdict"),
    [
        (_flat(1.0), _fall(0.5), HELD),  # NSR's end-window r ≈ 1.0 entirely above PSR's ≈ 0.5
        (_fall(0.5), _flat(1.0), NOT_HELD),  # entirely below
        (_flat(0.800), _flat(0.805), WITHIN_NOISE),  # 0.005 apart (the same noise): they overlap
    ],
)
def test_claim_2_compares_the_end_window_ratio_of_nsr_and_psr(tmp_path, nsr, psr, verdict):
    study = Study(tmp_path / "study").add("NSR", nsr).add("PSR", psr)
    built = report.build_report(study.done(), _controls(tmp_path / "controls.json", ALL_HELD))
    row = _rows(built)["nsr_above_psr"]
    assert row["verdict"] == verdict
    assert row["intervals"]["NSR"]["mean"] == pytest.approx(study.end_ratio("NSR"))
    assert row["intervals"]["PSR"]["mean"] == pytest.approx(study.end_ratio("PSR"))
    assert row["intervals"]["NSR"]["n"] == 3 * END
    nsr_i, psr_i = row["intervals"]["NSR"], row["intervals"]["PSR"]
    assert (nsr_i["low"] > psr_i["high"]) == (verdict == HELD)
    assert (nsr_i["high"] < psr_i["low"]) == (verdict == NOT_HELD)
    assert row["rule"] == report.RULES["2"] and row["claim"] == "2"


def test_claim_2_is_not_measured_while_a_run_is_training_or_missing(tmp_path):
    """PSR has two of its three seeds finished (the third at step 20); NSR has no run: not measured, and the
    report names what is missing. A finished configuration's own numbers stay in the run table."""
    study = (
        Study(tmp_path / "study")
        .add("PSR", _fall(0.5), seeds=(0, 1))
        .add("PSR", _fall(0.5), seeds=(2,), steps_of=lambda s: 20)
    )
    built = report.build_report(study.done(), _controls(tmp_path / "controls.json", ALL_HELD))
    row = _rows(built)["nsr_above_psr"]
    assert row["verdict"] == NOT_MEASURED
    assert row["intervals"] == {"NSR": None, "PSR": None}
    assert "PSR: 2 of 3 runs finished" in row["evidence"] and "NSR: no run" in row["evidence"]
    assert built["configurations"]["PSR"] == {"role": "psr", "finished": 2, "planned": 3, "complete": False}
    assert [built["runs"][f"PSR-seed{s}"]["status"] for s in (0, 1, 2)] == [
        "finished",
        "finished",
        "training",
    ]
    assert built["runs"]["PSR-seed2"]["last_step"] == 20
    assert built["runs"]["PSR-seed0"]["avg"]["mean"] == pytest.approx(0.3)
    # every verdict of the study is not measured; claim 9's rows too
    decided = [r for r in built["claims"] if r["verdict"] != report.REPORTED]
    assert {r["verdict"] for r in decided} == {NOT_MEASURED}
    assert len([r for r in decided if r["claim"] == "9"]) == 15


# --------------------------------------------------------------------------------------------
# Claim 8
# --------------------------------------------------------------------------------------------


def test_claim_8_says_first_when_a_configurations_answers_run_on(tmp_path):
    """PSR: one answer of 12 pooled writes on after </advice> (0.083 > 0.02): the premise failed for it, and
    report.md says so before anything else. NSR: one of 50 (0.02, not above 0.02): not flagged."""

    def one_of(total: int, seed_with: int):
        return lambda seed: [TRAILING if seed == seed_with and i == 0 else CLEAN for i in range(total)]

    study = Study(tmp_path / "study")
    study.add("PSR", _fall(0.5), completions=one_of(4, 1))
    study.add(
        "NSR",
        _flat(1.0),
        completions=lambda seed: [CLEAN] * (18 if seed else 13) + ([TRAILING] if seed == 0 else []),
    )
    built = report.build_report(study.done(), _controls(tmp_path / "controls.json", ALL_HELD))
    rows = _rows(built)
    shapes = rows["answer_shape"]["shapes"]
    assert shapes["PSR"]["n"] == 12 and shapes["PSR"]["text_after_close"] == pytest.approx(1 / 12)
    assert shapes["NSR"]["n"] == 50 and shapes["NSR"]["text_after_close"] == pytest.approx(0.02)
    assert shapes["GRPO"] is None  # no run
    assert rows["premise"]["verdict"] == report.PREMISE_FAILED
    assert rows["premise"]["failed_for"] == ["PSR"] and built["premise"]["failed_for"] == ["PSR"]
    markdown = report.report_markdown(built)
    first = markdown.split("\n\n")[1]
    assert (
        first.startswith("**The study's premise failed**") and "PSR (0.083)" in first and "NSR" not in first
    )
    # the answers' shape is pooled by eapo.evaluation.answer_shape: distinct 4-grams of the clean answer
    from eapo.evaluation.answers import distinct_ngram_ratio

    assert shapes["NSR"]["distinct_ngrams"] == pytest.approx(
        (49 * distinct_ngram_ratio(CLEAN) + distinct_ngram_ratio(TRAILING)) / 50
    )


def _full_study(root: Path, *, nsr_avg=(0.25, 0.15)) -> Study:
    """All eight configurations, three seeds each, with the controls test's dynamics (their verdicts follow
    by hand): GRPO and PSR fall to 0.6 / 0.5 of H_0, EAPO w0=0.2 holds r = 1, w0=1.0 falls to 0.5, EntroPIC
    holds 1.0, the integral run sits at 1.5, the adaptive bonus at 1.1 with a wide noise; NSR holds 1.2."""
    study = Study(root)
    study.add("GRPO", _fall(0.6), avg=(0.30, 0.20))
    study.add("PSR", _fall(0.5), avg=(0.28, 0.10))
    study.add("NSR", _flat(1.2), avg=nsr_avg)
    study.add("EAPO w0=0.2", _flat(1.0), avg=(0.40, 0.30))
    study.add("EAPO w0=1.0", _fall(0.5), avg=(0.31, 0.29))
    study.add("EAPO w0=0.2 + integral", _flat(1.5), avg=(0.31, 0.20))
    study.add("EntroPIC", _flat(1.0), avg=(0.32, 0.20))
    study.add("Adaptive entropy", _flat(1.1, scale=0.08), avg=(0.29, 0.20))
    return study


def test_claim_8_ranks_every_configuration_and_judges_eapo_best_against_nsr_too(tmp_path):
    """NSR's Avg (0.50) lies above EAPO w0=0.2's (0.40): plan.md's "every other configuration" includes NSR,
    so the row did not hold (the controls code, which has no NSR, would call it held)."""
    study = _full_study(tmp_path / "study", nsr_avg=(0.50, 0.15))
    built = report.build_report(study.done(), _controls(tmp_path / "controls.json", ALL_HELD))
    rows = _rows(built)
    assert rows["ranking_avg"]["ranking"][:3] == ["NSR", "EAPO w0=0.2", "EntroPIC"]
    assert rows["ranking_avg"]["intervals"]["NSR"]["mean"] == pytest.approx(0.50)
    assert rows["ranking_avg_strict"]["ranking"][:2] == ["EAPO w0=0.2", "EAPO w0=1.0"]
    assert rows["eapo_best_avg"]["verdict"] == NOT_HELD
    assert rows["eapo_best_avg_strict"]["verdict"] == WITHIN_NOISE  # 0.30 ± 0.01 against 0.29 ± 0.01
    assert rows["premise"]["verdict"] == report.PREMISE_HELD  # every answer closes and stops
    assert rows["answer_shape"]["shapes"]["GRPO"]["text_after_close"] == 0.0
    assert "premise failed" not in report.report_markdown(built)


# --------------------------------------------------------------------------------------------
# Claim 9 (and claims 1, 3-7 beside it)
# --------------------------------------------------------------------------------------------


def test_claim_9_sets_each_verdict_beside_the_controls_studys(tmp_path):
    """The 15 rows: where the synthetic controls claims.json holds this study's verdict, unchanged; where it
    holds another, changed, with the quantity's intervals of both studies."""
    study = _full_study(tmp_path / "study")
    first = report.build_report(study.done(), _controls(tmp_path / "same.json", ALL_HELD))
    ours = {key: _rows(first)[key]["verdict"] for _, key in report.COMPARED}
    # what the dynamics make of the rows (as tests/study/test_study_controls.py works them out by hand)
    assert ours["grpo_collapses"] == HELD and ours["psr_collapses"] == HELD
    assert ours["controller_engaged_w0_1.0"] == HELD and ours["operating_regime"] == NOT_HELD
    assert ours["entropic_holds_entropy"] == HELD and ours["eapo_pi_holds_entropy"] == NOT_HELD
    assert ours["eapo_best_avg"] == HELD  # 0.40 above every other, NSR's 0.25 included
    assert _rows(first)["nsr_above_psr"]["verdict"] == HELD  # 1.2 against 0.5

    before = dict(ours)
    before["grpo_collapses"] = NOT_HELD
    before["eapo_best_avg"] = WITHIN_NOISE
    interval = {"mean": 0.9, "low": 0.8, "high": 1.0, "n": 12}
    numbers = {"grpo_collapses": {"start": interval, "end": {**interval, "mean": 0.95}}}
    built = report.build_report(tmp_path / "study", _controls(tmp_path / "controls.json", before, numbers))
    compared = [row for row in built["claims"] if row["claim"] == "9"]
    assert [row["compares"] for row in compared] == [key for _, key in report.COMPARED]
    assert {row["compares"] for row in compared if row["verdict"] == "changed"} == {
        "grpo_collapses",
        "eapo_best_avg",
    }
    assert sum(row["verdict"] == "unchanged" for row in compared) == 13
    row = next(r for r in compared if r["compares"] == "grpo_collapses")
    assert (row["controls_verdict"], row["this_verdict"]) == (NOT_HELD, HELD)
    assert row["intervals"]["controls"] == {"start": interval, "end": {**interval, "mean": 0.95}}
    ours_row = _rows(built)["grpo_collapses"]
    assert row["intervals"]["this study"] == ours_row["intervals"]
    assert ours_row["intervals"]["end"]["mean"] == pytest.approx(1.2 * study.end_ratio("GRPO"))
    unchanged = next(r for r in compared if r["compares"] == "psr_collapses")
    assert unchanged["intervals"] == {} and unchanged["controls_verdict"] == unchanged["this_verdict"]
    markdown = report.report_markdown(built)
    assert (
        "| 1 | GRPO collapses: its entropy fell beyond the noise | did not hold | held | **changed** |"
        in markdown
    )
    assert "- **EAPO w0=0.2 scores best on Avg** (within noise → held)" in markdown


def test_claims_json_of_eapo_study_is_set_beside_the_report(tmp_path):
    """A claims.json that eapo study wrote earlier (its row says otherwise) is listed as a difference."""
    study = _full_study(tmp_path / "study")
    root = study.done()
    (root / "claims.json").write_text(
        json.dumps({"report_only": True, "claims": [{"key": "grpo_collapses", "verdict": NOT_MEASURED}]})
    )
    built = report.build_report(root, _controls(tmp_path / "controls.json", ALL_HELD))
    assert built["eapo_study_claims"]["differences"] == [
        {"key": "grpo_collapses", "claims.json": NOT_MEASURED, "report": HELD}
    ]
    assert "grpo_collapses (not measured there, held here)" in report.report_markdown(built)


def test_every_rule_is_quoted_from_the_plan():
    plan = re.sub(r"\s+", " ", (STOP / "plan.md").read_text(encoding="utf-8"))
    for name, rule in report.RULES.items():
        assert rule in plan, name
    assert len(report.COMPARED) == 15 and len({key for _, key in report.COMPARED}) == 15


# --------------------------------------------------------------------------------------------
# Malformed input
# --------------------------------------------------------------------------------------------


def test_malformed_files_are_errors_that_name_the_file(tmp_path, capsys):
    study = Study(tmp_path / "study").add("PSR", _fall(0.5)).add("NSR", _flat(1.0))
    root = study.done()
    controls = _controls(tmp_path / "controls.json", ALL_HELD)
    results = root / "runs" / "PSR-seed1" / "eval" / "results.json"
    results.write_text('{"metrics": ')
    with pytest.raises(report.ReportError, match=re.escape(str(results))):
        report.build_report(root, controls)
    results.write_text(json.dumps({"metrics": {"avg": 0.3}, "ci95": {"avg": [0.2]}}))
    with pytest.raises(report.ReportError, match="ci95.avg must be"):
        report.build_report(root, controls)
    results.write_text(json.dumps({"metrics": {"avg": 0.3, "avg_strict": 0.2}}))
    samples = root / "runs" / "NSR-seed0" / "eval" / "samples.jsonl"
    samples.write_text('{"completion": "a"}\nnot json\n{"completion": "b"}\n')
    with pytest.raises(report.ReportError, match=re.escape(f"{samples}:2")):
        report.build_report(root, controls)
    samples.write_text('{"text": "a"}\n')
    with pytest.raises(report.ReportError, match=re.escape(f"{samples}: sample 1 has no 'completion'")):
        report.build_report(root, controls)
    samples.write_text('{"completion": "a", "stop_reason": "eos"}\n')
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(report.ReportError, match="bad.json: expected a JSON object"):
        report.build_report(root, tmp_path / "bad.json")
    _controls(tmp_path / "short.json", {"grpo_collapses": HELD})
    with pytest.raises(report.ReportError, match="short.json: no claim 'psr_collapses'"):
        report.build_report(root, tmp_path / "short.json")
    (root / "sweep.json").write_text(json.dumps({"runs": {"PSR-seed0": {"label": "PSR"}}}))
    assert report.main([str(root), "--controls", str(controls)]) == 2
    assert f"{root / 'sweep.json'}: run 'PSR-seed0' is not a sweep record" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# The committed, partial study
# --------------------------------------------------------------------------------------------


def test_the_script_on_the_committed_partial_study(tmp_path):
    """``report.py docs/results/study-cpu-stop --out TMP``: the runs it calls finished are those trained to
    step 40 and evaluated (their Avg is their results.json's), every other run is not finished, and a
    claim is decided only when all its configurations' runs have finished."""
    if not (STOP / "runs").is_dir() or not (STOP / "plan.md").is_file():
        pytest.skip(f"{STOP} has no runs/ or plan.md: the stop study's outputs are not in this checkout")
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), str(STOP), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    built = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert len(built["runs"]) == 24
    finished = [name for name, state in built["runs"].items() if state["status"] == "finished"]
    assert f"{len(finished)} of 24 runs finished" in completed.stdout
    for name, state in built["runs"].items():
        results = STOP / "runs" / name / "eval" / "results.json"
        metrics = STOP / "runs" / name / "metrics.jsonl"
        if name in finished:
            assert state["last_step"] == STEPS and results.is_file()
            metric = json.loads(results.read_text(encoding="utf-8"))["metrics"]["avg"]
            assert state["avg"]["mean"] == pytest.approx(metric)
            assert f"| {name} | finished | {STEPS} |" in markdown
        else:
            assert not (results.is_file() and state["last_step"] == STEPS)
            if not metrics.exists():
                assert state["status"] == "not started" and f"| {name} | not started | 0 |" in markdown
    complete = {label for label, state in built["configurations"].items() if state["complete"]}
    for state in built["configurations"].values():
        assert state["complete"] == (state["finished"] == state["planned"] == 3)
    rows = _rows(built)
    if not {"NSR", "PSR"} <= complete:
        assert rows["nsr_above_psr"]["verdict"] == NOT_MEASURED
        assert "runs finished" in rows["nsr_above_psr"]["evidence"]
    for row in built["claims"]:
        if row["claim"] == "9":
            assert row["controls_verdict"] in (HELD, NOT_HELD, WITHIN_NOISE)
            assert (row["verdict"] == NOT_MEASURED) == (row["this_verdict"] == NOT_MEASURED)
    if len(complete) < 8:
        assert rows["eapo_best_avg"]["verdict"] == NOT_MEASURED
        assert rows["premise"]["verdict"] in (NOT_MEASURED, report.PREMISE_FAILED)
    for label, shape in rows["answer_shape"]["shapes"].items():
        assert (shape is None) == (label not in complete)


def test_eapo_study_judges_the_same_claims_file_and_writes_its_claims_md(tmp_path):
    """configs/study_cpu_stop.yaml's study.claims is the file this report reads: on the full synthetic study
    eapo study's claims (the engine on the same runs) hold the report's verdicts, every one of plan.md's
    rules is in claims.md, and claim 5's table has a row per EAPO run."""
    from eapo.study import SERIES_KEYS, assess, claims_markdown, collect_method_data, study_params

    study = _full_study(tmp_path / "study")
    root = study.done()
    built = report.build_report(root, _controls(tmp_path / "controls.json", ALL_HELD))
    runs, _ = report.planned_runs(root)
    data = collect_method_data(root, runs, keys=[*SERIES_KEYS, *report.CLAIMS.metrics])
    assessment = assess(report.CLAIMS, data, study_params(0.1, 0.1, 0.1))
    claims = assessment.claims["claims"]
    assert len(claims) == 16 and report.CLAIMS.path.name == "study_cpu_stop.claims.yaml"
    rows = _rows(built)
    assert {c.key: c.verdict for c in claims} == {c.key: rows[c.key]["verdict"] for c in claims}
    markdown = claims_markdown(report.CLAIMS, assessment)
    for number in map(str, range(1, 9)):
        assert report.RULES[number] in markdown, number
    regime = markdown.split("## Claim 5, run by run", 1)[1].split("\n\n")[1].splitlines()
    assert len(regime) == 2 + 6 and regime[2].startswith("| EAPO w0=0.2 | 0 | 0.2 | ")


def test_the_committed_stop_study_is_complete_and_its_readme_quotes_its_verdicts():
    """docs/results/study-cpu-stop (issue 47): the eight configurations with 3 seeds of 40 steps each on vLLM,
    every claim decided by plan.md's rule (none not measured), claims.md is claims.json's data, report.json
    agrees with claims.json on every claim both decide, the premise (no answer runs on past </advice>) held,
    and the README's verdict table states the verdict report.json holds for each row (no hand-edited verdict)."""
    payload = json.loads((STOP / "claims.json").read_text(encoding="utf-8"))
    built = json.loads((STOP / "report.json").read_text(encoding="utf-8"))
    markdown = (STOP / "claims.md").read_text(encoding="utf-8")
    readme = (STOP / "README.md").read_text(encoding="utf-8")
    assert payload["config"] == "configs/study_cpu_stop.yaml"
    assert payload["settings"]["k"] == 4 and payload["settings"]["eval_limit"] == 40
    assert payload["incomplete"] == {} and payload["backends"] == ["vllm"] * 24
    assert {
        role: (row["seeds"], row["steps"]) for role, row in payload["controls"]["configurations"].items()
    } == {role: (3, STEPS) for role in report.CONFIGURATIONS}
    claims = payload["claims"]
    assert len(claims) == 16 and {c["verdict"] for c in claims} <= {HELD, NOT_HELD, WITHIN_NOISE}
    for claim in claims:  # claims.md's rows; a cell escapes its "|"
        evidence = claim["evidence"].replace("|", "\\|")
        assert f"| {claim['statement']} |" in markdown, claim["statement"]
        assert f"| **{claim['verdict']}** | {evidence} |" in markdown, claim["statement"]

    # report.json: all 24 runs finished, the engine's verdicts are its own, the premise held
    assert [state["status"] for state in built["runs"].values()] == ["finished"] * 24
    assert built["eapo_study_claims"]["differences"] == []
    rows = _rows(built)
    assert {c["key"]: c["verdict"] for c in claims} == {c["key"]: rows[c["key"]]["verdict"] for c in claims}
    assert rows["premise"]["verdict"] == report.PREMISE_HELD and rows["premise"]["failed_for"] == []
    judged = [row for row in built["claims"] if row["verdict"] != "reported (no verdict)"]
    compared = [row for row in judged if row["claim"] == "9"]
    assert len(compared) == 15 and {row["verdict"] for row in compared} <= {"changed", "unchanged"}
    assert {row["verdict"] for row in judged if row["claim"] != "9"} <= {
        HELD,
        NOT_HELD,
        WITHIN_NOISE,
        report.PREMISE_HELD,
    }

    verdicts = readme.split("## The verdicts", 1)[1].split("\n## ", 1)[0]
    for row in judged:
        lines = [
            line
            for line in verdicts.splitlines()
            if line.startswith(f"| {row['claim']} | {row['statement']} |")
        ]
        assert len(lines) == 1, (row["claim"], row["statement"])
        assert lines[0].split("**")[1] == row["verdict"], (row["claim"], row["statement"])
    assert "Status: finished" in readme and "Status: running" not in readme
    assert "Interim report" not in markdown
    for name in ("comparison.md", "dynamics.png", "dynamics.svg", "plan.md", "pilot.md", "report.md"):
        assert (STOP / name).stat().st_size > 0, name
