"""EAPO as a verl (0.9.x) plugin: advantage estimators, a trainer and a reward function.

Installed with ``pip install 'eapo[verl]'``, this package is announced to verl through the
entry-point group ``verl.plugins`` (``verl/__init__.py`` imports every plugin it finds there unless
``VERL_USE_EXTERNAL_PLUGINS=none``), so every process that imports verl, Ray workers included, has:

* one advantage estimator per registered weighting scheme (``algorithm.adv_estimator=...``, the
  scheme's :attr:`eapo.core.Scheme.verl_estimator`): GRPO advantages times polarity weights, computed by
  :mod:`eapo.core` (:mod:`eapo.engines.verl.estimators`);
* the trainer ``eapo`` (``trainer.use_v1=True trainer.v1.trainer_mode=eapo``): verl's synchronous v1
  trainer whose advantage step computes ``H_t`` from the per-token entropies (``eapo.core.rollout_entropy``,
  as the TRL trainer) and applies the entropy-driven ``w+_t`` (:mod:`eapo.engines.verl.trainer`);
* entropy controls beside EAPO (``algorithm.eapo.method=clip_cov`` and the other presets, or
  ``algorithm.eapo.epsilon_high=0.28`` and the other keys on any scheme), mapped onto verl's own
  actor options where verl has the control, and run through :mod:`eapo.core.controls` where it
  does not (a control's run state through core's step, its token weights as the policy loss
  ``eapo_token_weights``: the adaptive coefficient, the top-entropy mask)
  (:mod:`eapo.engines.verl.entropy_control`);
* ``algorithm.eapo.*`` read once per process into the run's :class:`eapo.core.Algorithm`, by the
  trainer and by the estimators outside it (:mod:`eapo.engines.verl.settings`);
* the reward function :func:`compute_score`
  (``reward.custom_reward_function.path=pkg://eapo.engines.verl``): the paper's composite of
  format, Rouge-L, reranker and LLM judge (:mod:`eapo.engines.verl.reward`);
* the agent loop ``eapo_single_turn_agent``
  (``actor_rollout_ref.rollout.agent.default_agent_loop=eapo_single_turn_agent``): verl's single-turn
  loop with stop strings (``+actor_rollout_ref.rollout.custom.stop=[...]``), which verl has no setting
  for (:mod:`eapo.engines.verl.agent_loop`, :mod:`eapo.engines.verl.rollouts`).

verl swallows a plugin's import error (it logs it at DEBUG); if ``adv_estimator=eapo`` is reported
unknown, ``python -c "import eapo.engines.verl"`` shows why.
"""

from __future__ import annotations

import importlib.util

# First: with VERL_PLATFORM=cpu, importing it registers eapo's CPU platform with verl, which must happen
# before any verl module asks verl for its platform (some do at import); otherwise it does nothing.
from eapo.engines.verl import platform as _platform  # noqa: F401
from eapo.engines.verl.entropy_control import register_policy_losses
from eapo.engines.verl.estimators import (
    StepCall,
    estimators,
    register_estimators,
    step_call,
)
from eapo.engines.verl.reward import compute_score
from eapo.engines.verl.settings import TRAINER_NAME, algorithm_for_trainer, estimator_names

#: Whether verl is importable here. Without it, the parts that do not need it (the parquet export
#: behind ``eapo data export-verl``, the settings, the reward function) still import; the trainer
#: and the registrations need verl.
VERL_INSTALLED = importlib.util.find_spec("verl") is not None

#: Names that exist only where verl is installed (the trainer module imports verl at its top).
_TRAINER_NAMES = ("ENTROPY_FIELD", "EAPOVerlTrainer", "EAPOSingleTurnAgentLoop")

if VERL_INSTALLED:
    register_estimators()
    register_policy_losses()
    from eapo.engines.verl.agent_loop import (  # noqa: F401  (registers the agent loop; in __all__ below)
        EAPOSingleTurnAgentLoop,
    )
    from eapo.engines.verl.trainer import (  # noqa: F401  (registers the trainer; in __all__ below)
        ENTROPY_FIELD,
        EAPOVerlTrainer,
    )
else:

    def __getattr__(name: str):
        if name in _TRAINER_NAMES:
            raise ImportError(
                f"eapo.engines.verl.{name} needs verl, which is not installed in this environment: "
                "pip install 'eapo[verl]' (or run `make .venv-verl/.eapo-verl-installed`)."
            )
        raise AttributeError(f"module 'eapo.engines.verl' has no attribute {name!r}")


__all__ = [
    "VERL_INSTALLED",
    "TRAINER_NAME",
    "algorithm_for_trainer",
    "estimator_names",
    "estimators",
    "StepCall",
    "compute_score",
    "step_call",
    "register_estimators",
    "register_policy_losses",
]
if VERL_INSTALLED:
    __all__ += list(_TRAINER_NAMES)
