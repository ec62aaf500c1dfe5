"""Stop strings, why each rollout ended, and ``rollouts.jsonl`` on verl: the pieces eapo's agent loop,
reward function and trainer share (nothing here imports verl).

**Stop strings.** verl 0.9.1 has no setting for vLLM's ``stop``: its agent loops build the sampling
parameters themselves (``temperature``, ``top_p``, ``top_k``, ``repetition_penalty``, ``logprobs``) and
its vLLM server passes that dict on to ``vllm.SamplingParams``. eapo registers its own agent loop,
``eapo_single_turn_agent`` (:mod:`eapo.engines.verl.agent_loop`, verl's single-turn loop with two
additions), which reads the stop strings from ``actor_rollout_ref.rollout.custom.stop`` (``custom`` is
verl's extension point of the rollout config, which verl itself never reads) and:

* adds ``stop`` and ``include_stop_str_in_output=True`` to the sampling parameters
  (:func:`with_stops`), so vLLM stops at the first stop string it writes;
* cuts the response's tokens by :mod:`eapo.runtime.stop`'s rule (:func:`kept_tokens`: up to and
  including the token that completes the first stop string). vLLM already stopped there; the cut
  makes the rule hold whatever vLLM did (speculative decoding, say, may add tokens past it);
* writes into the rollout's ``extra_fields`` the stop strings (:data:`STOP_FIELD`) and the response's
  length in tokens (:data:`COMPLETION_TOKENS_FIELD`). verl's ``naive`` and ``limited`` reward managers
  hand those fields to ``compute_score`` in ``extra_info``: the reward cuts the text at the stop string
  and passes the length to the composite as ``completion_lengths`` (what the ``overlong`` penalty reads).

**A seed per request** (:func:`request_seed`, :func:`with_seed`): the agent loop gives each request
vLLM's ``seed``, derived from ``actor_rollout_ref.rollout.seed`` (``train.seed``), the step, the prompt's
split and dataset row and the sample's number, so that two runs of one config and seed, and a resumed
run against an uninterrupted one, sample the same tokens from the same weights.

**Why a rollout ended** (:func:`eapo.runtime.stop.stop_reason_of`, :data:`eapo.runtime.stop.STOP_REASONS`): ``string`` when
its decoded text contains a stop string, else ``eos`` when its last token is an end-of-sequence id (the
tokenizer's or the generation config's, the ids vLLM stops on), else ``cap``. The trainer logs the shares
of the step's rollouts (:func:`stop_reason_metrics`): ``completions/stopped_by_string``,
``completions/stopped_by_eos``, ``completions/stopped_by_cap``, the TRL engine's keys, summing to 1.

**rollouts.jsonl** (:data:`eapo.run_dir.ROLLOUT_KEYS`): with ``trainer.eapo.rollouts=N`` (N > 0) eapo's
trainer appends every N-th step's rollouts to ``trainer.eapo.rollouts_file`` (:class:`RolloutLog`),
built by :func:`eapo.run_dir.rollout_records` from the rows the trainer reads back from the TransferQueue.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eapo.run_dir import ROLLOUTS_FILE, RolloutRow, rollout_records
from eapo.runtime.stop import (
    STOP_REASON_METRICS,
    check_stops,
    stop_reason_metrics,
    stop_reason_of,
    stop_token_count,
)

__all__ = [
    "AGENT_LOOP_NAME",
    "STOP_SETTING",
    "STOP_FIELD",
    "COMPLETION_TOKENS_FIELD",
    "STOP_REASON_METRICS",
    "rollout_stops",
    "with_stops",
    "request_seed",
    "with_seed",
    "kept_tokens",
    "eos_token_ids",
    "stop_reason_of",
    "stop_reason_metrics",
    "RolloutLog",
    "RolloutRow",
    "rollout_records",
]

#: The name eapo's agent loop is registered under (``actor_rollout_ref.rollout.agent.default_agent_loop``).
AGENT_LOOP_NAME = "eapo_single_turn_agent"
#: Where the stop strings are set: verl's extension point of the rollout config.
STOP_SETTING = "actor_rollout_ref.rollout.custom.stop"
#: ``extra_fields`` keys eapo's agent loop writes (``extra_info`` keys in ``compute_score``).
STOP_FIELD = "eapo_stop"
COMPLETION_TOKENS_FIELD = "eapo_completion_tokens"


def _get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of an OmegaConf node, a verl config dataclass or a mapping (``default`` if absent)."""
    if config is None:
        return default
    if isinstance(config, Mapping) or hasattr(config, "get"):
        return config.get(key, default)
    return getattr(config, key, default)


def rollout_stops(rollout_config: Any) -> tuple[str, ...]:
    """The stop strings of ``actor_rollout_ref.rollout`` (its ``custom.stop``; ``()`` when unset); a
    ValueError naming the setting when they are not a list of non-empty strings."""
    stops = _get(_get(rollout_config, "custom"), "stop")
    if stops is not None and not isinstance(stops, str) and hasattr(stops, "__iter__"):
        stops = list(stops)  # an OmegaConf ListConfig
    return check_stops(stops, where=STOP_SETTING)


def with_stops(sampling_params: Mapping[str, Any], stops: Sequence[str]) -> dict[str, Any]:
    """A copy of verl's sampling parameters that makes vLLM stop at ``stops`` and keep the stop string
    (``include_stop_str_in_output``); unchanged without stop strings. Stops already there are kept."""
    params = dict(sampling_params)
    if stops:
        earlier = list(params.get("stop") or [])
        params["stop"] = earlier + [stop for stop in stops if stop not in earlier]
        params["include_stop_str_in_output"] = True
    return params


def request_seed(run_seed: int, step: int, split: str, index: int, sample: int) -> int:
    """vLLM's per-request ``seed`` for sample ``sample`` of the prompt at dataset row ``index`` of split
    ``split`` at step ``step`` of a run seeded ``run_seed``: a 63-bit hash of the five, the same in
    every run and launch (a resume included), different for every request of a run.

    verl 0.9.1 gives vLLM no per-request seed (``rollout.seed`` seeds the server's engine, whose one
    random stream is then consumed in whatever order requests are scheduled), or, with
    ``rollout.full_determinism``, the same seed to every request, which makes the ``n`` samples of a
    prompt one sample repeated. Seeded per request, a request's tokens depend only on the weights, the
    prompt and this seed."""
    key = f"eapo/{int(run_seed)}/{int(step)}/{split}/{int(index)}/{int(sample)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def with_seed(sampling_params: Mapping[str, Any], seed: int | None) -> dict[str, Any]:
    """A copy of verl's sampling parameters with vLLM's per-request ``seed`` (unchanged for ``None``; a
    seed already there is kept)."""
    params = dict(sampling_params)
    if seed is not None:
        params.setdefault("seed", seed)
    return params


def kept_tokens(
    response_ids: Sequence[int], decode: Callable[[Sequence[int]], str], stops: Sequence[str]
) -> int:
    """How many of ``response_ids`` the completion keeps: through the token that completes the first
    stop string (:func:`eapo.runtime.stop.stop_token_count`), all of them when none does."""
    count = stop_token_count(list(response_ids), decode, stops)
    return len(response_ids) if count is None else count


def eos_token_ids(tokenizer: Any, generation_config: Any = None) -> frozenset[int]:
    """Every id that ends a response in vLLM: the tokenizer's EOS and the generation config's."""
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return frozenset(ids)


# ---------------------------------------------------------------------------------------------
# rollouts.jsonl
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RolloutLog:
    """``trainer.eapo``: which steps' rollouts eapo's trainer writes, and where.

    ``rollouts``: every this many steps (steps N, 2N, ...); 0: none (eapo's ``logging.rollouts``).
    ``rollouts_file``: the JSON-lines file they are appended to (``eapo train --engine verl`` sets
    ``RUN_DIR/rollouts.jsonl``; a relative path is relative to where ``main_ppo`` runs)."""

    rollouts: int = 0
    rollouts_file: str = ROLLOUTS_FILE

    @classmethod
    def from_trainer_config(cls, trainer_config: Any) -> RolloutLog:
        section = _get(trainer_config, "eapo")
        if section is None:
            return cls()
        values = dict(section.items()) if hasattr(section, "items") else None
        if values is None:
            raise TypeError(f"trainer.eapo must be a mapping of settings, got {type(section).__name__}")
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"trainer.eapo has unknown keys {unknown}; known: {known}")
        every = values.get("rollouts", 0)
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(
                f"trainer.eapo.rollouts must be an int >= 0 (0: no rollouts written), got {every!r}"
            )
        path = values.get("rollouts_file", ROLLOUTS_FILE)
        if not isinstance(path, str) or not path:
            raise ValueError(f"trainer.eapo.rollouts_file must be a path, got {path!r}")
        return cls(rollouts=every, rollouts_file=path)

    def due(self, step: int) -> bool:
        """Whether step ``step`` (1-based) writes its rollouts."""
        return self.rollouts > 0 and step % self.rollouts == 0
