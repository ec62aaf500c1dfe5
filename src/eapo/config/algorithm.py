"""The ``algorithm`` section: the YAML view of one :class:`eapo.core.Algorithm`.

Its fields are derived from core's declarations (the weights, the step's settings, the objective's loss
options and every entropy control: :data:`eapo.core.WEIGHT_SETTINGS`, :data:`eapo.core.STEP_SETTINGS`,
:data:`eapo.core.OBJECTIVE_SETTINGS`, :data:`eapo.core.CONTROL_SETTINGS`), not copied. The section is
validated once, by :meth:`eapo.core.Algorithm.resolve` when the tree is validated
(:meth:`AlgorithmConfig.resolve`); the engines read the resolved value (:meth:`AlgorithmConfig.resolved`).
What the TRL engine cannot run is :meth:`AlgorithmConfig.trl_problems` (errors), what cannot act
:meth:`AlgorithmConfig.inert_controls` (warnings), both from the registrations (no control is named here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from eapo.config.fields import setting, with_settings
from eapo.core import (
    CONTROL_SETTINGS,
    OBJECTIVE_SETTINGS,
    STEP_SETTINGS,
    WEIGHT_SETTINGS,
    Algorithm,
)
from eapo.core.algorithm import LOSS_TYPES, method_setting

__all__ = ["AlgorithmConfig", "LOSS_TYPES"]

_METHOD = method_setting()


@dataclass
@with_settings("kl_bias_correction", CONTROL_SETTINGS.values())
@with_settings("entropy_agg", OBJECTIVE_SETTINGS.values(), nullable=False)
@with_settings("anchor_steps", STEP_SETTINGS.values(), nullable=False)
@with_settings("method", WEIGHT_SETTINGS.values())
class AlgorithmConfig:
    """The ``algorithm`` section: ``method`` and every setting core declares, derived into fields by
    :func:`with_settings` (a weight or control left null takes the scheme's or the preset's value).
    :meth:`eapo.config.RunConfig.validate` resolves it once into an :class:`eapo.core.Algorithm`."""

    method: str = setting(_METHOD.doc, _METHOD.default, valid=_METHOD.valid)

    def __post_init__(self) -> None:
        self._resolved: Algorithm | None = None

    def values(self) -> dict[str, Any]:
        """Every setting as written (None: unset), without ``method``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "method"}

    def resolve(self) -> Algorithm:
        """Resolve the section into an :class:`eapo.core.Algorithm` (the one validation), then hold the
        resolved values: the step's and objective's settings and every control (the preset's value, else
        off) are written back, so the run's ``config.yaml`` records what ran.

        Raises:
            eapo.core.SettingError: naming ``algorithm.<key>``.
        """
        algorithm = Algorithm.resolve(self.method, self.values(), where="algorithm.")
        for key, value in {
            **algorithm.step_settings(),
            **algorithm.objective,
            **algorithm.control_values(),
        }.items():
            if hasattr(self, key):  # a setting registered after this class was made has no field here
                setattr(self, key, value)
        for key in WEIGHT_SETTINGS:  # the set weights, as the declarations hold them (ints become floats)
            if getattr(self, key, None) is not None:
                setattr(self, key, algorithm.weights[key])
        self._resolved = algorithm
        return algorithm

    def resolved(self) -> Algorithm:
        """The value :meth:`resolve` made (resolving now if the tree was not validated)."""
        return self._resolved if self._resolved is not None else self.resolve()

    def weighting_method(self) -> str:
        """The polarity weighting scheme this method runs (the method, or GRPO for a control preset)."""
        return self.resolved().scheme

    def trl_problems(self) -> list[str]:
        """What the TRL engine cannot run in the resolved algorithm (:meth:`eapo.core.Algorithm.trl_problems`)."""
        return self.resolved().trl_problems("algorithm.")

    def inert_controls(self) -> list[str]:
        """Controls that are set but cannot act here (:meth:`eapo.core.Algorithm.inert_notes`; warnings)."""
        return self.resolved().inert_notes("algorithm.")
