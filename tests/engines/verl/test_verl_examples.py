"""The example scripts' arguments compose with verl's Hydra config into a run the eapo trainer accepts.

Training itself needs GPUs and vLLM; this checks everything before that: the overrides parse, verl's
``validate_config`` passes, the trainer is built (verl's real ``__init__``), and the paper's
hyperparameters are the ones that arrive.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl")

import verl  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

from eapo.engines.verl import EapoSettings  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "verl"


def script_args(script: str) -> list[str]:
    return script_args_with(script)


@pytest.mark.parametrize("dataset", ["rjua", "cmd"])
def test_example_composes_into_the_papers_setting(dataset):
    args = script_args(f"run_eapo_qwen3_8b_{dataset}.sh")
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=args)
    OmegaConf.resolve(config)
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )

    actor = config.actor_rollout_ref.actor
    assert config.data.train_files == f"data/verl/{dataset}/train.parquet"
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (32, 4)
    assert (config.data.max_prompt_length, config.data.max_response_length) == (2048, 2048)
    assert (config.trainer.total_epochs, config.trainer.n_gpus_per_node, config.trainer.nnodes) == (10, 4, 1)
    assert actor.optim.lr == 1e-6
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (True, 0.001, "low_var_kl")
    assert actor.loss_agg_mode == "seq-mean-token-mean"
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2)
    assert config.algorithm.use_kl_in_reward is False

    assert config.trainer.use_v1 and config.trainer.v1.trainer_mode == "eapo"
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    assert trainer.settings == EapoSettings(
        method="eapo",
        weights={"w0": 0.2, "w_min": 0.0, "w_max": 2.0, "w_neg": 1.0},
        split_by="mean",
        entropy_agg="token-mean",
    )

    reward_fn = get_custom_reward_fn(config)  # verl's loader: pkg:// path, reward_kwargs merged in
    assert reward_fn.args[0].__module__ == "eapo.engines.verl.reward"
    assert reward_fn.args[1] == {
        "options": {
            "llm_judge": {
                "base_url": "http://judge.test:8000/v1",
                "model": "judge",
                "api_key_env": "OPENAI_API_KEY",
            }
        }
    }


def compose_example(script: str, *arguments: str):
    """The script's arguments (``arguments`` passed to it), composed and validated as verl does."""
    args = script_args_with(script, *arguments)
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=args)
    OmegaConf.resolve(config)
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    return config


def script_args_with(script: str, *script_args_: str) -> list[str]:
    env = {
        **os.environ,
        "PRINT_ARGS": "1",
        "JUDGE_BASE_URL": "http://judge.test:8000/v1",
        "JUDGE_MODEL": "judge",
    }
    result = subprocess.run(
        ["bash", str(EXAMPLES / script), *script_args_],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    ("preset", "options"),
    [
        ("entropy_bonus", {"entropy_coeff": 0.01}),
        ("adaptive_entropy", {"entropy_coeff": 0.0, "calculate_entropy": True}),
        ("clip_higher", {"clip_ratio_high": 0.28}),
        ("clip_cov", {"policy_loss.loss_mode": "clip_cov", "policy_loss.clip_cov_ratio": 1e-3}),
        ("kl_cov", {"policy_loss.loss_mode": "kl_cov", "policy_loss.kl_cov_ratio": 2e-4}),
        ("top_entropy", {"calculate_entropy": True}),
        ("entropic", {"calculate_entropy": False, "policy_loss.loss_mode": "vanilla"}),
    ],
)
def test_entropy_control_example_composes(preset, options):
    extra = ["+algorithm.eapo.clip_cov_ratio=1e-3"] if preset == "clip_cov" else []
    config = compose_example("run_entropy_control_qwen3_8b.sh", preset, "rjua", *extra)
    assert config.algorithm.adv_estimator == "eapo_grpo"
    assert config.trainer.experiment_name == f"{preset}_qwen3_8b_rjua"
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    assert (trainer.settings.method, trainer.settings.scheme) == (preset, "grpo")
    actor = trainer.config.actor_rollout_ref.actor
    for option, value in options.items():
        assert OmegaConf.select(actor, option) == pytest.approx(value), option
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.optim.lr == 1e-6  # the paper's setting


def test_eapo_example_composes_with_clip_higher():
    config = compose_example("run_eapo_qwen3_8b_rjua.sh", "+algorithm.eapo.epsilon_high=0.28")
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    assert trainer.settings.method == "eapo" and trainer.settings.weights["w0"] == 0.2
    assert trainer.config.actor_rollout_ref.actor.clip_ratio_high == 0.28
    assert trainer.config.actor_rollout_ref.actor.clip_ratio_low == 0.2
