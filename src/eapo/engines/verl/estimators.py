"""verl advantage estimators, one per weighting scheme of :data:`eapo.core.WEIGHTING_SCHEMES`
(:func:`estimators`; each scheme's :attr:`eapo.core.Scheme.verl_estimator`: ``grpo`` is ``eapo_grpo``,
named apart from verl's own ``grpo`` estimator), each a polarity-weighted GRPO.

Each estimator computes ``Â_i = w+·A_i`` on D+ and ``w-·A_i`` on D- (Section 4.1 of the EAPO paper)
with :meth:`eapo.core.EAPOStep.step`; they differ only in where ``(w+, w-)`` come from:

* a fixed scheme's estimator (``psr``, ``eapo_grpo``, ...): the scheme's defaults
  (:func:`eapo.core.scheme_defaults`), or the overrides ``algorithm.eapo.w_pos`` /
  ``algorithm.eapo.w_neg``. They work with any verl trainer; outside the ``eapo`` trainer
  ``algorithm.eapo`` is read by :func:`eapo.engines.verl.settings.algorithm_for_estimator`.
  ``eapo_grpo`` is the estimator of the entropy-control presets (``algorithm.eapo.method=clip_cov``
  and the others of :data:`eapo.core.controls.ENTROPY_CONTROLS`), which the ``eapo`` trainer
  runs (:mod:`eapo.engines.verl.entropy_control`).
* a scheme whose ``w+_t`` depends on this step's rollout entropy (``needs_entropy``: ``eapo``'s
  Eq. ``dynamic_weight``), which an estimator never sees. The ``eapo`` trainer
  (:mod:`eapo.engines.verl.trainer`) computes the step's weights and hands them over with
  :func:`step_call`; called without it, the estimator fails and says so. Under that trainer the
  fixed schemes take their weights the same way.

verl calls an estimator as ``fn(token_level_rewards=, response_mask=, index=, config=, **optional)``
with ``config`` the ``algorithm`` section (``verl.trainer.ppo.ray_trainer.compute_advantage``).

Departures from verl's ``grpo`` estimator, whose maths is otherwise the same (unbiased group std,
``epsilon`` 1e-6, ``algorithm.norm_adv_by_std_in_grpo=False`` for mean-centring only):

* a group with a single rollout gets advantage 0 (verl's ``grpo`` passes its raw score through as
  the advantage); there is nothing to contrast it with, and eapo.core needs ``G >= 2``;
* rollouts equal to their group's mean count as positive (the paper's ``r_i >= r̄``), so with
  ``w+ != w-`` they matter only through ``frac_positive``: their advantage is 0 either way.
* verl's v1 trainer scores multi-turn agent loops (several outputs per rollout) by their final
  output only for ``grpo``; these estimators treat every output as a rollout of its group. The
  paper's single-turn QA has one output per rollout, where the two agree.
* a rollout whose score is NaN could not be scored (:func:`eapo.engines.verl.compute_score`
  returns NaN when the composite has no total, e.g. a failed judge call under
  ``missing=unscorable``): it gets advantage 0 and is left out of its group's mean and std and of
  ``frac_positive``, as TRL treats a ``None`` reward.

Rows of one group need not be contiguous (verl reorders the batch to balance sequence lengths) and
groups may differ in size (failed rollouts are dropped): the grouping by ``index``, the group
statistics over scored rows and the split are :mod:`eapo.core.step`'s, the same code the TRL trainer
runs (:func:`eapo.core.step.grouped_polarity_advantages`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from eapo.core.step import EAPOStep
from eapo.engines.verl.settings import algorithm_for_estimator, estimator_names, read_section

__all__ = [
    "StepCall",
    "step_call",
    "active_step",
    "estimators",
    "register_estimators",
]


# ---------------------------------------------------------------------------------------------
# The step, handed from the trainer to the estimator
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class StepCall:
    """What the ``eapo`` trainer hands the estimator for one step: core's step (the run's
    :class:`eapo.core.EAPOStep`) and ``H_t``; the estimator leaves here the step's metrics and, per
    row in verl's order, the weighted advantage, the polarity and whether the row was scored (each
    ``(B,)``: what ``rollouts.jsonl`` records)."""

    step: EAPOStep
    entropy: float | None
    estimator: str
    metrics: dict[str, float] | None = None
    advantages: torch.Tensor | None = None
    positive: torch.Tensor | None = None
    scored: torch.Tensor | None = None


_ACTIVE_STEP: contextvars.ContextVar[StepCall | None] = contextvars.ContextVar("eapo_step_call", default=None)


@contextlib.contextmanager
def step_call(step: EAPOStep, entropy: float | None, estimator: str) -> Iterator[StepCall]:
    """Make ``step`` decide this step inside this block, from the rewards verl hands the ``estimator``.

    verl's estimator signature has no place for per-step values, and verl builds the call itself
    (``compute_advantage`` in ``verl.trainer.ppo.ray_trainer``), so the trainer sets them here, in
    the same thread, around its call into verl. Yields the :class:`StepCall` that the estimator
    fills with core's metrics.
    """
    call = StepCall(step=step, entropy=entropy, estimator=estimator)
    token = _ACTIVE_STEP.set(call)
    try:
        yield call
    finally:
        _ACTIVE_STEP.reset(token)


def active_step() -> StepCall | None:
    """The :class:`StepCall` of the enclosing :func:`step_call` block, if any."""
    return _ACTIVE_STEP.get()


# ---------------------------------------------------------------------------------------------
# The estimator maths: gather groups, call eapo.core, scatter back
# ---------------------------------------------------------------------------------------------


def _estimate(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | None,
    config: Any,
    epsilon: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    if index is None:
        raise ValueError(
            f"the {name!r} advantage estimator groups rollouts by prompt and needs verl's 'uid' (index); "
            "none was passed"
        )
    call = active_step()
    if call is not None:  # under the eapo trainer, which resolved algorithm.eapo at its start
        read_section(config)  # the section's type and keys, checked on every call as outside the trainer
        if call.estimator != name:
            raise ValueError(
                f"the trainer runs the estimator {call.estimator!r} but algorithm.adv_estimator={name}; "
                "set algorithm.eapo.method and algorithm.adv_estimator to the same scheme"
            )
        step, entropy = call.step, call.entropy
    else:  # another verl trainer: the fixed scheme's weights, with algorithm.eapo's overrides
        step = algorithm_for_estimator(name, config).make_step()
        entropy = None
    norm_by_std = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    scores = token_level_rewards.sum(dim=-1)  # [B]
    # the whole decision, core's: group statistics, the split, (w+, w-), H_0, the eapo/* metrics
    advantages, metrics = step.step(
        scores, list(index), entropy, scale="group" if norm_by_std else "none", eps=epsilon
    )
    if call is not None:
        call.metrics = metrics
        call.advantages = advantages
        call.positive, call.scored = step.last_split  # the split step() made, per row
    token_advantages = advantages.unsqueeze(-1) * response_mask  # [B, T]
    return token_advantages, token_advantages


def _make_estimator(name: str):
    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any] | None = None,
        epsilon: float = 1e-6,
        config: Any = None,
        **unused: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _estimate(name, token_level_rewards, response_mask, index, config, epsilon)

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__doc__ = f"""verl advantage estimator ``{name}``: polarity-weighted GRPO outcome advantages.

    Args:
        token_level_rewards: ``(bs, response_length)``; the sequence reward is its sum.
        response_mask: ``(bs, response_length)``.
        index: ``(bs,)`` group ids (verl's ``uid``).
        epsilon: added to the group std.
        config: verl's ``algorithm`` config (reads ``norm_adv_by_std_in_grpo`` and ``eapo.*``).

    Returns:
        ``(advantages, returns)``, both ``(bs, response_length)`` and equal, as verl's ``grpo``.
    """
    return estimator


def estimators() -> dict[str, Any]:
    """name -> estimator function, one per registered weighting scheme (:func:`estimator_names`), made once
    per name (verl refuses a name re-registered to another function)."""
    for name in estimator_names():
        if name not in _ESTIMATORS:
            _ESTIMATORS[name] = function = _make_estimator(name)
            globals()[function.__name__] = function  # importable by its name (pickled by reference)
    return {name: _ESTIMATORS[name] for name in estimator_names()}


_ESTIMATORS: dict[str, Any] = {}


def register_estimators() -> None:
    """Register :func:`estimators` (every weighting scheme registered now) with verl's ``register_adv_est``.

    verl refuses to re-register a name to a different function. An entry left by an earlier import
    of this very module (same module and function name, e.g. after a failed plugin load) is
    replaced; one from anyone else raises verl's error.
    """
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, fn in estimators().items():
        existing = ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and existing is not fn and _same_function(existing, fn):
            del ADV_ESTIMATOR_REGISTRY[name]
        register_adv_est(name)(fn)


def _same_function(a: Any, b: Any) -> bool:
    return (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None),
        getattr(b, "__qualname__", None),
    )
