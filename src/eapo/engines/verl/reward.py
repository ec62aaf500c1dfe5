"""verl reward function: the paper's composite ``α1·r_fmt + α2·r_rouge + α3·r_rerank + α4·r_llm`` (Section 2.3).

Point verl at it with::

    reward.custom_reward_function.path=pkg://eapo.engines.verl
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.options.llm_judge.base_url=http://judge:8000/v1
    +reward.custom_reward_function.reward_kwargs.options.llm_judge.model=deepseek-chat

verl's reward managers (``naive`` and the others in ``verl.experimental.reward_loop``) call it once
per rollout as ``await compute_score(data_source=, solution_str=, ground_truth=, extra_info=,
**reward_kwargs)``; it scores through :func:`eapo.rewards.make_composite`, the scorer the TRL trainer
and ``eapo eval`` use, and returns ``{"score": total, "<component>": raw score, ...}``. verl trains on
``score`` and keeps the other keys as ``reward_extra_info`` (logged in validation).

``reward_kwargs`` (all optional):

* ``weights``: component → α; default :attr:`eapo.config.RewardConfig.weights` (format 0.1, Rouge-L
  0.3, reranker 0.3, judge 0.3);
* ``options``: component → its options, e.g. ``{"llm_judge": {"base_url": ..., "model": ...},
  "reranker": {"backend": "cross-encoder"}, "format": {"prefix": "<think>"}}``;
* ``missing``: ``unscorable`` (default, as ``reward.missing`` of ``eapo train``) or ``renormalize``
  — the composite's total for a rollout a weighted component could not score;
* ``stop``: stop strings; the response's text is cut at the end of the first one
  (:func:`eapo.runtime.stop.cut_text`), the text the TRL engine's rewards see. Default: the strings
  eapo's agent loop stopped on (``extra_info["eapo_stop"]``, from ``actor_rollout_ref.rollout.custom.stop``).

**From eapo's agent loop** (``eapo_single_turn_agent``, :mod:`eapo.engines.verl.agent_loop`): verl's
``naive`` and ``limited`` reward managers add the rollout's ``extra_fields`` to ``extra_info``; the loop
writes there the stop strings and the response's length in tokens (``eapo_completion_tokens``), which
reaches the composite as ``completion_lengths`` (what the ``overlong`` penalty reads). verl passes no
length of its own to ``compute_score``: without eapo's agent loop (or with a reward manager that drops
``extra_fields``, ``dapo``, ``gdpo``) a component that needs the length fails, naming it.

The judge's ``{query}`` is ``extra_info["question"]``, which ``eapo data export-verl`` writes.

A rollout the composite has no total for (under ``missing=unscorable``, any weighted component
returning ``None``, e.g. a failed judge call) gets ``score`` NaN and ``reward_unscored`` 1.0: the
plugin's estimators (:mod:`eapo.engines.verl.estimators`) give it advantage 0 and leave it out of its
group's mean and std, as the TRL trainer does. verl's own
score statistics (``critic/score/*``) then show NaN for that step; ``reward_unscored`` counts them.
A component that could not score shows as NaN under its own key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from eapo.engines.verl.rollouts import COMPLETION_TOKENS_FIELD, STOP_FIELD
from eapo.runtime.stop import check_stops, cut_text

__all__ = [
    "SCORE_KEY",
    "UNSCORED_KEY",
    "compute_score",
    "component_scores",
    "composite_for",
    "default_weights",
]

logger = logging.getLogger(__name__)

#: The keys of ``compute_score``'s result that are not a component's score: the total, the unscored flag.
SCORE_KEY = "score"
UNSCORED_KEY = "reward_unscored"

_COMPOSITES: dict[str, Any] = {}
_COMPOSITES_LOCK = threading.Lock()


def default_weights() -> dict[str, float]:
    """The α of the project's default reward (``eapo.config.RewardConfig().weights``)."""
    from eapo.config import RewardConfig

    return dict(RewardConfig().weights)


def _plain(value: Any) -> Any:
    """OmegaConf containers → plain dicts/lists (verl passes ``reward_kwargs`` as a dict of DictConfigs)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def composite_for(
    weights: Mapping[str, float] | None = None,
    options: Mapping[str, Any] | None = None,
    missing: str = "unscorable",
) -> Any:
    """The :class:`eapo.rewards.CompositeReward` for these settings, built once per process.

    Building loads models (the reranker) and opens clients (the judge), so every rollout scored
    with the same settings shares one instance.
    """
    from eapo.rewards import make_composite

    weights = _plain(weights) if weights is not None else default_weights()
    options = _plain(options) if options is not None else {}
    key = json.dumps(
        {"weights": weights, "options": options, "missing": missing}, sort_keys=True, default=str
    )
    with _COMPOSITES_LOCK:
        composite = _COMPOSITES.get(key)
        if composite is None:
            composite = make_composite(
                {name: float(alpha) for name, alpha in weights.items()}, missing=missing, **options
            )
            _COMPOSITES[key] = composite
        return composite


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


async def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: str | None,
    extra_info: Mapping[str, Any] | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    options: Mapping[str, Any] | None = None,
    missing: str = "unscorable",
    stop: Sequence[str] | None = None,
    **unused: Any,
) -> dict[str, float]:
    """Score one rollout with the composite reward (verl's ``compute_score`` interface).

    Args:
        data_source: the row's ``data_source`` (not used: every source is scored the same way).
        solution_str: the decoded response.
        ground_truth: ``reward_model.ground_truth`` of the row, the reference answer.
        extra_info: the row's ``extra_info``; ``question`` is the judge's query.
        weights, options, missing, stop: see the module docstring (from ``reward_kwargs``).
        unused: other keywords verl may pass (``reward_router_address``, ...).

    Returns:
        ``{"score": total or NaN, <component>: raw score or NaN, "reward_unscored": 0.0 or 1.0}``, the
        same keys for every rollout.
    """
    composite = composite_for(weights, options, missing)
    extra_info = extra_info or {}
    question = extra_info.get("question")
    prompts = [question] if question is not None else None
    stops = check_stops(
        _plain(stop) if stop is not None else extra_info.get(STOP_FIELD),
        where="reward_kwargs.stop" if stop is not None else f"extra_info[{STOP_FIELD!r}]",
    )
    text, _ = cut_text(solution_str, stops)
    kwargs: dict[str, Any] = {}
    length = extra_info.get(COMPLETION_TOKENS_FIELD)
    if length is not None:
        kwargs["completion_lengths"] = [int(length)]
    result = await asyncio.to_thread(composite.score, prompts, [text], [ground_truth], **kwargs)
    total = result.rewards[0]
    if total is None:
        logger.warning("the composite could not score a rollout of %s: score NaN, no advantage", data_source)
    scores = {SCORE_KEY: _number(total)}
    scores.update({name: _number(values[0]) for name, values in result.components.items()})
    scores[UNSCORED_KEY] = 1.0 if total is None else 0.0
    return scores


def component_scores(reward_extra_info: Mapping[str, Any]) -> dict[str, float]:
    """Each component's raw score from what :func:`compute_score` returned (verl keeps it as the rollout's
    ``reward_extra_info``): every key but the total and the unscored flag."""
    return {
        str(name): float(value)
        for name, value in reward_extra_info.items()
        if name not in (SCORE_KEY, UNSCORED_KEY)
    }
