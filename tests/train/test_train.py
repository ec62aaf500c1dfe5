"""End-to-end training on configs/tiny.yaml (a tiny random Llama built on the fly).

Each run takes a few seconds on a 2-core CPU; values are asserted, not just "it ran".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eapo.config import ConfigError, load_config
from eapo.core import make_weighting
from eapo.run_dir import REQUIRED_METRIC_KEYS, read_metrics
from eapo.train import RunError, run

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
FAST = ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false"]

EXPECTED_WEIGHTS = {"grpo": (1.0, 1.0), "psr": (1.0, 0.0), "nsr": (0.0, 1.0), "w_reinforce": (0.1, 1.0)}


def tiny(*overrides: str):
    return load_config(TINY, [*FAST, *overrides])


@pytest.mark.parametrize("method", ["grpo", "psr", "nsr", "w_reinforce", "eapo"])
def test_three_steps_of_each_method(method, tmp_path):
    run_dir = run(tiny(f"algorithm.method={method}", "train.save_steps=0"), tmp_path / method)
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        missing = [key for key in REQUIRED_METRIC_KEYS if key not in row]
        assert not missing, f"metrics line lacks {missing}"
        assert "reward/rouge_l/mean" in row and "reward/format/mean" in row
        assert 0.0 <= row["eapo/frac_positive"] <= 1.0
        assert row["entropy/rollout"] > 0 and math.isfinite(row["loss"])
    if method in EXPECTED_WEIGHTS:
        assert {(row["eapo/w_pos"], row["eapo/w_neg"]) for row in rows} == {EXPECTED_WEIGHTS[method]}
    # the rollout entropy is the token-weighted mean over the step's completions: with one policy
    # update per generation it equals TRL's entropy in the loss pass (same weights, same tokens)
    for row in rows:
        assert row["entropy/rollout"] == pytest.approx(row["entropy/train"], rel=1e-4)
    assert (run_dir / "final" / "config.json").exists()
    assert (run_dir / "config.yaml").exists()


def test_eapo_weight_follows_entropy_ratio(tmp_path):
    config = tiny("algorithm.w0=0.5", "algorithm.w_max=0.5004", "train.save_steps=0", "train.max_steps=4")
    rows = read_metrics(run(config, tmp_path / "run"))
    h0 = rows[0]["entropy/rollout"]
    for row in rows:
        assert row["eapo/H0"] == pytest.approx(h0, rel=1e-12)
        expected = min(max(0.5 * row["entropy/rollout"] / h0, 0.0), 0.5004)
        assert row["eapo/w_pos"] == pytest.approx(expected, rel=1e-9)
        assert row["eapo/w_neg"] == 1.0


def _step_gradients(
    method: str, tmp_path: Path, reuse_loss_pass: bool = True
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """Gradient of the first step's loss (beta=0) for one method, on identical rollouts."""
    from transformers.trainer_callback import PrinterCallback

    from eapo.models import load_tokenizer, resolve_model
    from eapo.train import build_dataset, build_reward, grpo_args, reward_function
    from eapo.trainer import EAPOTrainer

    config = tiny(f"algorithm.method={method}", "algorithm.beta=0.0", "train.save_steps=0")
    path = resolve_model("tiny")
    tokenizer = load_tokenizer(path)
    dataset = build_dataset(config, tokenizer)
    trainer = EAPOTrainer(
        model=path,
        reward_funcs=[reward_function(build_reward(config))],
        args=grpo_args(config, tmp_path / method),
        train_dataset=dataset,
        processing_class=tokenizer,
        weighting=make_weighting(method),
        reuse_loss_pass=reuse_loss_pass,
    )
    assert trainer.entropy_source() == ("loss_pass" if reuse_loss_pass else "extra_forward")
    trainer.remove_callback(PrinterCallback)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # normally set by Trainer's training loop
    rows = [dataset[i] for i in range(2) for _ in range(config.rollout.num_generations)]
    torch.manual_seed(1234)
    inputs = trainer._generate_and_score_completions(rows)
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, inputs).backward()  # the loss pass may apply the weights
    assert "eapo_positive" not in inputs
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    rewards, _ = trainer._total_rewards()
    return grads, inputs["advantages"].detach().clone(), rewards


def test_psr_and_nsr_split_the_grpo_gradient_by_polarity(tmp_path):
    grpo, adv_grpo, rewards = _step_gradients("grpo", tmp_path)
    psr, adv_psr, _ = _step_gradients("psr", tmp_path)
    nsr, adv_nsr, _ = _step_gradients("nsr", tmp_path)
    positive = (rewards.view(-1, 4) >= rewards.view(-1, 4).mean(1, keepdim=True)).view(-1)
    assert 0 < int(positive.sum()) < positive.numel(), "the test needs both polarities in the batch"
    # NSR moves parameters only through negative samples, PSR only through positive ones
    assert torch.equal(adv_nsr[positive], torch.zeros_like(adv_nsr[positive]))
    assert torch.equal(adv_nsr[~positive], adv_grpo[~positive])
    assert torch.equal(adv_psr[~positive], torch.zeros_like(adv_psr[~positive]))
    assert torch.equal(adv_psr[positive], adv_grpo[positive])
    # and the loss is linear in the advantages: g_GRPO = g_PSR + g_NSR, with both parts non-zero
    for name, g in grpo.items():
        torch.testing.assert_close(psr[name] + nsr[name], g, rtol=1e-4, atol=1e-6)
    assert sum(float(g.abs().sum()) for g in nsr.values()) > 0
    assert sum(float(g.abs().sum()) for g in psr.values()) > 0


def test_entropy_from_the_loss_pass_equals_the_extra_forward(tmp_path):
    grads_reused, adv_reused, _ = _step_gradients("eapo", tmp_path / "a", reuse_loss_pass=True)
    grads_extra, adv_extra, _ = _step_gradients("eapo", tmp_path / "b", reuse_loss_pass=False)
    torch.testing.assert_close(adv_reused, adv_extra, rtol=1e-5, atol=1e-7)
    for name, g in grads_extra.items():
        torch.testing.assert_close(grads_reused[name], g, rtol=1e-4, atol=1e-7)


def test_all_positive_batch_leaves_nsr_parameters_unchanged(tmp_path):
    """A batch whose rollouts are all positive (equal rewards in every group) gives NSR no signal."""
    config = tiny(
        "algorithm.method=nsr",
        "algorithm.beta=0.0",
        "train.max_steps=1",
        "train.save_steps=0",
        "reward.weights.rouge_l=0",
    )
    from transformers import AutoModelForCausalLM

    from eapo.models import resolve_model

    before = AutoModelForCausalLM.from_pretrained(resolve_model("tiny")).state_dict()
    run_dir = run(config, tmp_path / "run")
    row = read_metrics(run_dir)[0]
    assert row["eapo/frac_positive"] == 1.0  # the random model never writes the tags: every reward is 0
    after = AutoModelForCausalLM.from_pretrained(run_dir / "final").state_dict()
    for name, tensor in before.items():
        assert torch.equal(tensor, after[name]), name


_KILL_AT_STEP_2 = """
import os, sys
from transformers import TrainerCallback
from eapo.config import load_config
from eapo.train import run

class KillAfterCheckpoint(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 2:
            os._exit(137)  # a hard kill: no cleanup, no atexit, no flush beyond what was written

run(load_config(sys.argv[1], sys.argv[3:]), sys.argv[2], callbacks=[KillAfterCheckpoint()])
"""


def test_kill_after_step_2_and_resume_matches_uninterrupted(tmp_path):
    overrides = [*FAST, "train.save_steps=1"]
    reference = read_metrics(run(load_config(TINY, overrides), tmp_path / "straight"))

    killed = tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_AT_STEP_2, str(TINY), str(killed), *overrides],
        env=env,
        capture_output=True,
    )
    assert proc.returncode == 137, proc.stderr.decode()[-2000:]
    assert [row["step"] for row in read_metrics(killed)] == [1, 2]
    assert not (killed / "final").exists()

    with pytest.raises(RunError, match="--resume"):
        run(load_config(TINY, overrides), killed)
    resumed = read_metrics(run(load_config(TINY, overrides), killed, resume=True))

    assert [row["step"] for row in resumed] == [1, 2, 3]
    for key in ("eapo/H0", "eapo/w_pos", "entropy/rollout"):
        assert resumed[2][key] == pytest.approx(reference[2][key], rel=1e-6), key
    state = json.loads((killed / "checkpoint-3" / "eapo_state.json").read_text())
    assert state["weighting"]["adaptive"]["anchor_count"] == 1
    assert state["weighting"]["adaptive"]["anchor_sum"] == pytest.approx(
        reference[0]["entropy/rollout"], rel=1e-6
    )


def test_metrics_lines_are_valid_json_one_per_step(tmp_path):
    run_dir = run(tiny("train.save_steps=0", "train.max_steps=2"), tmp_path / "run")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_bad_input_errors(tmp_path):
    with pytest.raises(ConfigError, match="valid: grpo, psr, nsr, w_reinforce, eapo"):
        tiny("algorithm.method=ppo")
    with pytest.raises(ConfigError, match="unknown key 'algorithm.w_plus'.*valid keys"):
        tiny("algorithm.w_plus=1")
    with pytest.raises(ConfigError, match="does not apply to method 'eapo'"):
        tiny("algorithm.w_pos=0.5")
    with pytest.raises(RunError, match="fewer than one step"):
        run(tiny("data.limit=1", "train.prompts_per_step=2"), tmp_path / "small")
    with pytest.raises(RunError, match="cannot be loaded"):
        run(tiny("model.name_or_path=/nonexistent/model"), tmp_path / "nomodel")
    with pytest.raises(RunError, match="judge .* cannot be reached"):
        run(
            tiny(
                "reward.weights.llm_judge=0.5",
                "reward.judge.base_url=http://127.0.0.1:9/v1",
                "reward.judge.model=m",
            ),
            tmp_path / "nojudge",
        )


def test_two_iterations_per_generation_take_entropy_from_trls_old_logp_pass(tmp_path):
    """μ = 2: TRL makes an old-log-prob pass, which gives H_t; the reuse step carries the values forward."""
    config = tiny("algorithm.num_iterations=2", "train.max_steps=4", "train.save_steps=0")
    rows = read_metrics(run(config, tmp_path / "mu2"))
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["rollout/fresh"] for row in rows] == [True, False, True, False]
    for fresh, reused in ((rows[0], rows[1]), (rows[2], rows[3])):
        for key in ("entropy/rollout", "eapo/w_pos", "eapo/H0", "reward/mean"):
            assert reused[key] == fresh[key]
        # first iteration on a generation: the loss pass sees the parameters that generated it
        assert fresh["entropy/rollout"] == pytest.approx(fresh["entropy/train"], rel=1e-4)
    h0 = rows[0]["entropy/rollout"]
    assert rows[2]["eapo/w_pos"] == pytest.approx(min(0.2 * rows[2]["entropy/rollout"] / h0, 2.0), rel=1e-9)
    assert rows[1]["loss"] != rows[0]["loss"]  # the second iteration is a real update


@pytest.mark.parametrize(
    ("overrides", "source"),
    [
        ([], "loss_pass"),  # one micro-batch holds the step
        (["train.micro_batch_size=4"], "extra_forward"),  # gradient accumulation over 2 micro-batches
        (["algorithm.num_iterations=2"], "old_logps"),  # TRL computes old log-probs itself
    ],
)
def test_entropy_source_follows_the_batch_layout(overrides, source, tmp_path):
    from eapo.models import load_tokenizer, resolve_model
    from eapo.train import build_dataset, build_reward, grpo_args, reward_function
    from eapo.trainer import EAPOTrainer

    config = tiny(*overrides)
    path = resolve_model("tiny")
    tokenizer = load_tokenizer(path)
    trainer = EAPOTrainer(
        model=path,
        reward_funcs=[reward_function(build_reward(config))],
        args=grpo_args(config, tmp_path),
        train_dataset=build_dataset(config, tokenizer),
        processing_class=tokenizer,
        weighting=make_weighting("eapo"),
    )
    assert trainer.entropy_source() == source


def test_gradient_accumulation_run_logs_the_formula_weights(tmp_path):
    rows = read_metrics(run(tiny("train.micro_batch_size=4", "train.save_steps=0"), tmp_path / "accum"))
    h0 = rows[0]["entropy/rollout"]
    assert [row["rollout/fresh"] for row in rows] == [True, True, True]
    for row in rows:
        assert row["eapo/w_pos"] == pytest.approx(min(0.2 * row["entropy/rollout"] / h0, 2.0), rel=1e-9)
