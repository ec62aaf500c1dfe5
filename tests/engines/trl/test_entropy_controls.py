"""The entropy controls on the TRL engine: each control's loss and gradient through ``EAPOTrainer``
against the same objective written out by hand on the trainer's own log-probs, the adaptive
coefficient against :class:`eapo.core.AdaptiveEntropyCoef` replayed from the logged entropies, three
training steps of each preset (and composed with EAPO), and resume keeping the controller's state.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from eapo.core import ENTROPY_CONTROLS, AdaptiveEntropyCoef
from eapo.core.controls.entropic import EntroPICController
from eapo.run_dir import read_metrics
from eapo.train import run
from test_train import _rows, _trainer, tiny

BETA = 0.05


def _perturbed_trainer(tmp_path, *overrides):
    """A trainer whose policy has moved off the reference (non-zero KL), with one generated batch."""
    trainer, dataset = _trainer(tiny(f"algorithm.beta={BETA}", *overrides), tmp_path)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in trainer.model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    trainer.reuse_loss_pass = False  # the step is decided at generation: inputs["advantages"] are final
    torch.manual_seed(1234)
    inputs = trainer._generate_and_score_completions(_rows(dataset))
    return trainer, inputs


def _gradients(trainer, loss_fn):
    trainer.model.zero_grad()
    loss = loss_fn()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def _forward(trainer, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    return trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attention, inputs["completion_ids"].size(1), compute_entropy=True
    )[:2]


def _by_hand(trainer, inputs, per_token_policy, *, entropy_coef=0.0):
    """The objective written out: a per-token policy loss (given the log-probs, entropies and mask),
    β·k3 to the reference, 1/|y_i| aggregation, minus entropy_coef × the mean token entropy."""
    logp, entropies = _forward(trainer, inputs)
    mask = inputs["completion_mask"].float()  # [B, T]
    log_ref = inputs["ref_per_token_logps"] - logp
    k3 = torch.exp(log_ref) - log_ref - 1.0
    per_token = per_token_policy(logp, entropies, mask) + BETA * k3
    loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    return loss - entropy_coef * (entropies * mask).sum() / mask.sum()


def _assert_same(ours, theirs):
    assert ours[0] == pytest.approx(theirs[0], rel=1e-5, abs=1e-7)
    assert ours[1].keys() == theirs[1].keys()
    for name, grad in theirs[1].items():
        torch.testing.assert_close(ours[1][name], grad, rtol=1e-4, atol=1e-6)


def _ppo(advantages, old, low=0.2, high=0.2):
    def per_token(logp, entropies, mask):
        ratio = torch.exp(logp - old)
        a = advantages[:, None]
        return -torch.minimum(ratio * a, torch.clamp(ratio, 1 - low, 1 + high) * a)

    return per_token


def _moved_old_logps(inputs, scale=0.3, seed=7):
    """Behaviour log-probs off the current policy, so ratios leave [1 − ε, 1 + ε] (as after an update)."""
    generator = torch.Generator().manual_seed(seed)
    old = inputs["ref_per_token_logps"] + scale * torch.randn(
        inputs["ref_per_token_logps"].shape, generator=generator
    )
    inputs["old_per_token_logps"] = old
    return old


def test_entropy_bonus_is_trls_loss_minus_coef_times_mean_entropy(tmp_path):
    trainer, inputs = _perturbed_trainer(tmp_path, "algorithm.method=entropy_bonus")
    assert trainer.args.entropy_coef == pytest.approx(0.01)
    advantages = inputs["advantages"].clone()
    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    theirs = _gradients(
        trainer,
        lambda: _by_hand(
            trainer, inputs, _ppo(advantages, _forward(trainer, inputs)[0].detach()), entropy_coef=0.01
        ),
    )
    _assert_same(ours, theirs)
    assert trainer._metrics["train"]["entropy_control/coef"] == [pytest.approx(0.01)]


def test_clip_higher_clips_the_ratio_at_one_plus_epsilon_high(tmp_path):
    trainer, inputs = _perturbed_trainer(tmp_path, "algorithm.method=clip_higher")
    assert (trainer.epsilon_low, trainer.epsilon_high) == (0.2, 0.28)
    old = _moved_old_logps(inputs)
    advantages = inputs["advantages"].clone()
    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    theirs = _gradients(trainer, lambda: _by_hand(trainer, inputs, _ppo(advantages, old, high=0.28)))
    _assert_same(ours, theirs)
    symmetric = _gradients(trainer, lambda: _by_hand(trainer, inputs, _ppo(advantages, old, high=0.2)))
    assert abs(symmetric[0] - ours[0]) > 1e-6, "the batch must have ratios between 1.2 and 1.28"
    logp = _forward(trainer, inputs)[0].detach()
    ratio, mask = torch.exp(logp - old), inputs["completion_mask"].float()
    high = ((ratio > 1.28) & (advantages[:, None] > 0)).float()
    assert trainer._metrics["train"]["entropy_control/clip_high_frac"] == [
        pytest.approx(float((high * mask).sum() / mask.sum()), abs=1e-6)
    ]


def test_top_entropy_keeps_the_policy_loss_on_the_top_quantile(tmp_path):
    trainer, inputs = _perturbed_trainer(tmp_path, "algorithm.method=top_entropy")
    assert trainer.top_entropy_quantile == pytest.approx(0.2)
    advantages = inputs["advantages"].clone()

    def per_token(logp, entropies, mask):
        values = entropies.detach()[mask.bool()]
        kept = (entropies.detach() >= torch.quantile(values, 0.8)) & mask.bool()
        return _ppo(advantages, logp.detach())(logp, entropies, mask) * kept

    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    theirs = _gradients(trainer, lambda: _by_hand(trainer, inputs, per_token))
    _assert_same(ours, theirs)
    (share,) = trainer._metrics["train"]["entropy_control/top_entropy_frac"]
    assert 0.15 < share <= 0.25  # about the top 20% of the step's tokens (ties aside)


class _ToyScale:
    """A toy run state: each update's ``toy_scale`` is 1 + the last H_t it observed (1 before any)."""

    def __init__(self):
        self.last = None

    def anchor(self, h0):
        pass

    def loss_inputs(self):
        return {"toy_scale": 1.0 if self.last is None else 1.0 + self.last}

    def observe(self, entropy):
        self.last = entropy


def _toy_control():
    """A control neither engine has: positive-advantage tokens weighted by its state's ``toy_scale``."""
    from eapo.core.controls import EntropyControl

    def weights(inputs):
        return torch.where(inputs.advantages > 0, inputs.step["toy_scale"], 1.0) * inputs.mask

    return EntropyControl("toy", "a test", token_weights=weights, weight_metric="entropy_control/toy_weight")


def test_a_control_trl_lacks_runs_through_the_generic_path(tmp_path):
    """eapo forms TRL's loss for a control TRL lacks: with weights 1 it is TRL's own loss and gradient
    (ratios off 1, so the clip acts); with the toy's weights, the hand-written objective times them. Its
    run state gives each update's input, then core's step moves it with H_t."""
    trainer, inputs = _perturbed_trainer(tmp_path)
    old = _moved_old_logps(inputs)
    advantages = inputs["advantages"].clone()
    trls = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    assert not trainer._eapo_runs_the_loss()
    toy = _toy_control()
    trainer.eapo_controls = [toy]
    assert trainer._eapo_runs_the_loss()
    trainer._step_inputs = {"toy": {"toy_scale": 1.0}}
    _assert_same(_gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs)), trls)
    assert trainer._metrics["train"]["entropy_control/toy_weight"][-1] == pytest.approx(1.0)

    state = _ToyScale()
    trainer.eapo_step.controls["toy"] = state
    trainer._decide(inputs, *_step_rewards(trainer), entropy=2.0)  # step 1: input 1, then H = 2 observed
    assert trainer._step_inputs == {"toy": {"toy_scale": 1.0}} and state.last == 2.0
    trainer._decide(inputs, *_step_rewards(trainer), entropy=2.5)
    assert trainer._step_inputs == {"toy": {"toy_scale": 3.0}} and state.last == 2.5
    advantages = inputs["advantages"].clone()

    def weighted(logp, entropies, mask):
        return _ppo(advantages, old)(logp, entropies, mask) * torch.where(advantages[:, None] > 0, 3.0, 1.0)

    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    _assert_same(ours, _gradients(trainer, lambda: _by_hand(trainer, inputs, weighted)))
    mask = inputs["completion_mask"].float()
    expected = (torch.where(advantages[:, None] > 0, 3.0, 1.0) * mask).sum() / mask.sum()
    assert trainer._metrics["train"]["entropy_control/toy_weight"][-1] == pytest.approx(float(expected))


def _step_rewards(trainer):
    """This step's rewards and this process's rows, as the generation step hands them to ``_decide``."""
    rewards, _ = trainer._total_rewards()
    return rewards, torch.arange(rewards.shape[0])


def test_clip_cov_cuts_the_gradient_of_the_selected_tokens(tmp_path):
    # ratio 1 selects every candidate (no random draw); bounds chosen so that some tokens are candidates
    trainer, inputs = _perturbed_trainer(
        tmp_path,
        "algorithm.method=clip_cov",
        "algorithm.clip_cov_ratio=1.0",
        "algorithm.clip_cov_lb=0.5",
        "algorithm.clip_cov_ub=50",
    )
    old = _moved_old_logps(inputs, scale=0.05)
    advantages = inputs["advantages"].clone()
    selected_share = []

    def per_token(logp, entropies, mask):
        a = advantages[:, None].expand_as(logp)
        ratio = torch.exp(logp - old)
        surrogate = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 0.8, 1.2))
        clipped = (-a * torch.clamp(ratio, 0.8, 1.2) > -a * ratio) & mask.bool()
        n = mask.sum()
        cov = (a - (a * mask).sum() / n) * (logp.detach() - (logp.detach() * mask).sum() / n)
        cut = (cov > 0.5) & (cov < 50) & mask.bool() & ~clipped
        selected_share.append(float(cut.sum() / n))
        return surrogate * (~cut)

    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    theirs = _gradients(trainer, lambda: _by_hand(trainer, inputs, per_token))
    _assert_same(ours, theirs)
    assert 0.0 < selected_share[0] < 1.0, "the test needs both cut and kept tokens"
    assert trainer._metrics["train"]["entropy_control/cov_frac"] == [
        pytest.approx(selected_share[0], abs=1e-6)
    ]


def test_kl_cov_penalises_the_top_covariance_tokens(tmp_path):
    trainer, inputs = _perturbed_trainer(
        tmp_path, "algorithm.method=kl_cov", "algorithm.kl_cov_ratio=0.25", "algorithm.ppo_kl_coef=0.5"
    )
    old = _moved_old_logps(inputs, scale=0.05)
    advantages = inputs["advantages"].clone()

    def per_token(logp, entropies, mask):
        a = advantages[:, None].expand_as(logp)
        valid = mask.bool()
        adv, lp = a[valid], logp.detach()[valid]
        cov = (adv - adv.mean()) * (lp - lp.mean())
        k = max(1, int(cov.numel() * 0.25))
        selected = torch.zeros(valid.sum().item(), dtype=torch.bool)
        selected[torch.topk(cov, k).indices] = True
        full = torch.zeros_like(valid)
        full[valid] = selected
        log_ratio = logp - old
        return -a * torch.exp(log_ratio) + 0.5 * log_ratio.abs() * full

    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    theirs = _gradients(trainer, lambda: _by_hand(trainer, inputs, per_token))
    _assert_same(ours, theirs)
    (share,) = trainer._metrics["train"]["entropy_control/cov_frac"]
    assert share == pytest.approx(0.25, abs=0.05)


def test_entropic_weights_the_high_probability_tokens_by_alpha(tmp_path):
    """EntroPIC through EAPOTrainer's generic path: the step's α comes from its controller (moved by core's
    step with H_t), and the loss and gradient are the hand-written objective with the policy loss of tokens
    above the threshold weighted 1 + α (A > 0) or 1 − α (A < 0). The tiny model's tokens all have p < 0.02,
    so the threshold is set at the batch's median probability to reweight about half of them."""
    import dataclasses

    trainer, inputs = _perturbed_trainer(tmp_path, "algorithm.method=entropic")
    controller = trainer.eapo_step.controls["entropic"]
    h0 = controller.target
    assert h0 == pytest.approx(trainer.first_entropy) and trainer._step_inputs == {
        "entropic": {"entropic_alpha": 0.0}
    }
    # two more steps of the controller, each update applying its own step's α (H_t is known before it):
    # e = −0.1 gives α = −0.1 at once; then e = 0.3 gives α = 0.3 + 0.01 · (−0.1) = 0.299
    trainer._decide(inputs, *_step_rewards(trainer), entropy=h0 - 0.1)
    assert trainer._step_inputs == {"entropic": {"entropic_alpha": pytest.approx(-0.1)}}
    trainer._decide(inputs, *_step_rewards(trainer), entropy=h0 + 0.3)
    assert trainer._step_inputs == {"entropic": {"entropic_alpha": pytest.approx(0.299)}}
    assert trainer._metrics["train"]["entropic/alpha"][-1] == pytest.approx(0.299)
    assert trainer._metrics["train"]["entropic/integral"][-1] == pytest.approx(0.2)
    assert controller.alpha == pytest.approx(0.299)
    old = _moved_old_logps(inputs)
    advantages = inputs["advantages"].clone()
    logp = _forward(trainer, inputs)[0].detach()
    mask = inputs["completion_mask"].bool()
    threshold = float(torch.quantile(logp.exp()[mask], 0.5))
    controls = {
        **trainer.algorithm.controls,
        "entropic_threshold": threshold,
    }  # the update reads the run's value
    trainer.algorithm = dataclasses.replace(trainer.algorithm, controls=controls)
    high = logp > math.log(threshold)
    assert 0 < (high & mask).sum() < mask.sum() and (advantages > 0).any() and (advantages < 0).any()

    def weighted(logp, entropies, mask):
        sign = torch.sign(advantages)[:, None]
        return _ppo(advantages, old)(logp, entropies, mask) * (1.0 + 0.299 * sign * high)

    ours = _gradients(trainer, lambda: trainer.compute_loss(trainer.model, inputs))
    _assert_same(ours, _gradients(trainer, lambda: _by_hand(trainer, inputs, weighted)))
    unweighted = _gradients(trainer, lambda: _by_hand(trainer, inputs, _ppo(advantages, old)))
    assert abs(unweighted[0] - ours[0]) > 1e-6, "the weights must change the loss"


def _replayed_entropic(rows, **settings):
    """What eapo.core's EntroPIC controller logs at each step, replayed from the logged entropies (core's
    order for it: observe H_t, then the update's α)."""
    controller = EntroPICController(**settings)
    controller.anchor(rows[0]["entropy/rollout"])
    logged = []
    for row in rows:
        controller.observe(row["entropy/rollout"])
        assert controller.loss_inputs()["entropic_alpha"] == controller.metrics()["entropic/alpha"]
        logged.append(controller.metrics())
    return logged


def test_entropic_run_logs_the_controller_replayed_from_the_rollout_entropies(tmp_path):
    """Three steps with Kp = 0.1 and the target 0.9 × H_0 (so α leaves 0 from step 1 without clipping) and
    a threshold the tiny model's tokens reach: the logged entropic/* are the controller's, replayed, and
    each step's α is from its own error."""
    config = tiny(
        "algorithm.method=entropic",
        "algorithm.entropic_kp=0.1",
        "algorithm.entropic_target_ratio=0.9",
        "algorithm.entropic_threshold=0.005",
        "train.save_steps=0",
    )
    rows = read_metrics(run(config, tmp_path / "run"))
    assert [row["step"] for row in rows] == [1, 2, 3]
    replayed = _replayed_entropic(rows, kp=0.1, ki=0.01, threshold=0.005, target_ratio=0.9)
    for row, expected in zip(rows, replayed, strict=True):
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    h0 = rows[0]["entropy/rollout"]
    assert rows[0]["entropic/alpha"] == pytest.approx(0.1 * 0.1 * h0, rel=1e-6)  # e_1 = H_0 − 0.9 H_0
    e2 = rows[1]["entropy/rollout"] - 0.9 * h0
    assert rows[1]["entropic/alpha"] == pytest.approx(0.1 * e2 + 0.01 * 0.1 * h0, rel=1e-6)
    assert rows[2]["entropic/error"] == pytest.approx(rows[2]["entropy/rollout"] - 0.9 * h0, rel=1e-6)


def _replayed_coefficients(rows, *, ratio, delta=0.005):
    """What eapo.core.AdaptiveEntropyCoef applies at each logged step, from the logged entropies."""
    controller = AdaptiveEntropyCoef(coef=0.0, delta=delta, coef_min=0.0, coef_max=1.0, target_ratio=ratio)
    controller.anchor(rows[0]["entropy/rollout"])
    applied = []
    for row in rows:
        applied.append(controller.applied())
        controller.update(row["entropy"])  # TRL's update entropy: the loss pass's token mean
    return applied


@pytest.mark.parametrize("ratio", [1.5, 0.5])
def test_adaptive_entropy_matches_eapo_core_controller_anchored_at_h0(ratio, tmp_path):
    """TRL's Skywork-OR1 controller, with the target anchored at ratio × H_0 by eapo, applies the
    coefficients eapo.core.AdaptiveEntropyCoef (the verl plugin's) computes from the same entropies."""
    config = tiny(
        "algorithm.method=adaptive_entropy", f"algorithm.entropy_target_ratio={ratio}", "train.save_steps=0"
    )
    rows = read_metrics(run(config, tmp_path / "run"))
    assert len(rows) == 3
    applied = [row["entropy_control/coef"] for row in rows]
    assert applied == pytest.approx(_replayed_coefficients(rows, ratio=ratio))
    # 1.5 × H_0 lies above every step's entropy: the coefficient climbs and applies from step 2;
    # 0.5 × H_0 lies below: it never applies
    assert applied == pytest.approx([0.0, 0.005, 0.01] if ratio == 1.5 else [0.0, 0.0, 0.0])


def test_resume_keeps_the_adaptive_coefficient_and_its_anchored_target(tmp_path):
    """A run stopped after step 2 (its later outputs removed, as a kill would leave it) resumes with
    TRL's coefficient and eapo's anchored target, and logs step 3 as the uninterrupted run did."""
    import shutil

    config = tiny(
        "algorithm.method=adaptive_entropy", "algorithm.entropy_target_ratio=1.5", "train.save_steps=1"
    )
    run_dir = run(config, tmp_path / "run")
    straight = read_metrics(run_dir)
    state = json.loads((run_dir / "checkpoint-2" / "eapo_state.json").read_text())
    assert state["controls"]["adaptive_entropy"]["target"] == pytest.approx(
        1.5 * straight[0]["entropy/rollout"], rel=1e-6
    )
    for name in ("checkpoint-3", "final"):
        shutil.rmtree(run_dir / name)
    (run_dir / "summary.json").unlink()
    resumed = read_metrics(run(config, run_dir, resume=True))
    assert [row["step"] for row in resumed] == [1, 2, 3]
    assert resumed[2]["entropy_control/coef"] == pytest.approx(0.01)  # not 0: the controller was restored
    assert resumed[2]["entropy_control/coef"] == pytest.approx(straight[2]["entropy_control/coef"])
    final = json.loads((run_dir / "checkpoint-3" / "eapo_state.json").read_text())
    saved, kept = state["controls"]["adaptive_entropy"], final["controls"]["adaptive_entropy"]
    assert kept["target"] == pytest.approx(saved["target"]) and kept["settings"] == saved["settings"]


def test_resume_keeps_the_entropic_integral(tmp_path):
    """A run stopped after step 2 resumes with EntroPIC's integral, α and anchored target from its
    checkpoint: step 3 applies the uninterrupted run's α (its own error plus Ki × the saved integral), and
    its integral continues from the saved one."""
    import shutil

    config = tiny(
        "algorithm.method=entropic",
        "algorithm.entropic_kp=0.1",
        "algorithm.entropic_target_ratio=0.9",
        "train.save_steps=1",
    )
    run_dir = run(config, tmp_path / "run")
    straight = read_metrics(run_dir)
    saved = json.loads((run_dir / "checkpoint-2" / "eapo_state.json").read_text())["controls"]["entropic"]
    straight_final = json.loads((run_dir / "checkpoint-3" / "eapo_state.json").read_text())["controls"][
        "entropic"
    ]
    assert saved["target"] == pytest.approx(0.9 * straight[0]["entropy/rollout"], rel=1e-6)
    assert saved["integral"] == pytest.approx(straight[1]["entropic/integral"], rel=1e-9)
    assert saved["settings"] == {"kp": 0.1, "ki": 0.01, "threshold": 0.95, "target_ratio": 0.9}
    for name in ("checkpoint-3", "final"):
        shutil.rmtree(run_dir / name)
    (run_dir / "summary.json").unlink()
    resumed = read_metrics(run(config, run_dir, resume=True))
    assert [row["step"] for row in resumed] == [1, 2, 3]
    # step 3's α now reads step 3's own H_t, which the resumed run measures again (to rounding)
    assert resumed[2]["entropic/alpha"] == pytest.approx(straight[2]["entropic/alpha"], rel=1e-6)
    assert saved["alpha"] == pytest.approx(straight[1]["entropic/alpha"], rel=1e-9) != 0.0  # step 2's
    error = resumed[2]["entropy/rollout"] - saved["target"]
    assert resumed[2]["entropic/alpha"] == pytest.approx(0.1 * error + 0.01 * saved["integral"], rel=1e-6)
    assert resumed[2]["entropic/integral"] == pytest.approx(saved["integral"] + error, rel=1e-6)
    final = json.loads((run_dir / "checkpoint-3" / "eapo_state.json").read_text())["controls"]["entropic"]
    assert final["target"] == saved["target"] and final["settings"] == saved["settings"]
    # the resumed step 3 saw the same rollouts as the uninterrupted one: the same integral
    assert resumed[2]["entropy/rollout"] == pytest.approx(straight[2]["entropy/rollout"], rel=1e-6)
    assert final["integral"] == pytest.approx(straight_final["integral"], rel=1e-6)


@pytest.mark.parametrize("method", sorted(ENTROPY_CONTROLS))
def test_three_steps_of_each_control_preset(method, tmp_path):
    overrides = [f"algorithm.method={method}", "train.save_steps=0"]
    if method in ("clip_higher", "kl_cov"):
        overrides.append("algorithm.num_iterations=2")  # both act only where the policy has moved
    rows = read_metrics(run(tiny(*overrides), tmp_path / method))
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert (row["eapo/w_pos"], row["eapo/w_neg"]) == (1.0, 1.0)  # GRPO's weights
        assert math.isfinite(row["loss"]) and row["entropy/rollout"] > 0
    keys = {
        "entropy_bonus": "entropy_control/coef",
        "adaptive_entropy": "entropy_control/coef",
        "clip_higher": "entropy_control/clip_high_frac",
        "clip_cov": "entropy_control/cov_frac",
        "kl_cov": "entropy_control/cov_frac",
        "top_entropy": "entropy_control/top_entropy_frac",
        "entropic": "entropic/alpha",
    }
    assert all(keys[method] in row for row in rows), keys[method]


def test_a_control_composes_with_eapo_weighting(tmp_path):
    """algorithm.method=eapo with algorithm.top_entropy_quantile=0.5 is one run: EAPO's w+ and the mask."""
    rows = read_metrics(
        run(
            tiny("algorithm.method=eapo", "algorithm.top_entropy_quantile=0.5", "train.save_steps=0"),
            tmp_path / "r",
        )
    )
    h0 = rows[0]["entropy/rollout"]
    for row in rows:
        assert row["eapo/w_pos"] == pytest.approx(min(0.2 * row["entropy/rollout"] / h0, 2.0), rel=1e-9)
        assert 0.4 < row["entropy_control/top_entropy_frac"] <= 0.6
