"""``algorithm.eapo.*``, read once per process into the run's :class:`eapo.core.Algorithm`.

What is where:

* the names: the estimators this plugin registers are the weighting schemes' own
  (:attr:`eapo.core.Scheme.verl_estimator`, :func:`estimator_names`), with the estimator ↔ scheme map
  (:func:`scheme_of`, :func:`estimator_of`); :data:`TRAINER_NAME`;
* the keys: every algorithm setting eapo.core declares except the objective's (verl's own options hold
  it: :data:`VERL_NATIVE_KEYS` says where), flat as users write them (:func:`setting_keys`);
* two readers that share the section's parse (:func:`read_section`: type and unknown keys), each adding
  the estimator's rules, then :meth:`eapo.core.Algorithm.resolve` (the one validation):

  - :func:`algorithm_for_trainer` for the ``eapo`` trainer (:mod:`eapo.engines.verl.trainer`): the
    estimator must be one of this plugin's, ``method`` may be a weighting scheme or an entropy-control
    preset;
  - :func:`algorithm_for_estimator` for an estimator run by another verl trainer
    (:mod:`eapo.engines.verl.estimators`): only the schemes without the step's entropy run there,
    ``method`` must name the estimator's own scheme, and any entropy control is refused, since only the
    ``eapo`` trainer applies one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from eapo.core import (
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    STEP_SETTINGS,
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    Algorithm,
    SettingError,
    methods,
    scheme_of_method,
)
from eapo.core.algorithm import OBJECTIVE_SETTINGS

__all__ = [
    "TRAINER_NAME",
    "VERL_NATIVE_KEYS",
    "estimator_names",
    "setting_keys",
    "scheme_of",
    "estimator_of",
    "read_section",
    "algorithm_for_trainer",
    "algorithm_for_estimator",
]

#: ``trainer.v1.trainer_mode`` value that selects :class:`eapo.engines.verl.trainer.EAPOVerlTrainer`.
TRAINER_NAME = "eapo"

#: The objective's settings (:data:`eapo.core.OBJECTIVE_SETTINGS`) are verl's own options on verl:
#: ``algorithm.eapo`` refuses each with where to set it instead.
VERL_NATIVE_KEYS: dict[str, str] = {
    "scale_rewards": "algorithm.norm_adv_by_std_in_grpo (group: True; none: False; verl has no batch scaling)",
    "beta": "actor_rollout_ref.actor.kl_loss_coef, with actor_rollout_ref.actor.use_kl_loss=True",
    "epsilon": "actor_rollout_ref.actor.clip_ratio (clip-higher: algorithm.eapo.epsilon_high)",
    "loss_type": "actor_rollout_ref.actor.loss_agg_mode (the paper's grpo: seq-mean-token-mean; bnpo: token-mean)",
    "num_iterations": "actor_rollout_ref.actor.ppo_epochs",
    "kl_bias_correction": "actor_rollout_ref.actor.kl_loss_type (low_var_kl is the paper's k3 without the "
    "importance ratio)",
}
assert set(VERL_NATIVE_KEYS) == set(OBJECTIVE_SETTINGS), "every objective setting says where verl holds it"


def estimator_names() -> tuple[str, ...]:
    """The estimator names this plugin registers: one per registered weighting scheme, in its order."""
    return tuple(scheme.verl_estimator for scheme in WEIGHTING_SCHEMES.values())


def setting_keys() -> tuple[str, ...]:
    """Keys accepted under ``algorithm.eapo``, flat (the controls are not a sub-section)."""
    return ("method", *WEIGHT_SETTINGS, *STEP_SETTINGS, *CONTROL_SETTINGS)


def scheme_of(estimator: str) -> str:
    """The :mod:`eapo.core` weighting scheme the estimator ``estimator`` applies."""
    for scheme in WEIGHTING_SCHEMES.values():
        if scheme.verl_estimator == estimator:
            return scheme.name
    return estimator


def estimator_of(scheme: str) -> str:
    """The estimator name that applies the :mod:`eapo.core` weighting scheme ``scheme``."""
    registered = WEIGHTING_SCHEMES.get(scheme)
    return registered.verl_estimator if registered is not None else scheme


def read_section(algorithm_config: Any) -> dict[str, Any]:
    """``algorithm.eapo`` as a plain dict (``{}`` when absent); unknown keys raise.

    ``algorithm_config`` is what verl passes as ``config``: an OmegaConf ``DictConfig``, verl's
    ``AlgoConfig`` dataclass, a mapping, or ``None``.
    """
    if algorithm_config is None:
        return {}
    section = algorithm_config.get("eapo", None) if hasattr(algorithm_config, "get") else None
    if section is None:
        return {}
    if isinstance(section, Mapping):  # a plain dict, or an OmegaConf DictConfig
        values = dict(section)
    elif dataclasses.is_dataclass(section):
        values = dataclasses.asdict(section)
    else:
        raise TypeError(f"algorithm.eapo must be a mapping of settings, got {type(section).__name__}")
    native = [key for key in values if key in VERL_NATIVE_KEYS]
    if native:
        key = native[0]
        raise ValueError(f"algorithm.eapo.{key} is verl's own option on verl: set {VERL_NATIVE_KEYS[key]}")
    unknown = sorted(set(values) - set(setting_keys()))
    if unknown:
        raise ValueError(f"algorithm.eapo has unknown keys {unknown}; known: {list(setting_keys())}")
    return values


def _resolve(method: str, values: Mapping[str, Any]) -> Algorithm:
    settings = {key: value for key, value in values.items() if key != "method"}
    try:
        return Algorithm.resolve(method, settings, where="algorithm.eapo.", objective=False)
    except SettingError as error:
        raise ValueError(str(error)) from None


def algorithm_for_trainer(algorithm_config: Any) -> Algorithm:
    """Read ``algorithm.eapo`` for the ``eapo`` trainer, against ``algorithm.adv_estimator``, into the run's
    :class:`eapo.core.Algorithm`.

    Raises:
        ValueError: an estimator that is not one of this plugin's, a ``method`` that it does not run, an
            unknown key, a weight the scheme does not take or rejects, or an entropy control out of range
            or in a combination that cannot work.
    """
    estimator = algorithm_config.get("adv_estimator", None)
    if estimator not in estimator_names():
        raise ValueError(
            f"trainer.v1.trainer_mode={TRAINER_NAME} needs algorithm.adv_estimator to be one of "
            f"{list(estimator_names())} (registered by eapo.engines.verl), got {estimator!r}"
        )
    values = read_section(algorithm_config)
    method = values.get("method", None) or scheme_of(estimator)
    if method == estimator:
        method = scheme_of(estimator)  # method=eapo_grpo reads as the grpo scheme
    if method not in methods():
        raise ValueError(
            f"algorithm.eapo.method={method!r} is unknown; valid: weighting schemes "
            f"{', '.join(WEIGHTING_SCHEMES)} or entropy-control presets {', '.join(ENTROPY_CONTROLS)}"
        )
    scheme = scheme_of_method(method)
    if estimator_of(scheme) != estimator:
        if method in ENTROPY_CONTROLS:
            raise ValueError(
                f"algorithm.eapo.method={method} is a preset on GRPO's weights (1, 1), run by "
                f"algorithm.adv_estimator={estimator_of('grpo')}, but algorithm.adv_estimator={estimator}: set "
                f"adv_estimator={estimator_of('grpo')}, or keep your scheme and set the control's keys "
                f"(e.g. method={scheme_of(estimator)} {_preset_keys(method)})"
            )
        raise ValueError(
            f"algorithm.eapo.method={method} but algorithm.adv_estimator={estimator}; set both to the same "
            f"scheme (the {scheme} scheme's estimator is {estimator_of(scheme)})"
        )
    return _resolve(method, values)


def algorithm_for_estimator(estimator: str, algorithm_config: Any) -> Algorithm:
    """Read ``algorithm.eapo`` for estimator ``estimator`` run outside the ``eapo`` trainer.

    Only the schemes without the step's entropy apply there (``entropy_agg`` is read but unused: there is
    no ``H_t``).

    Raises:
        ValueError: an unknown key, an entropy control (only the ``eapo`` trainer applies one), a
            ``method`` other than the estimator's scheme, or a weight the scheme does not take or
            rejects.
        RuntimeError: the estimator's scheme needs the step's rollout entropy (``eapo``).
    """
    values = read_section(algorithm_config)
    scheme = scheme_of(estimator)
    if scheme in WEIGHTING_SCHEMES and WEIGHTING_SCHEMES[scheme].needs_entropy:
        raise RuntimeError(
            f"algorithm.adv_estimator={estimator} needs this step's rollout entropy, which only the eapo trainer "
            "supplies: set trainer.use_v1=True and trainer.v1.trainer_mode=eapo (with eapo[verl] installed "
            "so that verl loads the plugin)"
        )
    method = values.get("method")
    if method in ENTROPY_CONTROLS or any(values.get(key) is not None for key in CONTROL_SETTINGS):
        controls = [key for key in CONTROL_SETTINGS if values.get(key) is not None]
        raise ValueError(
            f"algorithm.eapo sets an entropy control ({method if method in ENTROPY_CONTROLS else controls}), "
            "which only the eapo trainer applies: set trainer.use_v1=True and trainer.v1.trainer_mode=eapo"
        )
    if method is not None and method not in (estimator, scheme):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} but algorithm.eapo.method={method}; set both to the same scheme"
        )
    return _resolve(scheme, values)


def _preset_keys(method: str) -> str:
    return " ".join(f"{key}={value}" for key, value in ENTROPY_CONTROLS[method].preset.items())
