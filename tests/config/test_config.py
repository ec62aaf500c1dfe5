"""The typed configuration: presets, overrides and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eapo.config import ConfigError, RunConfig, dump_config, load_config, parse_overrides

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ["demo", "tiny", "paper_rjua", "paper_cmd"]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_and_round_trip(name, tmp_path):
    config = load_config(ROOT / "configs" / f"{name}.yaml")
    again = tmp_path / "again.yaml"
    again.write_text(dump_config(config))
    assert load_config(again) == config


def test_paper_presets_carry_the_papers_hyperparameters():
    for name in ("paper_rjua", "paper_cmd"):
        c = load_config(ROOT / "configs" / f"{name}.yaml")
        assert c.model.name_or_path == "Qwen/Qwen3-8B"
        assert (c.train.prompts_per_step, c.rollout.num_generations) == (32, 4)
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
        assert (
            c.rollout.backend == "vllm"
            and c.reward.weights["llm_judge"] > 0
            and c.algorithm.loss_type == "grpo"
        )


def test_defaults_are_the_papers():
    c = RunConfig()
    assert (c.algorithm.beta, c.algorithm.epsilon, c.algorithm.loss_type, c.rollout.num_generations) == (
        0.001,
        0.2,
        "grpo",
        4,
    )


@pytest.mark.parametrize("name", ["ddp", "zero2", "zero3"])
def test_accelerate_configs_parse(name):
    config = yaml.safe_load((ROOT / "configs" / "accelerate" / f"{name}.yaml").read_text())
    assert config["distributed_type"] in ("MULTI_GPU", "DEEPSPEED")
    if name.startswith("zero"):
        assert config["deepspeed_config"]["zero_stage"] == int(name[-1])


def test_overrides_are_typed_and_nested():
    assert parse_overrides(
        ["algorithm.w0=0.1", "train.max_steps=3", "data.limit=null", "rollout.vllm_compile=true"]
    ) == {
        "algorithm": {"w0": 0.1},
        "train": {"max_steps": 3},
        "data": {"limit": None},
        "rollout": {"vllm_compile": True},
    }
    c = load_config(ROOT / "configs" / "tiny.yaml", ["algorithm.w0=1", "reward.weights.format=0.5"])
    assert c.algorithm.w0 == 1.0 and isinstance(c.algorithm.w0, float)
    assert c.reward.weights == {"format": 0.5, "rouge_l": 0.8}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.method=ppo"],
            "algorithm.method='ppo' is invalid; valid: grpo, psr, nsr, w_reinforce, qae, eapo, eapo_pi",
        ),
        (["algorithm.w_plus=1"], "unknown key 'algorithm.w_plus' in section 'algorithm'; valid keys: method"),
        (["bogus.key=1"], "unknown key 'bogus' in the top level"),
        (["algorithm.method=grpo", "algorithm.w0=0.1"], "algorithm.w0 does not apply to method 'grpo'"),
        (["train.max_steps=abc"], "train.max_steps must be int"),
        (["rollout.num_generations=1"], "rollout.num_generations=1 is invalid; valid: an integer >= 2"),
        (["train.micro_batch_size=3"], "multiple of train.micro_batch_size=3"),
        (["algorithm.split_by=mode"], "algorithm.split_by='mode' is invalid; valid: mean, median"),
    ],
)
def test_bad_overrides_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_config(ROOT / "configs" / "tiny.yaml", overrides)
    assert message in str(error.value)
    assert "tiny.yaml" in str(error.value)


def test_malformed_override():
    with pytest.raises(ConfigError, match="'novalue' must look like section.key=value"):
        load_config(None, ["novalue"])


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_config(broken)


def test_grpo_config_has_the_papers_kl_term_by_default(tmp_path):
    """TRL 1.16 defaults use_bias_correction_kl=True (the k3 KL times the importance ratio); the paper's
    objective and verl's low_var_kl have no such factor."""
    from trl import GRPOConfig

    from eapo.engines.trl.args import grpo_args

    assert GRPOConfig.__dataclass_fields__["use_bias_correction_kl"].default is True  # TRL's, for the record
    assert RunConfig().algorithm.kl_bias_correction is False
    assert grpo_args(RunConfig().validate(), tmp_path).use_bias_correction_kl is False
    on = load_config(None, ["algorithm.kl_bias_correction=true"])
    assert grpo_args(on, tmp_path).use_bias_correction_kl is True


@pytest.mark.parametrize(
    ("mode", "correction", "trl_mode"),
    [
        ("token_truncate", True, "token_truncate"),
        ("token_mask", True, "token_mask"),
        ("sequence_truncate", True, "sequence_truncate"),
        ("sequence_mask", True, "sequence_mask"),
        ("none", False, "token_truncate"),
    ],
)
def test_vllm_importance_correction_maps_to_trls_fields(mode, correction, trl_mode, tmp_path):
    from eapo.engines.trl.args import grpo_args

    config = load_config(
        None, [f"rollout.vllm_importance_correction={mode}", "rollout.vllm_importance_cap=2.5"]
    )
    args = grpo_args(config, tmp_path)
    assert args.vllm_importance_sampling_correction is correction
    assert args.vllm_importance_sampling_mode == trl_mode
    assert (args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max) == (None, 2.5)


def test_defaults_of_the_issue_12_options(tmp_path):
    """TRL's own vLLM default is sequence_mask with a cap of 3; ours is explicit token truncation."""
    from trl import GRPOConfig

    from eapo.engines.trl.args import grpo_args

    assert GRPOConfig.__dataclass_fields__["vllm_importance_sampling_mode"].default == "sequence_mask"
    c = RunConfig()
    assert (c.rollout.vllm_importance_correction, c.rollout.vllm_importance_cap) == ("token_truncate", 3.0)
    assert grpo_args(c.validate(), tmp_path).vllm_importance_sampling_mode == "token_truncate"
    assert (c.algorithm.entropy_agg, c.reward.missing) == ("token-mean", "unscorable")
    assert (c.train.eval_steps, c.train.eval_limit, c.train.eval_split, c.train.eval_sampling) == (
        0,
        32,
        "dev",
        "greedy",
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "algorithm.entropy_agg=seq-mean",
            "algorithm.entropy_agg='seq-mean' is invalid; valid: token-mean, ",
        ),
        ("reward.missing=zero", "reward.missing='zero' is invalid; valid: unscorable, renormalize"),
        (
            "rollout.vllm_importance_correction=tis",
            "rollout.vllm_importance_correction='tis' is invalid; valid: ",
        ),
        (
            "rollout.vllm_importance_cap=1.0",
            "rollout.vllm_importance_cap=1.0 is invalid; valid: a number > 1",
        ),
        ("train.eval_sampling=beam", "train.eval_sampling='beam' is invalid; valid: greedy, sampled"),
        ("train.eval_limit=0", "train.eval_limit=0 is invalid; valid: an integer >= 1"),
        ("train.eval_steps=-1", "train.eval_steps=-1 is invalid; valid: an integer >= 0"),
    ],
)
def test_issue_12_options_are_validated(override, message):
    with pytest.raises(ConfigError) as error:
        load_config(ROOT / "configs" / "tiny.yaml", [override])
    assert message in str(error.value)


LINEAR = "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.lora.layers=2"], "model.lora.layers needs model.lora.target_modules as a list"),
        ([LINEAR, "model.lora.layers=0"], "model.lora.layers=0 is invalid; valid: an integer N >= 1"),
        (
            [LINEAR, "model.lora.layers=[1,-1]"],
            "model.lora.layers=[1, -1] is invalid; valid: an integer N >= 1 (the last N layers) or a list of layer indices >= 0",
        ),
        ([LINEAR, "model.lora.layers=[]"], "model.lora.layers=[] is invalid"),
    ],
)
def test_lora_layers_are_validated(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_config(ROOT / "configs" / "tiny.yaml", overrides)
    assert message in str(error.value)


def test_lora_layers_select_the_last_n_decoder_layers(tmp_path):
    from transformers import LlamaConfig

    from eapo.engines.trl.args import lora_config

    LlamaConfig(num_hidden_layers=6).save_pretrained(tmp_path)
    base = ["model.lora.enabled=true", LINEAR]
    last_two = lora_config(
        load_config(ROOT / "configs" / "tiny.yaml", [*base, "model.lora.layers=2"]), str(tmp_path)
    )
    assert last_two.layers_to_transform == [4, 5]
    assert set(last_two.target_modules) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    listed = lora_config(
        load_config(ROOT / "configs" / "tiny.yaml", [*base, "model.lora.layers=[0,3]"]), str(tmp_path)
    )
    assert listed.layers_to_transform == [0, 3]
    assert (
        lora_config(load_config(ROOT / "configs" / "tiny.yaml", base), str(tmp_path)).layers_to_transform
        is None
    )
    with pytest.raises(ConfigError, match="the model has 6 decoder layers; use 1 to 6"):
        lora_config(
            load_config(ROOT / "configs" / "tiny.yaml", [*base, "model.lora.layers=7"]), str(tmp_path)
        )


def test_reward_options_give_the_format_check_the_response_prefix():
    from eapo.config import reward_options

    tiny = ROOT / "configs" / "tiny.yaml"
    assert "prefix" not in reward_options(load_config(tiny)).get("format", {})
    prefixed = reward_options(load_config(tiny, ["data.response_prefix=<think>"]))
    assert prefixed["format"]["prefix"] == "<think>"
    # an explicit prefix wins, and the config's own mapping is not modified
    config = load_config(tiny, ["data.response_prefix=<think>", "reward.options.format.prefix=<t>"])
    assert reward_options(config)["format"]["prefix"] == "<t>"
    config = load_config(tiny, ["data.response_prefix=<think>"])
    reward_options(config)
    assert "prefix" not in config.reward.options.get("format", {})


def test_judge_settings_are_typed_and_validated(tmp_path):
    c = load_config(
        ROOT / "configs" / "tiny.yaml",
        [
            "reward.judge.api_key_env=null",
            "reward.judge.structured_output=json_object",
            "reward.judge.max_retries=0",
        ],
    )
    assert (c.reward.judge.api_key_env, c.reward.judge.structured_output, c.reward.judge.max_retries) == (
        None,
        "json_object",
        0,
    )
    defaults = RunConfig().reward.judge
    assert (defaults.structured_output, defaults.max_retries, defaults.cache_dir) == (
        "auto",
        4,
        "judge_cache",
    )
    with pytest.raises(
        ConfigError, match="reward.judge.structured_output='grammar' is invalid; valid: auto, json_schema"
    ):
        load_config(ROOT / "configs" / "tiny.yaml", ["reward.judge.structured_output=grammar"])
    with pytest.raises(ConfigError, match=r"reward.judge.max_retries=-1 is invalid; valid: an integer >= 0"):
        load_config(ROOT / "configs" / "tiny.yaml", ["reward.judge.max_retries=-1"])
