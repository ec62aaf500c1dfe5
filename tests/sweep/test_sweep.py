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
from eapo.evaluation.labels import effective_weights
from eapo.evaluation.metrics import avg_columns
from eapo.evaluation.settings import EvalSettings
from eapo.sweep import (
    RunFailed,
    SweepError,
    parse_grid,
    plan_runs,
    run_sweep,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

# The paper's numbers, (Rouge-L, Reranker) by configuration: ("eapo", w0) or (method, w+, w−).
# Sensitivity table, RJUA columns (W-REINFORCE over w+ at w−=1, EAPO over w0).
PAPER = {
    ("w_reinforce", 0.05, 1.0): (0.263, 0.903),
    ("w_reinforce", 0.1, 1.0): (0.322, 0.958),
    ("w_reinforce", 0.2, 1.0): (0.337, 0.983),
    ("eapo", 0.05): (0.321, 0.943),
    ("eapo", 0.1): (0.319, 0.961),
    ("eapo", 0.2): (0.330, 0.973),
}
# Sensitivity table, CMD columns.
PAPER_CMD = {
    ("w_reinforce", 0.05, 1.0): (0.194, 0.778),
    ("w_reinforce", 0.1, 1.0): (0.185, 0.808),
    ("w_reinforce", 0.2, 1.0): (0.186, 0.754),
    ("eapo", 0.05): (0.195, 0.806),
    ("eapo", 0.1): (0.184, 0.800),
    ("eapo", 0.2): (0.187, 0.798),
}
# "Performance under different positive/negative reward weight configurations" (RJUA).
PAPER_WEIGHTS = {
    ("psr", 1.0, 0.0): (0.293, 0.940),
    ("nsr", 0.0, 1.0): (0.327, 0.971),
    ("grpo", 1.0, 1.0): (0.301, 0.970),
    ("w_reinforce", 1.0, 0.05): (0.299, 0.933),
    ("w_reinforce", 1.0, 0.1): (0.232, 0.922),
    ("w_reinforce", 1.0, 0.2): (0.274, 0.931),
    ("w_reinforce", 1.0, 5.0): (0.335, 0.976),
    ("w_reinforce", 0.05, 1.0): (0.263, 0.903),
    ("w_reinforce", 0.1, 1.0): (0.322, 0.958),
    ("w_reinforce", 0.2, 1.0): (0.337, 0.983),
    ("w_reinforce", 5.0, 1.0): (0.302, 0.970),
}


def paper_key(algorithm: dict) -> tuple:
    method = algorithm["method"]
    weights = effective_weights(method, {k: algorithm.get(k) for k in ("w_pos", "w_neg", "w0")})
    if method == "eapo":
        return (method, weights["w0"])
    return (method, weights["w_pos"], weights["w_neg"])


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


def test_entropy_control_presets_are_sweep_methods_with_grpos_weights():
    runs = plan_runs(["eapo", "clip_cov", "adaptive_entropy"], ["clip_cov.w_neg=0.5"], seeds=[0])
    assert [run.name for run in runs] == ["eapo-seed0", "clip_cov-w_neg0.5-seed0", "adaptive_entropy-seed0"]
    assert runs[1].overrides == ["algorithm.method=clip_cov", "algorithm.w_neg=0.5", "train.seed=0"]
    assert [run.label for run in runs] == ["EAPO (w0=0.2)", "Clip-Cov (w−=0.5)", "Adaptive entropy"]
    with pytest.raises(SweepError, match="does not take w0"):
        plan_runs(["clip_cov"], ["clip_cov.w0=0.1"])


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


def fake_results(
    rouge: float,
    reranker: float,
    k: int = 8,
    stand_in: bool = True,
    data: str = "rjua:test",
    laaj: float | None = None,
    extract: str = "advice",
) -> dict:
    """A results.json as `eapo eval` writes it (point values; CIs ± 0.01)."""
    metrics = {
        "rouge_l": rouge,
        "reranker": reranker,
        "rl_at_k": rouge + 0.03,
        "rr_at_k": min(reranker + 0.02, 1.0),
        "laaj": laaj,
    }
    metrics |= {
        "avg": (rouge + reranker + metrics["rl_at_k"] + metrics["rr_at_k"]) / 4,
        "avg_laaj": None if laaj is None else (rouge + reranker + laaj) / 3,
    }
    part = "whole completion" if extract == "whole" else f"answer = <{extract}>"
    labels = {
        "rouge_l": f"Rouge-L F1 (char level, {part})",
        "reranker": f"bi-encoder stand-in (all-MiniLM-L6-v2 cosine, clamped to [0, 1], {part})"
        if stand_in
        else f"cross-encoder reranker (BAAI/bge-reranker-v2-m3, sigmoid, {part})",
        "format": "format (<think> then <advice>; present in order, non-empty)",
    }
    if laaj is not None:
        labels["laaj"] = "LLM judge (response)"
    return {
        "metrics": metrics,
        "ci95": {
            key: ([value - 0.01, value + 0.01] if value is not None else None)
            for key, value in metrics.items()
        },
        "k": k,
        "n_prompts": 40,
        "model": "m",
        "data": data,
        "avg_of": {key: list(columns) for key, columns in avg_columns().items()},
        "labels": labels,
        "extract": {"rouge_l": extract, "reranker": extract}
        | ({"laaj": "advice"} if laaj is not None else {}),
        "n_samples": 40 * k,
        "unscored": {"rouge_l": 0, "reranker": 0, "format": 0} | ({"laaj": 2} if laaj is not None else {}),
        "settings": {"split": "dev", "limit": None},
    }


class FakeRunner:
    """Trains nothing: writes a run directory and a results.json with the numbers of ``table``."""

    def __init__(
        self,
        fail: set[str] = frozenset(),
        table: dict | None = None,
        data: str = "rjua:test",
        laaj: float | None = None,
        stand_in: bool = True,
    ) -> None:
        self.stand_in = stand_in
        self.fail = set(fail)
        self.table = PAPER if table is None else table
        self.data = data
        self.laaj = laaj
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
            rouge, reranker = self.table.get(paper_key(config["algorithm"]), (0.30, 0.95))
        out.mkdir(parents=True, exist_ok=True)
        results = fake_results(rouge, reranker, data=self.data, laaj=self.laaj, stand_in=self.stand_in)
        (out / "results.json").write_text(json.dumps(results))


def sweep(tmp_path, runner, **kwargs):
    return run_sweep(
        TINY,
        tmp_path / "sweep",
        methods=kwargs.pop("methods", ["grpo", "w_reinforce", "eapo"]),
        grids=kwargs.pop("grids", ["w_pos=0.05,0.1,0.2", "w0=0.05,0.1,0.2"]),
        eval_options=EvalSettings(k=8),
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


def test_finished_runs_from_an_eapo_without_a_later_setting_are_skipped_not_refused(tmp_path):
    """A run directory's config.yaml written before a setting existed (the 3-seed study's runs lack
    logging.report_to) is read with that setting's default, as ``eapo train --resume`` reads it: the
    rerun skips the finished run. A setting it does hold with another value still stops the sweep."""
    sweep(tmp_path, FakeRunner(), methods=["grpo"], grids=[])
    saved = tmp_path / "sweep" / "runs" / "grpo" / "config.yaml"
    tree = yaml.safe_load(saved.read_text())
    del tree["logging"]["report_to"], tree["logging"]["project"]  # added after this run was configured
    saved.write_text(yaml.safe_dump(tree))
    runner = FakeRunner()
    report = sweep(tmp_path, runner, methods=["grpo"], grids=[])
    assert runner.trained == [] and report.statuses["grpo"] == "skipped (finished)"

    tree["logging"]["project"] = "elsewhere"
    saved.write_text(yaml.safe_dump(tree))
    with pytest.raises(SweepError, match=r"runs/grpo: logging.project: 'elsewhere' \(existing\) vs 'eapo'"):
        sweep(tmp_path, FakeRunner(), methods=["grpo"], grids=[])
    saved.write_text("train: [unclosed\n")
    with pytest.raises(SweepError, match=r"runs/grpo: unreadable config.yaml .*not valid YAML"):
        sweep(tmp_path, FakeRunner(), methods=["grpo"], grids=[])


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
        eval_options=EvalSettings(),
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
        assert row["avg"] == "" and row["avg_laaj"] == ""  # an Avg needs all of its columns
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
        eval_options=EvalSettings(k=2, limit=2, scorers=("rouge_l", "format"), max_new_tokens=12),
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


# --------------------------------------------------------------------------------------------
# The paper's other tables: two datasets side by side, the w+/w− ratio, the LAAJ layout
# --------------------------------------------------------------------------------------------


def test_sensitivity_table_holds_two_datasets_side_by_side_as_in_the_paper(tmp_path):
    grids = ["w_pos=0.05,0.1,0.2", "w0=0.05,0.1,0.2"]
    cmd = run_sweep(
        TINY,
        tmp_path / "cmd",
        methods=["w_reinforce", "eapo"],
        grids=grids,
        eval_options=EvalSettings(k=8),
        runner=FakeRunner(table=PAPER_CMD, data="cmd:test", stand_in=False),
        include_base=False,
        echo=lambda message: None,
    )
    assert not cmd.failures
    report = sweep(tmp_path, FakeRunner(), methods=["w_reinforce", "eapo"], side_by_side=[tmp_path / "cmd"])
    assert not report.failures
    markdown = (tmp_path / "sweep" / "sensitivity.md").read_text()
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| Methods"))
    # the CMD sweep used the cross-encoder: only the RJUA Reranker column carries the stand-in mark
    assert header == (
        "| Methods | Rouge-L (rjua:test) | Reranker† (rjua:test) | Rouge-L (cmd:test) | Reranker (cmd:test) |"
    )
    assert "cross-encoder reranker (BAAI/bge-reranker-v2-m3" in markdown and "bi-encoder stand-in" in markdown
    # the paper's Range rows: W-REINFORCE 0.074 0.080 | 0.009 0.054; EAPO 0.011 0.030 | 0.011 0.008
    assert [line for line in lines if line.startswith("| Range")] == [
        "| Range (max−min) | 0.074 | 0.080 | 0.009 | 0.054 |",
        "| Range (max−min) | 0.011 | 0.030 | 0.011 | 0.008 |",
    ]
    row = next(line for line in lines if line.startswith("| w+=0.1 |"))
    assert (
        row
        == "| w+=0.1 | 0.322 [0.312, 0.332] | 0.958 [0.948, 0.968] | 0.185 [0.175, 0.195] | 0.808 [0.798, 0.818] |"
    )
    rows = read_csv(tmp_path / "sweep" / "sensitivity.csv")
    ranges = {(r["data"], r["method"]): r for r in rows if r["value"] == "range"}
    assert float(ranges[("cmd:test", "eapo")]["reranker"]) == pytest.approx(0.008, abs=1e-9)
    assert float(ranges[("rjua:test", "w_reinforce")]["rouge_l"]) == pytest.approx(0.074, abs=1e-9)
    # one dataset alone: plain column titles, as before
    alone = (tmp_path / "cmd" / "sensitivity.md").read_text()
    assert "| Methods | Rouge-L | Reranker |" in alone and "| Range (max−min) | 0.009 | 0.054 |" in alone


def test_side_by_side_needs_a_sweep_directory(tmp_path):
    runner = FakeRunner()
    with pytest.raises(SweepError, match="--side-by-side .*no sweep.json"):
        sweep(tmp_path, runner, side_by_side=[tmp_path / "nothing"])
    assert runner.trained == []


def test_fixed_weight_table_has_the_ratio_column_in_the_papers_layout(tmp_path):
    # the paper's two one-dimensional sweeps, into one directory
    sweep(
        tmp_path,
        FakeRunner(table=PAPER_WEIGHTS),
        methods=["grpo", "psr", "nsr", "w_reinforce"],
        grids=["w_reinforce.w_pos=1", "w_neg=0.05,0.1,0.2,5"],
    )
    sweep(tmp_path, FakeRunner(table=PAPER_WEIGHTS), methods=["w_reinforce"], grids=["w_pos=0.05,0.1,0.2,5"])
    markdown = (tmp_path / "sweep" / "fixed_weights.md").read_text()
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert cells[0] == ["Methods", "w+", "w−", "w+/w−", "Rouge-L", "Reranker†"]
    # (method, w+, w−, ratio, Rouge-L value) row by row, block titles as they appear
    body = [(c[0], c[1], c[2], c[3], c[4].split(" ")[0]) for c in cells[2:]]
    assert body == [
        ("PSR", "1", "0", "∞", "0.293"),
        ("NSR", "0", "1", "0", "0.327"),
        ("GRPO", "1", "1", "1", "0.301"),
        ("*W-REINFORCE, P/N ↓ (w+=1, w− varied)*", "", "", "", ""),
        ("W-REINFORCE", "1", "0.05", "20", "0.299"),
        ("W-REINFORCE", "1", "0.1", "10", "0.232"),
        ("W-REINFORCE", "1", "0.2", "5", "0.274"),
        ("W-REINFORCE", "1", "5", "0.2", "0.335"),
        ("*W-REINFORCE, P/N ↑ (w−=1, w+ varied)*", "", "", "", ""),
        ("W-REINFORCE", "0.05", "1", "0.05", "0.263"),
        ("W-REINFORCE", "0.1", "1", "0.1", "0.322"),
        ("W-REINFORCE", "0.2", "1", "0.2", "0.337"),
        ("W-REINFORCE", "5", "1", "5", "0.302"),
    ]
    rows = read_csv(tmp_path / "sweep" / "fixed_weights.csv")
    ratios = {(float(r["w_pos"]), float(r["w_neg"])): r["ratio"] for r in rows}
    assert ratios[(1.0, 0.0)] == "inf" and float(ratios[(1.0, 0.05)]) == pytest.approx(20.0)
    assert float(ratios[(0.05, 1.0)]) == pytest.approx(0.05)
    assert "Scored text: Rouge-L: the <advice> part (extract=advice)" in markdown


def test_with_a_judge_the_comparison_shows_both_of_the_papers_avgs(tmp_path):
    sweep(tmp_path, FakeRunner(laaj=0.7), methods=["grpo", "eapo"], grids=[])
    markdown = (tmp_path / "sweep" / "comparison.md").read_text()
    first, second = markdown.split("## With LLM-as-a-Judge")
    assert "| Methods | Rouge-L | Reranker† | RL@8 | RR@8† | Avg |" in first
    assert "| Methods | Rouge-L | Reranker† | LAAJ | Avg |" in second
    grpo_first = next(line for line in first.splitlines() if line.startswith("| GRPO"))
    grpo_second = next(line for line in second.splitlines() if line.startswith("| GRPO"))
    # GRPO = (0.30, 0.95): avg = (0.30 + 0.95 + 0.33 + 0.97) / 4; avg_laaj = (0.30 + 0.95 + 0.7) / 3 = 0.65
    avg = (0.30 + 0.95 + 0.33 + 0.97) / 4
    assert grpo_first.split(" | ")[-1].startswith(f"{avg:.3f} [")
    assert grpo_second.split(" | ")[-1].startswith("0.650 [")
    assert "With LLM-as-a-Judge: Avg: mean of Rouge-L, Reranker and LAAJ" in markdown
    # the unscored samples are counted under the table: 2 per evaluation, 3 evaluations (base included)
    assert "(over 3 evaluations): Rouge-L 0/960, Reranker 0/960, Format 0/960, LAAJ 6/960." in markdown
    rows = {r["label"]: r for r in read_csv(tmp_path / "sweep" / "comparison.csv")}
    assert float(rows["GRPO"]["avg"]) == pytest.approx(avg) and float(
        rows["GRPO"]["avg_laaj"]
    ) == pytest.approx(0.65)


def test_every_table_names_what_the_scorers_read(tmp_path):
    sweep(tmp_path, FakeRunner())
    for name in ("comparison.md", "sensitivity.md", "fixed_weights.md"):
        text = (tmp_path / "sweep" / name).read_text()
        assert (
            "Scored text: Rouge-L: the <advice> part (extract=advice); Reranker: the <advice> part" in text
        ), name
    # an evaluation with extract=whole in the same table is called out, not averaged over silently
    results_path = tmp_path / "sweep" / "runs" / "grpo" / "eval" / "results.json"
    results_path.write_text(json.dumps(fake_results(0.3, 0.95, extract="whole")))
    sweep(tmp_path, FakeRunner())
    text = (tmp_path / "sweep" / "comparison.md").read_text()
    assert (
        "Rouge-L: MIXED — the <advice> part (extract=advice) in 7, the whole response (extract=whole) in 1"
        in text
    )


# --jobs: configurations run concurrently; the manifest stays whole
# --------------------------------------------------------------------------------------------


class ConcurrentFakeRunner(FakeRunner):
    """A FakeRunner whose train/evaluate take a while and count how many are in flight at once."""

    def __init__(self, fail=frozenset(), delay: float = 0.15) -> None:
        import threading

        super().__init__(fail)
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def _enter(self):
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def _leave(self):
        with self._lock:
            self.in_flight -= 1

    def train(self, *args, **kwargs):
        import time

        self._enter()
        try:
            time.sleep(self.delay)
            return super().train(*args, **kwargs)
        finally:
            self._leave()

    def evaluate(self, args, log):
        import time

        self._enter()
        try:
            time.sleep(self.delay)
            return super().evaluate(args, log)
        finally:
            self._leave()


def test_jobs_2_runs_two_configurations_at_once_with_the_same_results(tmp_path):
    sequential = ConcurrentFakeRunner(delay=0.0)
    sweep(tmp_path / "one", sequential, methods=["grpo", "psr", "nsr"], grids=[], seeds=[0, 1], jobs=1)
    runner = ConcurrentFakeRunner(fail={"nsr-seed1"})
    report = sweep(tmp_path / "two", runner, methods=["grpo", "psr", "nsr"], grids=[], seeds=[0, 1], jobs=2)
    assert runner.most_in_flight == 2 and sequential.most_in_flight == 1
    assert sorted(runner.trained) == sorted(sequential.trained) and len(runner.trained) == 6
    assert report.failures.keys() == {"nsr-seed1"} and "CUDA out of memory" in report.failures["nsr-seed1"]
    manifest = json.loads((tmp_path / "two" / "sweep" / "sweep.json").read_text())
    assert list(manifest["runs"]) == [  # plan order, whatever order the jobs finished in
        "grpo-seed0",
        "grpo-seed1",
        "psr-seed0",
        "psr-seed1",
        "nsr-seed0",
        "nsr-seed1",
    ]
    assert {name: r["status"] for name, r in manifest["runs"].items()} == {
        "grpo-seed0": "done",
        "grpo-seed1": "done",
        "psr-seed0": "done",
        "psr-seed1": "done",
        "nsr-seed0": "done",
        "nsr-seed1": "failed",
    }
    assert all(r["method"] and r["run_dir"] == f"runs/{n}" for n, r in manifest["runs"].items())
    one = read_csv(tmp_path / "one" / "sweep" / "comparison.csv")
    two = read_csv(tmp_path / "two" / "sweep" / "comparison.csv")
    assert [r["runs"] for r in two] == ["base", "grpo-seed0;grpo-seed1", "psr-seed0;psr-seed1", "nsr-seed0"]
    assert [r["rouge_l"] for r in two] == [r["rouge_l"] for r in one]

    # A rerun with --jobs 2 skips what finished and retries only the failure.
    again = ConcurrentFakeRunner()
    report = sweep(tmp_path / "two", again, methods=["grpo", "psr", "nsr"], grids=[], seeds=[0, 1], jobs=2)
    assert again.trained == ["nsr-seed1"] and not report.failures
    assert report.statuses["grpo-seed0"] == "skipped (finished)"


def test_concurrent_manifest_writers_lose_nothing(tmp_path):
    import threading

    from eapo.sweep import update_manifest

    path = tmp_path / "sweep.json"

    def writer(index: int) -> None:
        for step in range(20):
            update_manifest(path, {"updated": index}, {f"run{index}": {"step": step, "status": "done"}})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    manifest = json.loads(path.read_text())
    assert manifest["runs"] == {f"run{i}": {"step": 19, "status": "done"} for i in range(6)}


def test_jobs_must_be_positive(tmp_path):
    with pytest.raises(SweepError, match="--jobs must be >= 1"):
        sweep(tmp_path, FakeRunner(), methods=["grpo"], grids=[], jobs=0)


def test_comparison_table_shows_the_strict_table_beside_the_lenient_one():
    from eapo.sweep.tables import Entry, comparison_table

    def with_strict(rouge, reranker, passed):
        # a share `passed` of the samples has its <advice> block; the others score 0 when strict
        results = fake_results(rouge, reranker)
        for key in ("rouge_l", "reranker", "rl_at_k", "rr_at_k", "avg"):
            value = results["metrics"][key] * passed
            results["metrics"][f"{key}_strict"] = value
            results["ci95"][f"{key}_strict"] = [value - 0.01, value + 0.01]
        return results

    entries = [
        Entry("nsr", "nsr", "NSR", {"w_pos": 0.0, "w_neg": 1.0}, [with_strict(0.30, 0.90, 0.5)], ["nsr"]),
        Entry("eapo", "eapo", "EAPO (w0=0.2)", {"w0": 0.2}, [with_strict(0.28, 0.88, 1.0)], ["eapo"]),
    ]
    markdown, table_csv = comparison_table(entries)
    lenient, strict = markdown.split("## Strict: an answer without its <advice> block scores 0")
    header = "| Methods | Rouge-L | Reranker† | RL@8 | RR@8† | Avg |"
    assert header in lenient and header in strict
    # lenient Avg: NSR (0.30 + 0.90 + 0.33 + 0.92) / 4 = 0.6125 (bold); EAPO 0.5925
    assert "| NSR | **0.300** [0.290, 0.310] |" in lenient
    # strict: NSR halves to 0.30625, EAPO keeps 0.5925 and is now best
    nsr_row = next(line for line in strict.splitlines() if line.startswith("| NSR |"))
    eapo_row = next(line for line in strict.splitlines() if line.startswith("| EAPO (w0=0.2) |"))
    assert nsr_row.endswith("| 0.306 [0.296, 0.316] |")
    assert eapo_row.endswith("| **0.593** [0.583, 0.603] |")
    rows = read_csv_text(table_csv)
    assert float(rows[0]["avg_strict"]) == pytest.approx(0.6125 / 2, abs=1e-12)
    assert float(rows[1]["avg_strict_ci_low"]) == pytest.approx(0.5925 - 0.01, abs=1e-12)


def read_csv_text(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def config_for(command: str, tmp_path: Path) -> str:
    """The tiny config for ``eapo sweep``; for ``eapo study``, the tiny config with a ``study:`` section (a
    study config names its methods and claims file)."""
    if command == "sweep":
        return str(TINY)
    study = tmp_path / "tiny_study.yaml"
    study.write_text(TINY.read_text() + "\nstudy:\n  methods: [eapo]\n  claims: paper\n")
    return str(study)


@pytest.mark.parametrize("command", ["sweep", "study"])
def test_engine_flag_trains_every_run_on_that_engine(tmp_path, monkeypatch, command):
    """``eapo sweep/study --engine verl`` hands ``engine=verl`` to every run's config (after the other
    overrides, so it wins); without the flag the config's engine stays."""
    import eapo.study as study_module
    import eapo.sweep as sweep_module
    from eapo.cli import app

    seen: list[list[str]] = []

    def capture(*args, **kwargs):
        seen.append(list(kwargs["overrides"]))
        raise sweep_module.SweepError("stop here")

    monkeypatch.setattr(sweep_module, "run_sweep", capture)
    monkeypatch.setattr(study_module, "run_study", capture)
    config = config_for(command, tmp_path)
    args = [command, "--config", config, "--output-dir", str(tmp_path / "out"), "train.max_steps=2"]
    for extra in (["--engine", "verl"], []):
        CliRunner().invoke(app, args + extra)
    assert seen == [["train.max_steps=2", "engine=verl"], ["train.max_steps=2"]]


@pytest.mark.parametrize("command", ["sweep", "study"])
def test_report_only_on_a_directory_without_a_sweep_refuses_and_trains_nothing(tmp_path, command):
    """``--report-only`` reports on a sweep that exists; on an empty directory it says so (exit 2)
    instead of training, and writes no manifest."""
    from eapo.cli import app

    out = tmp_path / "out"
    config = config_for(command, tmp_path)
    args = [command, "--config", config, "--output-dir", str(out), "--report-only", "train.max_steps=2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "holds no sweep.json, so there is nothing to report" in result.output
    assert not (out / "sweep.json").exists() and not (out / "runs").exists()
