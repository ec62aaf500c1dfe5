"""``eapo_single_turn_agent``: verl's single-turn agent loop with stop strings (:mod:`eapo.engines.verl.rollouts`).

verl 0.9.1 has no stop-string setting: its agent loops build vLLM's sampling parameters themselves.
This loop is verl's ``single_turn_agent`` with five changes, so that a run with stop strings ends
every rollout by :mod:`eapo.runtime.stop`'s rule, as the TRL engine and ``eapo eval`` do, and a prompt is
never cut by verl:

1. vLLM gets ``stop`` (``actor_rollout_ref.rollout.custom.stop``) and ``include_stop_str_in_output=True``;
2. the response is cut after the token that completes the first stop string (vLLM stopped there
   already; a token that straddles the string is kept, as vLLM keeps it), its log-probs and mask with it;
3. every request gets vLLM's per-request ``seed`` (:func:`eapo.engines.verl.rollouts.request_seed`), from
   ``actor_rollout_ref.rollout.seed``, the step (``global_steps``), the prompt's split and dataset row
   (``extra_info.split``, ``index``) and the sample's number (``session_id``), which verl's v1 trainer
   passes to every agent loop: two runs of one seed sample the same tokens;
4. ``extra_fields`` carries the stop strings and the response's length in tokens, which verl's ``naive``
   reward manager passes to :func:`eapo.engines.verl.compute_score` in ``extra_info``;
5. a prompt longer than ``actor_rollout_ref.rollout.prompt_length`` (``data.max_prompt_length``) is
   refused (:func:`check_prompt_length`), where verl's loop cuts it from the left, the chat template's
   opening and the instructions first. ``eapo train --engine verl`` cuts an over-long question to fit
   before verl reads it, by the TRL engine's rule (:func:`eapo.engines.verl.launch.write_data`).

Select it with ``actor_rollout_ref.rollout.agent.default_agent_loop=eapo_single_turn_agent`` (``eapo train
--engine verl`` does). verl instantiates an agent loop per rollout in its agent-loop workers, which load
eapo's plugin as every verl process does; the registration below is what they find there.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from eapo.engines.verl.rollouts import (
    AGENT_LOOP_NAME,
    COMPLETION_TOKENS_FIELD,
    STOP_FIELD,
    _get,
    kept_tokens,
    request_seed,
    rollout_stops,
    with_seed,
    with_stops,
)

__all__ = ["EAPOSingleTurnAgentLoop", "check_prompt_length", "cut_output", "seed_of_request"]


def cut_output(output: AgentLoopOutput, decode: Any, stops: tuple[str, ...]) -> AgentLoopOutput:
    """``output`` with its response cut by :mod:`eapo.runtime.stop`'s rule and the stop strings and the
    response length (in tokens) written into its ``extra_fields``."""
    kept = kept_tokens(output.response_ids, decode, stops) if stops else len(output.response_ids)
    if kept < len(output.response_ids):
        output.response_ids = output.response_ids[:kept]
        output.response_mask = output.response_mask[:kept]
        if output.response_logprobs is not None:
            output.response_logprobs = output.response_logprobs[:kept]
        if output.routed_experts is not None:
            output.routed_experts = output.routed_experts[: len(output.prompt_ids) + kept]
    output.extra_fields[STOP_FIELD] = list(stops)
    output.extra_fields[COMPLETION_TOKENS_FIELD] = len(output.response_ids)
    return output


def seed_of_request(run_seed: Any, kwargs: dict[str, Any]) -> int | None:
    """The request's seed from what verl's v1 trainer hands an agent loop (``global_steps``, ``index``,
    ``extra_info``, ``session_id``); None where one is missing (verl's legacy agent-loop path, which
    passes no step or sample number): vLLM then samples as verl has it."""
    step, index, sample = kwargs.get("global_steps"), kwargs.get("index"), kwargs.get("session_id")
    if run_seed is None or step is None or index is None or sample is None:
        return None
    split = _get(kwargs.get("extra_info"), "split", "") or ""
    return request_seed(int(run_seed), int(step), str(split), int(index), int(sample))


def check_prompt_length(prompt_ids: list[int], limit: int) -> list[int]:
    """``prompt_ids`` unchanged when they fit ``limit`` tokens; ValueError, naming the setting, when not."""
    if len(prompt_ids) > limit:
        raise ValueError(
            f"a prompt of {len(prompt_ids)} tokens is over actor_rollout_ref.rollout.prompt_length={limit} "
            "(data.max_prompt_length), and eapo's agent loop does not cut it from the left as verl's does: "
            "cut the question to fit (eapo train --engine verl cuts it to data.max_prompt_tokens, as the TRL "
            "engine) or raise data.max_prompt_length"
        )
    return prompt_ids


@register(AGENT_LOOP_NAME)
class EAPOSingleTurnAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop that stops at ``actor_rollout_ref.rollout.custom.stop`` (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stops = rollout_stops(self.rollout_config)

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        """verl's hook that left-truncates an over-long prompt: eapo refuses it instead."""
        return check_prompt_length(prompt_ids, self.rollout_config.prompt_length)

    def _decode(self, ids: Any) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        seed = seed_of_request(_get(self.rollout_config, "seed"), kwargs)
        params = with_seed(with_stops(sampling_params, self.stops), seed)
        output = await super().run(params, priority=priority, **kwargs)
        return cut_output(output, self._decode, self.stops)
