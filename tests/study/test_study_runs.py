"""A study of labelled runs (study.runs: the same method at several weights, the entropy-control
comparators, per-run seeds): planning, the scripted study end to end (tables, claims, figure), and
finishing a study whose runs lost their weights but kept their committed small outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from eapo.config import dump_config, load_config
from eapo.evaluation.metrics import avg_columns
from eapo.plot import seed_band
from eapo.study import (
    HELD,
    StudySettings,
    claims_params,
    plan_study,
    read_study_config,
    run_role,
    run_study,
    study_claims,
)
from eapo.sweep import SweepError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

RUNS = [
    {"label": "GRPO", "method": "grpo"},
    {"label": "PSR", "method": "psr"},
    {"label": "NSR", "method": "nsr"},
    {"label": "W-REINFORCE w+=0.1", "method": "w_reinforce", "overrides": {"w_pos": 0.1}},
    {"label": "EAPO w0=0.2", "method": "eapo", "overrides": {"w0": 0.2}},
    {"label": "W-REINFORCE w+=0.05", "method": "w_reinforce", "overrides": {"w_pos": 0.05}, "seeds": [0]},
    {
        "label": "W-REINFORCE w+=0.2",
        "method": "w_reinforce",
        "overrides": {"algorithm.w_pos": 0.2},
        "seeds": [0],
    },
    {"label": "EAPO w0=0.05", "method": "eapo", "overrides": {"w0": 0.05}, "seeds": [0]},
    {"label": "EAPO w0=0.1", "method": "eapo", "overrides": {"w0": 0.1}, "seeds": [0]},
    {"label": "Adaptive entropy", "method": "adaptive_entropy", "seeds": [0]},
    {
        "label": "Clip-higher",
        "method": "clip_higher",
        "overrides": {"algorithm.epsilon_high": 0.28},
        "seeds": [0],
    },
    {"label": "Clip-Cov", "method": "clip_cov", "seeds": [0]},
]


def test_study_runs_plan_labelled_runs_with_their_own_seeds_and_overrides():
    runs = plan_study([0, 1], RUNS)
    names = [run.name for run in runs]
    assert names[:4] == ["GRPO-seed0", "GRPO-seed1", "PSR-seed0", "PSR-seed1"]
    assert "W-REINFORCE_w+=0.05-seed0" in names and "W-REINFORCE_w+=0.05-seed1" not in names
    assert len(runs) == 5 * 2 + 7
    by_name = {run.name: run for run in runs}
    assert by_name["W-REINFORCE_w+=0.2-seed0"].overrides == [
        "algorithm.method=w_reinforce",
        "algorithm.w_pos=0.2",
        "train.seed=0",
    ]
    assert by_name["Clip-higher-seed0"].overrides == [
        "algorithm.method=clip_higher",
        "algorithm.epsilon_high=0.28",
        "train.seed=0",
    ]
    assert by_name["EAPO_w0=0.05-seed0"].label == "EAPO w0=0.05"
    # the claims know runs by method and effective weights, not by label
    roles = {run.name: run_role(run.method, dict(run.weights)) for run in runs}
    assert roles["W-REINFORCE_w+=0.1-seed1"] == "w_reinforce" and roles["EAPO_w0=0.2-seed0"] == "eapo"
    assert roles["W-REINFORCE_w+=0.05-seed0"] == "w_reinforce:w_pos=0.05"
    assert roles["EAPO_w0=0.1-seed0"] == "eapo:w0=0.1" and roles["Clip-Cov-seed0"] == "clip_cov"
    # no runs: study.methods x seeds, their weights set by study.grids (configs/study.yaml's plan)
    paper = plan_study(
        [0],
        methods=["grpo", "psr", "nsr", "w_reinforce", "eapo"],
        grids=["w_reinforce.w_pos=0.1", "eapo.w0=0.2"],
    )
    assert [run.name for run in paper] == [
        "grpo-seed0",
        "psr-seed0",
        "nsr-seed0",
        "w_reinforce-w_pos0.1-seed0",
        "eapo-w00.2-seed0",
    ]


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ([{"label": "a", "method": "ppo"}], r"runs\[0\].method 'ppo' is not a method"),
        ([{"label": "a", "method": "grpo"}, {"label": "a", "method": "psr"}], "used twice"),
        ([{"method": "grpo"}], "label must be a non-empty string"),
        ([{"label": "a", "method": "grpo", "weights": {}}], "unknown key 'weights'"),
        ([{"label": "a", "method": "eapo", "overrides": {"epsilon_high": 0.3}}], "dotted config keys"),
        ([{"label": "a", "method": "eapo", "overrides": {"w0": "x"}}], "must be a number"),
        ([{"label": "a", "method": "eapo", "seeds": []}], "seeds must be a non-empty list"),
        ([], "non-empty list"),
    ],
)
def test_bad_study_runs_are_refused_with_the_entry_named(runs, message):
    with pytest.raises(SweepError, match=message):
        StudySettings(runs=runs).validate()


def test_a_study_config_with_runs_reads(tmp_path):
    config = tmp_path / "study.yaml"
    study = {"seeds": [0, 1, 2], "runs": RUNS[:6], "claims": "paper"}
    config.write_text(TINY.read_text() + yaml.safe_dump({"study": study}))
    settings, tree = read_study_config(config)
    assert settings.runs[5]["overrides"] == {"w_pos": 0.05} and "study" not in tree
    # a threshold the config leaves unset is the claims file's (configs/paper.claims.yaml's params)
    assert settings.max_clipped_share is None and settings.entropy_band is None
    params = claims_params(settings, study_claims(settings, config))
    assert params["max_clipped_share"] == 0.1 and params["entropy_band"] == 0.1
    config.write_text(TINY.read_text() + yaml.safe_dump({"study": {**study, "entropy_band": 0.2}}))
    settings, _ = read_study_config(config)
    assert claims_params(settings, study_claims(settings, config))["entropy_band"] == 0.2


# --------------------------------------------------------------------------------------------
# The scripted study
# --------------------------------------------------------------------------------------------


def _ramp(a, b, n=20):
    return [a + (b - a) * i / (n - 1) for i in range(n)]


def _wiggle(level, n=20, amplitude=0.01):
    return [level + (amplitude if i % 2 else -amplitude) for i in range(n)]


# role -> (entropy, length, clipped share, Avg, Avg strict)
SCRIPT = {
    "grpo": (_ramp(1.5, 1.0), _wiggle(100), 0.0, 0.40, 0.35),
    "psr": (_ramp(1.5, 0.5), _wiggle(60), 0.0, 0.35, 0.30),
    "nsr": (_ramp(1.5, 2.5), _wiggle(160), 0.5, 0.45, 0.20),
    "w_reinforce": (_wiggle(1.5), _wiggle(150), 0.3, 0.46, 0.25),
    "w_reinforce:w_pos=0.05": (_wiggle(1.5), _wiggle(150), 0.3, 0.36, 0.15),
    "w_reinforce:w_pos=0.2": (_ramp(1.5, 2.2), _wiggle(150), 0.3, 0.44, 0.30),
    "eapo": (_wiggle(1.5), _wiggle(110), 0.02, 0.47, 0.42),
    "eapo:w0=0.05": (_wiggle(1.5), _wiggle(110), 0.02, 0.465, 0.415),
    "eapo:w0=0.1": (_wiggle(1.5), _wiggle(110), 0.02, 0.47, 0.42),
    "adaptive_entropy": (_ramp(1.5, 2.0), _wiggle(120), 0.1, 0.44, 0.40),
    "clip_higher": (_ramp(1.5, 1.0), _wiggle(120), 0.1, 0.43, 0.41),
    "clip_cov": (_ramp(1.5, 1.8), _wiggle(120), 0.1, 0.42, 0.40),
}
N_PROMPTS = 4


def _role(config) -> str:
    algorithm = config.algorithm
    return run_role(algorithm.method, {"w_pos": algorithm.w_pos, "w0": algorithm.w0})


class RoleRunner:
    """Writes scripted metrics and evaluations per configuration (no model)."""

    def __init__(self):
        self.trained, self.evaluated = [], []

    def train(self, base_config, overrides, run_dir, *, resume, log):
        config = load_config(base_config, overrides)
        self.trained.append(run_dir.name)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(config))
        entropy, length, clipped, _, _ = SCRIPT[_role(config)]
        rows = [
            {
                "step": s + 1,
                "entropy/rollout": h + 0.01 * config.train.seed,
                "completion/mean_length": n,
                "completions/clipped_ratio": clipped,
                "completions/stopped_by_cap": clipped,
                "reward/mean": 0.3,
                "eapo/H0": entropy[0],
                "kl": 0.0,
            }
            for s, (h, n) in enumerate(zip(entropy, length, strict=True))
        ]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run_dir / "final").mkdir(exist_ok=True)

    def evaluate(self, args, log):
        out = Path(args[args.index("--output-dir") + 1])
        self.evaluated.append(out.parent.name if out.name == "eval" else out.name)
        if "--config" in args:
            avg, strict = 0.30, 0.10
        else:
            run_dir = Path(args[args.index("--model") + 1])
            _, _, _, avg, strict = SCRIPT[_role(load_config(run_dir / "config.yaml"))]
        metrics = {"laaj": None, "avg_laaj": None}
        columns = {}
        for key, value in (("", avg), ("_strict", strict)):
            for column in ("rouge_l", "reranker", "rl_at_k", "rr_at_k", "avg"):
                metrics[column + key] = value
            for column in ("rouge_l", "reranker", "rl_at_k", "rr_at_k"):
                columns[column + key] = [value] * N_PROMPTS
        out.mkdir(parents=True, exist_ok=True)
        results = {
            "metrics": metrics,
            "ci95": {k: (None if v is None else [v - 0.005, v + 0.005]) for k, v in metrics.items()},
            "k": int(args[args.index("--k") + 1]),
            "n_prompts": N_PROMPTS,
            "data": "medquad:dev",
            "labels": {"rouge_l": "Rouge-L", "reranker": "bi-encoder stand-in", "format": "format"},
            "settings": {"split": "dev", "limit": int(args[args.index("--limit") + 1])},
            "per_prompt": {"ids": [f"p{i}" for i in range(N_PROMPTS)], "columns": columns},
            "avg_of": {key: list(value) for key, value in avg_columns().items()},
        }
        (out / "results.json").write_text(json.dumps(results))


def test_scripted_study_of_labelled_runs_then_finished_from_committed_outputs(tmp_path):
    tree = yaml.safe_load(TINY.read_text())
    tree["train"]["max_steps"] = 20
    tree["study"] = {
        "seeds": [0, 1],
        "jobs": 1,
        "k": 2,
        "eval_limit": N_PROMPTS,
        "runs": RUNS,
        "claims": "paper",
    }
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(tree))
    out = tmp_path / "study"
    runner = RoleRunner()
    report = run_study(config, out, runner=runner, echo=lambda m: None)
    assert len(runner.trained) == 17 and not report.sweep.failures
    payload = json.loads((out / "claims.json").read_text())
    assert payload["configurations"]["w_reinforce"] == [
        "W-REINFORCE_w+=0.1-seed0",
        "W-REINFORCE_w+=0.1-seed1",
    ]
    assert payload["configurations"]["eapo:w0=0.05"] == ["EAPO_w0=0.05-seed0"]
    verdicts = {c["key"]: c["verdict"] for c in payload["paper_claims"]}
    assert verdicts == dict.fromkeys(verdicts, HELD) and len(verdicts) == 12
    # the first eight claims read the same configurations (PSR's length is flat here: within noise)
    first = {c["statement"]: c["verdict"] for c in payload["claims"]}
    assert first["PSR lowers entropy"] == first["EAPO holds entropy near H_0"] == HELD
    assert first["EAPO scores best on Avg"] == HELD and len(first) == 8
    claims_md = (out / "claims.md").read_text()
    assert "## The paper's claims, in its words" in claims_md
    assert (
        "| EAPO is tuning-free: its Avg varies less over w0 than W-REINFORCE's over w+ (strict Avg) |"
        in claims_md
    )
    # the sensitivity table: the paper's layout, every metric and both Avgs, a Range row per block
    sensitivity = (out / "sensitivity.md").read_text()
    assert "| Methods | Rouge-L | Reranker† | RL@2 | RR@2† | Avg | Avg (strict) |" in sensitivity
    assert "*W-REINFORCE, w+ varied (w−=1)*" in sensitivity and "*EAPO, w0 varied*" in sensitivity
    ranges = [line for line in sensitivity.splitlines() if line.startswith("| Range (max−min)")]
    # W-REINFORCE over w+ 0.05 / 0.1 / 0.2: Avg 0.36 / 0.46 / 0.44 -> 0.100; strict 0.15 / 0.25 / 0.30 -> 0.150
    assert ranges[0].endswith("| 0.100 | 0.150 |")
    # EAPO over w0 0.05 / 0.1 / 0.2: Avg 0.465 / 0.47 / 0.47 -> 0.005; strict 0.415 / 0.42 / 0.42 -> 0.005
    assert ranges[1].endswith("| 0.005 | 0.005 |")
    comparison = (out / "comparison.md").read_text()
    assert "| W-REINFORCE w+=0.05 |" in comparison and "| Clip-Cov |" in comparison
    assert "## Strict: an answer without its <advice> block scores 0" in comparison
    assert (out / "dynamics.png").stat().st_size > 10_000

    # A new machine: the weights are gone, the committed small outputs are there. Nothing runs again.
    for final in (out / "runs").glob("*/final"):
        shutil.rmtree(final)
    again = RoleRunner()
    report = run_study(config, out, runner=again, echo=lambda m: None)
    assert again.trained == [] and again.evaluated == []
    assert set(report.sweep.statuses.values()) == {
        "skipped (finished; committed outputs, no weights)",
        "skipped",
    }
    rebuilt = json.loads((out / "claims.json").read_text())
    assert [c["verdict"] for c in rebuilt["paper_claims"]] == [c["verdict"] for c in payload["paper_claims"]]
    assert rebuilt["methods"]["eapo"]["avg"] == payload["methods"]["eapo"]["avg"]

    # A run cut short (its metrics end before train.max_steps) with no weights is trained again.
    metrics = out / "runs" / "PSR-seed1" / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]))
    third = RoleRunner()
    run_study(config, out, runner=third, echo=lambda m: None)
    assert third.trained == ["PSR-seed1"] and third.evaluated == []  # its evaluation still matches


def test_seed_band_by_hand():
    seeds = [
        [{"step": 1, "x": 1.0}, {"step": 2, "x": 3.0}],
        [{"step": 1, "x": 2.0}, {"step": 2, "x": 5.0}, {"step": 3, "x": 7.0}],
    ]
    steps, mean, low, high = seed_band(seeds, "x")
    assert steps.tolist() == [1, 2, 3]
    assert (
        mean.tolist() == [1.5, 4.0, 7.0]
        and low.tolist() == [1.0, 3.0, 7.0]
        and high.tolist() == [2.0, 5.0, 7.0]
    )
