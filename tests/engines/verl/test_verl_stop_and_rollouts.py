"""Stop strings, stop reasons and rollouts.jsonl on verl, piece by piece (no main_ppo; the real run's
assertions are in test_verl_cpu_train.py).

* eapo's agent loop (``eapo_single_turn_agent``, built as verl's agent-loop worker builds it): vLLM gets
  ``stop`` and ``include_stop_str_in_output``, the response is cut by eapo.runtime.stop's rule (a
  straddling token kept), the reward gets the stop strings and the length;
* ``compute_score`` through verl's ``naive`` manager: the text cut at the stop string, the length passed on;
* the trainer: ``completions/stopped_by_*`` and the ``rollouts.jsonl`` lines of a hand-built step, every
  value derived by hand;
* ``eapo train --engine verl``'s overrides for ``rollout.stop`` and ``logging.rollouts``, composed with
  verl's Hydra config.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path

import pytest

pytest.importorskip("verl")

import hydra  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tensordict import NonTensorStack, TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from eapo.engines.verl import EAPOVerlTrainer  # noqa: E402
from eapo.engines.verl import reward as verl_reward  # noqa: E402
from eapo.engines.verl.agent_loop import (  # noqa: E402
    EAPOSingleTurnAgentLoop,
    check_prompt_length,
    seed_of_request,
)
from eapo.engines.verl.rollouts import (  # noqa: E402
    AGENT_LOOP_NAME,
    COMPLETION_TOKENS_FIELD,
    STOP_FIELD,
    RolloutLog,
    eos_token_ids,
    request_seed,
    rollout_stops,
    stop_reason_metrics,
    stop_reason_of,
    with_seed,
    with_stops,
)
from eapo.run_dir import ROLLOUT_KEYS, read_rollouts  # noqa: E402

STOPS = ["</advice>", "er r"]


def words(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# --- the pieces ------------------------------------------------------------------------------------


def test_with_stops_adds_vllms_stop_and_keeps_the_rest():
    params = {"temperature": 1.0, "top_p": 0.9, "logprobs": True}
    assert with_stops(params, ()) == params
    got = with_stops({**params, "stop": ["x"]}, ("</advice>", "x"))
    assert got == {**params, "stop": ["x", "</advice>"], "include_stop_str_in_output": True}
    assert "stop" not in params  # a copy


def test_rollout_stops_read_verls_extension_point(verl_config):
    rollout = verl_config.actor_rollout_ref.rollout
    assert rollout_stops(rollout) == ()  # custom: null
    rollout.custom = {"stop": ["</advice>", "\n\n"]}
    assert rollout_stops(rollout) == ("</advice>", "\n\n")
    rollout.custom = {"stop": "</advice>"}
    with pytest.raises(ValueError, match=r"actor_rollout_ref.rollout.custom.stop must be a list"):
        rollout_stops(rollout)
    rollout.custom = {"stop": [""]}
    with pytest.raises(ValueError, match="non-empty strings"):
        rollout_stops(rollout)


def test_stop_reasons_and_their_shares(tiny_tokenizer):
    eos = eos_token_ids(tiny_tokenizer)
    assert eos == {tiny_tokenizer.eos_token_id}
    cases = {  # response text → reason, with STOPS
        "drink water </advice>": "string",
        "water rest": "string",  # "er r" straddles "water" and "rest"
        "rest [EOS]": "eos",
        "see a doctor": "cap",
    }
    for text, reason in cases.items():
        ids = words(tiny_tokenizer, text)
        decoded = tiny_tokenizer.decode(ids, skip_special_tokens=True)
        assert stop_reason_of(decoded, ids, STOPS, eos) == reason, text
        if reason == "string":  # without stop strings the same rollout ran to the cap
            assert stop_reason_of(decoded, ids, (), eos) == "cap"
    # 2 of 4 by a string, 1 by EOS, 1 at the cap; the shares sum to 1
    assert stop_reason_metrics(list(cases.values())) == {
        "completions/stopped_by_string": 0.5,
        "completions/stopped_by_eos": 0.25,
        "completions/stopped_by_cap": 0.25,
    }
    assert stop_reason_metrics([]) == {}
    with pytest.raises(ValueError, match="unknown stop reasons"):
        stop_reason_metrics(["length"])


def test_rollout_log_settings(verl_config):
    assert RolloutLog.from_trainer_config(verl_config.trainer) == RolloutLog(0, "rollouts.jsonl")
    verl_config.trainer.eapo = {"rollouts": 2, "rollouts_file": "/tmp/r.jsonl"}
    log = RolloutLog.from_trainer_config(verl_config.trainer)
    assert [step for step in range(1, 7) if log.due(step)] == [2, 4, 6]
    verl_config.trainer.eapo = {"rollouts": -1}
    with pytest.raises(ValueError, match=r"trainer.eapo.rollouts must be an int >= 0"):
        RolloutLog.from_trainer_config(verl_config.trainer)
    verl_config.trainer.eapo = {"rollout": 1}
    with pytest.raises(ValueError, match=r"unknown keys \['rollout'\]"):
        RolloutLog.from_trainer_config(verl_config.trainer)


# --- the agent loop --------------------------------------------------------------------------------


class RecordingServer:
    """verl's LLM server client: records each ``generate`` and answers with fixed token ids."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids
        self.calls: list[dict] = []

    async def generate(self, **kwargs):
        self.calls.append(kwargs)
        log_probs = [-0.5 - i for i in range(len(self.token_ids))]
        return TokenOutput(token_ids=self.token_ids, log_probs=log_probs, stop_reason="completed")


def run_agent_loop(verl_config, tokenizer, response: str, stops: list[str] | None, **fields):
    """eapo's agent loop, instantiated from verl's registry as verl's agent-loop worker does, on one prompt
    (``fields``: what verl's v1 agent-loop worker adds to its arguments, e.g. ``global_steps``)."""
    if stops is not None:
        verl_config.actor_rollout_ref.rollout.custom = {"stop": stops}
    server = RecordingServer(words(tokenizer, response))

    async def run():
        loop = hydra.utils.instantiate(
            _agent_loop_registry[AGENT_LOOP_NAME],
            trainer_config=DictConfigWrap(config=verl_config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(verl_config.data),
            tools=ToolListWrap([]),
        )
        return await loop.run(
            {"temperature": 1.0, "top_p": 1.0, "logprobs": True},
            raw_prompt=[{"role": "user", "content": "question"}],
            **fields,
        )

    return asyncio.run(run()), server


def test_the_agent_loop_passes_stop_to_vllm_and_cuts_by_eapos_rule(verl_config, tiny_tokenizer):
    # "er r" is completed by "rest", which straddles it: "rest" is kept whole, what follows is cut
    output, server = run_agent_loop(verl_config, tiny_tokenizer, "drink water rest and see", STOPS)
    (call,) = server.calls
    assert call["sampling_params"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "logprobs": True,
        "stop": STOPS,
        "include_stop_str_in_output": True,
    }
    assert output.response_ids == words(tiny_tokenizer, "drink water rest")
    assert output.response_mask == [1, 1, 1]
    assert output.response_logprobs == [-0.5, -1.5, -2.5]
    assert output.extra_fields[STOP_FIELD] == STOPS
    assert output.extra_fields[COMPLETION_TOKENS_FIELD] == 3


def test_the_agent_loop_without_stop_strings_is_verls(verl_config, tiny_tokenizer):
    output, server = run_agent_loop(verl_config, tiny_tokenizer, "drink water rest and see", None)
    assert server.calls[0]["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "logprobs": True}
    assert output.response_ids == words(tiny_tokenizer, "drink water rest and see")
    assert output.extra_fields[STOP_FIELD] == []
    assert output.extra_fields[COMPLETION_TOKENS_FIELD] == 5


def test_each_request_gets_a_seed_from_the_run_seed_step_prompt_and_sample(verl_config, tiny_tokenizer):
    """What verl's v1 agent-loop worker passes every agent loop (the step, the dataset row and split, the
    sample's session) and rollout.seed give vLLM's per-request seed: the same in a second run (a resume
    included), different when any of the five differs."""
    verl_config.actor_rollout_ref.rollout.seed = 7
    fields = {"global_steps": 3, "index": 5, "session_id": 2, "extra_info": {"split": "train", "index": 5}}
    _, server = run_agent_loop(verl_config, tiny_tokenizer, "drink water", None, **fields)
    seed = server.calls[0]["sampling_params"]["seed"]
    assert seed == request_seed(7, 3, "train", 5, 2) == seed_of_request(7, fields)
    assert 0 <= seed < 2**63
    _, again = run_agent_loop(verl_config, tiny_tokenizer, "drink water", None, **fields)
    assert again.calls[0]["sampling_params"]["seed"] == seed
    others = {
        request_seed(8, 3, "train", 5, 2),
        request_seed(7, 4, "train", 5, 2),
        request_seed(7, 3, "dev", 5, 2),
        request_seed(7, 3, "train", 6, 2),
        request_seed(7, 3, "train", 5, 3),
    }
    assert seed not in others and len(others) == 5
    group = {request_seed(0, 1, "train", 0, sample) for sample in range(64)}
    assert len(group) == 64  # the n samples of a prompt are not one sample repeated
    # a seed already in verl's sampling parameters is kept; without the step, verl's sampling is left alone
    assert with_seed({"seed": 1}, seed) == {"seed": 1}
    assert seed_of_request(7, {"index": 5, "session_id": 2}) is None
    assert seed_of_request(None, fields) is None


# --- the reward ------------------------------------------------------------------------------------

REFERENCE = "drink water and rest"
QUESTION = "what about the fever"
ANSWER = "<think> reasoning about symptoms </think> <advice> drink water and rest </advice>"


def scored_by_naive(
    verl_config, tokenizer, response: str, extra_fields: dict, *, reference: str = REFERENCE, **reward_kwargs
) -> dict:
    """One rollout through verl's naive reward manager, with the agent loop's ``extra_fields`` in the
    batch as verl's agent-loop worker puts them (``tool_extra_fields``)."""
    verl_config.reward.custom_reward_function.path = "pkg://eapo.engines.verl"
    verl_config.reward.custom_reward_function.name = "compute_score"
    verl_config.reward.custom_reward_function.reward_kwargs = reward_kwargs
    verl_config.reward.reward_manager.name = "naive"
    manager = load_reward_manager(verl_config, tokenizer)
    prompt_ids = words(tokenizer, f"user: {QUESTION}")
    response_ids = words(tokenizer, response)
    attention_mask = torch.ones(1, len(prompt_ids) + len(response_ids), dtype=torch.long)
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt_ids]),
            "responses": torch.tensor([response_ids]),
            "attention_mask": attention_mask,
        },
        non_tensors={
            "data_source": np.array(["eapo/demo"], dtype=object),
            "reward_model": np.array([{"style": "model", "ground_truth": reference}], dtype=object),
            "extra_info": np.array([{"question": QUESTION, "index": 0}], dtype=object),
            "tool_extra_fields": np.array([extra_fields], dtype=object),
        },
    )
    return manager.loop.run_until_complete(manager.run_single(data))


def test_the_reward_sees_the_text_cut_at_the_stop_string(verl_config, tiny_tokenizer):
    """The answer, then words written past "</advice>" (as a straddling token can): cut at the stop
    string, the text is the reference exactly (Rouge-L over the whole text 1); uncut, the words cost."""
    response = ANSWER + " rest and see"
    whole = {"weights": {"rouge_l": 1.0}, "options": {"rouge_l": {"extract": "whole"}}}
    fields = {STOP_FIELD: ["</advice>"], COMPLETION_TOKENS_FIELD: 14}
    cut = scored_by_naive(verl_config, tiny_tokenizer, response, fields, reference=ANSWER, **whole)
    assert cut["reward_score"] == pytest.approx(1.0)
    uncut = scored_by_naive(
        verl_config, tiny_tokenizer, response, {STOP_FIELD: []}, reference=ANSWER, **whole
    )
    assert uncut["reward_score"] < 0.95
    # reward_kwargs.stop, for a reward manager that drops the agent loop's fields, does the same
    explicit = scored_by_naive(
        verl_config, tiny_tokenizer, response, {}, reference=ANSWER, stop=["</advice>"], **whole
    )
    assert explicit["reward_score"] == pytest.approx(1.0)


def test_the_reward_passes_the_length_in_tokens_on(monkeypatch):
    """``completion_lengths`` reaches the composite (what the overlong penalty reads) from the agent
    loop's field; without it the composite gets no length (verl passes none)."""
    seen = []

    class Recording:
        def score(self, prompts, completions, references, **kwargs):
            seen.append((completions, kwargs))
            from eapo.rewards.composite import CompositeResult

            return CompositeResult(rewards=[0.5], components={"format": [0.5]}, metrics={}, details={})

    monkeypatch.setattr(verl_reward, "composite_for", lambda *args: Recording())
    info = {"question": QUESTION, STOP_FIELD: ["</advice>"], COMPLETION_TOKENS_FIELD: 7}
    scores = asyncio.run(verl_reward.compute_score("eapo/demo", "a </advice> b", REFERENCE, info))
    assert scores == {"score": 0.5, "format": 0.5, "reward_unscored": 0.0}
    assert seen[-1] == (["a </advice>"], {"completion_lengths": [7]})
    asyncio.run(verl_reward.compute_score("eapo/demo", "a </advice> b", REFERENCE, {"question": QUESTION}))
    assert seen[-1] == (["a </advice> b"], {})


# --- the trainer: stop reasons and rollouts.jsonl of a hand-built step ---------------------------

#: Two prompts × three rollouts, interleaved as after verl's length balancing. ``index`` is the dataset
#: row: prompt "b" (row 2) comes before "a" (row 5) in rollouts.jsonl.
ROLLOUTS = [  # uid, session, response, score (NaN: unscored), reason
    ("a", 0, "drink water </advice>", 0.9, "string"),
    ("b", 0, "water rest", 0.1, "string"),  # "er r" straddles: the completion is "water r"
    ("a", 1, "rest [EOS]", 0.2, "eos"),
    ("b", 1, "<advice> rest </advice>", math.nan, "string"),
    ("a", 2, "see a doctor", 0.7, "cap"),
    ("b", 2, "fever lasts", 0.5, "cap"),
]
INDEX = {"a": 5, "b": 2}


def put_step(queue, tokenizer, step: int, *, padding: bool = False):
    """One step's rollouts as verl's TransferQueue holds them when ``_compute_advantage`` runs."""
    rows = [*ROLLOUTS, ("pad", 0, "[EOS]", 0.0, None)] if padding else ROLLOUTS
    keys = [f"{uid}{step}_{session}_0" for uid, session, *_ in rows]
    tags = [{"is_padding": uid == "pad"} for uid, *_ in rows]
    responses = [torch.tensor(words(tokenizer, text)) for _, _, text, _, _ in rows]
    rm_scores, extra_fields = [], []
    for (uid, _, _, score, _), response in zip(rows, responses, strict=True):
        row = torch.zeros(len(response))
        row[-1] = score
        rm_scores.append(row)
        components = {"format": 1.0, "rouge_l": math.nan if math.isnan(score) else score / 2}
        info = {"score": score, **components, "reward_unscored": float(math.isnan(score))}
        extra_fields.append({} if uid == "pad" else {"reward_extra_info": info, "turn_scores": []})
    fields = TensorDict(
        {
            "uid": NonTensorStack(*[f"{uid}{step}" for uid, *_ in rows]),
            "index": torch.tensor([INDEX.get(uid, 0) for uid, *_ in rows]),
            "raw_prompt": NonTensorStack(
                *[[{"role": "user", "content": f"question {uid}"}] for uid, *_ in rows]
            ),
            "responses": torch.nested.as_nested_tensor(responses, layout=torch.jagged),
            "response_mask": torch.nested.as_nested_tensor(
                [torch.ones(len(r)) for r in responses], layout=torch.jagged
            ),
            "rm_scores": torch.nested.as_nested_tensor(rm_scores, layout=torch.jagged),
            "old_log_probs": torch.nested.as_nested_tensor(
                [-torch.ones(len(r)) for r in responses], layout=torch.jagged
            ),
            "entropy": torch.nested.as_nested_tensor(
                [torch.full((len(r),), 1.5) for r in responses], layout=torch.jagged
            ),
            "extra_fields": NonTensorStack(*extra_fields),
        },
        batch_size=len(keys),
    )
    return queue.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=tags)


@pytest.fixture
def logging_trainer(verl_config, tiny_tokenizer, tmp_path):
    """The eapo trainer with STOPS through eapo's agent loop and rollouts.jsonl every step."""
    verl_config.actor_rollout_ref.rollout.custom = {"stop": STOPS}
    verl_config.actor_rollout_ref.rollout.agent.default_agent_loop = AGENT_LOOP_NAME
    verl_config.trainer.eapo = {"rollouts": 1, "rollouts_file": str(tmp_path / "run" / "rollouts.jsonl")}
    trainer = EAPOVerlTrainer(verl_config)
    trainer.tokenizer = tiny_tokenizer  # what init() loads
    trainer.__dict__["eos_token_ids"] = eos_token_ids(tiny_tokenizer)  # the model's, without its files
    trainer.global_steps = 1
    return trainer


def test_a_steps_stop_reasons_and_rollouts_jsonl(logging_trainer, in_memory_tq, tiny_tokenizer, tmp_path):
    trainer = logging_trainer
    batch = put_step(in_memory_tq, tiny_tokenizer, 1)
    metrics = {}
    trainer._compute_advantage(batch, metrics=metrics)
    metrics.update(trainer._log_rollouts(batch))

    # 3 of 6 ended by a stop string, 1 by EOS, 2 at the cap
    assert metrics["completions/stopped_by_string"] == pytest.approx(3 / 6)
    assert metrics["completions/stopped_by_eos"] == pytest.approx(1 / 6)
    assert metrics["completions/stopped_by_cap"] == pytest.approx(2 / 6)
    # a: [0.9, 0.2, 0.7], mean 0.6 → D+, D-, D+; b: [0.1, NaN, 0.5], scored mean 0.3 → D-, -, D+
    assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == (0.2, 1.0)  # step 1: w+ = w0
    assert metrics["eapo/frac_positive"] == pytest.approx(3 / 5)
    assert metrics["eapo/num_unscored"] == 1

    rows = read_rollouts(tmp_path / "run")
    assert all(tuple(row) == ROLLOUT_KEYS for row in rows)
    std_a = math.sqrt((0.3**2 + 0.4**2 + 0.1**2) / 2) + 1e-6  # unbiased std, + GRPO's epsilon
    std_b = math.sqrt(2 * 0.2**2) + 1e-6
    expected = [  # prompt b (dataset row 2) first, then a; samples in order
        (
            0,
            0,
            "question b",
            "water r",
            0.1,
            {"format": 1.0, "rouge_l": 0.05},
            -0.2 / std_b,
            "D-",
            1.0,
            "string",
        ),
        (
            0,
            1,
            "question b",
            "<advice> rest </advice>",
            None,
            {"format": 1.0, "rouge_l": None},
            0.0,
            None,
            None,
            "string",
        ),
        (
            0,
            2,
            "question b",
            "fever lasts",
            0.5,
            {"format": 1.0, "rouge_l": 0.25},
            0.2 * 0.2 / std_b,
            "D+",
            0.2,
            "cap",
        ),
        (
            1,
            0,
            "question a",
            "drink water </advice>",
            0.9,
            {"format": 1.0, "rouge_l": 0.45},
            0.2 * 0.3 / std_a,
            "D+",
            0.2,
            "string",
        ),
        (1, 1, "question a", "rest", 0.2, {"format": 1.0, "rouge_l": 0.1}, -0.4 / std_a, "D-", 1.0, "eos"),
        (
            1,
            2,
            "question a",
            "see a doctor",
            0.7,
            {"format": 1.0, "rouge_l": 0.35},
            0.2 * 0.1 / std_a,
            "D+",
            0.2,
            "cap",
        ),
    ]
    assert len(rows) == len(expected)
    for row, (
        prompt_index,
        sample,
        prompt,
        completion,
        reward,
        rewards,
        advantage,
        polarity,
        weight,
        reason,
    ) in zip(rows, expected, strict=True):
        assert row["step"] == 1
        assert (row["prompt_index"], row["sample"], row["prompt"], row["completion"]) == (
            prompt_index,
            sample,
            prompt,
            completion,
        )
        assert row["reward"] == pytest.approx(reward)
        assert row["rewards"] == pytest.approx(rewards)
        assert row["advantage"] == pytest.approx(advantage, rel=1e-6)
        assert (row["polarity"], row["weight"], row["stop_reason"]) == (polarity, weight, reason)
    # the logged numbers, from the lines: the mean of the scored rewards (verl's critic/score/mean is NaN
    # with an unscored rollout) and the share of D+ among the scored rollouts
    scored = [row for row in rows if row["polarity"] is not None]
    assert sum(row["polarity"] == "D+" for row in scored) / len(scored) == pytest.approx(
        metrics["eapo/frac_positive"]
    )
    # the advantages the lines hold are the ones the update uses
    for row in rows:
        uid = "ab"[1 - row["prompt_index"]]
        tokens = in_memory_tq.store[("train", f"{uid}1_{row['sample']}_0")]["advantages"]
        assert float(tokens[0]) == pytest.approx(row["advantage"], abs=1e-7)


def test_step_logs_the_stop_reasons_and_appends_only_on_its_steps(
    logging_trainer, in_memory_tq, tiny_tokenizer, tmp_path, monkeypatch
):
    """``step`` (verl's, here the advantage step on a queued batch) ends with the stop reasons in the
    step's metrics, and the rollouts of every ``trainer.eapo.rollouts``-th step appended."""
    trainer = logging_trainer
    trainer.rollout_log = RolloutLog(rollouts=2, rollouts_file=trainer.rollout_log.rollouts_file)

    def verls_step(self, metrics, timing_raw):
        return self._compute_advantage(put_step(in_memory_tq, tiny_tokenizer, self.global_steps), metrics)

    monkeypatch.setattr(PPOTrainerSync, "step", verls_step)
    for step in (1, 2, 3):
        trainer.global_steps = step
        metrics = {}
        trainer.step(metrics, {})
        assert metrics["completions/stopped_by_string"] == pytest.approx(0.5)
        assert trainer._last_step[0] is metrics  # the checkpoint's snapshot has them too
    rows = read_rollouts(tmp_path / "run")
    assert [row["step"] for row in rows] == [2] * 6


def test_padding_rows_are_neither_logged_nor_counted(logging_trainer, in_memory_tq, tiny_tokenizer, tmp_path):
    """verl pads a batch to the data-parallel size with synthetic rows (``is_padding``; score 0, one EOS
    token, a uid of their own): they are no rollouts, so neither the split's metrics, the stop reasons
    nor rollouts.jsonl count them."""
    trainer = logging_trainer
    batch = put_step(in_memory_tq, tiny_tokenizer, 1, padding=True)
    metrics = {}
    trainer._compute_advantage(batch, metrics=metrics)
    assert metrics["eapo/frac_positive"] == pytest.approx(3 / 5)  # with the padding row: 4 / 6
    assert metrics["eapo/num_unscored"] == 1
    metrics = trainer._log_rollouts(batch)
    assert metrics["completions/stopped_by_eos"] == pytest.approx(1 / 6)  # the padding row's EOS left out
    assert len(read_rollouts(tmp_path / "run")) == 6


def test_stop_strings_with_verls_own_agent_loop_are_refused(verl_config):
    verl_config.actor_rollout_ref.rollout.custom = {"stop": ["</advice>"]}
    with pytest.raises(ValueError, match=r"default_agent_loop=eapo_single_turn_agent"):
        EAPOVerlTrainer(verl_config)


# --- eapo train --engine verl's overrides ----------------------------------------------------------


def test_launch_writes_stop_and_rollouts_overrides_that_compose(tmp_path):
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from eapo.config import load_config
    from eapo.engines.verl.launch import VerlLayout, verl_overrides

    stops = ["</advice>", "it's", "a\\", "\n\n"]
    tiny = Path(__file__).resolve().parents[3] / "src" / "eapo" / "configs" / "tiny.yaml"
    config = load_config(tiny, ["engine=verl", "logging.rollouts=3", f"rollout.stop={json.dumps(stops)}"])
    layout = VerlLayout(tmp_path / "run")
    args = verl_overrides(
        config,
        layout,
        model_dir=tmp_path / "model",
        adapter=None,
        data={"train": tmp_path / "train.parquet", "val": tmp_path / "val.parquet"},
        num_rows=16,
        resume=False,
        cpu=True,
    )
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=args)
    OmegaConf.resolve(composed)
    rollout = composed.actor_rollout_ref.rollout
    assert rollout_stops(rollout) == tuple(stops)
    assert rollout.agent.default_agent_loop == AGENT_LOOP_NAME
    assert list(composed.reward.custom_reward_function.reward_kwargs.stop) == stops
    log = RolloutLog.from_trainer_config(composed.trainer)
    assert log == RolloutLog(3, str((tmp_path / "run").resolve() / "rollouts.jsonl"))
    # the eapo trainer accepts the composed config (stops with eapo's agent loop)
    assert EAPOVerlTrainer(composed).stops == tuple(stops)


def test_a_prompt_over_the_cap_is_refused_where_verl_cuts_it_from_the_left():
    """verl's agent loops pass every prompt through ``_cap_text_prompt_length``, which left-truncates;
    eapo's loop refuses an over-long prompt instead (``eapo train --engine verl`` has cut it to fit)."""
    from types import SimpleNamespace

    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    assert check_prompt_length([1, 2, 3], 3) == [1, 2, 3]
    loop = SimpleNamespace(rollout_config=SimpleNamespace(prompt_length=3))
    assert "_cap_text_prompt_length" in vars(AgentLoopBase)  # the hook verl calls, overridden
    with pytest.raises(
        ValueError, match=r"a prompt of 4 tokens is over actor_rollout_ref.rollout.prompt_length=3"
    ):
        EAPOSingleTurnAgentLoop._cap_text_prompt_length(loop, [1, 2, 3, 4])
