"""Rewards: the paper's composite ``r = α1·r_fmt + α2·r_rouge + α3·r_rerank + α4·r_llm`` (Section 2.3).

Every component is a callable ``(prompts, completions, references, **kwargs) -> list[float | None]``
with a registry ``name`` and a human ``label``; ``None`` means "could not score this sample". The
trainer, the evaluation harness, TRL and verl all build them through this registry::

    from eapo.rewards import make_reward, make_composite

    rouge = make_reward("rouge_l", level="char")
    reward = make_composite(
        {"format": 0.1, "rouge_l": 0.3, "reranker": 0.3, "llm_judge": 0.3},
        reranker={"backend": "auto"},
        llm_judge={"base_url": "http://localhost:8000/v1", "model": "judge", "api_key_env": None},
    )
    result = reward.score(prompts, completions, references)  # .rewards, .components, .metrics

Components: four scores of the answer's quality, in [0, 1], and two penalties of the whole
completion, <= 0 (their weights α stay >= 0: the sign is in the range; :mod:`eapo.rewards.composite`
on how they add up):

* ``format`` — {0, 1}: ``<think>…</think>`` then ``<advice>…</advice>`` present, in order, non-empty
  (the paper's check; ``strict=True``: each once and nothing outside) (:mod:`eapo.rewards.format`);
* ``rouge_l`` — Rouge-L F1, char / word / auto level, of the ``<advice>`` answer or
  (``extract="whole"``) the whole completion (:mod:`eapo.rewards.rouge`);
* ``reranker`` — cross-encoder relevance, or the labelled bi-encoder stand-in; ``extract`` as for
  Rouge-L (:mod:`eapo.rewards.reranker`);
* ``llm_judge`` — the appendix LLM-as-a-Judge prompts (:mod:`eapo.rewards.judge_prompts`) sent by the
  client :mod:`eapo.rewards.judge` (over :mod:`eapo.rewards.judge_transport`; registered by
  :mod:`eapo.rewards.judge_component`);
* ``overlong`` — [-1, 0]: DAPO's soft overlong punishment (Eq. 13), 0 up to ``max_tokens - buffer``
  tokens, then a ramp to -1 at the cap; reads ``completion_lengths`` or TRL's ``completion_ids``
  (:mod:`eapo.rewards.overlong`);
* ``repetition`` — [max_penalty, 0]: the share of repeated word n-grams times ``max_penalty`` (TRL's
  and open-r1's repetition penalty), of the whole completion by default, so text after
  ``</advice>`` counts (:mod:`eapo.rewards.repetition`).

Metric keys of :meth:`CompositeReward.score`: ``reward/<component>/{mean,std,none_frac}``,
``reward/{mean,std,none_frac}`` and ``reward/llm_judge/<target>/<dimension>/mean``.

Each component's module registers it whole (:mod:`eapo.rewards.registry`: its settings, metrics, plot
panels and evaluation columns); importing this package imports the built-in ones. A component
registered from any other module with :func:`register_reward` is used like them. Importing stays light
(no torch, no openai): models and clients are loaded when a component is built.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from eapo.rewards.base import RewardFunction, as_text, prompt_text
from eapo.rewards.composite import CompositeResult, CompositeReward, check_weights, combine, summarize
from eapo.rewards.extract import extract_answer, extract_think
from eapo.rewards.registry import (
    REWARD_COMPONENTS,
    EvalColumn,
    EvalScorer,
    EvalTable,
    RewardComponent,
    ScorerSetting,
    StrictGate,
    register_reward,
    unregister_reward,
)

__all__ = [
    "REWARD_COMPONENTS",
    "RewardComponent",
    "EvalScorer",
    "ScorerSetting",
    "EvalColumn",
    "EvalTable",
    "StrictGate",
    "register_reward",
    "unregister_reward",
    "RewardFunction",
    "CompositeReward",
    "CompositeResult",
    "make_reward",
    "make_composite",
    "reward_class",
    "combine",
    "summarize",
    "extract_answer",
    "extract_think",
    "as_text",
    "prompt_text",
]

#: The built-in components' modules; each registers its component when imported, in this order (the
#: order of the configuration's help, the plot's panels and the summary's lines).
BUILTIN_MODULES: tuple[str, ...] = (
    "eapo.rewards.format",
    "eapo.rewards.rouge",
    "eapo.rewards.reranker",
    "eapo.rewards.judge_component",
    "eapo.rewards.overlong",
    "eapo.rewards.repetition",
)
for _module in BUILTIN_MODULES:
    importlib.import_module(_module)


def reward_class(name: str) -> Callable[..., RewardFunction]:
    """The class registered under ``name``."""
    if name not in REWARD_COMPONENTS:
        raise ValueError(f"unknown reward component {name!r}; known: {', '.join(REWARD_COMPONENTS)}")
    return REWARD_COMPONENTS[name].build


def make_reward(name: str, **options: Any) -> RewardFunction:
    """Build the reward component ``name`` with ``options`` (its constructor's keyword arguments).

    Raises:
        ValueError: an unknown name, or an option the component does not take (the message lists
            the ones it accepts, and names what replaces an option the component no longer takes:
            its ``removed_options``).
    """
    cls = reward_class(name)
    parameters = inspect.signature(cls).parameters
    accepted = [
        key for key, parameter in parameters.items() if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        removed = getattr(cls, "removed_options", {})
        replaced = "".join(f"; {key} is gone, use {removed[key]}" for key in unknown if key in removed)
        raise ValueError(
            f"reward {name!r} does not take option(s) {unknown}{replaced}; it accepts {accepted}"
        )
    return cls(**options)


def make_composite(
    weights: Mapping[str, float],
    *,
    parallel: bool = True,
    missing: str = "unscorable",
    **options: Mapping[str, Any],
) -> CompositeReward:
    """Build ``Σ α_k r_k`` from ``{component name: α}``; ``options`` maps a component name to its options.

    ``missing`` (``"unscorable"`` or ``"renormalize"``) is what a sample's total is when a weighted
    component could not score it (:mod:`eapo.rewards.composite`).

    Example: ``make_composite({"format": 0.5, "rouge_l": 0.5}, rouge_l={"level": "word"})``.
    """
    check_weights(weights)
    for name in weights:
        reward_class(name)  # an unknown name fails before any model is loaded
    unknown = sorted(set(options) - set(weights))
    if unknown:
        raise ValueError(
            f"options given for {unknown}, which are not in the composite's weights {sorted(weights)}; "
            "add them to the weights or drop the options"
        )
    for name, component_options in options.items():
        if not isinstance(component_options, Mapping):
            raise ValueError(
                f"options for reward {name!r} must be a mapping of keyword arguments, got {component_options!r}"
            )
    components = {name: make_reward(name, **dict(options.get(name, {}))) for name in weights}
    return CompositeReward(weights, components, parallel=parallel, missing=missing)
