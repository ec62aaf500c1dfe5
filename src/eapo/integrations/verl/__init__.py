"""EAPO as a verl (0.9.x) plugin: advantage estimators, a trainer and a reward function.

Installed with ``pip install 'eapo[verl]'``, this package is announced to verl through the
entry-point group ``verl.plugins`` (``verl/__init__.py`` imports every plugin it finds there unless
``VERL_USE_EXTERNAL_PLUGINS=none``), so every process that imports verl, Ray workers included, has:

* advantage estimators ``eapo``, ``psr``, ``nsr``, ``w_reinforce`` (``algorithm.adv_estimator=...``):
  GRPO advantages times polarity weights, computed by :mod:`eapo.core`
  (:mod:`eapo.integrations.verl.estimators`);
* the trainer ``eapo`` (``trainer.use_v1=True trainer.v1.trainer_mode=eapo``): verl's synchronous v1
  trainer whose advantage step computes ``H_t`` from the per-token entropies (``eapo.core.rollout_entropy``,
  as the TRL trainer) and applies the entropy-driven ``w+_t`` (:mod:`eapo.integrations.verl.trainer`);
* the reward function :func:`compute_score`
  (``reward.custom_reward_function.path=pkg://eapo.integrations.verl``): the paper's composite of
  format, Rouge-L, reranker and LLM judge (:mod:`eapo.integrations.verl.reward`).

verl swallows a plugin's import error (it logs it at DEBUG); if ``adv_estimator=eapo`` is reported
unknown, ``python -c "import eapo.integrations.verl"`` shows why.
"""

from __future__ import annotations

from eapo.integrations.verl.estimators import (
    ESTIMATOR_NAMES,
    ESTIMATORS,
    PolarityStep,
    polarity_grpo_advantages,
    polarity_weights,
    register_estimators,
)

register_estimators()

from eapo.integrations.verl.reward import compute_score  # noqa: E402
from eapo.integrations.verl.trainer import (  # noqa: E402  (registers the trainer)
    ENTROPY_FIELD,
    TRAINER_NAME,
    WEIGHTING_STATE_FILE,
    EapoSettings,
    EAPOVerlTrainer,
)

__all__ = [
    "ESTIMATOR_NAMES",
    "ESTIMATORS",
    "ENTROPY_FIELD",
    "TRAINER_NAME",
    "WEIGHTING_STATE_FILE",
    "EAPOVerlTrainer",
    "EapoSettings",
    "PolarityStep",
    "compute_score",
    "polarity_grpo_advantages",
    "polarity_weights",
    "register_estimators",
]
