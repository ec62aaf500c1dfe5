"""The verl plugin path of a plugin module (issue 48): ``tests/plugins/toy_plugin.py``'s scheme (with a
setting of its own), control and reward component (with an option of its own), named nowhere under
``src/``, run through eapo's verl plugin as the built-ins do: ``algorithm.adv_estimator=tilted`` with
``algorithm.eapo.tilt`` and ``token_floor``, and ``toy_length`` in the weights and options that
``reward.custom_reward_function.reward_kwargs`` hands eapo's ``compute_score``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[3]
PLUGINS = ROOT / "tests" / "plugins"


def _plugin_env() -> dict[str, str]:
    """This environment with EAPO_PLUGINS=toy_plugin, the plugin's folder and src/ on the Python path."""
    env = {**os.environ, "EAPO_PLUGINS": "toy_plugin"}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def test_every_process_that_imports_verl_registers_the_plugins_estimator():
    """``import verl`` alone (what a Ray worker does: verl imports its plugins, eapo's among them, whose
    package imports EAPO_PLUGINS first) puts the plugin's scheme in verl's estimator registry."""
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print(get_adv_estimator_fn('tilted').__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_plugin_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "compute_tilted_advantage"


def test_a_reward_worker_finds_the_plugins_reward_component():
    """What verl's reward worker does (``RewardLoopWorker._init_reward_fn`` → ``load_reward_manager`` →
    ``get_custom_reward_fn``): load eapo's ``compute_score`` from ``pkg://eapo.engines.verl`` with the
    run's ``reward_kwargs``, in a fresh process with EAPO_PLUGINS set and nothing of eapo imported by
    hand. The plugin's component scores: "drink water" is 11 characters, 11 / 20 = 0.55."""
    code = (
        "import asyncio, json\n"
        "from omegaconf import OmegaConf\n"
        "from verl.trainer.ppo.reward import get_custom_reward_fn\n"
        "config = OmegaConf.create({'reward': {'custom_reward_function': {\n"
        "    'path': 'pkg://eapo.engines.verl', 'name': 'compute_score',\n"
        "    'reward_kwargs': {'weights': {'toy_length': 1.0}, 'options': {'toy_length': {'target': 20}}}}}})\n"
        "score = get_custom_reward_fn(config)\n"
        "print(json.dumps(asyncio.run(score(data_source='eapo/demo', solution_str='drink water',\n"
        "    ground_truth='drink water and rest', extra_info={'question': 'what about the fever'}))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_plugin_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    assert scores == {"score": pytest.approx(0.55), "toy_length": pytest.approx(0.55), "reward_unscored": 0.0}


@pytest.fixture
def toy_plugin_imported(monkeypatch):
    """Import the toy plugin in this process, and unregister it afterwards: its scheme, setting, control,
    reward component and verl estimator would otherwise stay in the registries for every test after this
    one (the parity test of ``algorithm.eapo``'s keys, for one, would see ``tilt`` and ``token_floor``), and
    so would the composites ``compute_score`` built with its component (one per process, by settings)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from eapo.core import CONTROL_SETTINGS, ENTROPY_CONTROLS, WEIGHT_SETTINGS, WEIGHTING_SCHEMES
    from eapo.engines.verl import reward as verl_reward
    from eapo.rewards import REWARD_COMPONENTS

    registries = (
        WEIGHT_SETTINGS,
        WEIGHTING_SCHEMES,
        CONTROL_SETTINGS,
        ENTROPY_CONTROLS,
        ADV_ESTIMATOR_REGISTRY,
        REWARD_COMPONENTS,
        verl_reward._COMPOSITES,
    )
    saved = [dict(registry) for registry in registries]
    monkeypatch.syspath_prepend(str(PLUGINS))
    import toy_plugin  # (registers, as EAPO_PLUGINS does at import in a real process)

    yield toy_plugin
    for registry, before in zip(registries, saved, strict=True):
        registry.clear()
        registry.update(before)
    sys.modules.pop("toy_plugin", None)


def test_the_plugins_scheme_and_control_train_on_verl(verl_config, in_memory_tq, toy_plugin_imported):
    """Two steps of the eapo trainer with the plugin's estimator: w+ = tilt, w- = 1 - tilt, and the
    control's token weights in eapo's loss (its share logged)."""

    from eapo.engines.verl import EAPOVerlTrainer, register_estimators

    register_estimators()  # what the plugin entry point does once the registries are filled
    from test_verl_entropy_control import TinyPolicy, train

    verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2
    verl_config.algorithm.adv_estimator = "tilted"
    verl_config.algorithm.eapo = {"tilt": 0.3, "token_floor": 0.5}
    trainer = EAPOVerlTrainer(verl_config)
    assert (trainer.algorithm.method, dict(trainer.algorithm.weights)) == ("tilted", {"tilt": 0.3})
    assert trainer.algorithm.controls["token_floor"] == 0.5
    history = train(trainer, in_memory_tq, 2, TinyPolicy(seed=3))
    for metrics, calls in history:
        assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == pytest.approx((0.3, 0.7))
        assert metrics["toy/token_floor"] == pytest.approx(0.5)
        assert len(calls) == 2


#: The plugin's reward in the run's ``reward_kwargs`` (what ``eapo train --engine verl`` writes from
#: ``reward.weights`` / ``reward.options``): Rouge-L 0.4 (words, the whole text) + toy_length 0.6, target 20.
REWARD_KWARGS = {
    "weights": {"rouge_l": 0.4, "toy_length": 0.6},
    "options": {"rouge_l": {"level": "word", "extract": "whole"}, "toy_length": {"target": 20}},
}
REFERENCE = "drink water and rest"
#: Two prompts × four rollouts (at most 5 words: the tiny policy's positions), and the plugin's score of
#: each by hand: min(1, characters / 20).
RESPONSES = {
    "a": ["drink water", "rest", "see a doctor", "drink water and rest"],
    "b": ["if the fever lasts", "<advice> rest </advice>", "water", "see a doctor if the"],
}
TOY = {
    "drink water": 11 / 20,
    "rest": 4 / 20,
    "see a doctor": 12 / 20,
    "drink water and rest": 1.0,  # 20 characters
    "if the fever lasts": 18 / 20,
    "<advice> rest </advice>": 1.0,  # 23 characters, capped
    "water": 5 / 20,
    "see a doctor if the": 19 / 20,
}


def scored_rollouts(manager, tokenizer):
    """Each rollout of RESPONSES through verl's ``naive`` reward manager, as the reward loop calls it:
    ``(uid, session, response ids, its output)``, the output being ``{"reward_score", "reward_extra_info"}``."""
    import numpy as np
    import torch
    from verl import DataProto

    out = []
    for uid, texts in RESPONSES.items():
        prompt = tokenizer(f"user: question {uid}", add_special_tokens=False)["input_ids"]
        for session, text in enumerate(texts):
            response = tokenizer(text, add_special_tokens=False)["input_ids"]
            data = DataProto.from_dict(
                tensors={
                    "prompts": torch.tensor([prompt]),
                    "responses": torch.tensor([response]),
                    "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long),
                },
                non_tensors={
                    "data_source": np.array(["eapo/demo"], dtype=object),
                    "reward_model": np.array([{"style": "model", "ground_truth": REFERENCE}], dtype=object),
                    "extra_info": np.array([{"question": f"question {uid}", "index": 0}], dtype=object),
                },
            )
            output = manager.loop.run_until_complete(manager.run_single(data))
            out.append((uid, session, response, output))
    return out


def put_scored_step(queue, policy, scored, step: int):
    """One step's rollouts as verl's TransferQueue holds them before the advantage step: each rollout's
    reward (the manager's ``reward_score``) on its last token and its ``reward_extra_info`` in
    ``extra_fields`` (as verl's agent-loop worker puts them), and the tiny policy's log π and entropies of
    its tokens (the response's word ids mod its vocabulary)."""
    import torch
    from tensordict import NonTensorStack, TensorDict
    from test_verl_entropy_control import VOCAB

    tokens = [[i % VOCAB for i in response] for _, _, response, _ in scored]
    with torch.no_grad():
        logp_rows, entropy_rows = policy.forward(tokens)
    rm_scores = []
    for _, _, response, output in scored:
        row = torch.zeros(len(response))
        row[-1] = output["reward_score"]
        rm_scores.append(row)

    def jagged(rows):
        return torch.nested.as_nested_tensor(
            [torch.as_tensor(r, dtype=torch.float32) for r in rows], layout=torch.jagged
        )

    keys = [f"{uid}{step}_{session}_0" for uid, session, _, _ in scored]
    fields = TensorDict(
        {
            "uid": NonTensorStack(*[f"{uid}{step}" for uid, *_ in scored]),
            "index": torch.tensor(["ab".index(uid) for uid, *_ in scored]),
            "raw_prompt": NonTensorStack(
                *[[{"role": "user", "content": f"question {uid}"}] for uid, *_ in scored]
            ),
            "responses": torch.nested.as_nested_tensor(
                [torch.tensor(response) for _, _, response, _ in scored], layout=torch.jagged
            ),
            "tokens": jagged(tokens),
            "response_mask": jagged([[1.0] * len(row) for row in tokens]),
            "rm_scores": jagged(rm_scores),
            "old_log_probs": jagged(logp_rows),
            "entropy": jagged(entropy_rows),
            "extra_fields": NonTensorStack(
                *[{"reward_extra_info": output["reward_extra_info"]} for *_, output in scored]
            ),
        },
        batch_size=len(keys),
    )
    return queue.kv_batch_put(keys=keys, partition_id="train", fields=fields)


def test_the_plugins_reward_scores_verls_rollouts_and_trains(
    verl_config, in_memory_tq, tiny_tokenizer, toy_plugin_imported, tmp_path, monkeypatch
):
    """Two steps of the eapo trainer with all three of the plugin's registrations: each rollout scored
    through verl's ``naive`` reward manager by eapo's ``compute_score`` with ``toy_length`` in its
    ``reward_kwargs``; the advantage step on those rewards (the plugin's estimator, w+ = 0.3, w- = 0.7),
    the update with the plugin's control, and ``rollouts.jsonl``: each rollout's ``toy_length`` is its
    hand score, its reward 0.4·Rouge-L + 0.6·toy_length, its advantage the weighted GRPO advantage of
    those rewards, whose split the plugin's component moves (prompt b's rollouts, split by Rouge-L alone,
    would be D-, D+, D+, D-)."""
    import torch
    from test_verl_entropy_control import TinyActorWorkerGroup, TinyPolicy
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from eapo.core.step import grouped_polarity_advantages
    from eapo.engines.verl import EAPOVerlTrainer, register_estimators
    from eapo.engines.verl.launch import NO_DUAL_CLIP
    from eapo.engines.verl.rollouts import eos_token_ids
    from eapo.run_dir import read_rollouts

    register_estimators()  # what the plugin entry point does once the registries are filled
    verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2
    verl_config.algorithm.adv_estimator = "tilted"
    verl_config.algorithm.eapo = {"tilt": 0.3, "token_floor": 0.5}
    verl_config.reward.custom_reward_function.path = "pkg://eapo.engines.verl"
    verl_config.reward.custom_reward_function.name = "compute_score"
    verl_config.reward.custom_reward_function.reward_kwargs = REWARD_KWARGS
    verl_config.reward.reward_manager.name = "naive"
    verl_config.trainer.eapo = {"rollouts": 1, "rollouts_file": str(tmp_path / "rollouts.jsonl")}
    trainer = EAPOVerlTrainer(verl_config)
    trainer.tokenizer = tiny_tokenizer  # what init() loads
    trainer.__dict__["eos_token_ids"] = eos_token_ids(tiny_tokenizer)  # the model's, without its files
    manager = load_reward_manager(trainer.config, tiny_tokenizer)  # as verl's reward worker loads it
    # the rest of train() in test_verl_entropy_control: dual clip off, two epochs, the whole batch at once
    trainer.config.actor_rollout_ref.actor.clip_ratio_c = NO_DUAL_CLIP
    trainer.config.actor_rollout_ref.actor.ppo_epochs = 2
    trainer.config.actor_rollout_ref.actor.ppo_mini_batch_size = 2
    policy = TinyPolicy(seed=3)
    start = policy.logits.detach().clone()
    trainer.actor_rollout_wg = TinyActorWorkerGroup(in_memory_tq, policy)
    trainer.actor_rollout_wg.set_loss_fn(trainer.actor_loss_fn())

    def verls_step(self, metrics, timing_raw):  # rollout + reward → advantage → update
        batch = put_scored_step(
            in_memory_tq, policy, scored_rollouts(manager, tiny_tokenizer), self.global_steps
        )
        batch = self._compute_advantage(batch, metrics=metrics)
        self._update_actor(batch, metrics)
        return batch

    monkeypatch.setattr(PPOTrainerSync, "step", verls_step)
    history = []
    for step in (1, 2):
        trainer.global_steps = step
        metrics: dict = {}
        trainer.step(metrics, {})
        history.append(metrics)
    assert not torch.equal(policy.logits, start)  # it trained
    assert len(trainer.actor_rollout_wg.calls) == 4  # two epochs a step

    rows = read_rollouts(tmp_path)
    assert [row["step"] for row in rows] == [1] * 8 + [2] * 8
    for step, metrics in enumerate(history, start=1):
        assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == pytest.approx((0.3, 0.7))
        assert metrics["toy/token_floor"] == pytest.approx(0.5)
        lines = {(row["prompt"], row["sample"]): row for row in rows if row["step"] == step}
        ordered = [
            lines[(f"question {uid}", i)] for uid, texts in RESPONSES.items() for i in range(len(texts))
        ]
        assert [row["completion"] for row in ordered] == [t for texts in RESPONSES.values() for t in texts]
        for row in ordered:
            assert set(row["rewards"]) == {"rouge_l", "toy_length"}
            assert row["rewards"]["toy_length"] == pytest.approx(TOY[row["completion"]], abs=1e-12)
            assert row["rewards"]["toy_length"] == pytest.approx(min(1.0, len(row["completion"]) / 20))
            total = 0.4 * row["rewards"]["rouge_l"] + 0.6 * row["rewards"]["toy_length"]
            assert row["reward"] == pytest.approx(total, abs=1e-6)
        totals = torch.tensor([row["reward"] for row in ordered])
        uids = [uid for uid, texts in RESPONSES.items() for _ in texts]
        advantages, positive, _ = grouped_polarity_advantages(totals, uids, 0.3, 0.7)
        assert [row["advantage"] for row in ordered] == pytest.approx(advantages.tolist(), abs=1e-6)
        assert [row["polarity"] for row in ordered] == ["D+" if p else "D-" for p in positive.tolist()]
        assert [row["polarity"] for row in ordered[4:]] == ["D+", "D+", "D-", "D+"]
        rouge = torch.tensor([row["rewards"]["rouge_l"] for row in ordered])
        _, by_rouge, _ = grouped_polarity_advantages(rouge, uids, 0.3, 0.7)
        assert by_rouge.tolist()[4:] == [False, True, True, False]


def test_the_plugin_is_unregistered_after_its_in_process_test():
    """The fixture of the tests above restores the registries (this runs after the tests that use it)."""
    from eapo.core import WEIGHTING_SCHEMES
    from eapo.engines.verl import reward as verl_reward
    from eapo.engines.verl.settings import setting_keys
    from eapo.rewards import REWARD_COMPONENTS

    assert "tilted" not in WEIGHTING_SCHEMES and "tilt" not in setting_keys()
    assert "toy_length" not in REWARD_COMPONENTS
    assert not any("toy_length" in key for key in verl_reward._COMPOSITES)
