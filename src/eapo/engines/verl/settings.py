"""``algorithm.eapo.*``, read once: the typed :class:`EapoSettings` both verl paths build.

What is where:

* the names: :data:`ESTIMATOR_NAMES` (the estimators this plugin registers) and the estimator ↔
  weighting-scheme map (:func:`scheme_of`, :func:`estimator_of`); :data:`TRAINER_NAME`;
* the keys: :data:`WEIGHT_KEYS`, :data:`CONTROL_KEYS` (the fields of
  :class:`~eapo.engines.verl.entropy_control.EntropyControls`, the one definition of the controls) and
  :data:`SETTING_KEYS`, everything ``algorithm.eapo`` accepts, flat as users write it;
* :class:`EapoSettings`: the method, the weights, ``entropy_agg`` and the resolved
  :class:`~eapo.engines.verl.entropy_control.EntropyControls`, built by one of two readers that share
  the section's parse (:func:`read_section`: type and unknown keys) and each add their own rules:

  - :meth:`EapoSettings.from_algorithm_config` for the ``eapo`` trainer
    (:mod:`eapo.engines.verl.trainer`): the estimator must be one of this plugin's, ``method`` may be
    a weighting scheme or an entropy-control preset, ``entropy_agg`` and the controls are validated;
  - :meth:`EapoSettings.for_estimator` for an estimator run by another verl trainer
    (:mod:`eapo.engines.verl.estimators`): only the fixed schemes run there (a scheme that
    ``needs_entropy`` needs the step's ``H_t``), ``method`` must name the estimator's own scheme, and any entropy control is refused,
    since only the ``eapo`` trainer applies one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eapo.core import (
    CONTROL_SETTINGS,
    STEP_SETTINGS,
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    WeightingScheme,
    check_weights,
    make_weighting,
    method_scheme,
)
from eapo.core.controls import ENTROPY_CONTROLS
from eapo.core.step import step_problems
from eapo.engines.verl.entropy_control import EntropyControls

__all__ = [
    "TRAINER_NAME",
    "ESTIMATOR_NAMES",
    "SCHEME_OF_ESTIMATOR",
    "WEIGHT_KEYS",
    "CONTROL_KEYS",
    "SETTING_KEYS",
    "VERL_NATIVE_KEYS",
    "scheme_of",
    "estimator_of",
    "read_section",
    "EapoSettings",
]

#: ``trainer.v1.trainer_mode`` value that selects :class:`eapo.engines.verl.trainer.EAPOVerlTrainer`.
TRAINER_NAME = "eapo"

#: The estimator names this plugin registers; each applies a weighting scheme of :mod:`eapo.core` (see
#: :data:`SCHEME_OF_ESTIMATOR`).
ESTIMATOR_NAMES: tuple[str, ...] = ("eapo", "eapo_pi", "psr", "nsr", "w_reinforce", "qae", "eapo_grpo")

#: Estimator name -> the :mod:`eapo.core` weighting scheme it applies, where the two names differ
#: (verl already has an estimator called ``grpo``).
SCHEME_OF_ESTIMATOR: dict[str, str] = {"eapo_grpo": "grpo"}

#: The weight keys of ``algorithm.eapo`` (each scheme takes some of them): :data:`eapo.core.WEIGHT_SETTINGS`.
WEIGHT_KEYS: tuple[str, ...] = tuple(WEIGHT_SETTINGS)

#: The step's keys of ``algorithm.eapo`` (``split_by``, ``entropy_agg``): :data:`eapo.core.STEP_SETTINGS`.
STEP_KEYS: tuple[str, ...] = tuple(STEP_SETTINGS)

#: The entropy-control keys of ``algorithm.eapo``: eapo's unified names, the same as the YAML tree's
#: ``algorithm.*`` (:data:`eapo.core.CONTROL_SETTINGS`); the fields of :class:`EntropyControls`.
CONTROL_KEYS: tuple[str, ...] = tuple(CONTROL_SETTINGS)

#: The ``algorithm.*`` keys of eapo's YAML tree (the TRL engine's) that are verl's own options on verl:
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

#: Keys accepted under ``algorithm.eapo``, flat (the controls are not a sub-section): every algorithm
#: setting eapo.core declares, as the TRL engine accepts them.
SETTING_KEYS: tuple[str, ...] = ("method", *WEIGHT_KEYS, *STEP_KEYS, *CONTROL_KEYS)


def scheme_of(estimator: str) -> str:
    """The :mod:`eapo.core` weighting scheme the estimator ``estimator`` applies."""
    return SCHEME_OF_ESTIMATOR.get(estimator, estimator)


def estimator_of(scheme: str) -> str:
    """The estimator name that applies the :mod:`eapo.core` weighting scheme ``scheme``."""
    return {value: key for key, value in SCHEME_OF_ESTIMATOR.items()}.get(scheme, scheme)


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
    unknown = sorted(set(values) - set(SETTING_KEYS))
    if unknown:
        raise ValueError(f"algorithm.eapo has unknown keys {unknown}; known: {list(SETTING_KEYS)}")
    return values


@dataclass(frozen=True)
class EapoSettings:
    """``algorithm.eapo.*``: which polarity weighting and entropy controls apply.

    Unset (``None``) weights take the scheme's defaults, the paper's (Section 5.1;
    :func:`eapo.core.scheme_defaults`). The entropy-control keys (:data:`CONTROL_KEYS`, eapo's unified names, the TRL config's
    ``algorithm.*``) sit flat beside the weights in ``algorithm.eapo``; read, they become
    :attr:`controls`: the method's preset, if it is one, with the keys set on top
    (:mod:`eapo.engines.verl.entropy_control`).
    """

    method: str
    """A weighting scheme (:data:`eapo.core.WEIGHTING_SCHEMES`) or an entropy-control preset on GRPO's weights (:data:`eapo.core.ENTROPY_CONTROLS`). Defaults to
    ``algorithm.adv_estimator``'s scheme; presets and grpo run with ``adv_estimator=eapo_grpo``."""
    weights: Mapping[str, Any] = field(default_factory=dict)
    """The weights that were set (:data:`eapo.core.WEIGHT_SETTINGS`, checked against the scheme); the
    others are the scheme's defaults."""
    split_by: str = STEP_SETTINGS["split_by"].default
    """:data:`eapo.core.STEP_SETTINGS`: the polarity split (group mean, the paper, median, or QAE's quantile)."""
    quantile_k: float = STEP_SETTINGS["quantile_k"].default
    """:data:`eapo.core.STEP_SETTINGS`: K of ``split_by=quantile`` (QAE)."""
    quantile_method: str = STEP_SETTINGS["quantile_method"].default
    """:data:`eapo.core.STEP_SETTINGS`: how ``split_by=quantile`` reads the K-quantile (linear, QAE's)."""
    entropy_agg: str = STEP_SETTINGS["entropy_agg"].default
    """:data:`eapo.core.STEP_SETTINGS`: how H_t averages per-token entropies (eapo.core.rollout_entropy)."""
    controls: EntropyControls = field(default_factory=EntropyControls)
    """The entropy controls, resolved: the method's preset (if it is one) with the keys set on top."""

    @classmethod
    def from_algorithm_config(cls, algorithm: Any) -> EapoSettings:
        """Read and validate ``algorithm.eapo`` for the ``eapo`` trainer, against ``algorithm.adv_estimator``.

        Raises:
            ValueError: an estimator that is not one of this plugin's, a ``method`` that it does not
                run, an unknown key, a weight the scheme does not take or rejects, or an entropy
                control out of range or in a combination that cannot work.
        """
        estimator = algorithm.get("adv_estimator", None)
        if estimator not in ESTIMATOR_NAMES:
            raise ValueError(
                f"trainer.v1.trainer_mode={TRAINER_NAME} needs algorithm.adv_estimator to be one of "
                f"{list(ESTIMATOR_NAMES)} (registered by eapo.engines.verl), got {estimator!r}"
            )
        values = read_section(algorithm)
        method = values.get("method", None) or scheme_of(estimator)
        if method == estimator:
            method = scheme_of(estimator)  # method=eapo_grpo reads as the grpo scheme
        if method not in WEIGHTING_SCHEMES and method not in ENTROPY_CONTROLS:
            raise ValueError(
                f"algorithm.eapo.method={method!r} is unknown; valid: weighting schemes "
                f"{', '.join(WEIGHTING_SCHEMES)} or entropy-control presets {', '.join(ENTROPY_CONTROLS)}"
            )
        scheme = method_scheme(method)
        if estimator_of(scheme) != estimator:
            if method in ENTROPY_CONTROLS:
                raise ValueError(
                    f"algorithm.eapo.method={method} is a preset on GRPO's weights (1, 1), run by "
                    f"algorithm.adv_estimator=eapo_grpo, but algorithm.adv_estimator={estimator}: set "
                    "adv_estimator=eapo_grpo, or keep your scheme and set the control's keys "
                    f"(e.g. method={scheme_of(estimator)} {_preset_keys(method)})"
                )
            raise ValueError(
                f"algorithm.eapo.method={method} but algorithm.adv_estimator={estimator}; set both to the same "
                f"scheme (the {scheme} scheme's estimator is {estimator_of(scheme)})"
            )
        weights = check_weights(
            method, scheme, {key: values.get(key) for key in WEIGHT_KEYS}, "algorithm.eapo."
        )
        controls = EntropyControls.resolve(method, {key: values.get(key) for key in CONTROL_KEYS})
        return cls(method=method, weights=weights, **_step_settings(values, scheme), controls=controls)

    @classmethod
    def for_estimator(cls, estimator: str, algorithm: Any) -> EapoSettings:
        """Read ``algorithm.eapo`` for estimator ``estimator`` run outside the ``eapo`` trainer.

        Only the fixed schemes' weights apply there (``entropy_agg`` is read but unused: there is no
        ``H_t``).

        Raises:
            ValueError: an unknown key, an entropy control (only the ``eapo`` trainer applies one), a
                ``method`` other than the estimator's scheme, or a weight the scheme does not take or
                rejects.
            RuntimeError: ``estimator`` is ``eapo``, whose ``w+_t`` needs the step's rollout entropy.
        """
        values = read_section(algorithm)
        if estimator in ESTIMATOR_NAMES and make_weighting(scheme_of(estimator)).needs_entropy:
            raise RuntimeError(
                f"algorithm.adv_estimator={estimator} needs this step's rollout entropy, which only the eapo trainer "
                "supplies: set trainer.use_v1=True and trainer.v1.trainer_mode=eapo (with eapo[verl] installed "
                "so that verl loads the plugin)"
            )
        method = values.get("method")
        if method in ENTROPY_CONTROLS or any(values.get(key) is not None for key in CONTROL_KEYS):
            controls = [key for key in CONTROL_KEYS if values.get(key) is not None]
            raise ValueError(
                f"algorithm.eapo sets an entropy control ({method if method in ENTROPY_CONTROLS else controls}), "
                "which only the eapo trainer applies: set trainer.use_v1=True and trainer.v1.trainer_mode=eapo"
            )
        if method is not None and method not in (estimator, scheme_of(estimator)):
            raise ValueError(
                f"algorithm.adv_estimator={estimator} but algorithm.eapo.method={method}; set both to the same scheme"
            )
        scheme = scheme_of(estimator)
        weights = check_weights(
            scheme, scheme, {key: values.get(key) for key in WEIGHT_KEYS}, "algorithm.eapo."
        )
        return cls(method=scheme, weights=weights, **_step_settings(values, scheme))

    @property
    def scheme(self) -> str:
        """The :mod:`eapo.core` weighting scheme: the method, or ``grpo`` for an entropy-control preset."""
        return method_scheme(self.method)

    @property
    def estimator(self) -> str:
        """The ``algorithm.adv_estimator`` that applies :attr:`scheme`."""
        return estimator_of(self.scheme)

    def overrides(self) -> dict[str, Any]:
        """The weights that were set, by name."""
        return dict(self.weights)

    def build_weighting(self) -> WeightingScheme:
        """A fresh :class:`eapo.core.WeightingScheme` for these settings."""
        return make_weighting(self.scheme, **self.weights)  # unset weights take the scheme's defaults


def _step_settings(values: Mapping[str, Any], scheme: str) -> dict[str, Any]:
    """The step's settings of ``algorithm.eapo`` (:data:`eapo.core.STEP_SETTINGS`), held to their
    declarations (defaults where unset); ``quantile_k`` or ``quantile_method`` set to other than its default
    applies only with ``split_by=quantile``."""
    problems = step_problems(values, "algorithm.eapo.", scheme)
    if problems:
        raise ValueError(problems[0])
    return {
        key: spec.default if values.get(key) is None else spec.check(values[key], "algorithm.eapo.")
        for key, spec in STEP_SETTINGS.items()
    }


def _preset_keys(method: str) -> str:
    return " ".join(f"{key}={value}" for key, value in ENTROPY_CONTROLS[method].preset.items())
