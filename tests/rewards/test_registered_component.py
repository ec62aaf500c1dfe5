"""A reward component registered from a module outside eapo (``keyword_reward.py``, beside this file) is
used like a built-in one, with no file under ``src/`` naming it: configured (``reward.weights``,
``reward.options`` and its ``run_options``), scored by the composite (``reward/keyword/*``), evaluated
(its columns, its strict variant, its Avg and table, the CSV; its scorer setting a flag of every command
that evaluates), plotted (its registered panel) and
summarised (its trend and its table column). Values are hand-derived."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from eapo.config import ConfigError, load_config, reward_options, reward_settings
from eapo.data import Record
from eapo.evaluation import SamplingSettings, evaluate
from eapo.evaluation.metrics import avg_columns, metric_keys, strict_columns
from eapo.evaluation.runner import build_scorers
from eapo.plot import panel_keys, plot_runs
from eapo.rewards import REWARD_COMPONENTS, make_composite, make_reward, unregister_reward
from eapo.summary import render_summary, summarize_run

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
BUILTIN_KEYS = metric_keys()


@pytest.fixture
def keyword():
    """Import ``keyword_reward`` afresh (it registers its component at import); unregister it after."""
    sys.modules.pop("keyword_reward", None)
    module = importlib.import_module("keyword_reward")
    yield module
    unregister_reward("keyword")
    sys.modules.pop("keyword_reward", None)


def test_importing_the_module_registers_it(keyword):
    assert REWARD_COMPONENTS["keyword"] is keyword.COMPONENT
    assert "keyword" in metric_keys() and "avg_keyword" in metric_keys()


def test_without_the_test_component_nothing_names_it():
    assert "keyword" not in REWARD_COMPONENTS
    assert metric_keys() == BUILTIN_KEYS and "keyword" not in BUILTIN_KEYS


def test_the_configuration_takes_its_weight_and_options(keyword):
    config = load_config(TINY, ["reward.weights.keyword=0.5"])
    # its run_options: the keyword defaults to the data name's first word (tiny.yaml: demo)
    assert config.data.name == "demo"
    assert reward_options(config)["keyword"] == {"keyword": "demo"}
    weights, options, _ = reward_settings(config)
    assert weights == {"format": 0.2, "rouge_l": 0.8, "keyword": 0.5}
    assert options["keyword"] == {"keyword": "demo"}
    explicit = load_config(TINY, ["reward.weights.keyword=0.5", "reward.options.keyword.keyword=Water"])
    assert reward_options(explicit)["keyword"] == {"keyword": "Water"}
    # light: a bad option fails when the configuration is loaded, naming its key
    with pytest.raises(ConfigError, match=r"reward\.options\.keyword is invalid"):
        load_config(TINY, ["reward.weights.keyword=0.5", "reward.options.keyword.colour=red"])


def test_the_composite_scores_and_logs_it(keyword):
    reward = make_composite({"rouge_l": 0.5, "keyword": 0.5}, rouge_l={"level": "word"})
    result = reward.score(
        ["q", "q", "q"],
        [
            "<think>x</think><advice>drink water</advice>",  # rouge_l 1, keyword 1
            "<think>x</think><advice>rest</advice>",  # rouge_l 0, keyword 0
            "",  # rouge_l 0, keyword None: the sample has no total
        ],
        ["drink water"] * 3,
    )
    assert result.components["keyword"] == [1.0, 0.0, None]
    assert result.rewards == [pytest.approx(1.0), pytest.approx(0.0), None]
    assert result.metrics["reward/keyword/mean"] == pytest.approx(0.5)
    assert result.metrics["reward/keyword/std"] == pytest.approx(0.5)
    assert result.metrics["reward/keyword/none_frac"] == pytest.approx(1 / 3)
    assert "Keyword" not in reward.label and "keyword ('water' present)" in reward.label
    reward.close()


class ScriptedGenerator:
    """Fixed completions per prompt (no model)."""

    backend = "scripted"

    def __init__(self, texts: dict[str, list[str]]) -> None:
        self.texts = texts

    def generate(self, prompts, *, k, **kwargs):
        from eapo.runtime.generate import Completion

        return [[Completion(text, len(text.split()), True) for text in self.texts[p][:k]] for p in prompts]


class ConstantReranker:
    """A stand-in reranker: 0.8 for every sample (no model)."""

    name = "reranker"
    label = "constant 0.8 (test)"
    extract = "advice"

    def __call__(self, prompts, completions, references, **kwargs):
        return [0.8] * len(completions)


def evaluate_with_keyword(output_dir: Path) -> dict:
    """Two prompts × two samples, hand-scored: Rouge-L (word) a = [1, 1], b = [6/7, 1]; format a = [1, 0],
    b = [1, 0]; keyword ("water") a = [1, 1], b = [0, 0]; reranker 0.8."""
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
        "reranker": ConstantReranker(),
        **build_scorers(["keyword", "format"]),
    }
    return evaluate(
        records,
        ["A", "B"],
        scorers,
        output_dir,
        model="scripted",
        data="hand",
        generator=ScriptedGenerator(texts),
        settings=SamplingSettings(k=2, max_new_tokens=16, n_resamples=200),
    )


def test_evaluation_fills_its_columns_avg_table_and_csv(keyword, tmp_path):
    assert avg_columns()["avg"] == ("rouge_l", "reranker", "rl_at_k", "rr_at_k", "keyword")
    assert avg_columns()["avg_keyword"] == ("keyword", "kw_at_k")
    assert list(strict_columns())[-1] == "keyword_strict"
    results = evaluate_with_keyword(tmp_path)
    m = results["metrics"]
    rouge_l = (1.0 + (6 / 7 + 1) / 2) / 2
    assert m["keyword"] == pytest.approx(0.5, abs=1e-12)  # per prompt: a 1, b 0
    assert m["kw_at_k"] == pytest.approx(0.5, abs=1e-12)
    assert m["keyword_strict"] == pytest.approx((0.5 + 0.0) / 2, abs=1e-12)  # a's second sample fails format
    assert m["avg"] == pytest.approx((rouge_l + 0.8 + 1.0 + 0.8 + 0.5) / 5, abs=1e-12)
    assert m["avg_keyword"] == pytest.approx(0.5, abs=1e-12)
    strict = ((0.5 + 3 / 7) / 2 + 0.4 + (1 + 6 / 7) / 2 + 0.8 + 0.25) / 5
    assert m["avg_strict"] == pytest.approx(strict, abs=1e-12)
    assert m["laaj"] is None and m["avg_laaj"] is None
    assert results["avg_of"]["avg_keyword"] == ["keyword", "kw_at_k"]
    assert results["labels"]["keyword"] == "keyword ('water' present)"
    assert results["unscored"]["keyword"] == 0 and "keyword" not in results["extra"]
    assert results["per_prompt"]["columns"]["keyword"] == [1.0, 0.0]

    markdown = (tmp_path / "results.md").read_text(encoding="utf-8")
    lines = markdown.splitlines()
    # its column in the main table; its own table (with a heading, so the main one has one too)
    assert "## Performance comparison" in lines and "## With the keyword" in lines
    assert "## With LLM-as-a-Judge" not in lines
    main = lines[lines.index("## Performance comparison") + 2]
    assert main == "| Model | Rouge-L | Reranker | RL@2 | RR@2 | Keyword | Avg |"
    own = lines[lines.index("## With the keyword") + 2 :][:3]
    assert own[0] == "| Model | Keyword | KW@2 | Avg |"
    assert own[2].startswith("| scripted | 0.500 [") and own[2].endswith("| 0.500 [0.000, 1.000] |")
    assert (
        "Rouge-L / Reranker / Keyword / LAAJ: mean over the k samples; RL@2 / RR@2 / KW@2: best of the k samples."
        in lines
    )
    assert (
        "With the keyword: Avg: mean of Keyword and KW@2 (a test's table); – when one of them was not measured."
        in lines
    )
    assert any(line.startswith("- Keyword: keyword ('water' present)") for line in lines)
    assert "Keyword 0/4" in markdown  # the unscored note, with its title
    header = (tmp_path / "results.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[header.index("keyword") : header.index("keyword") + 3] == [
        "keyword",
        "keyword_ci_low",
        "keyword_ci_high",
    ]
    assert "avg_keyword" in header and "keyword_strict" in header


def test_its_scorer_setting_is_a_flag_of_every_command_that_evaluates(keyword, tmp_path, monkeypatch):
    """The commands' options are generated from the registry when their modules are imported (after the
    plugins): built again now, eapo eval, sweep and study take --keyword, and it sets the option."""
    import typer
    from typer.testing import CliRunner

    import eapo.evaluation
    from eapo.commands import eval as eval_module
    from eapo.commands import options, study, sweep
    from eapo.evaluation import EvalSettings
    from eapo.evaluation.runner import eval_scorers

    settings = EvalSettings(scorers="keyword", scorer_settings={"keyword": "tea"})
    assert settings.cli_args()[-2:] == ["--keyword", "tea"]
    assert eval_scorers(settings, None, "", tmp_path)["keyword"].keyword == "tea"
    seen = []
    monkeypatch.setattr(
        eapo.evaluation, "run_eval", lambda settings, **_: seen.append(settings) or ({}, tmp_path)
    )
    (tmp_path / "results.md").write_text("", encoding="utf-8")
    for function in (eval_module.eval_command, sweep.sweep_command, study.study_command):
        app = typer.Typer()
        app.command()(options.with_scorer_settings(function.__wrapped__))
        (keyword_option,) = [p for p in typer.main.get_command(app).params if p.name == "keyword"]
        assert keyword_option.opts == ["--keyword"]
        assert keyword_option.help == (
            "The keyword an evaluation looks for. Default: the run's reward.options.keyword.keyword, else water "
            "(eapo study: study.scorer_settings.keyword)."
        )
        if function is eval_module.eval_command:
            result = CliRunner().invoke(app, ["--model", "tiny", "--keyword", "tea"])
            assert result.exit_code == 0, result.output
    assert seen[0].scorer_settings == {"keyword": "tea"}


def test_a_scorer_setting_has_one_owner(keyword):
    from eapo.rewards import EvalScorer, RewardComponent, ScorerSetting, register_reward

    clashing = RewardComponent(
        name="keyword2",
        build=keyword.KeywordReward,
        title="Keyword 2",
        evaluation=EvalScorer(settings=(ScorerSetting("keyword", "keyword", "Again."),)),
    )
    with pytest.raises(ValueError, match="'keyword2': scorer setting 'keyword' is 'keyword''s"):
        register_reward(clashing)
    assert "keyword2" not in REWARD_COMPONENTS


def write_run(run_dir: Path) -> Path:
    """A run directory: config.yaml, and a metrics.jsonl in which the keyword share rises 0 -> 0.5."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("algorithm: {method: grpo}\ntrain: {seed: 0}\n", encoding="utf-8")
    rows = [
        {
            "step": step,
            "entropy/rollout": 1.0,
            "reward/mean": 0.1 * step,
            "reward/format/mean": 1.0,
            "reward/keyword/mean": 0.1 * (step - 1),
            "completion/mean_length": 20.0,
        }
        for step in range(1, 7)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return run_dir


def test_the_plot_draws_its_registered_panel(keyword, tmp_path):
    run_dir = write_run(tmp_path / "run")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert panel_keys([rows]) == [
        ("entropy/rollout", "Entropy (rollout, nats/token)"),
        ("reward/mean", "Reward"),
        ("reward/format/mean", "Reward: format"),
        ("reward/keyword/mean", "Keyword share"),  # its registration's title, after the built-ins
        ("completion/mean_length", "Response length (tokens)"),
    ]
    figure = plot_runs([run_dir])
    titles = [axis.get_title() for axis in figure.axes if axis.get_visible()]
    assert titles[3] == "Keyword share"


def test_the_summary_shows_its_trend_and_column(keyword, tmp_path):
    run_dir = write_run(tmp_path / "run")
    evaluate_with_keyword(run_dir / "eval")
    summary = summarize_run(run_dir)
    # thirds of 6 steps: steps 1-2 (0.0, 0.1) and 5-6 (0.4, 0.5)
    assert summary["trends"]["reward/keyword/mean"] == {
        "label": "  keyword",
        "first": pytest.approx(0.05),
        "last": pytest.approx(0.45),
        "k": 2,
        "n": 6,
    }
    text = render_summary(summary)
    assert "    keyword" + " " * 8 + "0.050 -> 0.450  (+0.400)" in text.splitlines()
    header = next(line for line in text.splitlines() if line.startswith("| Model |"))
    assert header == (
        "| Model | Rouge-L | Reranker | RL@2 | RR@2 | Keyword | Avg | Avg (strict) | Format | Tokens | Truncated |"
    )
