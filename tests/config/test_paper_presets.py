"""The presets behind the paper's tables: the cross-model preset is paper_rjua.yaml on another
backbone, and every paper preset scores format, Rouge-L and the reranker as the paper does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eapo.config import dump_config, load_config
from eapo.rewards import make_reward

ROOT = Path(__file__).resolve().parents[2]
PAPER_PRESETS = ["paper_rjua", "paper_cmd", "paper_qwen25_7b_rjua"]


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_load_round_trip_and_ship_in_the_package(name, tmp_path):
    from eapo.config import packaged_config

    config = load_config(ROOT / "configs" / f"{name}.yaml")
    again = tmp_path / "again.yaml"
    again.write_text(dump_config(config))
    assert load_config(again) == config
    assert packaged_config(name).read_text() == (ROOT / "configs" / f"{name}.yaml").read_text()


def test_the_cross_model_preset_is_paper_rjua_on_qwen25_7b_instruct():
    rjua = yaml.safe_load(dump_config(load_config(ROOT / "configs" / "paper_rjua.yaml")))
    qwen = yaml.safe_load(dump_config(load_config(ROOT / "configs" / "paper_qwen25_7b_rjua.yaml")))
    assert qwen["model"]["name_or_path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert rjua["model"]["name_or_path"] == "Qwen/Qwen3-8B"
    # everything else — data, rollout, reward, algorithm, train — is the Qwen3-8B RJUA setting
    qwen["model"]["name_or_path"] = rjua["model"]["name_or_path"]
    assert qwen == rjua
    c = load_config(ROOT / "configs" / "paper_qwen25_7b_rjua.yaml")
    assert c.data.name == "rjua" and (c.train.prompts_per_step, c.rollout.num_generations) == (32, 4)
    assert (c.data.max_prompt_tokens, c.rollout.max_completion_tokens) == (2048, 2048)
    assert (c.train.num_epochs, c.train.learning_rate, c.algorithm.beta, c.algorithm.epsilon) == (
        10,
        1e-6,
        0.001,
        0.2,
    )
    assert (c.algorithm.method, c.algorithm.w0, c.algorithm.w_min, c.algorithm.w_max) == (
        "eapo",
        0.2,
        0.0,
        2.0,
    )


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_use_the_papers_format_check_and_name_the_scored_text(name):
    options = load_config(ROOT / "configs" / f"{name}.yaml").reward.options
    assert options["format"] == {"strict": False}
    assert options["rouge_l"]["extract"] == "advice" and options["reranker"]["extract"] == "advice"
    fmt = make_reward("format", **options["format"])
    # tags present, in order, non-empty: a polite sentence around them does not zero the reward
    assert fmt(None, ["Sure. <think>reason</think> Answer: <advice>rest</advice> Hope this helps."]) == [1.0]
    assert fmt(None, ["<advice>rest</advice><think>reason</think>"]) == [0.0]


# Options that change the loss or the advantages: a reader of a paper preset must see the paper's
# objective in the file itself, not inherit a library default (TRL's KL and vLLM defaults differ).
LOSS_AFFECTING = {
    "algorithm": {
        "beta": 0.001,
        "epsilon": 0.2,
        "loss_type": "grpo",
        "kl_bias_correction": False,
        "entropy_agg": "token-mean",
        "scale_rewards": "group",
        "split_by": "mean",
        "num_iterations": 1,
    },
    "rollout": {"vllm_importance_correction": "token_truncate", "num_generations": 4, "temperature": 1.0},
    "reward": {"missing": "unscorable"},
}


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_spell_out_every_loss_affecting_option(name):
    tree = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    for section, expected in LOSS_AFFECTING.items():
        for key, value in expected.items():
            assert key in tree[section], f"{name}.yaml does not set {section}.{key}"
            assert tree[section][key] == value, f"{name}.yaml: {section}.{key}={tree[section][key]!r}"


def test_the_paper_presets_objective_reaches_trl_as_written(tmp_path):
    from eapo.engines.trl.args import grpo_args

    config = load_config(ROOT / "configs" / "paper_rjua.yaml", ["rollout.backend=auto"])
    args = grpo_args(config, tmp_path)
    assert args.use_bias_correction_kl is False and args.loss_type == "grpo"
    assert (args.beta, args.epsilon, args.scale_rewards, args.num_iterations) == (0.001, 0.2, "group", 1)
