"""The eapo trainer: registration, _compute_advantage (entropy → weights → advantages), checkpoints.

The trainer is built with verl's real ``__init__`` on verl's default config: that needs no cluster.
What ``init()`` would create with Ray (worker groups, dataloaders, TransferQueue) is replaced where
a method touches it: TransferQueue by the in-memory stand-in of conftest.py, the actor worker group
by :class:`RecordingWorkerGroup`, the dataloader by a real torchdata StatefulDataLoader.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from tensordict import NonTensorStack, TensorDict  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync  # noqa: E402

from eapo.core import STATE_FILE, make_weighting  # noqa: E402
from eapo.core.step import grouped_polarity_advantages  # noqa: E402
from eapo.engines.verl import EAPOVerlTrainer  # noqa: E402
from eapo.testing import entropy_batch  # noqa: E402

# Two prompts, four rollouts each, interleaved as after verl's length balancing.
UIDS = ["a", "b", "a", "b", "a", "b", "a", "b"]
SCORES = [0.9, 0.1, 0.4, 0.6, 0.2, 0.2, 0.8, 0.5]
LENGTHS = [3, 1, 4, 2, 2, 5, 1, 3]


class RecordingWorkerGroup:
    """The actor worker group's checkpoint calls, recorded; saving creates the folder as verl's does."""

    def __init__(self) -> None:
        self.saved: list[str] = []
        self.loaded: list[str] = []

    def save_checkpoint(self, local_path, remote_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        self.saved.append(local_path)

    def load_checkpoint(self, local_path, del_local_after_load=False):
        self.loaded.append(local_path)


def put_rollouts(
    queue,
    step: int,
    entropy: float | None = None,
    *,
    uids=UIDS,
    scores=SCORES,
    entropies: list[list[float]] | None = None,
    masks: list[list[float]] | None = None,
):
    """Write one step's rollouts into the queue as verl leaves them before ``_compute_advantage``:
    the reward step's ``rm_scores`` and the old-log-prob pass's per-token ``entropy`` (each token
    ``entropy``, or the rows ``entropies``; none at all when both are None, as in bypass mode)."""
    if entropies is None:
        entropies = None if entropy is None else [[entropy] * n for n in LENGTHS]
    lengths = [len(row) for row in entropies] if entropies is not None else LENGTHS
    masks = masks or [[1.0] * n for n in lengths]
    keys = [f"{uid}{step}_{session}_0" for session, uid in enumerate(uids)]
    rm_scores = []
    for score, length in zip(scores, lengths, strict=True):
        row = torch.zeros(length)
        row[-1] = score  # the reward manager puts the score on the last response token
        rm_scores.append(row)
    columns = {
        "uid": NonTensorStack(*[f"{uid}{step}" for uid in uids]),
        "response_mask": torch.nested.as_nested_tensor([torch.tensor(m) for m in masks], layout=torch.jagged),
        "rm_scores": torch.nested.as_nested_tensor(rm_scores, layout=torch.jagged),
        "old_log_probs": torch.nested.as_nested_tensor(
            [-torch.ones(n) for n in lengths], layout=torch.jagged
        ),
    }
    if entropies is not None:
        columns["entropy"] = torch.nested.as_nested_tensor(
            [torch.tensor(row) for row in entropies], layout=torch.jagged
        )
    fields = TensorDict(columns, batch_size=len(keys))
    return queue.kv_batch_put(keys=keys, partition_id="train", fields=fields)


def expected_advantages(w_pos: float, w_neg: float) -> torch.Tensor:
    return grouped_polarity_advantages(torch.tensor(SCORES), UIDS, w_pos, w_neg)[0]


def advantages_in_queue(queue, batch) -> torch.Tensor:
    """Per-sequence advantages the trainer wrote back (constant over each response's tokens)."""
    values = []
    for key, length in zip(batch.keys, LENGTHS, strict=True):
        tokens = queue.store[("train", key)]["advantages"]
        assert tokens.shape == (length,)
        assert torch.all(tokens == tokens[0])
        values.append(tokens[0])
    return torch.stack(values)


def run_step(trainer, queue, step: int, entropy: float | None):
    batch = put_rollouts(queue, step, entropy)
    metrics = {}
    batch = trainer._compute_advantage(batch, metrics=metrics)
    return advantages_in_queue(queue, batch), metrics


def attach_checkpoint_io(trainer, folder):
    """What init() would create and _save/_load_checkpoint touch."""
    trainer.config.trainer.default_local_dir = str(folder)
    trainer.actor_rollout_wg = RecordingWorkerGroup()
    trainer.train_dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
    return trainer


# --- registration ------------------------------------------------------------------------------


def test_entry_point_group_is_the_one_verl_reads():
    (plugin,) = [ep for ep in entry_points(group="verl.plugins") if ep.name == "eapo"]
    assert plugin.value == "eapo.engines.verl"


def test_importing_verl_alone_loads_the_plugin():
    """A fresh interpreter that only imports verl gets the estimators and the trainer (entry point)."""
    code = (
        "import verl, sys\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "assert 'eapo.engines.verl' in sys.modules\n"
        "print(sorted(n for n in ('eapo', 'psr', 'nsr', 'w_reinforce') if n in ADV_ESTIMATOR_REGISTRY))\n"
        "print(get_trainer_cls('eapo').__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["['eapo', 'nsr', 'psr', 'w_reinforce']", "EAPOVerlTrainer"]


def test_trainer_is_registered_and_behaves_as_the_sync_trainer(verl_config):
    assert get_trainer_cls("eapo") is EAPOVerlTrainer
    assert issubclass(EAPOVerlTrainer, PPOTrainerSync)
    trainer = EAPOVerlTrainer(verl_config)
    assert trainer.registered_mode == "eapo"
    assert trainer.trainer_mode == "sync"
    assert type(trainer.replay_buffer) is ReplayBuffer and not isinstance(
        trainer.replay_buffer, ReplayBufferAsync
    )


# --- _compute_advantage --------------------------------------------------------------------------


def test_entropy_drives_the_positive_weight(verl_config, in_memory_tq):
    trainer = EAPOVerlTrainer(verl_config)
    # step 1 anchors H_0 = 1.2: w+ = w0 = 0.2
    advantages, metrics = run_step(trainer, in_memory_tq, 1, entropy=1.2)
    torch.testing.assert_close(advantages, expected_advantages(0.2, 1.0), rtol=0, atol=1e-6)
    # group a [0.9, 0.4, 0.2, 0.8] (mean 0.575): 2 positive; b [0.1, 0.6, 0.2, 0.5] (mean 0.35): 2 positive
    assert metrics == pytest.approx(
        {
            "entropy/rollout": 1.2,
            "entropy/rollout_tokens": sum(LENGTHS),  # every rollout's tokens, whichever worker held it
            "eapo/w_pos": 0.2,
            "eapo/w_neg": 1.0,
            "eapo/H0": 1.2,
            "eapo/frac_positive": 0.5,
            "eapo/num_unscored": 0.0,
        }
    )
    # step 2: entropy rose to 1.8, w+ = 0.2 · 1.8 / 1.2 = 0.3
    advantages, metrics = run_step(trainer, in_memory_tq, 2, entropy=1.8)
    torch.testing.assert_close(advantages, expected_advantages(0.3, 1.0), rtol=0, atol=1e-6)
    assert metrics["eapo/w_pos"] == pytest.approx(0.3)
    assert metrics["eapo/H0"] == pytest.approx(1.2)
    # step 3: 0.2 · 30 / 1.2 = 5 is clipped to w_max = 2
    _, metrics = run_step(trainer, in_memory_tq, 3, entropy=30.0)
    assert metrics["eapo/w_pos"] == pytest.approx(2.0)


def test_settings_from_algorithm_eapo(verl_config, in_memory_tq):
    verl_config.algorithm.eapo = {"w0": 0.5, "w_max": 0.6, "w_neg": 2.0}
    trainer = EAPOVerlTrainer(verl_config)
    run_step(trainer, in_memory_tq, 1, entropy=1.0)
    advantages, metrics = run_step(trainer, in_memory_tq, 2, entropy=1.5)  # 0.75 clipped to 0.6
    torch.testing.assert_close(advantages, expected_advantages(0.6, 2.0), rtol=0, atol=1e-6)
    assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == pytest.approx((0.6, 2.0))


def test_fixed_scheme_runs_without_entropy(verl_config, in_memory_tq):
    verl_config.algorithm.adv_estimator = "psr"
    trainer = EAPOVerlTrainer(verl_config)
    advantages, metrics = run_step(trainer, in_memory_tq, 1, entropy=None)
    torch.testing.assert_close(advantages, expected_advantages(1.0, 0.0), rtol=0, atol=1e-6)
    assert metrics == pytest.approx(
        {"eapo/w_pos": 1.0, "eapo/w_neg": 0.0, "eapo/frac_positive": 0.5, "eapo/num_unscored": 0.0}
    )


def test_missing_entropy_is_a_clear_error(verl_config, in_memory_tq):
    trainer = EAPOVerlTrainer(verl_config)
    with pytest.raises(RuntimeError, match=r"per-token 'entropy'.*bypass_mode"):
        run_step(trainer, in_memory_tq, 1, entropy=None)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_verl_path_gives_the_shared_batch_its_hand_derived_entropy(agg, verl_config, in_memory_tq):
    """The same batch and number as tests/test_train.py (the TRL trainer): one H_t on both
    engines. The third row is verl's padding row: one response token, masked out."""
    verl_config.algorithm.eapo = {"entropy_agg": agg}
    trainer = EAPOVerlTrainer(verl_config)
    rows = [list(row) if row else [7.0] for row in entropy_batch.ROWS]
    masks = [[1.0] * len(row) if row else [0.0] for row in entropy_batch.ROWS]
    batch = put_rollouts(
        in_memory_tq, 1, uids=["a", "a", "b", "b"], scores=[0.9, 0.1, 0.4, 0.6], entropies=rows, masks=masks
    )
    metrics = {}
    trainer._compute_advantage(batch, metrics=metrics)
    assert metrics["entropy/rollout"] == pytest.approx(entropy_batch.H_T[agg], rel=1e-6)
    assert metrics["eapo/H0"] == metrics["entropy/rollout"]
    assert metrics["entropy/rollout_tokens"] == sum(map(sum, masks))  # the padding row counts in neither


def test_entropy_agg_default_and_errors(verl_config):
    assert EAPOVerlTrainer(verl_config).algorithm.entropy_agg == "token-mean"  # as eapo train's default
    verl_config.algorithm.eapo = {"entropy_agg": "seq-mean"}
    with pytest.raises(ValueError, match="algorithm.eapo.entropy_agg='seq-mean' is invalid"):
        EAPOVerlTrainer(verl_config)


def test_configuration_errors_are_raised_before_verl_starts(verl_config):
    bypass = verl_config.copy()
    bypass.algorithm.rollout_correction.bypass_mode = True
    with pytest.raises(ValueError, match="bypass_mode"):
        EAPOVerlTrainer(bypass)
    grpo = verl_config.copy()
    grpo.algorithm.adv_estimator = "grpo"
    with pytest.raises(ValueError, match="algorithm.adv_estimator to be one of"):
        EAPOVerlTrainer(grpo)
    mismatch = verl_config.copy()
    mismatch.algorithm.eapo = {"method": "psr"}
    with pytest.raises(ValueError, match="algorithm.eapo.method=psr but algorithm.adv_estimator=eapo"):
        EAPOVerlTrainer(mismatch)
    fixed_key = verl_config.copy()
    fixed_key.algorithm.eapo = {"w_pos": 1.0}
    with pytest.raises(
        ValueError,
        match=r"algorithm.eapo.w_pos does not apply to method 'eapo'; it accepts w0, w_min, w_max, w_neg, anchor_steps",
    ):
        EAPOVerlTrainer(fixed_key)


# --- checkpoints ---------------------------------------------------------------------------------


def test_checkpoint_round_trip_restores_the_anchor(verl_config, in_memory_tq, tmp_path):
    trainer = attach_checkpoint_io(EAPOVerlTrainer(verl_config), tmp_path)
    run_step(trainer, in_memory_tq, 1, entropy=1.2)  # H_0 = 1.2
    trainer.global_steps = 1
    trainer._save_checkpoint()

    folder = tmp_path / "global_step_1"
    assert trainer.actor_rollout_wg.saved == [str(folder / "actor")]
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "1"
    state = json.loads((folder / STATE_FILE).read_text())
    assert state["method"] == "eapo"
    assert state["weighting"]["anchor_sum"] == pytest.approx(1.2)

    resumed = attach_checkpoint_io(EAPOVerlTrainer(verl_config.copy()), tmp_path)
    resumed._load_checkpoint()  # resume_mode=auto finds global_step_1
    assert resumed.global_steps == 1
    assert resumed.actor_rollout_wg.loaded == [str(folder / "actor")]
    assert resumed.weighting.h0 == pytest.approx(1.2)

    # the resumed run and the uninterrupted one take the same next step: w+ = 0.2 · 0.6 / 1.2 = 0.1
    continued, metrics = run_step(trainer, in_memory_tq, 2, entropy=0.6)
    after_resume, resumed_metrics = run_step(resumed, in_memory_tq, 3, entropy=0.6)
    assert resumed_metrics == pytest.approx(metrics)
    assert metrics["eapo/w_pos"] == pytest.approx(0.1)
    torch.testing.assert_close(after_resume, continued)


def test_resume_path_and_mismatched_settings(verl_config, in_memory_tq, tmp_path):
    trainer = attach_checkpoint_io(EAPOVerlTrainer(verl_config), tmp_path / "run")
    run_step(trainer, in_memory_tq, 1, entropy=0.9)
    trainer.global_steps = 7
    trainer._save_checkpoint()

    explicit = verl_config.copy()
    explicit.trainer.resume_mode = "resume_path"
    explicit.trainer.resume_from_path = str(tmp_path / "run" / "global_step_7")
    resumed = attach_checkpoint_io(EAPOVerlTrainer(explicit), tmp_path / "elsewhere")
    resumed._load_checkpoint()
    assert (resumed.global_steps, resumed.weighting.h0, resumed.first_entropy) == (
        7,
        pytest.approx(0.9),
        pytest.approx(0.9),
    )

    changed = explicit.copy()
    changed.algorithm.eapo = {"w0": 0.3}
    with pytest.raises(
        ValueError, match=r"eapo_state.json: checkpointed w0=0.2 differs from the configured w0=0.3"
    ):
        attach_checkpoint_io(EAPOVerlTrainer(changed), tmp_path / "elsewhere")._load_checkpoint()


def test_resuming_a_checkpoint_without_eapo_state_warns_and_reanchors(verl_config, tmp_path, caplog):
    (tmp_path / "global_step_3").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    trainer = attach_checkpoint_io(EAPOVerlTrainer(verl_config), tmp_path)
    with caplog.at_level(logging.WARNING, logger="eapo.engines.verl.trainer"):
        trainer._load_checkpoint()
    assert trainer.global_steps == 3
    assert trainer.weighting.h0 is None
    assert "re-anchors H_0" in caplog.text


# --- the whole step, the same batch as the TRL trainer's test ------------------------------------


def _approx_state(state):
    if isinstance(state, dict):
        return {key: _approx_state(value) for key, value in state.items()}
    return pytest.approx(state, rel=1e-6) if isinstance(state, float) else state


def test_verl_path_gives_the_shared_step_its_hand_derived_decision(verl_config, in_memory_tq, tmp_path):
    """The batch of eapo.testing.entropy_batch (NaN rewards; each group three scored rollouts of four),
    interleaved as after verl's length balancing, through two steps: the same H_t, weights,
    advantages, metrics and state as tests/test_train.py gets from the TRL trainer."""
    trainer = attach_checkpoint_io(EAPOVerlTrainer(verl_config), tmp_path)
    order = [0, 4, 1, 5, 2, 6, 3, 7]  # verl row -> row of the shared (contiguous) batch
    uids = ["a" if row < 4 else "b" for row in order]
    scores = [entropy_batch.STEP_SCORES[row] for row in order]
    for t in range(2):
        rows = entropy_batch.step_rows(t)
        entropies = [list(rows[row]) if rows[row] else [7.0] for row in order]  # [7.0]: a padding row
        masks = [[1.0] * len(rows[row]) if rows[row] else [0.0] for row in order]
        batch = put_rollouts(in_memory_tq, t + 1, uids=uids, scores=scores, entropies=entropies, masks=masks)
        metrics = {}
        batch = trainer._compute_advantage(batch, metrics=metrics)
        expected = entropy_batch.step_expected(t, eps=1e-6)  # verl's epsilon
        got = torch.stack([in_memory_tq.store[("train", key)]["advantages"][0] for key in batch.keys])
        want = torch.tensor(
            [expected["advantages"][row] if rows[row] else 0.0 for row in order]  # padding: masked to 0
        )
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert metrics.pop("entropy/rollout_tokens") == sum(map(sum, masks))  # verl's own, beside TRL's keys
        assert metrics == pytest.approx(expected["metrics"], rel=1e-6)
        # with TRL's epsilon (1e-4), the estimator gives the TRL trainer's advantages on the same batch
        trl = entropy_batch.step_expected(t, eps=1e-4)
        advantages, _, _ = grouped_polarity_advantages(
            torch.tensor(scores), uids, metrics["eapo/w_pos"], metrics["eapo/w_neg"], eps=1e-4
        )
        torch.testing.assert_close(
            advantages, torch.tensor([trl["advantages"][row] for row in order]), rtol=1e-5, atol=1e-6
        )
    trainer.global_steps = 2
    trainer._save_checkpoint()
    state = json.loads((tmp_path / "global_step_2" / STATE_FILE).read_text())
    assert state == _approx_state(expected["state"])


# --- EAPO's integral term and QAE's quantile split on verl ------------------------------------


def test_eapo_pi_with_the_quantile_split_runs_cores_step_and_resumes_its_integral(
    verl_config, in_memory_tq, tmp_path
):
    """adv_estimator=eapo_pi with split_by=quantile (K = 0.5): each step's advantages are core's EAPOStep
    on the same rewards and H_t, eapo/integral follows the scheme replayed on the entropies, and a resume
    from the step-2 checkpoint continues with the same integral and w+ as the uninterrupted run."""
    from eapo.core import EAPOStep

    verl_config.algorithm.adv_estimator = "eapo_pi"
    verl_config.algorithm.eapo = {"split_by": "quantile", "quantile_k": 0.5}
    trainer = attach_checkpoint_io(EAPOVerlTrainer(verl_config.copy()), tmp_path)
    replay = EAPOStep(make_weighting("eapo_pi"), split_by="quantile", quantile_k=0.5)
    order = [0, 2, 4, 6, 1, 3, 5, 7]  # group a, then group b
    scores = torch.tensor([SCORES[i] for i in order])
    entropies = [2.0, 1.4, 1.1, 2.6]
    for step, entropy in enumerate(entropies[:2], start=1):
        advantages, metrics = run_step(trainer, in_memory_tq, step, entropy=entropy)
        expected, _ = replay.step(scores, [0] * 4 + [1] * 4, entropy)
        torch.testing.assert_close(advantages[torch.tensor(order)], expected.float(), rtol=1e-5, atol=1e-6)
        assert metrics["eapo/integral"] == pytest.approx(replay.weighting.integral)
    trainer.global_steps = 2
    trainer._save_checkpoint()
    resumed = attach_checkpoint_io(EAPOVerlTrainer(verl_config.copy()), tmp_path)
    resumed._load_checkpoint()
    assert resumed.weighting.integral == trainer.weighting.integral != 0.0
    for step, entropy in enumerate(entropies[2:], start=3):
        _, continued = run_step(trainer, in_memory_tq, step, entropy=entropy)
        _, after_resume = run_step(resumed, in_memory_tq, step + 10, entropy=entropy)
        for key in ("eapo/w_pos", "eapo/integral", "eapo/H0"):
            assert after_resume[key] == continued[key], key


def test_the_qae_estimator_gives_cores_quantile_advantages(verl_config, in_memory_tq):
    """adv_estimator=qae (algorithm.eapo.quantile_k = 0.3): GRPO's weights with the quantile split, core's."""
    from eapo.core import EAPOStep

    verl_config.algorithm.adv_estimator = "qae"
    verl_config.algorithm.eapo = {"quantile_k": 0.3}
    trainer = EAPOVerlTrainer(verl_config)
    assert (trainer.eapo_step.split_by, trainer.eapo_step.quantile_k) == ("quantile", 0.3)
    order = [0, 2, 4, 6, 1, 3, 5, 7]  # group a, then group b
    advantages, metrics = run_step(trainer, in_memory_tq, 1, entropy=1.0)
    expected, _ = EAPOStep(make_weighting("grpo"), split_by="quantile", quantile_k=0.3).step(
        torch.tensor([SCORES[i] for i in order]), [0] * 4 + [1] * 4, None
    )
    torch.testing.assert_close(advantages[torch.tensor(order)], expected.float(), rtol=1e-5, atol=1e-6)
    assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == (1.0, 1.0)
