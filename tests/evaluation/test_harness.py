"""The resumable evaluation loop on the tiny random model (fast: 8-token responses, Rouge-L + format)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from eapo.data import Record, render_prompts
from eapo.evaluation import EvalMismatchError, SamplingSettings, evaluate, load_samples
from eapo.rewards import make_reward
from eapo.runtime.generate import TransformersGenerator
from eapo.runtime.models import load_tokenizer, resolve_model

ROOT = Path(__file__).resolve().parents[2]
RECORDS = [
    Record(
        id=f"r{index}",
        question=f"Question number {index}: what should I do?",
        reference=f"Rest and drink water {index}.",
    )
    for index in range(5)
]
SETTINGS = SamplingSettings(k=3, temperature=1.0, max_new_tokens=8, seed=0, batch_size=2, n_resamples=200)


class CrashAfter(Exception):
    pass


class CountingGenerator:
    """Wraps a real generator; counts prompts generated and can simulate a crash after N calls."""

    def __init__(self, inner, crash_after_calls: int | None = None) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.calls = 0
        self.prompts: list[str] = []
        self.crash_after_calls = crash_after_calls

    def generate(self, prompts, **kwargs):
        if self.crash_after_calls is not None and self.calls >= self.crash_after_calls:
            raise CrashAfter("simulated crash")
        self.calls += 1
        self.prompts += list(prompts)
        return self.inner.generate(prompts, **kwargs)


def never():
    raise AssertionError("nothing was left to generate, yet the model was loaded")


@pytest.fixture(scope="module")
def tiny():
    path = resolve_model("tiny")
    return (
        path,
        TransformersGenerator(path, dtype="float32"),
        render_prompts(RECORDS, load_tokenizer(path), "en"),
    )


@pytest.fixture(scope="module")
def scorers():
    return {"rouge_l": make_reward("rouge_l", level="char", extract="whole"), "format": make_reward("format")}


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_an_interrupted_evaluation_resumes_from_its_samples(tmp_path, tiny, scorers):
    model_path, generator, prompts = tiny
    out = tmp_path / "eval"
    first = CountingGenerator(generator, crash_after_calls=2)  # batches of 2 prompts: crash before the 3rd
    with pytest.raises(CrashAfter):
        evaluate(
            RECORDS, prompts, scorers, out, model="tiny", data="hand", generator=first, settings=SETTINGS
        )
    assert first.calls == 2 and len(first.prompts) == 4
    written = lines_of(out / "samples.jsonl")
    assert len(written) == 4 * 3  # appended and flushed per prompt before the crash
    with open(out / "samples.jsonl", "a", encoding="utf-8") as f:  # a kill in the middle of a write
        f.write('{"id": "r4", "sample": 0, "compl')

    second = CountingGenerator(generator)
    results = evaluate(
        RECORDS, prompts, scorers, out, model="tiny", data="hand", generator=second, settings=SETTINGS
    )
    assert second.calls == 1 and second.prompts == [prompts[4]]  # only the unfinished prompt
    lines = lines_of(out / "samples.jsonl")
    assert lines[:12] == written  # the finished prompts' samples are reused byte for byte
    samples = [json.loads(line) for line in lines]
    assert [(s["id"], s["sample"]) for s in samples] == [(f"r{i}", j) for i in range(5) for j in range(3)]
    assert results["n_prompts"] == 5 and results["k"] == 3

    # Every number comes from samples.jsonl: recompute RL@k and Rouge-L by hand.
    rouge = np.array(
        [[s["scores"]["rouge_l"] for s in samples if s["id"] == f"r{i}"] for i in range(5)]
    )  # [5, 3]
    assert results["metrics"]["rouge_l"] == pytest.approx(rouge.mean(axis=1).mean(), abs=1e-12)
    assert results["metrics"]["rl_at_k"] == pytest.approx(rouge.max(axis=1).mean(), abs=1e-12)
    assert results["metrics"]["reranker"] is None and results["metrics"]["laaj"] is None
    # no reranker: neither Avg of the paper can be formed
    assert results["metrics"]["avg"] is None and results["metrics"]["avg_laaj"] is None
    assert results["unscored"] == {"rouge_l": 0, "format": 0} and results["n_samples"] == 15
    assert results["extract"] == {"rouge_l": "whole"}
    low, high = results["ci95"]["rouge_l"]
    assert low <= results["metrics"]["rouge_l"] <= high
    assert results["extra"]["format"] == pytest.approx(np.mean([s["scores"]["format"] for s in samples]))
    assert all(s["num_tokens"] <= 8 for s in samples)

    # A third run has nothing to generate: the model is never loaded, the numbers are the same.
    again = evaluate(
        RECORDS, prompts, scorers, out, model="tiny", data="hand", generator=never, settings=SETTINGS
    )
    assert again["metrics"] == results["metrics"] and again["ci95"] == results["ci95"]
    for name in ("results.json", "results.csv", "results.md", "eval_config.json"):
        assert (out / name).stat().st_size > 0


def test_samples_from_other_settings_are_never_mixed_in(tmp_path, tiny, scorers):
    model_path, generator, prompts = tiny
    out = tmp_path / "eval"
    evaluate(
        RECORDS[:2],
        prompts[:2],
        scorers,
        out,
        model="tiny",
        data="hand",
        generator=generator,
        settings=SETTINGS,
    )
    for field, value in (("k", 4), ("temperature", 0.7), ("max_new_tokens", 16), ("seed", 1)):
        changed = SamplingSettings(**{**SETTINGS.__dict__, field: value})
        with pytest.raises(EvalMismatchError, match=f"{field}=") as error:
            evaluate(
                RECORDS[:2],
                prompts[:2],
                scorers,
                out,
                model="tiny",
                data="hand",
                generator=never,
                settings=changed,
            )
        assert "--output-dir" in str(error.value)
    with pytest.raises(EvalMismatchError, match="model="):
        evaluate(
            RECORDS[:2],
            prompts[:2],
            scorers,
            out,
            model="other",
            data="hand",
            generator=never,
            settings=SETTINGS,
        )
    other_prompts = [p + " (changed)" for p in prompts[:2]]
    with pytest.raises(EvalMismatchError, match="different prompt text"):
        evaluate(
            RECORDS[:2],
            other_prompts,
            scorers,
            out,
            model="tiny",
            data="hand",
            generator=never,
            settings=SETTINGS,
        )


def test_files_from_an_older_eapo_eval_are_clear_errors(tmp_path):
    """An eval_config.json without a generation field, or a sample without a field eapo eval writes today
    (stop_reason, prompt, num_tokens, ...), written before eapo eval recorded it, is not read with a default
    (issue 48): the error names the file and what to do."""
    from eapo.evaluation.harness import SAMPLE_FIELDS, _sample, check_generation, generation_fingerprint
    from eapo.runtime.generate import Completion

    current = generation_fingerprint("tiny", SETTINGS)
    config = tmp_path / "eval_config.json"
    older = {key: value for key, value in current.items() if key != "stop"}
    config.write_text(json.dumps({"generation": older, "scorers": {}}))
    with pytest.raises(
        ValueError, match=r"eval_config.json: the generation settings lack \['stop'\] .*--output-dir"
    ):
        check_generation(config, current)
    config.write_text(json.dumps({"generation": current, "scorers": {}}))
    assert check_generation(config, current)["generation"] == current
    record = SimpleNamespace(id="1", question="q", reference="r")
    sample = _sample(record, "p", 0, Completion(text="x", num_tokens=1, finished=True, stop_reason="eos"))
    assert tuple(sample) == SAMPLE_FIELDS  # what load_samples asks of every line
    path = tmp_path / "samples.jsonl"
    for field in ("stop_reason", "prompt", "num_tokens"):
        older_sample = {key: value for key, value in sample.items() if key != field}
        path.write_text(json.dumps(sample) + "\n" + json.dumps(older_sample) + "\n")
        with pytest.raises(
            ValueError,
            match=rf"samples.jsonl:2: sample lacks \['{field}'\] \(eapo eval writes .*--output-dir",
        ):
            load_samples(path)


class LengthScorer:
    """A stand-in scorer whose label we can change: the completion's length in characters."""

    name = "rouge_l"

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, prompts, completions, references, **kwargs):
        return [float(len(c)) for c in completions]


def test_a_changed_scorer_rescores_stored_samples_without_generating(tmp_path, tiny, scorers):
    model_path, generator, prompts = tiny
    out = tmp_path / "eval"
    evaluate(
        RECORDS[:2],
        prompts[:2],
        scorers,
        out,
        model="tiny",
        data="hand",
        generator=generator,
        settings=SETTINGS,
    )
    rescored = {"rouge_l": LengthScorer("length v2"), "format": scorers["format"]}
    results = evaluate(
        RECORDS[:2], prompts[:2], rescored, out, model="tiny", data="hand", generator=never, settings=SETTINGS
    )
    samples, torn = load_samples(out / "samples.jsonl")
    assert not torn and all(s["scores"]["rouge_l"] == float(len(s["completion"])) for s in samples)
    assert results["labels"]["rouge_l"] == "length v2"
    stored = json.loads((out / "eval_config.json").read_text())
    assert stored["scorers"]["rouge_l"] == "length v2"


def test_eval_cli_on_a_run_directory_uses_the_runs_settings(tmp_path, monkeypatch):
    """`eapo eval --model RUN_DIR`: RUN_DIR/final, the run's data and rollout length, output in RUN_DIR/eval."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from eapo.cli import app

    run_dir = tmp_path / "run"
    shutil.copytree(resolve_model("tiny"), run_dir / "final")
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["algorithm"] = {"method": "w_reinforce", "w_pos": 0.2}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    args = [
        "eval",
        "--model",
        str(run_dir),
        "--k",
        "2",
        "--limit",
        "2",
        "--scorers",
        "rouge_l,format",
        "--bootstrap",
        "50",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    assert results["data"] == "demo:dev[:2]" and results["n_prompts"] == 2 and results["k"] == 2
    assert results["settings"]["max_new_tokens"] == config["rollout"]["max_completion_tokens"]
    # --backend auto follows the rollout backend the run pinned (tiny.yaml: generate), also where vLLM is installed
    assert config["rollout"]["backend"] == "generate" and results["settings"]["backend"] == "transformers"
    assert results["display_name"] == "W-REINFORCE (w+=0.2, w−=1)"
    assert set(results["metrics"]) == {
        "rouge_l",
        "reranker",
        "rl_at_k",
        "rr_at_k",
        "laaj",
        "avg",
        "avg_laaj",
    } | {
        "rouge_l_strict",
        "reranker_strict",
        "rl_at_k_strict",
        "rr_at_k_strict",
        "avg_strict",
    }
    # format ran: Rouge-L has its strict column; no reranker, so neither Avg can be formed
    assert results["metrics"]["rouge_l_strict"] is not None and results["metrics"]["avg_strict"] is None
    assert results["metrics"]["rouge_l_strict"] <= results["metrics"]["rouge_l"] + 1e-12
    assert "W-REINFORCE (w+=0.2, w−=1)" in (run_dir / "eval" / "results.md").read_text()
    # a different k in the same directory is refused with the field named
    result = CliRunner().invoke(app, [*args[:3], "--k", "3", *args[5:]])
    assert result.exit_code == 1 and "k=2" in result.output and "k=3" in result.output


def test_eval_cli_config_evaluates_the_base_model(tmp_path, monkeypatch):
    """`eapo eval --config CONFIG`: the config's base model on its data, before any training."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from eapo.cli import app

    out = tmp_path / "base"
    args = ["eval", "--config", str(ROOT / "configs" / "tiny.yaml"), "--output-dir", str(out), "--k", "2"]
    result = CliRunner().invoke(app, [*args, "--limit", "2", "--scorers", "rouge_l", "--max-new-tokens", "6"])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "tiny" and results["display_name"] == "tiny (base)"
    assert results["data"] == "demo:dev[:2]" and results["settings"]["max_new_tokens"] == 6
    samples, _ = load_samples(out / "samples.jsonl")
    assert len(samples) == 4 and all(s["num_tokens"] <= 6 for s in samples)


def test_eval_of_a_config_with_a_response_prefix_prefills_and_checks_it(tmp_path, monkeypatch):
    """data.response_prefix: every prompt ends with it, and the format scorer checks prefix + completion."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from eapo.cli import app

    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["data"]["response_prefix"] = "<think>"
    (tmp_path / "prefixed.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "base"
    args = [
        "eval",
        "--config",
        str(tmp_path / "prefixed.yaml"),
        "--output-dir",
        str(out),
        "--k",
        "2",
        "--limit",
        "2",
    ]
    result = CliRunner().invoke(
        app, [*args, "--scorers", "format", "--max-new-tokens", "4", "--bootstrap", "20"]
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["response_prefix"] == "<think>"
    samples, _ = load_samples(out / "samples.jsonl")
    assert len(samples) == 4 and all(s["prompt"].endswith("<|im_start|>assistant\n<think>") for s in samples)
    # the scorer built for this run checks "<think>" + completion: a completion that closes the
    # prefilled tag is well formed, the same text without the prefix is not
    from eapo.config import load_config, reward_options
    from eapo.evaluation.runner import build_scorers

    (fmt,) = build_scorers(
        ["format"], reward_options=reward_options(load_config(tmp_path / "prefixed.yaml"))
    ).values()
    assert fmt.check("R</think><advice>A</advice>")
    (plain,) = build_scorers(
        ["format"], reward_options=reward_options(load_config(ROOT / "configs" / "tiny.yaml"))
    ).values()
    assert not plain.check("R</think><advice>A</advice>")


def test_eval_cli_errors_name_what_is_missing(tmp_path):
    from eapo.cli import app

    result = CliRunner().invoke(app, ["eval", "--model", "tiny"])
    assert result.exit_code == 1 and "--output-dir" in result.output
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.yaml").write_text((ROOT / "configs" / "tiny.yaml").read_text())
    result = CliRunner().invoke(app, ["eval", "--model", str(tmp_path / "unfinished")])
    assert result.exit_code == 1 and "no final/" in result.output
    assert os.path.exists(tmp_path / "unfinished")


def test_laaj_scores_the_response_with_the_judge(tmp_path, tiny):
    """With a judge endpoint (a real local OpenAI-compatible server), LAAJ is the judge's score of the
    response (target=response), averaged into avg_laaj (Rouge-L, Reranker, LAAJ) and not into avg;
    a sample the judge could not score is counted in results.json and under the table."""
    from eapo.evaluation import build_scorers
    from eapo.testing import Fault, JudgeServer

    model_path, generator, prompts = tiny
    with JudgeServer(default_score=80.0) as server:
        scorers = build_scorers(
            ["rouge_l", "reranker"],
            reward_options={
                "rouge_l": {"level": "char", "extract": "whole"},
                "reranker": {"backend": "bi-encoder"},
            },
            judge_base_url=server.base_url,
            judge_model=server.model,
            judge_api_key_env=None,
        )
        assert list(scorers) == ["rouge_l", "reranker", "laaj"] and scorers["laaj"].target == "response"
        # record r1's two samples: an unparseable answer, and again on the re-ask -> None
        server.inject("Question number 1:", *[Fault.malformed()] * 4)
        settings = SamplingSettings(k=2, max_new_tokens=6, n_resamples=100)
        results = evaluate(
            RECORDS[:3],
            prompts[:3],
            scorers,
            tmp_path,
            model="tiny",
            data="hand",
            generator=generator,
            settings=settings,
        )
        assert server.pending_faults("Question number 1:") == 0
    metrics = results["metrics"]
    assert metrics["laaj"] == pytest.approx(0.8, abs=1e-9)  # r1 unscored: left out, not a zero
    assert results["ci95"]["laaj"] == pytest.approx([0.8, 0.8], abs=1e-9)
    assert results["unscored"] == {"rouge_l": 0, "reranker": 0, "laaj": 2} and results["n_samples"] == 6
    assert results["n_scored"]["laaj"] == 2
    four = (metrics["rouge_l"], metrics["reranker"], metrics["rl_at_k"], metrics["rr_at_k"])
    assert metrics["avg"] == pytest.approx(sum(four) / 4, abs=1e-12)
    assert metrics["avg_laaj"] == pytest.approx(
        (metrics["rouge_l"] + metrics["reranker"] + 0.8) / 3, abs=1e-12
    )
    assert results["avg_of"] == {
        "avg": ["rouge_l", "reranker", "rl_at_k", "rr_at_k"],
        "avg_laaj": ["rouge_l", "reranker", "laaj"],
    }
    assert results["extract"] == {"rouge_l": "whole", "reranker": "advice", "laaj": "advice"}
    markdown = (tmp_path / "results.md").read_text()
    assert "| Model | Rouge-L | Reranker† | RL@2 | RR@2† | Avg |" in markdown
    assert "| Model | Rouge-L | Reranker† | LAAJ | Avg |" in markdown
    assert "LAAJ 2/6" in markdown
    header, row = (tmp_path / "results.csv").read_text().strip().splitlines()
    assert dict(zip(header.split(","), row.split(","), strict=True))["unscored_laaj"] == "2"


def test_eval_of_a_run_on_other_data_keeps_its_prompt_and_prefix_unless_told(tmp_path, monkeypatch, caplog):
    """`eapo eval --model RUN --data jsonl`: the run's prompt template and response prefix go with it
    (the model learnt to answer them); --prompt / --response-prefix replace them, with a warning."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from eapo.cli import app

    run_dir = tmp_path / "run"
    shutil.copytree(resolve_model("tiny"), run_dir / "final")
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["data"].update(prompt="en_fewshot", response_prefix="<think>")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    held_out = tmp_path / "held_out.jsonl"
    rows = [
        {"id": f"q{i}", "question": f"What helps symptom {i}?", "answer": f"Rest {i}."} for i in range(12)
    ]
    held_out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = ["--data", "jsonl", "--data-path", str(held_out), "--split", "all", "--k", "1"]
    common += ["--scorers", "format", "--max-new-tokens", "3", "--bootstrap", "20"]

    def evaluate_into(name, *extra):
        out = tmp_path / name
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="eapo.evaluation.runner"):
            result = CliRunner().invoke(
                app, ["eval", "--model", str(run_dir), "--output-dir", str(out), *common, *extra]
            )
        assert result.exit_code == 0, result.output
        samples, _ = load_samples(out / "samples.jsonl")
        settings = json.loads((out / "results.json").read_text())["settings"]
        warnings = [r.getMessage() for r in caplog.records if "the run trained with" in r.getMessage()]
        scorer = json.loads((out / "eval_config.json").read_text())["scorers"]["format"]
        return settings, samples, warnings, scorer

    settings, samples, warnings, scorer = evaluate_into("kept")
    assert settings["prompt"] == settings["trained_prompt"] == "en_fewshot"
    assert settings["response_prefix"] == settings["trained_response_prefix"] == "<think>"
    assert len(samples) == 12 and all(s["prompt"].endswith("assistant\n<think>") for s in samples)
    assert warnings == []
    assert scorer.endswith("after '<think>')")  # the format check reads "<think>" + completion

    settings, samples, warnings, scorer = evaluate_into("replaced", "--prompt", "en", "--response-prefix", "")
    assert settings["prompt"] == "en" and settings["response_prefix"] == ""
    assert settings["trained_prompt"] == "en_fewshot" and settings["trained_response_prefix"] == "<think>"
    assert all(s["prompt"].endswith("<|im_start|>assistant\n") for s in samples)
    assert len(warnings) == 2 and scorer.endswith("non-empty)")  # no prefix: the completion as is
    assert "--prompt en_fewshot" in warnings[0] and "--response-prefix '<think>'" in warnings[1]


def test_prompt_drift_names_each_difference_from_training():
    """No run, or the run's own prompt and prefix: no warning; a changed prefix: one naming both."""
    from eapo.evaluation.runner import prompt_drift

    assert prompt_drift("en", "", None, None) == []
    assert prompt_drift("en_fewshot", "<think>", "en_fewshot", "<think>") == []
    (warning,) = prompt_drift("en_fewshot", "", "en_fewshot", "<think>")
    assert "response prefix ''" in warning and "'<think>'" in warning


def test_the_laaj_judge_comes_from_the_flags_else_the_configs_reward_judge():
    from eapo.config import load_config
    from eapo.evaluation import judge_settings

    tiny = ROOT / "configs" / "tiny.yaml"
    cfg = load_config(
        tiny,
        [
            "reward.judge.base_url=http://judge:8011/v1",
            "reward.judge.model=jm",
            "reward.judge.api_key_env=null",
            "reward.judge.max_retries=1",
            "reward.judge.structured_output=json_object",
        ],
    )
    options = {"timeout": 60.0, "concurrency": 32, "max_retries": 1, "structured_output": "json_object"}
    assert judge_settings(cfg, None, None, None) == ("http://judge:8011/v1", "jm", None, options)
    assert judge_settings(cfg, "http://other/v1", "om", "KEY") == ("http://other/v1", "om", "KEY", options)
    assert judge_settings(cfg, "http://other/v1", "om", None)[2] == "OPENAI_API_KEY"  # not the config's key
    assert judge_settings(cfg, None, "om", "")[:3] == ("http://judge:8011/v1", "om", None)
    assert judge_settings(load_config(tiny), None, None, None)[:3] == (None, None, "OPENAI_API_KEY")
    assert judge_settings(None, "http://x/v1", "m", None) == ("http://x/v1", "m", "OPENAI_API_KEY", {})


def test_eval_stops_before_generating_when_its_judge_is_unreachable(tmp_path):
    from eapo.cli import app

    config = str(ROOT / "configs" / "tiny.yaml")
    dead = [
        "reward.judge.base_url=http://127.0.0.1:9/v1",
        "reward.judge.model=m",
        "reward.judge.api_key_env=null",
    ]
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app, ["eval", "--config", config, "--output-dir", str(out), "--limit", "1", *dead]
    )
    assert result.exit_code == 1
    assert "LAAJ:" in result.output and "127.0.0.1:9/v1" in result.output and "--no-judge" in result.output
    assert not (out / "samples.jsonl").exists()  # nothing generated
    result = CliRunner().invoke(app, ["eval", "--model", "tiny", "--output-dir", str(out), *dead])
    assert result.exit_code == 1 and "need a configuration to apply to" in result.output
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--config",
            config,
            "--output-dir",
            str(out),
            "--limit",
            "1",
            "--k",
            "2",
            "--max-new-tokens",
            "4",
            "--scorers",
            "rouge_l",
            "--no-judge",
            *dead,
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["metrics"]["laaj"] is None


class ScriptedGenerator:
    """Returns fixed completions per prompt (no model)."""

    backend = "scripted"

    def __init__(self, texts: dict[str, list[str]]) -> None:
        self.texts = texts

    def generate(self, prompts, *, k, **kwargs):
        from eapo.runtime.generate import Completion

        return [[Completion(text, len(text.split()), True) for text in self.texts[p][:k]] for p in prompts]


class ConstantScorer:
    """A stand-in reranker: the same score for every sample (the strict column then shows the gating alone)."""

    name = "reranker"
    label = "constant 0.8 (test)"
    extract = "advice"

    def __call__(self, prompts, completions, references, **kwargs):
        return [0.8] * len(completions)


def test_strict_scores_zero_an_answer_without_its_advice_block(tmp_path):
    """Word-level Rouge-L of the <advice> answer, hand-computed. Without an <advice> block the lenient
    Rouge-L falls back to the text after </think> (or the whole text); the strict one scores 0."""
    records = [
        Record(id="a", question="q a", reference="rest and drink water"),
        Record(id="b", question="q b", reference="see a doctor"),
    ]
    texts = {
        "A": [
            "<think>x</think><advice>rest and drink water</advice>",
            "<think>x</think> rest and drink water",
        ],
        "B": ["<think>y</think><advice>see a doctor now</advice>", "see a doctor"],
    }
    scorers = {
        "rouge_l": make_reward("rouge_l", level="word"),
        "reranker": ConstantScorer(),
        "format": make_reward("format"),
    }
    settings = SamplingSettings(k=2, max_new_tokens=16, n_resamples=200)
    results = evaluate(
        records,
        ["A", "B"],
        scorers,
        tmp_path,
        model="scripted",
        data="hand",
        generator=ScriptedGenerator(texts),
        settings=settings,
    )
    m = results["metrics"]
    # lenient: a = [1, 1], b = [6/7 (P 3/4, R 1), 1]
    assert m["rouge_l"] == pytest.approx((1.0 + (6 / 7 + 1) / 2) / 2, abs=1e-12)
    assert m["rl_at_k"] == pytest.approx(1.0, abs=1e-12)
    assert m["avg"] == pytest.approx((m["rouge_l"] + 0.8 + 1.0 + 0.8) / 4, abs=1e-12)
    # strict: a = [1, 0], b = [6/7, 0]; reranker [0.8, 0] for both
    assert m["rouge_l_strict"] == pytest.approx((0.5 + 3 / 7) / 2, abs=1e-12)
    assert m["rl_at_k_strict"] == pytest.approx((1 + 6 / 7) / 2, abs=1e-12)
    assert m["reranker_strict"] == pytest.approx(0.4, abs=1e-12)
    assert m["rr_at_k_strict"] == pytest.approx(0.8, abs=1e-12)
    expected = ((0.5 + 3 / 7) / 2 + 0.4 + (1 + 6 / 7) / 2 + 0.8) / 4
    assert m["avg_strict"] == pytest.approx(expected, abs=1e-12)
    low, high = results["ci95"]["avg_strict"]
    assert low <= expected <= high and results["ci95"]["reranker_strict"] == pytest.approx([0.4, 0.4])
    assert results["strict_gate"] == "format" and results["avg_strict_of"] == {
        "avg_strict": ["rouge_l_strict", "reranker_strict", "rl_at_k_strict", "rr_at_k_strict"]
    }
    assert results["extra"]["format"] == pytest.approx(0.5)
    assert "## Strict: an answer without its <advice> block scores 0" in (tmp_path / "results.md").read_text()


class ShapedGenerator:
    """Three fixed answers per prompt: clean, written on after </advice>, and cut at the cap (no model)."""

    backend = "scripted"

    def generate(self, prompts, *, k, **kwargs):
        from eapo.runtime.generate import Completion

        answers = [
            Completion("x</think><advice>drink water</advice>", 6, True, "eos"),
            Completion("x</think><advice>rest</advice> blah blah blah blah blah", 9, True, "eos"),
            Completion("x</think><advice>rest and rest and rest", 16, False, "cap"),
        ]
        return [answers[:k] for _ in prompts]


def test_results_record_the_answers_shape(tmp_path):
    """results.json["answers"] and results.md's table, from all samples; the closing tag is the format
    scorer's last tag (the response prefix <think> is in the prompt, not before the tail)."""
    records = [
        Record(id="a", question="q a", reference="rest"),
        Record(id="b", question="q b", reference="rest"),
    ]
    scorers = {
        "rouge_l": make_reward("rouge_l", level="word"),
        "format": make_reward("format", prefix="<think>"),
    }
    results = evaluate(
        records,
        ["A<think>", "B<think>"],
        scorers,
        tmp_path,
        model="scripted",
        data="hand",
        generator=ShapedGenerator(),
        settings=SamplingSettings(k=3, max_new_tokens=16, n_resamples=50),
    )
    shape = results["answers"]
    clean = "x</think><advice>drink water</advice>"
    trailing = "x</think><advice>rest</advice> blah blah blah blah blah"
    # each prompt has the same three answers: the shares are the three answers'
    assert shape["n"] == 6
    assert shape["cut_at_cap"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["no_close_tag"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["text_after_close"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["wrote_on"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["chars_after_close"] == pytest.approx(25 / 3, abs=1e-15)
    assert shape["share_after_close"] == pytest.approx(25 / len(trailing) / 3, abs=1e-15)
    # words: clean 2 (no 4-gram: left out), trailing 6 (3 4-grams, 2 unique: "blah blah blah blah" twice),
    # cut 5 (2 4-grams, both unique)
    assert len(clean.split()) == 2
    assert shape["distinct_ngrams"] == pytest.approx((2 / 3 + 1) / 2, abs=1e-15)
    assert shape["close_tag"] == "</advice>" and shape["split"] == "first"
    assert results["extra"]["truncated_frac"] == pytest.approx(1 / 3, abs=1e-15)
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["answers"] == shape
    markdown = (tmp_path / "results.md").read_text()
    assert "## Answer shape: what no score sees" in markdown
    assert "| scripted | 6 | 0.33 | 0.33 | 0.33 | 0.33 | 8.3 | 0.15 | 0.83 |" in markdown

    # another answer tag: the closing tag follows the format scorer's
    scorers["format"] = make_reward("format", tags=["think", "answer"], prefix="<think>")
    again = evaluate(
        records,
        ["A<think>", "B<think>"],
        scorers,
        tmp_path,
        model="scripted",
        data="hand",
        generator=never,
        settings=SamplingSettings(k=3, max_new_tokens=16, n_resamples=50),
    )
    assert again["answers"]["close_tag"] == "</answer>" and again["answers"]["no_close_tag"] == 1.0
    assert "| Model | Answers | Cut at the cap | No `</answer>` |" in (tmp_path / "results.md").read_text()
