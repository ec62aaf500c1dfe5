"""The ``reward`` section: the composite's weights α_k and per-component options, what an unscorable
rollout means, and the LLM judge's endpoint (``reward.judge``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eapo.config.fields import (
    ENV_NAME,
    NON_EMPTY,
    URL,
    above,
    at_least,
    is_finite,
    one_of,
    satisfies,
    setting,
)
from eapo.rewards import REWARD_COMPONENTS
from eapo.rewards.composite import MISSING_MODES
from eapo.rewards.judge import STRUCTURED_OUTPUTS, TARGETS  # the judge's client is imported on first use
from eapo.rewards.registry import default_weights, light_components


def _reward_weights(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= set(REWARD_COMPONENTS)
        and all(is_finite(alpha) and alpha >= 0 for alpha in value.values())
        and any(alpha > 0 for alpha in value.values())
    )


def _reward_options(value: Any) -> bool:
    return isinstance(value, dict) and all(
        name in REWARD_COMPONENTS and isinstance(options, dict) for name, options in value.items()
    )


_REWARD_WEIGHTS = satisfies(
    _reward_weights,
    "a mapping of reward components (" + ", ".join(REWARD_COMPONENTS) + ") to finite weights >= 0, one > 0",
)
_REWARD_OPTIONS = satisfies(
    _reward_options,
    "a mapping of reward components (" + ", ".join(REWARD_COMPONENTS) + ") to option mappings",
)


@dataclass
class JudgeConfig:
    base_url: str | None = setting(
        "OpenAI-compatible endpoint of the LLM judge (needed when llm_judge has a weight).",
        None,
        valid=URL,
    )
    model: str | None = setting("Judge model name.", None, valid=NON_EMPTY)
    api_key_env: str | None = setting(
        "NAME of the environment variable holding the judge's API key; null for a local server that needs "
        "none (e.g. `eapo judge serve`).",
        "OPENAI_API_KEY",
        valid=ENV_NAME,
    )
    target: str = setting(
        "What the judge scores during training: think, response or both.",
        "think",
        valid=one_of(*TARGETS),
    )
    concurrency: int = setting("Concurrent judge requests.", 32, valid=at_least(1))
    timeout: float = setting("Per-request timeout in seconds.", 60.0, valid=above(0))
    max_retries: int = setting(
        "Retries of a request after HTTP 429/5xx, a timeout or a connection error (exponential backoff); "
        "then the sample is unscorable (reward.missing).",
        4,
        valid=at_least(0),
    )
    structured_output: str = setting(
        "How requests ask for the answer's shape: json_schema (each dimension an integer 0-100, enforced "
        "by vLLM/SGLang while decoding), json_object, plain (the prompt alone), or auto (the first of those "
        "the server accepts, probed once).",
        "auto",
        valid=one_of(*STRUCTURED_OUTPUTS),
    )
    cache_dir: str | None = setting(
        "Disk cache of the judge's answers (keyed by model and prompt), relative to the run directory "
        "(or absolute); null: no cache. `eapo eval` keeps its own under its output directory.",
        "judge_cache",
        valid=NON_EMPTY,
    )


@dataclass
class RewardConfig:
    weights: dict[str, float] = setting(
        "Composite weights α_k by component ("
        + ", ".join(REWARD_COMPONENTS)
        + "); the total is Σ α_k·r_k. The penalties overlong and repetition score <= 0, so a weight on "
        "one lowers the total's floor below 0 (docs/guide/rewards.md).",
        factory=default_weights,  # each component's registered default_weight
        valid=_REWARD_WEIGHTS,
    )
    options: dict[str, dict[str, Any]] = setting(
        "Per-component options, e.g. {rouge_l: {level: char}, reranker: {backend: bi-encoder}, "
        "overlong: {buffer: 64}}; overlong's max_tokens defaults to rollout.max_completion_tokens. The "
        "options of " + ", ".join(sorted(light_components())) + " are checked when the config is loaded.",
        factory=dict,
        valid=_REWARD_OPTIONS,
    )
    judge: JudgeConfig = setting("LLM judge endpoint.", factory=JudgeConfig)
    missing: str = setting(
        "A rollout that a weighted component could not score (e.g. a failed judge call): 'unscorable' "
        "(one scale per group: no reward, no advantage, left out of its group's mean and std) or "
        "'renormalize' (the remaining weights rescaled to the full weight).",
        "unscorable",
        valid=one_of(*MISSING_MODES),
    )
