"""EAPO as a verl (0.9.x) plugin: advantage estimators, a trainer and a reward function.

Installed with ``pip install 'eapo[verl]'``, this package is announced to verl through the
entry-point group ``verl.plugins`` (``verl/__init__.py`` imports every plugin it finds there unless
``VERL_USE_EXTERNAL_PLUGINS=none``), so every process that imports verl, Ray workers included, has:

* advantage estimators ``eapo``, ``psr``, ``nsr``, ``w_reinforce``, ``eapo_grpo``
  (``algorithm.adv_estimator=...``): GRPO advantages times polarity weights, computed by
  :mod:`eapo.core` (:mod:`eapo.engines.verl.estimators`);
* the trainer ``eapo`` (``trainer.use_v1=True trainer.v1.trainer_mode=eapo``): verl's synchronous v1
  trainer whose advantage step computes ``H_t`` from the per-token entropies (``eapo.core.rollout_entropy``,
  as the TRL trainer) and applies the entropy-driven ``w+_t`` (:mod:`eapo.engines.verl.trainer`);
* entropy controls beside EAPO (``algorithm.eapo.method=clip_cov`` and the other presets, or
  ``algorithm.eapo.epsilon_high=0.28`` and the other keys on any scheme), mapped onto verl's own
  actor options where verl has the control, and run through :mod:`eapo.core.entropy_control` where it
  does not (the adaptive coefficient; the top-entropy mask, as the policy loss ``eapo_top_entropy``)
  (:mod:`eapo.engines.verl.entropy_control`);
* ``algorithm.eapo.*`` read once, into :class:`EapoSettings`, by the trainer and by the estimators
  outside it (:mod:`eapo.engines.verl.settings`);
* the reward function :func:`compute_score`
  (``reward.custom_reward_function.path=pkg://eapo.engines.verl``): the paper's composite of
  format, Rouge-L, reranker and LLM judge (:mod:`eapo.engines.verl.reward`).

verl swallows a plugin's import error (it logs it at DEBUG); if ``adv_estimator=eapo`` is reported
unknown, ``python -c "import eapo.engines.verl"`` shows why.
"""

from __future__ import annotations

from eapo.engines.verl.estimators import (
    ESTIMATORS,
    PolarityStep,
    polarity_grpo_advantages,
    polarity_weights,
    register_estimators,
)

register_estimators()

from eapo.engines.verl.entropy_control import (  # noqa: E402
    EntropyControls,
    register_policy_losses,
)

register_policy_losses()

from eapo.engines.verl.reward import compute_score  # noqa: E402
from eapo.engines.verl.settings import ESTIMATOR_NAMES, TRAINER_NAME, EapoSettings  # noqa: E402
from eapo.engines.verl.trainer import (  # noqa: E402  (registers the trainer)
    ENTROPY_FIELD,
    WEIGHTING_STATE_FILE,
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
    "EntropyControls",
    "PolarityStep",
    "compute_score",
    "polarity_grpo_advantages",
    "polarity_weights",
    "register_estimators",
    "register_policy_losses",
]
