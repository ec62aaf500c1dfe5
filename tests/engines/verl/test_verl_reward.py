"""compute_score through verl's reward-manager interface (the ``naive`` manager, loaded as verl loads it)."""

from __future__ import annotations

import asyncio
import math

import pytest

pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402

from eapo.engines.verl import compute_score  # noqa: E402
from eapo.rewards import make_composite  # noqa: E402

REFERENCE = "drink water and rest"
QUESTION = "what about the fever"
RESPONSES = [
    "<think> reasoning about symptoms </think> <advice> drink water and rest </advice>",  # format 1, Rouge-L 1
    "<advice> drink water </advice>",  # no <think>: format 0; Rouge-L F1 = 20/27 (see below)
    "drink water",  # no tags at all
]
WEIGHTS = {"format": 0.5, "rouge_l": 0.5}


def reward_manager(verl_config, tokenizer, **reward_kwargs):
    verl_config.reward.custom_reward_function.path = "pkg://eapo.engines.verl"
    verl_config.reward.custom_reward_function.name = "compute_score"
    verl_config.reward.custom_reward_function.reward_kwargs = reward_kwargs
    verl_config.reward.reward_manager.name = "naive"
    return load_reward_manager(verl_config, tokenizer)


def one_rollout(tokenizer, response: str) -> DataProto:
    """A single-rollout batch as the agent loop hands it to the reward manager (right-padded response)."""
    prompt_ids = tokenizer(f"user: {QUESTION}", add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    width = 16
    responses = torch.full((1, width), tokenizer.pad_token_id)
    responses[0, : len(response_ids)] = torch.tensor(response_ids)
    attention_mask = torch.zeros(1, len(prompt_ids) + width, dtype=torch.long)
    attention_mask[0, : len(prompt_ids) + len(response_ids)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt_ids]),
            "responses": responses,
            "attention_mask": attention_mask,
        },
        non_tensors={
            "data_source": np.array(["eapo/demo"], dtype=object),
            "reward_model": np.array([{"style": "model", "ground_truth": REFERENCE}], dtype=object),
            "extra_info": np.array([{"question": QUESTION, "index": 0}], dtype=object),
        },
    )


def test_naive_reward_manager_scores_with_the_composite(verl_config, tiny_tokenizer):
    manager = reward_manager(verl_config, tiny_tokenizer, weights=WEIGHTS)
    assert manager.is_async_reward_score  # compute_score is a coroutine function
    outputs = [
        manager.loop.run_until_complete(manager.run_single(one_rollout(tiny_tokenizer, r))) for r in RESPONSES
    ]

    # 1: exact answer in the right format. 2: char-level LCS of "drinkwater" (10) with
    # "drinkwaterandrest" (17) is 10, P = 1, R = 10/17, F1 = 20/27; format 0.
    assert outputs[0]["reward_score"] == pytest.approx(1.0)
    assert outputs[1]["reward_score"] == pytest.approx(0.5 * 20 / 27)
    assert outputs[1]["reward_extra_info"]["rouge_l"] == pytest.approx(20 / 27)
    assert outputs[1]["reward_extra_info"]["format"] == 0.0

    # every rollout: the score the composite gives directly, and the same extra-info keys
    direct = make_composite(WEIGHTS).score([QUESTION] * 3, RESPONSES, [REFERENCE] * 3)
    for output, total, fmt, rouge in zip(
        outputs, direct.rewards, direct.components["format"], direct.components["rouge_l"], strict=True
    ):
        assert output["reward_score"] == pytest.approx(total)
        assert set(output["reward_extra_info"]) == {"score", "format", "rouge_l", "reward_unscored"}
        assert output["reward_extra_info"]["format"] == fmt
        assert output["reward_extra_info"]["rouge_l"] == pytest.approx(rouge)
        assert output["reward_extra_info"]["reward_unscored"] == 0.0


def test_component_options_reach_the_component(verl_config, tiny_tokenizer):
    """reward_kwargs.options: with prefix "<think>" a response that starts inside the think block is well formed."""
    manager = reward_manager(
        verl_config, tiny_tokenizer, weights={"format": 1.0}, options={"format": {"prefix": "<think>"}}
    )
    response = "reasoning about symptoms </think> <advice> drink water </advice>"
    output = manager.loop.run_until_complete(manager.run_single(one_rollout(tiny_tokenizer, response)))
    assert output["reward_score"] == 1.0


@pytest.mark.parametrize("missing", [None, "unscorable", "renormalize"])
def test_unscorable_rollout_scores_nan_and_is_flagged(missing):
    # Rouge-L without a reference: the component returns None (as a failed judge call would).
    kwargs = {} if missing is None else {"missing": missing}
    scores = asyncio.run(
        compute_score(
            "eapo/demo",
            "<think> reasoning </think> <advice> x </advice>",
            None,
            {"question": QUESTION},
            weights={"format": 0.5, "rouge_l": 0.5},
            **kwargs,
        )
    )
    assert math.isnan(scores["rouge_l"]) and scores["format"] == 1.0
    if missing == "renormalize":  # format alone, rescaled to the full weight
        assert (scores["score"], scores["reward_unscored"]) == (1.0, 0.0)
    else:  # the default: no total; the estimators give it no advantage
        assert math.isnan(scores["score"]) and scores["reward_unscored"] == 1.0


def test_default_weights_are_the_projects_and_a_judge_needs_its_endpoint():
    from eapo.config import RewardConfig
    from eapo.engines.verl.reward import default_weights

    assert (
        default_weights()
        == RewardConfig().weights
        == {"format": 0.1, "rouge_l": 0.3, "reranker": 0.3, "llm_judge": 0.3}
    )
    with pytest.raises(ValueError, match="llm_judge needs base_url="):
        asyncio.run(
            compute_score(
                "eapo/demo",
                "<advice> x </advice>",
                REFERENCE,
                {"question": QUESTION},
                weights={"llm_judge": 1.0},
            )
        )
