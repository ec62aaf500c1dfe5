"""End-to-end training on configs/tiny.yaml (a tiny random Llama built on the fly).

Each run takes a few seconds on a 2-core CPU; values are asserted, not just "it ran".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from eapo.config import ConfigError, load_config
from eapo.core import make_weighting
from eapo.core.step import polarity_split, split_metrics
from eapo.run_dir import REQUIRED_METRIC_KEYS, read_metrics, read_rollouts
from eapo.train import RunError, run

ROOT = Path(__file__).resolve().parents[1]
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

    from eapo.engines.trl.args import grpo_args, reward_function
    from eapo.engines.trl.trainer import EAPOTrainer
    from eapo.runtime.models import load_tokenizer, resolve_model
    from eapo.train import build_dataset, build_reward

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
    assert trainer.entropy_source() is None  # known once a step has shown which pass TRL made
    trainer.remove_callback(PrinterCallback)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # normally set by Trainer's training loop
    rows = [dataset[i] for i in range(2) for _ in range(config.rollout.num_generations)]
    torch.manual_seed(1234)
    inputs = trainer._generate_and_score_completions(rows)
    assert trainer.entropy_source() == ("loss_pass" if reuse_loss_pass else "extra_forward")
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, inputs).backward()  # the loss pass may apply the weights
    assert "eapo_row" not in inputs
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

    from eapo.runtime.models import resolve_model

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


@pytest.mark.parametrize("method", ["eapo", "eapo_pi"])
def test_kill_after_step_2_and_resume_matches_uninterrupted(method, tmp_path):
    """SIGKILL after step 2, then --resume: H_0, w+ and (eapo_pi) the integral continue as uninterrupted."""
    overrides = [*FAST, "train.save_steps=1", f"algorithm.method={method}", "logging.rollouts=1"]
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
    assert [row["step"] for row in read_rollouts(killed)] == [1] * 8 + [2] * 8
    assert not (killed / "final").exists()

    with pytest.raises(RunError, match="--resume"):
        run(load_config(TINY, overrides), killed)
    resumed = read_metrics(run(load_config(TINY, overrides), killed, resume=True))

    assert [row["step"] for row in resumed] == [1, 2, 3]
    # rollouts.jsonl: each step once, no gap, and the resumed step's rollouts are the uninterrupted run's
    rollouts, straight = read_rollouts(killed), read_rollouts(tmp_path / "straight")
    assert (
        [row["step"] for row in rollouts] == [row["step"] for row in straight] == [1] * 8 + [2] * 8 + [3] * 8
    )
    assert [row["completion"] for row in rollouts] == [row["completion"] for row in straight]
    for mine, theirs in zip(rollouts, straight, strict=True):
        assert mine["advantage"] == pytest.approx(theirs["advantage"], rel=1e-5, abs=1e-7)
    keys = ("eapo/H0", "eapo/w_pos", "entropy/rollout") + (("eapo/integral",) if method == "eapo_pi" else ())
    for key in keys:
        assert resumed[2][key] == pytest.approx(reference[2][key], rel=1e-6, abs=1e-9), key
    state = json.loads((killed / "checkpoint-3" / "eapo_state.json").read_text())
    assert state["weighting"]["anchor_count"] == 1
    assert state["weighting"]["anchor_sum"] == pytest.approx(reference[0]["entropy/rollout"], rel=1e-6)


def test_metrics_lines_are_valid_json_one_per_step(tmp_path):
    run_dir = run(tiny("train.save_steps=0", "train.max_steps=2"), tmp_path / "run")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_bad_input_errors(tmp_path):
    with pytest.raises(ConfigError, match="valid: grpo, psr, nsr, w_reinforce, qae, eapo, eapo_pi"):
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
        # LoRA with β > 0: TRL's first policy forward is the reference pass (adapter off), not kept
        (["model.lora.enabled=true", "algorithm.beta=0.04"], "loss_pass"),
    ],
)
def test_entropy_source_follows_the_batch_layout(overrides, source, tmp_path):
    from eapo.engines.trl.args import grpo_args, lora_config, reward_function
    from eapo.engines.trl.trainer import EAPOTrainer
    from eapo.runtime.models import load_tokenizer, resolve_model
    from eapo.train import build_dataset, build_reward

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
        peft_config=lora_config(config, path),
    )
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(2) for _ in range(config.rollout.num_generations)]
    output = trainer._generate_and_score_completions(rows)
    # seen, not predicted: "old_logps" exactly when TRL's output carries its old-log-prob pass
    assert (output.get("old_per_token_logps") is not None) == (source == "old_logps")
    assert trainer.entropy_source() == source


def test_gradient_accumulation_run_logs_the_formula_weights(tmp_path):
    rows = read_metrics(run(tiny("train.micro_batch_size=4", "train.save_steps=0"), tmp_path / "accum"))
    h0 = rows[0]["entropy/rollout"]
    assert [row["rollout/fresh"] for row in rows] == [True, True, True]
    for row in rows:
        assert row["eapo/w_pos"] == pytest.approx(min(0.2 * row["entropy/rollout"] / h0, 2.0), rel=1e-9)


# --------------------------------------------------------------------------------------------
# Issue 12: the paper's KL term, vLLM importance correction, one H_t, unscorable rollouts, validation
# --------------------------------------------------------------------------------------------


def _trainer(config, tmp_path: Path, reward=None, **kwargs):
    """An EAPOTrainer for ``config`` as run() builds it (no training), in train mode."""
    from transformers.trainer_callback import PrinterCallback

    from eapo.engines.trl.args import grpo_args, reward_function
    from eapo.engines.trl.trainer import EAPOTrainer
    from eapo.runtime.models import load_tokenizer, resolve_model
    from eapo.train import build_dataset, build_reward

    path = resolve_model(config.model.name_or_path)
    tokenizer = load_tokenizer(path)
    dataset = build_dataset(config, tokenizer)
    trainer = EAPOTrainer(
        model=path,
        reward_funcs=[reward_function(reward if reward is not None else build_reward(config))],
        args=grpo_args(config, tmp_path),
        train_dataset=dataset,
        processing_class=tokenizer,
        **kwargs,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # normally set by Trainer's training loop
    return trainer, dataset


def _rows(dataset, prompts: int = 2, generations: int = 4):
    return [dataset[i] for i in range(prompts) for _ in range(generations)]


@pytest.mark.parametrize("bias_correction", [False, True])
def test_kl_term_is_the_papers_k3_unless_bias_correction_is_asked_for(bias_correction, tmp_path):
    """TRL's loss gradient equals the paper's objective from eapo.core (PPO-clip + β·k3, 1/|y_i|) with
    the default kl_bias_correction=false; TRL's own default (the KL times the importance ratio,
    differentiable even where it is 1) gives another gradient."""
    from eapo.core import aggregate_loss, kl_penalty, ppo_clip_per_token

    beta = 0.5
    flag = str(bias_correction).lower()
    config = tiny("algorithm.method=grpo", f"algorithm.beta={beta}", f"algorithm.kl_bias_correction={flag}")
    trainer, dataset = _trainer(config, tmp_path)
    assert trainer.args.use_bias_correction_kl is bias_correction
    with torch.no_grad():  # move the policy off the frozen reference: a zero KL has a zero gradient
        generator = torch.Generator().manual_seed(0)
        for parameter in trainer.model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    torch.manual_seed(1234)
    inputs = trainer._generate_and_score_completions(_rows(dataset))
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, inputs).backward()
    trl = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    trainer.model.zero_grad()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    logp, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attention, inputs["completion_ids"].size(1)
    )
    mask = inputs["completion_mask"]
    kl = kl_penalty(logp, inputs["ref_per_token_logps"], kind="k3")  # [B, T]
    assert float(aggregate_loss(kl.detach(), mask)) > 1e-3, "the test needs a non-zero KL"
    surrogate = aggregate_loss(
        ppo_clip_per_token(logp, logp.detach(), inputs["advantages"], clip_low=0.2, clip_high=0.2), mask
    )
    (surrogate + beta * aggregate_loss(kl, mask, "seq-mean-token-mean")).backward()
    paper = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    difference = math.sqrt(sum(float((trl[n] - paper[n]).pow(2).sum()) for n in paper))
    size = math.sqrt(sum(float(paper[n].pow(2).sum()) for n in paper))
    if bias_correction:
        assert difference > 1e-2 * size  # the extra β·k3·∇log π term
    else:
        for name, grad in paper.items():
            torch.testing.assert_close(trl[name], grad, rtol=1e-4, atol=1e-6)


def test_importance_correction_fractions_are_logged(tmp_path):
    """The vllm_is/* metrics on a hand-built rollout batch (vLLM itself needs a GPU)."""
    config = tiny("rollout.vllm_importance_correction=token_mask", "rollout.vllm_importance_cap=3.0")
    trainer, _ = _trainer(config, tmp_path)
    assert (trainer.vllm_importance_sampling_correction, trainer.vllm_importance_sampling_mode) == (
        True,
        "token_mask",
    )
    ln = math.log
    # token ratios π_old / π_vllm: row 0 [2, 4 (> 3: zeroed)], row 1 [1, pad], row 2 [0.5, 8 (zeroed)]
    old = torch.tensor([[ln(2.0), ln(4.0)], [0.0, 0.0], [ln(0.5), ln(8.0)]])
    output = {
        "old_per_token_logps": old,
        "sampling_per_token_logps": torch.zeros(3, 2),
        "completion_mask": torch.tensor([[1, 1], [1, 0], [1, 1]]),
        "importance_sampling_ratio": torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.5, 0.0]]),  # what TRL applied
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # TRL's weights agree: no warning
        trainer._log_importance_correction(output)
    metrics = trainer._metrics["train"]
    assert metrics["vllm_is/token_frac"] == [pytest.approx(2 / 5)]  # 2 of 5 completion tokens
    assert metrics["vllm_is/row_frac"] == [pytest.approx(2 / 3)]  # rows 0 and 2
    output["importance_sampling_ratio"] = torch.ones(3, 2)
    with pytest.warns(UserWarning, match="differ from TRL's importance_sampling_ratio"):
        trainer._log_importance_correction(output)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_trl_path_gives_the_shared_batch_its_hand_derived_entropy(agg, tmp_path):
    """The same batch and number as tests/engines/verl/test_verl_trainer.py: one H_t on both engines."""
    from eapo.testing import entropy_batch

    trainer, _ = _trainer(tiny(f"algorithm.entropy_agg={agg}"), tmp_path)
    assert trainer.entropy_agg == agg
    assert trainer._rollout_entropy(*entropy_batch.padded()) == pytest.approx(
        entropy_batch.H_T[agg], rel=1e-12
    )


class FixedScores:
    """A scorer that returns the shared step batch's rewards (None where it is NaN: unscorable)."""

    name = "fixed"
    label = "fixed test scorer"

    def __call__(self, prompts, completions, references, **kwargs):
        from eapo.testing import entropy_batch

        return [None if value != value else value for value in entropy_batch.STEP_SCORES]


@pytest.mark.parametrize("reuse_loss_pass", [True, False])
def test_trl_path_gives_the_shared_step_its_hand_derived_decision(reuse_loss_pass, tmp_path, monkeypatch):
    """The whole step on the batch of eapo.testing.entropy_batch (NaN rewards, groups with three scored
    rollouts of four), as tests/engines/verl/test_verl_trainer.py runs it through verl: same H_t,
    weights, advantages (core's group std + 1e-6, as verl's), metrics and state."""
    from eapo.core import rollout_entropy
    from eapo.engines.trl.trainer import EAPOTrainer
    from eapo.rewards import CompositeReward
    from eapo.testing import entropy_batch

    config = tiny("algorithm.method=eapo", "algorithm.beta=0.0", "reward.missing=unscorable")
    composite = CompositeReward(
        {"fixed": 1.0}, {"fixed": FixedScores()}, missing="unscorable", parallel=False
    )
    trainer, dataset = _trainer(config, tmp_path, reward=composite, reuse_loss_pass=reuse_loss_pass)
    step = {"t": 0}

    def shared_entropy(self, entropies, mask):  # the shared batch's per-token entropies at this step
        rows = entropy_batch.step_rows(step["t"])
        values = torch.tensor([[*row, *[7.0] * (3 - len(row))] for row in rows])
        return rollout_entropy(
            values, (torch.arange(3) < torch.tensor([len(r) for r in rows])[:, None]).float()
        )

    monkeypatch.setattr(EAPOTrainer, "_rollout_entropy", shared_entropy)
    for t in range(2):
        step["t"] = t
        torch.manual_seed(3 + t)
        inputs = trainer._generate_and_score_completions(_rows(dataset))
        trainer.compute_loss(trainer.model, inputs)
        expected = entropy_batch.step_expected(t, eps=1e-6)
        torch.testing.assert_close(
            inputs["advantages"].to(torch.float64),
            torch.tensor(expected["advantages"], dtype=torch.float64),
            rtol=1e-5,
            atol=1e-6,
        )
        for key, value in expected["metrics"].items():
            assert trainer._metrics["train"][key][-1] == pytest.approx(value, rel=1e-6), key
    state = trainer.eapo_state()
    assert json.loads(json.dumps(state)) == _approx_state(expected["state"])


def _approx_state(state):
    if isinstance(state, dict):
        return {key: _approx_state(value) for key, value in state.items()}
    return pytest.approx(state, rel=1e-6) if isinstance(state, float) else state


@pytest.mark.parametrize("reuse_loss_pass", [True, False])
def test_seq_mean_entropy_of_a_generated_step(reuse_loss_pass, tmp_path):
    from eapo.core import rollout_entropy

    config = tiny("algorithm.entropy_agg=seq-mean-token-mean", "algorithm.beta=0.0")
    trainer, dataset = _trainer(config, tmp_path, reuse_loss_pass=reuse_loss_pass)
    torch.manual_seed(7)
    inputs = trainer._generate_and_score_completions(_rows(dataset))
    trainer.compute_loss(trainer.model, inputs)
    (logged,) = trainer._metrics["train"]["entropy/rollout"]
    with torch.no_grad():
        entropies = trainer._policy_entropies(inputs)
    expected = rollout_entropy(entropies, inputs["completion_mask"], agg="seq-mean-token-mean")
    assert logged == pytest.approx(expected, rel=1e-5)


class FirstFails:
    """A scorer that cannot score the first rollout of every call (a judge call that failed)."""

    name = "flaky"
    label = "flaky test scorer"

    def __call__(self, prompts, completions, references, **kwargs):
        return [None] + [0.25 * (index % 4) for index in range(1, len(completions))]


@pytest.mark.parametrize("missing", ["unscorable", "renormalize"])
def test_a_rollout_the_judge_could_not_score_gets_no_advantage(missing, tmp_path):
    """reward.missing=unscorable: the rollout's reward is NaN, its advantage 0, and its group's mean
    and std come from the other three; renormalize scores it on format alone (another scale)."""
    from eapo.rewards import CompositeReward, make_reward

    config = tiny("algorithm.method=grpo", "algorithm.beta=0.0", f"reward.missing={missing}")
    composite = CompositeReward(
        {"format": 0.5, "flaky": 0.5},
        {"format": make_reward("format"), "flaky": FirstFails()},
        missing=missing,
        parallel=False,
    )
    trainer, dataset = _trainer(config, tmp_path, reward=composite)
    torch.manual_seed(3)
    inputs = trainer._generate_and_score_completions(_rows(dataset))
    trainer.compute_loss(trainer.model, inputs)
    rewards = trainer._gathered_rewards[:, 0]  # [8]
    advantages = inputs["advantages"]
    metrics = trainer._metrics["train"]
    assert metrics["reward/flaky/none_frac"] == [pytest.approx(1 / 8)]
    # the random model never writes the tags: format 0, so totals are 0.5·flaky = [?, .125, .25, .375, 0, ...]
    expected = torch.tensor([0.0, 0.125, 0.25, 0.375, 0.0, 0.125, 0.25, 0.375])
    if missing == "renormalize":
        torch.testing.assert_close(rewards, expected)  # rollout 0: format alone, rescaled: 0
        assert advantages[0] < 0  # scored below its group on format alone
        return
    assert math.isnan(rewards[0]) and torch.equal(rewards[1:], expected[1:])
    assert advantages[0] == 0.0
    scored = expected[1:4]  # the group's mean and std over the three scored rollouts
    torch.testing.assert_close(advantages[1:4], (scored - scored.mean()) / (scored.std() + 1e-6))
    group = expected[4:]
    torch.testing.assert_close(advantages[4:], (group - group.mean()) / (group.std() + 1e-6))
    # eapo/frac_positive over the 7 scored rollouts: 0.25, 0.375 and 0.25, 0.375 are >= their means
    assert metrics["eapo/frac_positive"] == [pytest.approx(4 / 7)]
    totals, scored_mask = trainer._total_rewards()
    assert scored_mask.tolist() == [False] + [True] * 7
    assert math.isnan(totals[0])  # left out of its group's centre, as out of its mean and std
    positive, _ = polarity_split(totals, [0, 0, 0, 0, 1, 1, 1, 1], by=trainer.eapo_step.split_by)
    assert positive[0]  # counted positive, with advantage 0


def test_median_split_leaves_an_unscored_rollout_out_of_the_median(tmp_path):
    config = tiny("algorithm.method=grpo", "algorithm.split_by=median", "algorithm.beta=0.0")
    trainer, _ = _trainer(config, tmp_path)
    trainer._gathered_rewards = torch.tensor(
        [[math.nan], [0.1], [0.2], [0.9], [0.0], [0.0], [1.0], [math.nan]]
    )
    totals, scored = trainer._total_rewards()
    assert scored.tolist() == [False, True, True, True, True, True, True, False]
    positive, scored = polarity_split(totals, [0, 0, 0, 0, 1, 1, 1, 1], by=trainer.eapo_step.split_by)
    metrics = split_metrics(positive, scored)
    # group 1: median of [0.1, 0.2, 0.9] is 0.2 (the mean, 0.4, would put 0.2 in D-); group 2: median 0
    assert positive.tolist() == [True, False, True, True, True, True, True, True]
    assert metrics == {"eapo/frac_positive": pytest.approx(5 / 6), "eapo/num_unscored": 2.0}


def test_validation_every_n_steps_scores_a_fixed_dev_subset(tmp_path):
    from eapo.engines.trl.validation import VALIDATION_FILE
    from eapo.runtime.models import resolve_model
    from eapo.train import build_reward, build_validation

    overrides = ["train.save_steps=0", "train.max_steps=3"]
    validated = tiny(*overrides, "train.eval_steps=2", "train.eval_limit=4")
    run_dir = run(validated, tmp_path / "val")
    rows = read_metrics(run_dir)
    assert [sorted(k for k in row if k.startswith("val/")) for row in rows] == [
        [],
        ["val/format", "val/mean_length", "val/none_frac", "val/reward", "val/rouge_l"],
        [],
    ]
    step2 = rows[1]
    assert 0.0 <= step2["val/rouge_l"] <= 1.0 and 0.0 <= step2["val/format"] <= 1.0
    assert 0.0 <= step2["val/reward"] <= 1.0 and step2["val/none_frac"] == 0.0
    assert 0 < step2["val/mean_length"] <= validated.rollout.max_completion_tokens

    # the answers are in validation.jsonl; scoring them again gives the logged numbers
    answers = [json.loads(line) for line in (run_dir / VALIDATION_FILE).read_text().splitlines()]
    assert [a["step"] for a in answers] == [2] * 4
    reward = build_reward(validated)
    subset = build_validation(validated, resolve_model("tiny"), reward, run_dir)
    assert [a["id"] for a in answers] == subset.ids and len(subset.ids) == 4
    again = reward.score(subset.prompts, [a["completion"] for a in answers], subset.references)
    assert step2["val/reward"] == pytest.approx(again.metrics["reward/mean"], rel=1e-12)
    assert step2["val/rouge_l"] == pytest.approx(again.metrics["reward/rouge_l/mean"], rel=1e-12)
    assert step2["val/format"] == again.metrics["reward/format/mean"]
    assert [a["reward"] for a in answers] == pytest.approx(again.rewards)

    # validation draws no training randomness: the run's training numbers equal a run without it
    plain = read_metrics(run(tiny(*overrides), tmp_path / "plain"))
    for with_val, without in zip(rows, plain, strict=True):
        for key in ("entropy/rollout", "reward/mean", "loss", "eapo/w_pos"):
            assert with_val[key] == without[key], key


def test_validation_subset_settings(tmp_path):
    from eapo.runtime.models import resolve_model
    from eapo.train import build_reward, build_validation

    config = tiny(
        "train.eval_steps=5", "train.eval_limit=3", "train.eval_sampling=sampled", "rollout.top_p=0.9"
    )
    subset = build_validation(config, resolve_model("tiny"), build_reward(config), tmp_path)
    assert (subset.every, subset.greedy, subset.temperature, subset.top_p) == (5, False, 1.0, 0.9)
    assert subset.max_new_tokens == config.rollout.max_completion_tokens
    assert [subset.due(step) for step in (0, 4, 5, 10)] == [False, False, True, True]
    from eapo.data import load

    train_ids = {record.id for record in load("demo", split="train")}
    assert len(subset.ids) == 3 and not set(subset.ids) & train_ids  # the dev split, disjoint from train
    # an unknown split is refused with the rest of the settings, before anything is loaded
    with pytest.raises(ConfigError, match="train.eval_split='nope' is invalid; valid: a split name"):
        tiny("train.eval_steps=1", "train.eval_split=nope")


def test_metrics_lines_carry_rollout_values_forward_but_not_validation(tmp_path):
    """A step that reuses the previous generation (μ > 1) carries its rollout values, never val/*."""
    from types import SimpleNamespace

    from eapo.engines.trl.callbacks import MetricsCallback

    callback = MetricsCallback(tmp_path, tensorboard=False)
    fresh = {"loss": 0.5, "entropy/rollout": 1.2, "reward/mean": 0.3, "val/reward": 0.4}
    for step, logs in ((1, fresh), (2, {"loss": 0.4})):
        state = SimpleNamespace(is_world_process_zero=True, global_step=step, epoch=step / 2)
        callback.on_log(None, state, None, logs=dict(logs))
    first, second = read_metrics(tmp_path)
    assert (first["val/reward"], first["rollout/fresh"]) == (0.4, True)
    assert (second["entropy/rollout"], second["reward/mean"], second["rollout/fresh"]) == (1.2, 0.3, False)
    assert "val/reward" not in second and second["loss"] == 0.4


def test_the_judge_gets_the_configured_client_settings_and_a_cache_in_the_run_directory(tmp_path):
    """reward.judge.* reach the judge's client; the cache lies under the run directory unless absolute."""
    from eapo.testing import JudgeServer
    from eapo.train import build_reward

    with JudgeServer(response_formats=("json_object",)) as server:
        judge_settings = [
            "reward.weights.llm_judge=0.5",
            f"reward.judge.base_url={server.base_url}",
            f"reward.judge.model={server.model}",
            "reward.judge.api_key_env=null",
            "reward.judge.max_retries=1",
            "reward.judge.timeout=7",
            "reward.judge.structured_output=auto",
        ]
        reward = build_reward(tiny(*judge_settings), tmp_path / "run")
        judge = reward.components["llm_judge"]
        try:
            assert (judge.max_retries, judge.timeout, judge.structured_output, judge.api_key_env) == (
                1,
                7.0,
                "auto",
                None,
            )
            assert judge.cache is not None and judge.cache.root == tmp_path / "run" / "judge_cache"
            result = reward.score(["q"], ["<think>r</think><advice>a</advice>"], ["ref"])
            assert result.components["llm_judge"] == [pytest.approx(0.8)]
            assert judge.output_format == "json_object"  # probed: the server refuses json_schema
            assert len(list((tmp_path / "run" / "judge_cache").rglob("*.json"))) == 1
        finally:
            reward.close()
        elsewhere = build_reward(
            tiny(*judge_settings, f"reward.judge.cache_dir={tmp_path / 'shared'}"), tmp_path / "r"
        )
        none = build_reward(tiny(*judge_settings, "reward.judge.cache_dir=null"), tmp_path / "r")
        try:
            assert elsewhere.components["llm_judge"].cache.root == tmp_path / "shared"
            assert none.components["llm_judge"].cache is None
        finally:
            elsewhere.close()
            none.close()


def test_failed_judge_calls_in_a_training_run_are_unscorable_and_counted(tmp_path, monkeypatch):
    """A real judge endpoint that fails the first request of every question (HTTP 400, not retried):
    one rollout per group is unscored, and the step's line counts it in reward/llm_judge/none_frac."""
    from eapo.data import load
    from eapo.testing import Fault, JudgeServer

    monkeypatch.setenv("EAPO_TEST_JUDGE_KEY", "not-a-secret")
    with JudgeServer() as server:
        for record in load("demo", split="train", limit=16):
            server.inject(record.question, Fault.status(400))
        config = tiny(
            "train.save_steps=0",
            "train.max_steps=1",
            "reward.weights.llm_judge=0.5",
            f"reward.judge.base_url={server.base_url}",
            f"reward.judge.model={server.model}",
            "reward.judge.api_key_env=EAPO_TEST_JUDGE_KEY",
            "reward.judge.target=response",
        )
        (row,) = read_metrics(run(config, tmp_path / "run"))
    assert row["reward/llm_judge/none_frac"] == 2 / 8  # one rollout in each of the step's 2 groups
    assert row["reward/none_frac"] == 2 / 8  # unscorable, not rescored on format and Rouge-L
    assert row["reward/format/none_frac"] == 0.0 and row["reward/rouge_l/none_frac"] == 0.0


def test_resume_accepts_a_config_saved_before_new_settings_existed_and_names_real_changes(tmp_path):
    """A run's config.yaml from an older eapo lacks settings added since (read with their defaults): not a
    change. A changed value is, and is named."""
    import yaml

    from eapo.config import config_changes, dump_config
    from eapo.train import _inspect_run_dir

    config = tiny("train.save_steps=0")
    tree = yaml.safe_load(dump_config(config))
    del tree["train"]["lm_head"], tree["train"]["share_frozen_layers"]  # added after this run started
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(tree))
    assert config_changes(saved, config) == {}
    tree["train"]["learning_rate"] = 0.5
    tree["rollout"]["temperature"] = 0.5
    saved.write_text(yaml.safe_dump(tree))
    assert config_changes(saved, config) == {
        "rollout.temperature": (0.5, config.rollout.temperature),
        "train.learning_rate": (0.5, config.train.learning_rate),
    }
    with pytest.raises(
        RunError, match=r"differs from this run's configuration \(rollout.temperature, train.learning_rate\)"
    ):
        _inspect_run_dir(tmp_path, config, resume=True)
    saved.write_text("train: [unclosed\n")
    with pytest.raises(RunError, match=r"unreadable: .*config.yaml: not valid YAML"):
        _inspect_run_dir(tmp_path, config, resume=True)


@pytest.mark.parametrize(
    ("method", "quantile_method"),
    [
        (["algorithm.method=grpo", "algorithm.split_by=quantile"], "linear"),
        (["algorithm.method=qae"], "linear"),
        (["algorithm.method=qae", "algorithm.quantile_method=inverse_cdf"], "inverse_cdf"),
    ],
)
def test_quantile_split_on_trl_gives_cores_qae_advantages(method, quantile_method, tmp_path):
    """split_by=quantile (QAE, K = 0.3), or the qae method, on the TRL engine: the advantages TRL trains on
    are core's, from the step's own rewards, centred on each group's K-quantile read as quantile_method
    (linear, the reference's, unless set)."""
    from eapo.core.step import EAPOStep, contiguous_index

    config = tiny(*method, "algorithm.quantile_k=0.3")
    trainer, dataset = _trainer(config, tmp_path)
    trainer.reuse_loss_pass = False  # decided at generation: inputs["advantages"] are final
    torch.manual_seed(1234)
    inputs = trainer._generate_and_score_completions(_rows(dataset))
    rewards, _ = trainer._total_rewards()
    expected, _ = EAPOStep(
        make_weighting("grpo"), split_by="quantile", quantile_k=0.3, quantile_method=quantile_method
    ).step(rewards, contiguous_index(rewards.shape[0], config.rollout.num_generations), None)
    step = trainer.eapo_step
    assert (step.split_by, step.quantile_k, step.quantile_method) == ("quantile", 0.3, quantile_method)
    torch.testing.assert_close(inputs["advantages"].double(), expected.double(), rtol=1e-6, atol=1e-7)
    if quantile_method == "inverse_cdf":
        assert (inputs["advantages"] == 0).sum() > 0  # some rollouts sit at their group's quantile


def test_eapo_pi_on_trl_logs_the_integral_of_its_own_entropies(tmp_path):
    """method=eapo_pi, 3 steps: w+ and eapo/integral equal the scheme replayed on the logged entropy/rollout."""
    rows = read_metrics(
        run(tiny("algorithm.method=eapo_pi", "train.max_steps=3", "train.save_steps=0"), tmp_path)
    )
    replay = make_weighting("eapo_pi")
    for row in rows:
        assert row["eapo/w_pos"] == pytest.approx(replay.weights(row["entropy/rollout"])[0], rel=1e-9)
        assert row["eapo/integral"] == pytest.approx(replay.integral, rel=1e-9, abs=1e-12)
    assert rows[-1]["eapo/integral"] != 0.0


def test_two_steps_of_qae_on_trl(tmp_path):
    """method=qae trains: GRPO's weights, and with G = 4, K = 0.4 the quantile (linear, the reference's) lies
    at position 1.2 of each group's sorted rewards, between its 2nd and 3rd smallest, so at least 2 of every
    4 rollouts are at or above it (eapo/frac_positive >= 0.5)."""
    rows = read_metrics(
        run(tiny("algorithm.method=qae", "train.max_steps=2", "train.save_steps=0"), tmp_path)
    )
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert (row["eapo/w_pos"], row["eapo/w_neg"]) == (1.0, 1.0)
        assert row["eapo/frac_positive"] >= 0.5
