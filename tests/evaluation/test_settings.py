"""One :class:`EvalSettings` for ``eapo eval``, ``run_eval`` and the sweep: the flags build it, a sweep turns
it back into the same flags, and what it leaves open is resolved from the run's rollout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import eapo.evaluation
from eapo.cli import app
from eapo.evaluation import EvalSettings, SamplingSettings, default_scorers
from eapo.evaluation.runner import sampling_settings

EVERY_FIELD_SET = EvalSettings(
    data="jsonl",
    data_path="questions.jsonl",
    split="test",
    limit=3,
    prompt="en",
    response_prefix="",
    max_prompt_tokens=256,
    k=4,
    temperature=0.7,
    top_p=0.9,
    max_new_tokens=64,
    seed=5,
    batch_size=2,
    backend="transformers",
    dtype="float32",
    scorers=("rouge_l", "format"),
    scorer_settings={"rouge_level": "char", "reranker_backend": "bi-encoder"},
    judge_base_url="http://127.0.0.1:8011/v1",
    judge_model="judge",
    judge_api_key_env="",
    judge=False,
    n_resamples=200,
)


@pytest.fixture
def eval_flags(monkeypatch, tmp_path):
    """``eapo eval ARGS`` -> the EvalSettings (and target keywords) it hands to ``run_eval``."""
    calls = []

    def fake_run_eval(settings, **target):
        calls.append((settings, target))
        (tmp_path / "results.md").write_text("table\n", encoding="utf-8")
        return {}, tmp_path

    monkeypatch.setattr(eapo.evaluation, "run_eval", fake_run_eval)

    def invoke(*args: str):
        result = CliRunner().invoke(app, ["eval", *args])
        assert result.exit_code == 0, result.output
        (call,) = calls[-1:]
        return call

    return invoke


def test_eval_flag_defaults_are_the_settings_defaults(eval_flags):
    settings, target = eval_flags("--model", "tiny")
    assert settings == EvalSettings() and settings.scorer_names == default_scorers()
    assert target == {"model": "tiny", "config": None, "output_dir": None, "overrides": [], "progress": True}


@pytest.mark.parametrize(
    "settings",
    [
        EvalSettings(),
        EvalSettings(k=2, limit=2, scorers="rouge_l,format", max_new_tokens=12),
        EVERY_FIELD_SET,
    ],
    ids=["defaults", "sweep-like", "every-field"],
)
def test_settings_survive_the_round_trip_through_eapo_eval_flags(eval_flags, settings):
    parsed, _ = eval_flags("--model", "tiny", *settings.cli_args())
    assert parsed == settings


def test_a_sweep_passes_and_records_the_flags_it_always_did():
    assert EvalSettings().cli_args() == ["--k", "8", "--split", "dev", "--backend", "auto", "--seed", "0"]
    study = EvalSettings(k=8, limit=100, max_new_tokens=256, batch_size=16, scorers="rouge_l,reranker,format")
    assert study.cli_args() == [
        "--k", "8", "--split", "dev", "--backend", "auto", "--seed", "0",
        "--limit", "100", "--max-new-tokens", "256", "--batch-size", "16",
        "--scorers", "rouge_l,reranker,format",
    ]  # fmt: skip
    assert EVERY_FIELD_SET.cli_args()[-9:] == [
        "--rouge-level", "char", "--reranker-backend", "bi-encoder", "--dtype", "float32", "--bootstrap", "200",
        "--no-judge",
    ]  # fmt: skip


def test_eapo_sweep_flags_build_the_settings_every_evaluation_runs_with(monkeypatch, tmp_path):
    import eapo.sweep

    captured = {}

    def fake_run_sweep(config, output_dir, **kwargs):
        captured.update(kwargs)
        raise eapo.sweep.SweepError("stop here")

    monkeypatch.setattr(eapo.sweep, "run_sweep", fake_run_sweep)
    args = ["sweep", "--config", "configs/tiny.yaml", "--output-dir", str(tmp_path)]
    args += ["--k", "2", "--eval-limit", "3", "--eval-split", "test", "--eval-temperature", "0.5"]
    args += ["--eval-max-new-tokens", "16", "--eval-batch-size", "4", "--scorers", "rouge_l"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "stop here" in result.output
    assert captured["eval_options"] == EvalSettings(
        k=2, limit=3, split="test", temperature=0.5, max_new_tokens=16, batch_size=4, scorers=("rouge_l",)
    )


def test_scorers_accept_the_flag_form_and_default_to_the_one_list():
    assert EvalSettings(scorers=" rouge_l, format ,").scorers == ("rouge_l", "format")
    assert EvalSettings(scorers=["laaj"]).scorers == ("laaj",)
    assert EvalSettings().scorers is None and EvalSettings().scorer_names == default_scorers()
    assert default_scorers() == ("rouge_l", "reranker", "format")


def test_what_the_settings_leave_open_comes_from_the_run_rollout():
    rollout = SimpleNamespace(temperature=0.6, top_p=0.95, max_completion_tokens=128, stop=["</advice>"])
    assert sampling_settings(
        EvalSettings(k=2, seed=3, n_resamples=10), rollout, "transformers"
    ) == SamplingSettings(
        k=2,
        temperature=0.6,
        top_p=0.95,
        max_new_tokens=128,
        seed=3,
        batch_size=8,
        n_resamples=10,
        stop=("</advice>",),
    )
    explicit = EvalSettings(temperature=0.0, top_p=0.5, max_new_tokens=7, batch_size=3, stop=())
    resolved = sampling_settings(explicit, rollout, "vllm")
    assert (
        resolved.temperature,
        resolved.top_p,
        resolved.max_new_tokens,
        resolved.batch_size,
        resolved.stop,
    ) == (0.0, 0.5, 7, 3, ())
    no_run = sampling_settings(EvalSettings(), None, "paged")
    assert (no_run.temperature, no_run.top_p, no_run.max_new_tokens, no_run.batch_size, no_run.stop) == (
        1.0,
        1.0,
        512,
        64,
        (),
    )


def test_stop_strings_pass_on_as_eval_flags_and_match_the_results_they_made():
    assert EvalSettings(stop=("</advice>", "###")).cli_args()[-4:] == ["--stop", "</advice>", "--stop", "###"]
    assert EvalSettings(stop=()).cli_args()[-1] == "--no-stop"
    assert "--stop" not in EvalSettings().cli_args() and "--no-stop" not in EvalSettings().cli_args()
    results = {
        "metrics": {"avg_laaj": 0.1},
        "k": 8,
        "settings": {"split": "dev", "limit": None, "stop": ["</advice>"]},
        "labels": {"rouge_l": "", "reranker": "", "format": ""},
    }
    assert EvalSettings(stop=("</advice>",)).matches(results)
    assert not EvalSettings(stop=()).matches(results)
    assert EvalSettings().matches(results)  # None: the run's, whatever it was
    # a results.json from before eapo eval recorded its stop strings is not read as "none" (issue 48)
    older = {**results, "settings": {"split": "dev", "limit": None}}
    assert EvalSettings().matches(older)  # not asked for: not read
    with pytest.raises(
        ValueError, match=r"sweep/runs/a/eval/results.json has no settings.stop .*delete its directory"
    ):
        EvalSettings(stop=()).matches(older, Path("sweep/runs/a/eval/results.json"))
    with pytest.raises(ValueError, match="--stop must hold non-empty strings"):
        EvalSettings(stop=("",))


def test_scorer_settings_are_the_registered_ones_checked_and_kept_in_registration_order():
    settings = EvalSettings(scorer_settings={"reranker_backend": "cross-encoder", "rouge_level": None})
    assert settings.scorer_settings == {"reranker_backend": "cross-encoder"}  # None: the run's
    assert EvalSettings(scorer_settings=None) == EvalSettings() and EvalSettings().scorer_settings == {}
    both = EvalSettings(scorer_settings={"reranker_backend": "auto", "rouge_level": "word"})
    assert list(both.scorer_settings) == ["rouge_level", "reranker_backend"]
    with pytest.raises(
        ValueError, match=r"unknown scorer setting\(s\) \['level'\]; valid: rouge_level, reranker_backend"
    ):
        EvalSettings(scorer_settings={"level": "word"})
    with pytest.raises(ValueError, match="--rouge-level 'words' is invalid; valid: char, word, auto"):
        EvalSettings(scorer_settings={"rouge_level": "words"})


def test_asking_for_the_real_reranker_does_not_reuse_the_stand_ins_scores():
    """A setting's ``real`` values (the reranker's cross-encoder) refuse results its stand-in scored."""
    results = {
        "k": 8,
        "settings": {"split": "dev", "limit": None},
        "labels": {"rouge_l": "", "reranker": "bi-encoder stand-in (all-MiniLM-L6-v2)", "format": ""},
    }
    assert EvalSettings().matches(results)
    assert EvalSettings(scorer_settings={"reranker_backend": "auto"}).matches(results)
    assert not EvalSettings(scorer_settings={"reranker_backend": "cross-encoder"}).matches(results)
    results["labels"]["reranker"] = "cross-encoder reranker (BAAI/bge-reranker-v2-m3, sigmoid, advice)"
    assert EvalSettings(scorer_settings={"reranker_backend": "cross-encoder"}).matches(results)


def test_each_scorer_setting_sets_its_components_option_over_the_runs(tmp_path):
    from eapo.evaluation.runner import eval_scorers

    settings = EvalSettings(scorers="rouge_l", scorer_settings={"rouge_level": "word"})
    assert eval_scorers(settings, None, "", tmp_path)["rouge_l"].level == "word"
    assert eval_scorers(EvalSettings(scorers="rouge_l"), None, "", tmp_path)["rouge_l"].level == "char"


def test_the_flag_defaults_are_read_without_importing_torch():
    code = (
        "import sys\n"
        "from eapo.evaluation import EvalSettings, default_scorers\n"
        "assert default_scorers() == ('rouge_l', 'reranker', 'format')\n"
        "import eapo.commands.eval, eapo.commands.sweep\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
