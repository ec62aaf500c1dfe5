"""``eapo sweep``: grid planning, the comparison and sensitivity tables, failure isolation, skipping
finished runs (with a fake runner), and one real tiny sweep end to end."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from eapo.config import dump_config, load_config
from eapo.sweep import (
    EvalOptions,
    RunFailed,
    SweepError,
    parse_grid,
    plan_runs,
    run_sweep,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

# The paper's Sensitivity table (RJUA): W-REINFORCE over w+, EAPO over w0 -> (Rouge-L, Reranker).
PAPER = {
    ("w_reinforce", 0.05): (0.263, 0.903),
    ("w_reinforce", 0.1): (0.322, 0.958),
    ("w_reinforce", 0.2): (0.337, 0.983),
    ("eapo", 0.05): (0.321, 0.943),
    ("eapo", 0.1): (0.319, 0.961),
    ("eapo", 0.2): (0.330, 0.973),
}


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


def test_a_grid_varies_only_the_methods_it_belongs_to():
    runs = plan_runs(["grpo", "w_reinforce", "eapo"], ["w_pos=0.1,0.2", "w0=0.05,0.2"], seeds=[0, 1])
    names = [run.name for run in runs]
    assert names == [
        "grpo-seed0",
        "grpo-seed1",
        "w_reinforce-w_pos0.1-seed0",
        "w_reinforce-w_pos0.1-seed1",
        "w_reinforce-w_pos0.2-seed0",
        "w_reinforce-w_pos0.2-seed1",
        "eapo-w00.05-seed0",
        "eapo-w00.05-seed1",
        "eapo-w00.2-seed0",
        "eapo-w00.2-seed1",
    ]
    assert runs[2].overrides == ["algorithm.method=w_reinforce", "algorithm.w_pos=0.1", "train.seed=0"]
    assert runs[2].label == "W-REINFORCE (w+=0.1, w−=1)" and runs[6].label == "EAPO (w0=0.05)"


def test_axes_of_one_method_multiply_and_scoped_keys_target_one_method():
    runs = plan_runs(["w_reinforce", "eapo"], ["w_pos=0.1,1", "w_neg=0.5,1", "eapo.w_neg=2"])
    assert [run.name for run in runs] == [
        "w_reinforce-w_neg0.5-w_pos0.1",
        "w_reinforce-w_neg1-w_pos0.1",
        "w_reinforce-w_neg0.5-w_pos1",
        "w_reinforce-w_neg1-w_pos1",
        "eapo-w_neg2",
    ]


@pytest.mark.parametrize(
    ("grids", "methods", "message"),
    [
        (["w0=0.1"], ["grpo"], "varies eapo, which is not in --methods"),
        (["beta=0.1"], ["eapo"], "not a grid key"),
        (["grpo.w0=0.1"], ["grpo"], "does not take w0"),
        (["w_pos=a,b"], ["w_reinforce"], "comma-separated numbers"),
        (["w_pos"], ["w_reinforce"], "KEY=V1,V2"),
        (["w_pos=0.1", "w_reinforce.w_pos=0.2"], ["w_reinforce"], "give all its values in one --grid"),
        ([], ["ppo"], "unknown"),
    ],
)
def test_bad_grids_are_refused_with_the_reason(grids, methods, message):
    with pytest.raises(SweepError, match=message):
        plan_runs(methods, grids)


def test_parse_grid():
    axis = parse_grid("w0=0.05,0.1,0.2")
    assert (axis.key, axis.values, axis.methods) == ("w0", (0.05, 0.1, 0.2), ("eapo",))


# --------------------------------------------------------------------------------------------
# A fake runner: writes hand-built run directories and evaluations (no model), can fail on demand
# --------------------------------------------------------------------------------------------


def fake_results(rouge: float, reranker: float, k: int = 8, stand_in: bool = True) -> dict:
    metrics = {
        "rouge_l": rouge,
        "reranker": reranker,
        "rl_at_k": rouge + 0.03,
        "rr_at_k": min(reranker + 0.02, 1.0),
    }
    metrics |= {"laaj": None, "avg": sum(metrics.values()) / 4}
    return {
        "metrics": metrics,
        "ci95": {
            key: ([value - 0.01, value + 0.01] if value is not None else None)
            for key, value in metrics.items()
        },
        "k": k,
        "n_prompts": 40,
        "model": "m",
        "data": "rjua:test",
        "labels": {
            "rouge_l": "Rouge-L F1 (char level, answer = <advice>)",
            "reranker": "bi-encoder stand-in (all-MiniLM-L6-v2 cosine, clamped to [0, 1])"
            if stand_in
            else "cross-encoder reranker (BAAI/bge-reranker-v2-m3, sigmoid)",
            "format": "format (<think> then <advice>)",
        },
        "settings": {"split": "dev", "limit": None},
    }


class FakeRunner:
    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.fail = set(fail)
        self.trained: list[str] = []
        self.evaluated: list[str] = []

    def train(self, base_config, overrides, run_dir, *, resume, log):
        name = Path(run_dir).name
        self.trained.append(name)
        if name in self.fail:
            raise RunFailed(f"exit code 1; last lines of {log}:\nRuntimeError: CUDA out of memory")
        config = load_config(base_config, overrides)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(config))
        rows = [
            {"step": s, "entropy/rollout": 1.0 / s, "reward/mean": 0.1 * s, "eapo/w_pos": 0.2, "kl": 0.0}
            for s in range(1, 4)
        ]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run_dir / "final").mkdir()

    def evaluate(self, args, log):
        out = Path(args[args.index("--output-dir") + 1])
        self.evaluated.append(out.parent.name if out.name == "eval" else out.name)
        if "--config" in args:
            rouge, reranker = 0.20, 0.85  # the base model
        else:
            config = yaml.safe_load((Path(args[args.index("--model") + 1]) / "config.yaml").read_text())
            algorithm = config["algorithm"]
            key = algorithm.get("w_pos") if algorithm["method"] == "w_reinforce" else algorithm.get("w0")
            rouge, reranker = PAPER.get((algorithm["method"], key), (0.30, 0.95))
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(fake_results(rouge, reranker)))


def sweep(tmp_path, runner, **kwargs):
    return run_sweep(
        TINY,
        tmp_path / "sweep",
        methods=kwargs.pop("methods", ["grpo", "w_reinforce", "eapo"]),
        grids=kwargs.pop("grids", ["w_pos=0.05,0.1,0.2", "w0=0.05,0.1,0.2"]),
        eval_options=EvalOptions(k=8),
        runner=runner,
        echo=lambda message: None,
        **kwargs,
    )


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def test_sensitivity_table_reproduces_the_papers_range_row(tmp_path):
    report = sweep(tmp_path, FakeRunner())
    assert not report.failures
    rows = read_csv(tmp_path / "sweep" / "sensitivity.csv")
    ranges = {(r["method"], r["varied"]): r for r in rows if r["value"] == "range"}
    assert set(ranges) == {("w_reinforce", "w_pos"), ("eapo", "w0")}
    # the paper: W-REINFORCE Range 0.074 / 0.080, EAPO Range 0.011 / 0.030
    assert float(ranges[("w_reinforce", "w_pos")]["rouge_l"]) == pytest.approx(0.074, abs=1e-9)
    assert float(ranges[("w_reinforce", "w_pos")]["reranker"]) == pytest.approx(0.080, abs=1e-9)
    assert float(ranges[("eapo", "w0")]["rouge_l"]) == pytest.approx(0.011, abs=1e-9)
    assert float(ranges[("eapo", "w0")]["reranker"]) == pytest.approx(0.030, abs=1e-9)
    values = [(r["method"], float(r["value"]), float(r["rouge_l"])) for r in rows if r["value"] != "range"]
    assert values[:3] == [
        ("w_reinforce", 0.05, 0.263),
        ("w_reinforce", 0.1, 0.322),
        ("w_reinforce", 0.2, 0.337),
    ]
    markdown = (tmp_path / "sweep" / "sensitivity.md").read_text()
    assert "*W-REINFORCE, w+ varied (w−=1)*" in markdown and "*EAPO, w0 varied*" in markdown
    assert (
        "| Range (max−min) | 0.074 | 0.080 |" in markdown
        and "| Range (max−min) | 0.011 | 0.030 |" in markdown
    )
    assert "Reranker†" in markdown and "bi-encoder stand-in" in markdown


def test_comparison_table_in_the_papers_layout(tmp_path):
    sweep(tmp_path, FakeRunner())
    markdown = (tmp_path / "sweep" / "comparison.md").read_text()
    header = next(line for line in markdown.splitlines() if line.startswith("| Methods"))
    assert header == "| Methods | Rouge-L | Reranker† | RL@8 | RR@8† | Avg |"
    body = [
        line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| Methods")
    ]
    labels = [line.split(" | ")[0].lstrip("| ") for line in body[1:]]
    assert labels == [
        "Base model (before training)",
        "GRPO",
        "W-REINFORCE (w+=0.05, w−=1)",
        "W-REINFORCE (w+=0.1, w−=1)",
        "W-REINFORCE (w+=0.2, w−=1)",
        "EAPO (w0=0.05)",
        "EAPO (w0=0.1)",
        "EAPO (w0=0.2)",
    ]
    assert "**0.337**" in markdown  # the best trained Rouge-L is bold
    rows = {r["label"]: r for r in read_csv(tmp_path / "sweep" / "comparison.csv")}
    assert float(rows["EAPO (w0=0.2)"]["rouge_l"]) == pytest.approx(0.330)
    assert float(rows["EAPO (w0=0.2)"]["w0"]) == 0.2 and rows["EAPO (w0=0.2)"]["n_seeds"] == "1"
    assert (tmp_path / "sweep" / "dynamics.png").stat().st_size > 10_000
    assert (tmp_path / "sweep" / "dynamics.svg").exists()


def test_a_failed_run_is_reported_and_the_others_finish(tmp_path):
    runner = FakeRunner(fail={"eapo-w00.1"})
    report = sweep(tmp_path, runner)
    assert report.failures.keys() == {"eapo-w00.1"} and "CUDA out of memory" in report.failures["eapo-w00.1"]
    assert runner.trained[-1] == "eapo-w00.2" and "eapo-w00.2" in runner.evaluated
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert manifest["runs"]["eapo-w00.1"]["status"] == "failed"
    assert manifest["runs"]["eapo-w00.2"]["status"] == "done"
    comparison = (tmp_path / "sweep" / "comparison.md").read_text()
    assert "Failed runs" in comparison and "eapo-w00.1: training failed" in comparison
    assert "EAPO (w0=0.1)" not in comparison.split("Failed runs")[0]

    # Rerun: finished runs are skipped, the failed one is retried.
    again = FakeRunner()
    report = sweep(tmp_path, again)
    assert again.trained == ["eapo-w00.1"] and again.evaluated == ["eapo-w00.1"]
    assert report.statuses["grpo"] == "skipped (finished)" and report.statuses["base"] == "skipped"
    assert not report.failures and "Failed runs" not in (tmp_path / "sweep" / "comparison.md").read_text()


def test_seeds_are_pooled_into_mean_and_sd(tmp_path):
    sweep(tmp_path, FakeRunner(), methods=["grpo"], grids=[], seeds=[0, 1])
    rows = read_csv(tmp_path / "sweep" / "comparison.csv")
    grpo = next(r for r in rows if r["method"] == "grpo")
    assert grpo["n_seeds"] == "2" and grpo["runs"] == "grpo-seed0;grpo-seed1"
    assert float(grpo["rouge_l"]) == pytest.approx(0.30) and float(grpo["rouge_l_sd"]) == pytest.approx(0.0)
    assert "GRPO (2 seeds)" in (tmp_path / "sweep" / "comparison.md").read_text()


def test_a_run_directory_with_another_configuration_stops_the_sweep_first(tmp_path):
    sweep(tmp_path, FakeRunner(), methods=["grpo"], grids=[])
    runner = FakeRunner()
    with pytest.raises(SweepError, match=r"train.max_steps: 3 \(existing\) vs 5"):
        sweep(tmp_path, runner, methods=["grpo"], grids=[], overrides=["train.max_steps=5"])
    assert runner.trained == [] and runner.evaluated == []


def test_a_bad_override_is_refused_before_anything_runs(tmp_path):
    runner = FakeRunner()
    with pytest.raises(SweepError, match="algorithm.w0=0.3 applies to none of the methods grpo"):
        sweep(tmp_path, runner, methods=["grpo"], grids=[], overrides=["algorithm.w0=0.3"])
    with pytest.raises(SweepError, match="base config: .*train.max_steps"):
        sweep(tmp_path, runner, methods=["grpo"], grids=[], overrides=["train.max_steps=0"])
    assert runner.trained == []


def test_weights_for_another_method_are_dropped_per_method(tmp_path):
    """demo.yaml sets EAPO's w0/w_min/w_max: a w_reinforce run must not inherit them."""
    runner = FakeRunner()
    demo = ROOT / "configs" / "demo.yaml"
    run_sweep(
        demo,
        tmp_path / "sweep",
        methods=["w_reinforce", "eapo"],
        overrides=["algorithm.w_max=1.5"],
        eval_options=EvalOptions(),
        runner=runner,
        echo=lambda message: None,
    )
    w_reinforce = yaml.safe_load((tmp_path / "sweep" / "runs" / "w_reinforce" / "config.yaml").read_text())
    eapo = yaml.safe_load((tmp_path / "sweep" / "runs" / "eapo" / "config.yaml").read_text())
    assert w_reinforce["algorithm"]["method"] == "w_reinforce"
    assert [w_reinforce["algorithm"][k] for k in ("w0", "w_min", "w_max")] == [None, None, None]
    assert (eapo["algorithm"]["w0"], eapo["algorithm"]["w_max"]) == (
        yaml.safe_load(demo.read_text())["algorithm"]["w0"],
        1.5,
    )
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert "algorithm.w0=null" in manifest["runs"]["w_reinforce"]["overrides"]


# --------------------------------------------------------------------------------------------
# End to end: the real `eapo sweep` on configs/tiny.yaml
# --------------------------------------------------------------------------------------------


def test_tiny_sweep_end_to_end(tmp_path, monkeypatch):
    """2 methods × 2 steps of the tiny model, evaluated with k=2 on 2 prompts, as subprocesses.

    The base-model row is left out here to keep the test short (another subprocess); the fake-runner
    tests cover it, and test_harness covers `eapo eval --config` on the tiny base model."""
    for key, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        monkeypatch.setenv(key, os.environ.get(key, value))
    from eapo.cli import app

    out = tmp_path / "sweep"
    args = ["sweep", "--config", str(TINY), "--methods", "grpo,eapo", "--output-dir", str(out), "--no-base"]
    args += ["--k", "2", "--eval-limit", "2", "--scorers", "rouge_l,format", "--eval-max-new-tokens", "12"]
    args += ["train.max_steps=2", "train.save_steps=0", "logging.tensorboard=false", "logging.progress=false"]
    args += ["logging.plot=false"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + "".join(
        f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((out / "logs").glob("*.log"))
    )
    for name in (
        "comparison.md",
        "comparison.csv",
        "sensitivity.md",
        "sensitivity.csv",
        "dynamics.png",
        "dynamics.svg",
    ):
        assert (out / name).stat().st_size > 0, name
    rows = {r["row"]: r for r in read_csv(out / "comparison.csv")}
    assert set(rows) == {"grpo", "eapo"}
    for row in rows.values():
        assert 0.0 <= float(row["rouge_l"]) <= float(row["rl_at_k"]) <= 1.0
        assert row["reranker"] == ""  # not scored in this test: null, not zero
        assert float(row["avg"]) == pytest.approx((float(row["rouge_l"]) + float(row["rl_at_k"])) / 2)
    for name in ("grpo", "eapo"):
        results = json.loads((out / "runs" / name / "eval" / "results.json").read_text())
        assert results["k"] == 2 and results["n_prompts"] == 2
        metrics = [
            json.loads(line) for line in (out / "runs" / name / "metrics.jsonl").read_text().splitlines()
        ]
        assert [m["step"] for m in metrics] == [1, 2]
    comparison = (out / "comparison.md").read_text()
    assert "| Methods | Rouge-L | RL@2 | Avg |" in comparison
    assert "GRPO" in comparison and "EAPO (w0=0.2)" in comparison
    assert "No method was run with two or more values" in (out / "sensitivity.md").read_text()

    # A rerun skips everything: nothing is trained or evaluated again.
    runner = FakeRunner()
    report = run_sweep(
        TINY,
        out,
        methods=["grpo", "eapo"],
        overrides=args[args.index("train.max_steps=2") :],
        eval_options=EvalOptions(k=2, limit=2, scorers="rouge_l,format", max_new_tokens=12),
        include_base=False,
        runner=runner,
        echo=lambda message: None,
    )
    assert runner.trained == [] and runner.evaluated == []
    assert report.statuses == {"grpo": "skipped (finished)", "eapo": "skipped (finished)"}


def test_the_same_configuration_reached_twice_is_one_run_not_two_seeds(tmp_path):
    # `w_reinforce` (default w+=0.1) in one sweep, then the grid point w_pos=0.1 in a second sweep
    sweep(tmp_path, FakeRunner(), methods=["w_reinforce"], grids=[])
    sweep(tmp_path, FakeRunner(), methods=["w_reinforce"], grids=["w_pos=0.1,0.2"], include_base=False)
    rows = read_csv(tmp_path / "sweep" / "comparison.csv")
    labels = [r["label"] for r in rows if r["method"] == "w_reinforce"]
    assert labels == ["W-REINFORCE (w+=0.1, w−=1)", "W-REINFORCE (w+=0.2, w−=1)"]
    assert {r["n_seeds"] for r in rows if r["method"] == "w_reinforce"} == {"1"}
    assert "2 seeds" not in (tmp_path / "sweep" / "comparison.md").read_text()
