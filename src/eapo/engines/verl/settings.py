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
    (:mod:`eapo.engines.verl.estimators`): only the fixed schemes run there (``eapo`` needs the step's
    entropy), ``method`` must name the estimator's own scheme, and any entropy control is refused,
    since only the ``eapo`` trainer applies one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eapo.core import ENTROPY_AGGREGATIONS, WEIGHTING_SCHEMES, WeightingScheme, make_weighting
from eapo.core.entropy_control import ENTROPY_CONTROLS
from eapo.engines.verl.entropy_control import EntropyControls

__all__ = [
    "TRAINER_NAME",
    "ESTIMATOR_NAMES",
    "SCHEME_OF_ESTIMATOR",
    "WEIGHT_KEYS",
    "CONTROL_KEYS",
    "SETTING_KEYS",
    "scheme_of",
    "estimator_of",
    "read_section",
    "EapoSettings",
]

#: ``trainer.v1.trainer_mode`` value that selects :class:`eapo.engines.verl.trainer.EAPOVerlTrainer`.
TRAINER_NAME = "eapo"

#: The estimator names this plugin registers; each applies a weighting scheme of :mod:`eapo.core` (see
#: :data:`SCHEME_OF_ESTIMATOR`).
ESTIMATOR_NAMES: tuple[str, ...] = ("eapo", "psr", "nsr", "w_reinforce", "eapo_grpo")

#: Estimator name -> the :mod:`eapo.core` weighting scheme it applies, where the two names differ
#: (verl already has an estimator called ``grpo``).
SCHEME_OF_ESTIMATOR: dict[str, str] = {"eapo_grpo": "grpo"}

#: The weight keys of ``algorithm.eapo`` (each scheme takes some of them).
WEIGHT_KEYS: tuple[str, ...] = ("w0", "w_min", "w_max", "w_pos", "w_neg")

#: The entropy-control keys of ``algorithm.eapo``: eapo's unified names, the same as the TRL
#: config's ``algorithm.*``; the fields of :class:`EntropyControls`, in their order.
CONTROL_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(EntropyControls))

#: Keys accepted under ``algorithm.eapo``, flat (the controls are not a sub-section).
SETTING_KEYS: tuple[str, ...] = ("method", *WEIGHT_KEYS, "entropy_agg", *CONTROL_KEYS)


def scheme_of(estimator: str) -> str:
    """The :mod:`eapo.core` weighting scheme the estimator ``estimator`` applies."""
    return SCHEME_OF_ESTIMATOR.get(estimator, estimator)


def estimator_of(scheme: str) -> str:
    """The estimator name that applies the :mod:`eapo.core` weighting scheme ``scheme``."""
    return {value: key for key, value in SCHEME_OF_ESTIMATOR.items()}.get(scheme, scheme)


def _scheme_of_method(method: str) -> str:
    return "grpo" if method in ENTROPY_CONTROLS else method


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
    unknown = sorted(set(values) - set(SETTING_KEYS))
    if unknown:
        raise ValueError(f"algorithm.eapo has unknown keys {unknown}; known: {list(SETTING_KEYS)}")
    return values


@dataclass(frozen=True)
class EapoSettings:
    """``algorithm.eapo.*``: which polarity weighting and entropy controls apply.

    Unset (``None``) weights take the scheme's defaults, the paper's (Section 5.1): ``eapo`` w0 = 0.2,
    w_min = 0, w_max = 2, w- = 1; ``psr`` (1, 0); ``nsr`` (0, 1); ``w_reinforce`` (0.1, 1); ``grpo``
    (1, 1). The entropy-control keys (:data:`CONTROL_KEYS`, eapo's unified names, the TRL config's
    ``algorithm.*``) sit flat beside the weights in ``algorithm.eapo``; read, they become
    :attr:`controls`: the method's preset, if it is one, with the keys set on top
    (:mod:`eapo.engines.verl.entropy_control`).
    """

    method: str
    """A weighting scheme (eapo, psr, nsr, w_reinforce, grpo) or an entropy-control preset on GRPO's
    weights (entropy_bonus, adaptive_entropy, clip_higher, clip_cov, kl_cov, top_entropy). Defaults to
    ``algorithm.adv_estimator``'s scheme; presets and grpo run with ``adv_estimator=eapo_grpo``."""
    w0: float | None = None
    """eapo: base positive weight w0."""
    w_min: float | None = None
    """eapo: lower clip of w+."""
    w_max: float | None = None
    """eapo: upper clip of w+."""
    w_pos: float | None = None
    """Fixed schemes: the positive weight w+."""
    w_neg: float | None = None
    """Every scheme: the negative weight w-."""
    entropy_agg: str = "token-mean"
    """How H_t averages per-token entropies: token-mean or seq-mean-token-mean (eapo.core.rollout_entropy)."""
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
        scheme = _scheme_of_method(method)
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
        entropy_agg = values.get("entropy_agg", "token-mean")
        if entropy_agg not in ENTROPY_AGGREGATIONS:
            raise ValueError(
                f"algorithm.eapo.entropy_agg={entropy_agg!r} is invalid; valid: {', '.join(ENTROPY_AGGREGATIONS)}"
            )
        weights = {key: values[key] for key in WEIGHT_KEYS if key in values}
        _build_weighting(scheme, weights)  # validate once, here
        controls = EntropyControls.resolve(method, {key: values.get(key) for key in CONTROL_KEYS})
        return cls(method=method, **weights, entropy_agg=entropy_agg, controls=controls)

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
        if estimator == "eapo":
            raise RuntimeError(
                "algorithm.adv_estimator=eapo needs this step's rollout entropy, which only the eapo trainer "
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
        weights = {key: values[key] for key in WEIGHT_KEYS if key in values}
        _build_weighting(scheme_of(estimator), weights)  # rejects keys the scheme does not take
        return cls(
            method=scheme_of(estimator), **weights, entropy_agg=values.get("entropy_agg", "token-mean")
        )

    @property
    def scheme(self) -> str:
        """The :mod:`eapo.core` weighting scheme: the method, or ``grpo`` for an entropy-control preset."""
        return _scheme_of_method(self.method)

    @property
    def estimator(self) -> str:
        """The ``algorithm.adv_estimator`` that applies :attr:`scheme`."""
        return estimator_of(self.scheme)

    def overrides(self) -> dict[str, float]:
        """The weights that were set, by name."""
        return {key: getattr(self, key) for key in WEIGHT_KEYS if getattr(self, key) is not None}

    def build_weighting(self) -> WeightingScheme:
        """A fresh :class:`eapo.core.WeightingScheme` for these settings."""
        return _build_weighting(self.scheme, self.overrides())


def _build_weighting(scheme: str, weights: Mapping[str, Any]) -> WeightingScheme:
    try:
        return make_weighting(scheme, **weights)  # None values take the scheme's defaults
    except ValueError as error:
        raise ValueError(f"algorithm.eapo: {error}") from error


def _preset_keys(method: str) -> str:
    return " ".join(f"{key}={value}" for key, value in ENTROPY_CONTROLS[method].preset.items())
