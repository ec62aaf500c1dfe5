"""The controls study's claims (configs/study_cpu_controls.claims.yaml, issue 38): each of plan.md's seven
rules on synthetic dynamics whose verdicts follow by hand, the seed pairing of the similar-trajectory claim,
and ``eapo study`` with that claims file on a scripted runner (claims.md is claims.json's data)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from eapo.config import dump_config, load_config
from eapo.study import (
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    WITHIN_NOISE,
    MethodData,
    StudySettings,
    assess,
    claims_markdown,
    load_claims,
    read_study_config,
    run_role,
    run_study,
    study_params,
)
from eapo.study.quantities import Reading
from eapo.sweep import SweepError

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "configs" / "study_cpu_controls.yaml"
CONTROLS = load_claims(ROOT / "configs" / "study_cpu_controls.claims.yaml")
CONTROL_ROLES = dict(CONTROLS.names)  # role -> label, in plan.md's order
STEPS = 40


def assess_control_claims(data, *, window=0.1):
    """The controls claims file judged over ``data``: its claims and the whole assessment."""
    assessment = assess(CONTROLS, data, study_params(window, 0.1, 0.1))
    return assessment.claims["claims"], assessment


def _noise(seed: int, n: int = STEPS, scale: float = 0.01) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, scale, n)


def _result(avg: float, strict: float, half: float = 0.01) -> dict:
    return {
        "metrics": {"avg": avg, "avg_strict": strict},
        "ci95": {"avg": [avg - half, avg + half], "avg_strict": [strict - half, strict + half]},
    }


def _data(ratio_of_seed, *, h0: float = 1.0, w0: float | None = None, avg=(0.3, 0.2), seeds=(0, 1, 2)):
    """A configuration whose entropy is ``h0 · ratio_of_seed(seed)`` per step; EAPO's w+ = w0 · r_t."""
    d = MethodData()
    for seed in seeds:
        r = np.asarray(ratio_of_seed(seed), dtype=float)
        d.series.setdefault("entropy/rollout", []).append(list(h0 * r))
        if w0 is not None:
            d.series.setdefault("eapo/w_pos", []).append(list(w0 * r))
        d.h0.append(h0)
        d.seeds.append(seed)
        d.runs.append(f"run-seed{seed}")
        d.results.append(_result(*avg))
    return d


def _flat(level: float, scale: float = 0.01):
    return lambda seed: np.full(STEPS, level) + _noise(seed, scale=scale)


def _fall(to: float):
    return lambda seed: np.linspace(1.0, to, STEPS) + _noise(seed)


def _verdicts(data) -> dict[str, str]:
    claims, _ = assess_control_claims(data, window=0.1)
    return {claim.key: claim.verdict for claim in claims}


def test_every_claim_decided_on_dynamics_that_follow_the_algebra():
    """GRPO and PSR fall to 0.6 / 0.5 of H_0; EAPO w0=0.2 holds r = 1 (so w+ stays 0.2: not engaged),
    EAPO w0=1.0 falls to r = 0.5 (w+ = 0.5: engaged); EntroPIC holds 1.0, the integral run sits at 1.5,
    the adaptive bonus wanders about 1.1 with a noise that straddles the band; EAPO w0=0.2 has the best
    Avg by a clear margin, on strict Avg its interval touches another's."""
    data = {
        "grpo": _data(_fall(0.6), avg=(0.30, 0.20)),
        "psr": _data(_fall(0.5), avg=(0.28, 0.10)),
        "eapo": _data(_flat(1.0), w0=0.2, avg=(0.40, 0.30)),
        "eapo:w0=1": _data(_fall(0.5), w0=1.0, avg=(0.31, 0.29)),
        "eapo_pi": _data(_flat(1.5), w0=0.2, avg=(0.31, 0.20)),
        "entropic": _data(_flat(1.0), avg=(0.32, 0.20)),
        "adaptive_entropy": _data(_flat(1.1, scale=0.08), avg=(0.29, 0.20)),
    }
    assert _verdicts(data) == {
        "controller_engaged_w0_0.2": NOT_HELD,  # w+/w0 = 1 ± noise: inside [0.8, 1.2]
        "controller_engaged_w0_1.0": HELD,  # w+/w0 ≈ 0.52 at the end
        "grpo_collapses": HELD,
        "psr_collapses": HELD,
        "eapo_w0_0.2_closer_than_grpo": HELD,
        "eapo_w0_0.2_closer_than_psr": HELD,
        "eapo_w0_1.0_closer_than_grpo": NOT_HELD,  # |0.52 − 1| > |0.62 − 1|
        "eapo_w0_1.0_closer_than_psr": WITHIN_NOISE,  # both fall to ~0.5
        "operating_regime": NOT_HELD,  # end-window w+ 0.2 and ≈ 0.52: disjoint, as the algebra predicts
        "similar_trajectory": NOT_HELD,  # d ≈ 0.5 − 1.0 over the second half, outside ±0.1
        "entropic_holds_entropy": HELD,
        "eapo_pi_holds_entropy": NOT_HELD,
        "adaptive_entropy_holds_entropy": WITHIN_NOISE,
        "eapo_best_avg": HELD,
        "eapo_best_avg_strict": WITHIN_NOISE,  # 0.30 ± 0.01 against 0.29 ± 0.01
    }


def test_the_operating_regime_holds_when_the_end_window_weights_overlap():
    """w0 = 0.2 with entropy risen to 2.5 × H_0 and w0 = 1.0 with entropy fallen to 0.5 × H_0 both end at
    w+ ≈ 0.5 (the algebra's limit): the intervals overlap, held; the entropies differ by 5×: not similar."""

    def settle(level: float):
        return lambda seed: np.concatenate([np.linspace(1.0, level, 30), np.full(10, level)]) + _noise(seed)

    data = {"eapo": _data(settle(2.5), w0=0.2), "eapo:w0=1": _data(settle(0.5), w0=1.0)}
    verdicts = _verdicts(data)
    assert verdicts["operating_regime"] == HELD
    assert verdicts["similar_trajectory"] == NOT_HELD
    assert verdicts["controller_engaged_w0_0.2"] == HELD  # w+ rose to ~2.5 × w0


def test_the_same_trajectory_at_both_w0_is_similar_and_missing_runs_are_not_measured():
    same = _fall(0.7)
    data = {"eapo": _data(same, w0=0.2), "eapo:w0=1": _data(same, w0=1.0)}
    verdicts = _verdicts(data)
    assert verdicts["similar_trajectory"] == HELD  # d_t = 0 exactly, paired by seed
    assert verdicts["grpo_collapses"] == NOT_MEASURED
    assert verdicts["entropic_holds_entropy"] == NOT_MEASURED
    assert verdicts["eapo_best_avg"] == NOT_MEASURED  # the other configurations were not evaluated
    claims, _ = assess_control_claims(data)
    evidence = {c.key: c.evidence for c in claims}
    assert evidence["grpo_collapses"] == "no finished run of GRPO"


def test_the_paired_difference_pairs_by_seed_not_by_order():
    """``divide: H0, minus: b`` (the similar-trajectory claim's d_t): r_t of a minus r_t of b, seed by seed."""
    a = _data(lambda seed: np.full(6, 1.0 + seed), seeds=(0, 1))
    b = _data(lambda seed: np.full(6, 0.5 + seed), seeds=(1, 0))  # the other order
    reading = Reading({}, {"a": a, "b": b}, {}, role="a")
    assert reading.series("entropy/rollout", divide="H0", minus="b") == [[0.5] * 6, [0.5] * 6]
    b.h0[0] = None  # a seed without H_0 is left out of r and of the pairing
    assert Reading({}, {"b": b}, {}, role="b").series("entropy/rollout", divide="H0") == [[0.5] * 6]
    assert reading.series("entropy/rollout", divide="H0", minus="b") == [[0.5] * 6]


def test_the_regime_table_prints_the_prediction_beside_the_logged_weight():
    data = {"eapo:w0=1": _data(_flat(0.8, scale=0.0), w0=1.0, seeds=(4,))}
    claims, assessment = assess_control_claims(data)
    (run,) = assessment.tables["regime_runs"]
    assert run["role"] == "eapo:w0=1" and run["seed"] == 4
    assert run["r_end"] == pytest.approx(0.8) and run["predicted_w_pos"] == pytest.approx(0.8)
    assert run["logged_w_pos"] == pytest.approx(0.8)
    markdown = claims_markdown(CONTROLS, assessment)
    assert "| EAPO w0=1.0 | 4 | 1 | 0.800 | 0.800 | 0.800 |" in markdown
    for claim in claims:
        assert f"| **{claim.verdict}** | {claim.evidence.replace('|', chr(92) + '|')} |" in markdown
        assert claim.rule in markdown


def test_bad_claims_setting_is_refused(tmp_path):
    """study.claims names a claims file: a path beside the config or a packaged name; anything else is an
    error that says what it looked for, before anything runs."""
    with pytest.raises(SweepError, match="study.claims must name a claims file"):
        StudySettings(claims="", methods=["grpo"]).validate()
    with pytest.raises(SweepError, match="study.claims must name a claims file .* got None"):
        StudySettings(methods=["grpo"]).validate()  # no default: a study names its claims
    settings, _ = read_study_config(STUDY)
    assert settings.claims == "study_cpu_controls.claims.yaml"
    config = tmp_path / "study.yaml"
    config.write_text(STUDY.read_text().replace("claims: study_cpu_controls.claims.yaml", "claims: control"))
    with pytest.raises(
        SweepError, match=r"study.claims: 'control' is neither .* \(.*paper.*study_cpu_controls"
    ):
        read_study_config(config)
    config.write_text(STUDY.read_text())  # the path is read beside the config: not here
    with pytest.raises(SweepError, match=r"study.claims: no claims file .*study_cpu_controls.claims.yaml"):
        read_study_config(config)


# --------------------------------------------------------------------------------------------
# eapo study with study.claims: controls, on a scripted runner
# --------------------------------------------------------------------------------------------

SCRIPTED = {  # role -> (r_t of seed, Avg, strict Avg)
    "grpo": (lambda seed: np.linspace(1.0, 0.6, 12) + _noise(seed, 12), 0.30, 0.2),
    "psr": (lambda seed: np.linspace(1.0, 0.5, 12) + _noise(seed, 12), 0.28, 0.1),
    "eapo": (lambda seed: np.full(12, 1.0) + _noise(seed, 12), 0.40, 0.3),
    "eapo:w0=1": (lambda seed: np.linspace(1.0, 0.5, 12) + _noise(seed, 12), 0.31, 0.2),
    "eapo_pi": (lambda seed: np.full(12, 1.5) + _noise(seed, 12), 0.31, 0.2),
    "entropic": (lambda seed: np.full(12, 1.0) + _noise(seed, 12), 0.32, 0.2),
    "adaptive_entropy": (lambda seed: np.full(12, 1.0) + _noise(seed, 12), 0.29, 0.2),
}


class ControlsRunner:
    """Writes each run's metrics from :data:`SCRIPTED` by its role (w+ = w0 · r_t for EAPO's rule)."""

    def __init__(self):
        self.trained: list[str] = []

    def train(self, base_config, overrides, run_dir, *, resume, log):
        config = load_config(base_config, overrides)
        a = config.algorithm
        role = run_role(
            a.method, {"w0": a.w0, "integral_gain": a.integral_gain} if a.method.startswith("eapo") else {}
        )
        self.trained.append(role)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(config))
        r = SCRIPTED[role][0](config.train.seed)
        h0 = 1.2
        rows = [
            {"step": t + 1, "entropy/rollout": h0 * x, "eapo/H0": h0, "reward/mean": 0.3, "kl": 0.0}
            | ({"eapo/w_pos": a.w0 * x} if a.method.startswith("eapo") else {"eapo/w_pos": 1.0})
            for t, x in enumerate(r)
        ]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        (run_dir / "summary.json").write_text(json.dumps({"rollout/backend": "vllm"}))
        (run_dir / "final").mkdir()

    def evaluate(self, args, log):
        out = Path(args[args.index("--output-dir") + 1])
        if "--config" in args:
            avg, strict = 0.25, 0.1
        else:
            import yaml

            config = yaml.safe_load((Path(args[args.index("--model") + 1]) / "config.yaml").read_text())
            a = config["algorithm"]
            weights = (
                {"w0": a["w0"], "integral_gain": a["integral_gain"]} if a["method"].startswith("eapo") else {}
            )
            _, avg, strict = SCRIPTED[run_role(a["method"], weights)]
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(_result(avg, strict) | {"k": 4, "n_prompts": 40}))


def test_a_controls_study_on_scripted_runs_writes_its_seven_claims(tmp_path):
    settings, _ = read_study_config(STUDY)
    settings.seeds = [0, 1]
    runner = ControlsRunner()
    out = tmp_path / "study"
    report = run_study(
        STUDY, out, settings=settings, overrides=["train.max_steps=12"], runner=runner, echo=lambda m: None
    )
    assert sorted(set(runner.trained)) == sorted(CONTROL_ROLES) and len(runner.trained) == 14
    payload = json.loads((out / "claims.json").read_text())
    assert "paper_claims" not in payload
    assert payload["settings"]["claims"] == "study_cpu_controls.claims.yaml"
    verdicts = {c["key"]: c["verdict"] for c in payload["claims"]}
    assert [c.key for c in report.claims["claims"]] == list(verdicts)
    assert verdicts["grpo_collapses"] == HELD and verdicts["controller_engaged_w0_1.0"] == HELD
    assert verdicts["operating_regime"] == NOT_HELD and verdicts["eapo_pi_holds_entropy"] == NOT_HELD
    assert verdicts["eapo_best_avg"] == HELD
    assert payload["controls"]["configurations"]["eapo"]["runs"] == ["EAPO_w0=0.2-seed0", "EAPO_w0=0.2-seed1"]
    markdown = (out / "claims.md").read_text()
    for claim in payload["claims"]:
        assert f"| **{claim['verdict']}** | {claim['evidence'].replace('|', chr(92) + '|')} |" in markdown
    assert "docs/results/study-cpu-controls/plan.md" in markdown


class _NothingRuns:
    """A runner that fails the test if the study trains or evaluates anything."""

    def train(self, *args, **kwargs):
        raise AssertionError("--report-only trained a run")

    def evaluate(self, *args, **kwargs):
        raise AssertionError("--report-only evaluated a run")


def test_an_interim_report_decides_only_complete_configurations_and_writes_no_manifest(tmp_path):
    """eapo study --report-only, while a study runs elsewhere: nothing trains, sweep.json is untouched,
    and a configuration with an unfinished seed is left out (its claims not measured) rather than
    decided on the seeds that finished."""
    settings, _ = read_study_config(STUDY)
    settings.seeds = [0, 1]
    out = tmp_path / "study"
    study = functools.partial(
        run_study, STUDY, out, settings=settings, overrides=["train.max_steps=12"], echo=lambda m: None
    )
    with pytest.raises(SweepError, match="holds no sweep.json"):
        study(runner=_NothingRuns(), report_only=True)
    study(runner=ControlsRunner())
    # GRPO seed 1 is still training: 6 of its 12 steps logged, no final/, no evaluation yet
    unfinished = out / "runs" / "GRPO-seed1"
    rows = (unfinished / "metrics.jsonl").read_text().splitlines()[:6]
    (unfinished / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (unfinished / "final").rmdir()
    (unfinished / "eval" / "results.json").unlink()
    manifest = (out / "sweep.json").read_bytes()

    report = study(runner=_NothingRuns(), report_only=True)
    assert (out / "sweep.json").read_bytes() == manifest
    payload = json.loads((out / "claims.json").read_text())
    assert payload["report_only"] is True
    assert payload["incomplete"] == {"grpo": {"label": "GRPO", "finished": 1, "planned": 2}}
    verdicts = {c.key: c.verdict for c in report.claims["claims"]}
    assert verdicts["grpo_collapses"] == NOT_MEASURED and verdicts["psr_collapses"] == HELD
    assert verdicts["controller_engaged_w0_1.0"] == HELD and verdicts["operating_regime"] == NOT_HELD
    grpo = payload["controls"]["configurations"]["grpo"]
    assert grpo["runs"] == [] and grpo["seeds"] == 0 and grpo["steps"] == 0  # not its finished seed alone
    assert payload["controls"]["configurations"]["psr"]["runs"] == ["PSR-seed0", "PSR-seed1"]
    markdown = (out / "claims.md").read_text()
    assert "**Interim report**" in markdown and "GRPO (1 of 2 runs)" in markdown


RESULTS = ROOT / "docs" / "results" / "study-cpu-controls"


def test_the_committed_controls_study_is_complete_and_its_readme_quotes_its_verdicts():
    """docs/results/study-cpu-controls (issue 38): the seven configurations with 3 seeds of 40 steps
    each, every claim decided by plan.md's rule, claims.md is claims.json's data, and the README's
    verdict table states the verdict claims.json holds for each claim (no hand-edited verdict)."""
    payload = json.loads((RESULTS / "claims.json").read_text(encoding="utf-8"))
    markdown = (RESULTS / "claims.md").read_text(encoding="utf-8")
    readme = (RESULTS / "README.md").read_text(encoding="utf-8")
    assert (
        payload["config"] == "configs/study_cpu_controls.yaml" and payload["settings"]["claims"] == "controls"
    )
    assert payload["settings"]["k"] == 4 and payload["settings"]["eval_limit"] == 40
    assert payload["report_only"] is False and payload["incomplete"] == {}
    assert payload["backends"] == ["vllm"] * 21
    table = payload["controls"]["configurations"]
    assert {role: (row["seeds"], row["steps"]) for role, row in table.items()} == {
        role: (3, 40) for role in CONTROL_ROLES
    }
    claims = payload["claims"]
    assert len(claims) == 15 and {c["verdict"] for c in claims} <= {HELD, NOT_HELD, WITHIN_NOISE}
    for claim in claims:  # claims.md's rows; a cell escapes its "|"
        evidence = claim["evidence"].replace("|", "\\|")
        assert f"| {claim['statement']} |" in markdown, claim["statement"]
        assert f"| **{claim['verdict']}** | {evidence} |" in markdown, claim["statement"]

    verdicts = readme.split("## The verdicts", 1)[1].split("\n## ", 1)[0]
    for claim in claims:
        rows = [line for line in verdicts.splitlines() if line.startswith(f"| {claim['statement']} |")]
        assert len(rows) == 1, claim["statement"]
        assert rows[0].split("**")[1] == claim["verdict"], claim["statement"]
    assert "Status: finished" in readme and "Status: running" not in readme
    assert "Interim report" not in markdown
    for name in ("comparison.md", "sensitivity.md", "dynamics.png", "dynamics.svg", "plan.md", "pilot.md"):
        assert (RESULTS / name).stat().st_size > 0, name
