"""One run's algorithm as one frozen value, resolved and validated once: :class:`Algorithm`.

Every view of the algorithm's settings produces this value and reads it, none re-validates it:

* ``eapo train``'s YAML section ``algorithm`` (:class:`eapo.config.AlgorithmConfig`) resolves it once
  when the tree is validated (:meth:`~eapo.config.AlgorithmConfig.resolved`);
* TRL's :class:`eapo.EAPOConfig` resolves it once in ``__post_init__`` (``EAPOConfig.algorithm``), from
  its own fields (the objective's are TRL's: :data:`OBJECTIVE_TRL_FIELDS`);
* the verl plugin resolves it once per process from ``algorithm.eapo`` (the launcher writes that
  section from the value, :meth:`Algorithm.section`), where verl's own options hold the objective.

What it holds: the method as written and the weighting scheme it runs, every weight the scheme takes
(its defaults written out), the step's split and entropy aggregation, every entropy-control setting
(None where neither the user nor the method's preset set it: an engine's own option is then left
alone), and the objective's loss options (:data:`OBJECTIVE_SETTINGS`; empty where the engine holds
them). The builders (:meth:`Algorithm.make_weighting`, :meth:`Algorithm.make_step`) trust the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, get_args

from eapo.core.advantages import AdvantageScale
from eapo.core.controls import (
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    EntropyControl,
    applied_by_eapo,
    control_problems,
    control_states,
    is_on,
    resolve_controls,
)
from eapo.core.settings import (
    ANY_OF_TYPE,
    Setting,
    SettingError,
    at_least,
    between,
    check_settings,
    one_of,
    settings_by_name,
)
from eapo.core.step import STEP_SETTINGS, EAPOStep, step_problems
from eapo.core.weighting import (
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    WeightingScheme,
    check_weights,
    scheme_defaults,
)

__all__ = [
    "OBJECTIVE_SETTINGS",
    "OBJECTIVE_TRL_FIELDS",
    "LOSS_TYPES",
    "EAPO_LOSS_TYPES",
    "method_setting",
    "methods",
    "scheme_of_method",
    "Algorithm",
]

#: ``loss_type``: TRL 1.16's ``GRPOConfig.loss_type`` values (verl maps the ones it has).
LOSS_TYPES: tuple[str, ...] = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")

_OBJECTIVE = "EAPO paper, Eq. grpo and Section 5.1"

#: The objective's loss options, declared once (each engine maps them onto its own options).
OBJECTIVE_SETTINGS: dict[str, Setting] = settings_by_name(
    [
        Setting(
            "scale_rewards",
            str,
            "Advantage scaling: group (GRPO), batch or none.",
            one_of(*get_args(AdvantageScale)),
            default="group",
            citation="EAPO paper, Eq. A_i",
        ),
        Setting(
            "beta",
            float,
            "KL coefficient to the frozen reference model (the paper: 0.001).",
            at_least(0),
            default=0.001,
            citation=_OBJECTIVE,
        ),
        Setting(
            "epsilon",
            float,
            "PPO clip range ε (the paper: 0.2).",
            between(0, 1, low_open=True, high_open=True),
            default=0.2,
            citation=_OBJECTIVE,
        ),
        Setting(
            "loss_type",
            str,
            "TRL loss aggregation; 'grpo' is the paper's 1/|y_i| (seq-mean-token-mean).",
            one_of(*LOSS_TYPES),
            default="grpo",
            citation=_OBJECTIVE,
        ),
        Setting(
            "num_iterations",
            int,
            "Policy updates per generation batch (μ).",
            at_least(1),
            default=1,
            citation=_OBJECTIVE,
        ),
        Setting(
            "kl_bias_correction",
            bool,
            "Multiply the k3 KL term by the importance ratio (TRL's use_bias_correction_kl); off is the "
            "paper's objective and verl's low_var_kl.",
            ANY_OF_TYPE,
            default=False,
            citation=_OBJECTIVE,
        ),
    ]
)

#: The ``loss_type`` values eapo's own loss aggregates like, where it forms TRL's (grpo: 1/|y_i|; bnpo: token-mean).
EAPO_LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo")

#: The objective setting -> TRL 1.16's ``GRPOConfig`` field, where the names differ.
OBJECTIVE_TRL_FIELDS: dict[str, str] = {"kl_bias_correction": "use_bias_correction_kl"}


def methods() -> tuple[str, ...]:
    """Every ``algorithm.method``: the weighting schemes, then the entropy-control presets (registered now)."""
    return (*WEIGHTING_SCHEMES, *ENTROPY_CONTROLS)


def scheme_of_method(method: str) -> str:
    """The weighting scheme of a method: the method itself, or ``grpo`` for an entropy-control preset
    (GRPO's weights plus one control)."""
    if method in WEIGHTING_SCHEMES:
        return method
    if method in ENTROPY_CONTROLS:
        return "grpo"
    raise ValueError(f"unknown method {method!r}; known: {', '.join(methods())}")


def method_setting() -> Setting:
    """``method``'s declaration, its choices the methods registered now (:func:`methods`)."""
    return Setting(
        "method",
        str,
        "Method: a polarity weighting scheme (eapo.core.WEIGHTING_SCHEMES) or an entropy-control preset, "
        "which is GRPO's weights (1, 1) plus that control's settings from its source "
        "(eapo.core.ENTROPY_CONTROLS). Any control's settings also compose with any scheme.",
        one_of(*methods()),
        default="eapo",
    )


def _frozen(values: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class Algorithm:
    """One run's algorithm, resolved: build with :meth:`resolve` (the one validation).

    Attributes:
        method: ``algorithm.method`` as written: a weighting scheme or an entropy-control preset.
        scheme: the weighting scheme it runs (the method, or ``grpo`` for a preset).
        weights: every weight the scheme takes, resolved (its defaults where unset).
        split_by, quantile_k, quantile_method, entropy_agg: the step's settings, resolved (a scheme with
            its own split, QAE's quantile, sets ``split_by``).
        controls: every entropy-control setting: the user's value, else the preset's, else None (unset:
            the control's "off" for eapo's maths; an engine's own option is left alone).
        objective: the objective's loss options (:data:`OBJECTIVE_SETTINGS`), resolved; empty where the
            engine holds them itself (the verl plugin).
    """

    method: str
    scheme: str
    weights: Mapping[str, Any]
    split_by: str
    quantile_k: float
    quantile_method: str
    entropy_agg: str
    controls: Mapping[str, Any]
    objective: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        method: str | None = None,
        settings: Mapping[str, Any] | None = None,
        *,
        where: str = "",
        objective: bool = True,
    ) -> Algorithm:
        """The one validation: ``method`` (None: ``eapo``) and its settings (None values: unset).

        Args:
            method: a weighting scheme or an entropy-control preset.
            settings: flat, as users write them: weights, step, controls and (``objective=True``) the
                objective's options.
            where: the prefix of keys in errors (``algorithm.``, ``EAPOConfig.``, ``algorithm.eapo.``).
            objective: whether the objective's options belong to this view (not on verl, whose own
                options hold them).

        Raises:
            SettingError: naming ``where + key``: an unknown method or key, a value out of range, a weight
                the scheme does not take, or a rule between settings broken.
        """
        values = {key: value for key, value in (settings or {}).items() if value is not None}
        method = "eapo" if method is None else method
        method_setting().check(method, where)
        scheme = scheme_of_method(method)
        known = {
            **WEIGHT_SETTINGS,
            **STEP_SETTINGS,
            **CONTROL_SETTINGS,
            **(OBJECTIVE_SETTINGS if objective else {}),
        }
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise SettingError(
                f"{where}{unknown[0]} is not an algorithm setting; known: method, {', '.join(known)}",
                f"{where}{unknown[0]}",
            )
        weights = check_weights(
            method, scheme, {k: v for k, v in values.items() if k in WEIGHT_SETTINGS}, where
        )
        step = check_settings(STEP_SETTINGS, {k: v for k, v in values.items() if k in STEP_SETTINGS}, where)
        problems = step_problems(step, where, scheme)
        if problems:
            key = "quantile_k" if f"{where}quantile_k=" in problems[0] else "quantile_method"
            raise SettingError(problems[0], f"{where}{key}")
        implied = WEIGHTING_SCHEMES[scheme].split_by
        if implied is not None and step.get("split_by", implied) not in ("mean", implied):
            raise SettingError(
                f"{where}split_by={step['split_by']} contradicts method {method}, which splits at the {implied} "
                "(leave split_by unset)",
                f"{where}split_by",
            )
        step = {key: spec.default for key, spec in STEP_SETTINGS.items()} | step
        if implied is not None:
            step["split_by"] = implied
        controls = check_settings(
            CONTROL_SETTINGS, {k: v for k, v in values.items() if k in CONTROL_SETTINGS}, where, nullable=True
        )
        controls = resolve_controls(method, controls, fill_defaults=False)
        problems = control_problems(controls, where)  # each control's own rules
        if problems:
            raise SettingError(problems[0], f"{where}method")
        resolved_controls = _with_defaults(controls)
        try:
            control_states(resolved_controls)  # each run state holds its own settings
        except ValueError as error:
            raise SettingError(f"{where.rstrip('.') or 'algorithm'}: {error}", f"{where}method") from None
        objective_values: dict[str, Any] = {}
        if objective:
            objective_values = {
                key: spec.default for key, spec in OBJECTIVE_SETTINGS.items()
            } | check_settings(
                OBJECTIVE_SETTINGS, {k: v for k, v in values.items() if k in OBJECTIVE_SETTINGS}, where
            )
        return cls(
            method=method,
            scheme=scheme,
            weights=_frozen({**scheme_defaults(scheme), **weights}),
            controls=_frozen(controls),
            objective=_frozen(objective_values),
            **step,
        )

    def __getstate__(self) -> dict[str, Any]:  # picklable (TRL saves its arguments with the checkpoint)
        return {
            name: dict(value) if isinstance(value, MappingProxyType) else value
            for name, value in self.__dict__.items()
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, _frozen(value) if isinstance(value, dict) else value)

    # --- views -------------------------------------------------------------------------------------

    def control_values(self) -> dict[str, Any]:
        """Every control setting with each unset one at its declared default (off): what the controls'
        maths reads (:class:`eapo.core.controls.TokenInputs`)."""
        return _with_defaults(self.controls)

    def set_controls(self) -> dict[str, Any]:
        """The control settings that are set (by the user or the method's preset)."""
        return {key: value for key, value in self.controls.items() if value is not None}

    def step_settings(self) -> dict[str, Any]:
        """``split_by``, ``quantile_k``, ``quantile_method``, ``entropy_agg``."""
        return {key: getattr(self, key) for key in STEP_SETTINGS}

    def section(self) -> dict[str, Any]:
        """``algorithm.eapo`` for the verl plugin, which resolves it again in its own processes: the method,
        every weight, the step's settings, and the controls whose value differs from what the method alone
        resolves to (its preset, else off). The objective is verl's own options."""
        alone = resolve_controls(self.method, {})
        controls = {key: value for key, value in self.control_values().items() if value != alone[key]}
        return {"method": self.method, **self.weights, **self.step_settings(), **controls}

    def applied_by_eapo(self, engine: str) -> list[EntropyControl]:
        """The controls that are on and that eapo runs itself on ``engine`` (it has no option for them)."""
        return applied_by_eapo(engine, self.control_values())

    def inert_notes(self, where: str = "algorithm.") -> list[str]:
        """Controls set but unable to act in this configuration (warnings): each registration's ``inert``."""
        values = self.control_values()
        return [
            note.replace("{p}", where)
            for control in ENTROPY_CONTROLS.values()
            if control.inert is not None
            for note in control.inert(values, self.objective)
        ]

    def trl_problems(self, where: str = "algorithm.") -> list[str]:
        """What TRL cannot run, where eapo forms TRL's loss (a ``loss_mode``'s policy loss, or the token weights
        of a control TRL lacks): a control TRL applies only in its own loss (``trl_loss_only``), and a
        ``loss_type`` eapo's loss does not aggregate like (:data:`EAPO_LOSS_TYPES`)."""
        values = self.control_values()
        weighted = [c.name for c in self.applied_by_eapo("trl") if c.token_weights is not None]
        formed = [f"loss_mode={values['loss_mode']}"] if values["loss_mode"] != "vanilla" else []
        formed += [f"method or keys of {name}" for name in weighted]
        if not formed:
            return []
        problems = []
        loss_only = [c for c in ENTROPY_CONTROLS.values() if c.trl_loss_only and is_on(c, values)]
        if loss_only:
            shown = ", ".join(f"{s.name}={values[s.name]}" for c in loss_only for s in c.declares[:1])
            problems.append(
                f"{where}{formed[0]} with an entropy bonus TRL applies only in its own loss "
                f"({', '.join(c.name for c in loss_only)}: {shown}) cannot run on TRL: eapo forms the loss there "
                "in place of TRL's, whose entropy bonus it does not re-implement; drop one of the two, or run the "
                "pair on verl (actor.entropy_coeff composes with eapo's loss there)"
            )
        loss_type = self.objective.get("loss_type")
        if loss_type is not None and loss_type not in EAPO_LOSS_TYPES:
            problems.append(
                f"{where}{formed[0]}: eapo's loss aggregates as {where}loss_type grpo (1/|y_i|, "
                f"seq-mean-token-mean) or bnpo (token-mean); got loss_type={loss_type!r}"
            )
        return problems

    # --- builders (trusting the value) --------------------------------------------------------------

    def make_weighting(self) -> WeightingScheme:
        """A fresh weighting scheme: the scheme's builder with the resolved weights."""
        return WEIGHTING_SCHEMES[self.scheme].build(self.scheme, **self.weights)

    def control_states(self) -> dict[str, Any]:
        """A fresh run state of every control that keeps one and is on, by name."""
        return control_states(self.control_values())

    def make_step(
        self, *, weighting: WeightingScheme | None = None, controls: Mapping[str, Any] | None = None
    ):
        """The run's :class:`eapo.core.EAPOStep`: a fresh weighting (or ``weighting``), the split, and the
        controls' run states (or ``controls``)."""
        return EAPOStep(
            self.make_weighting() if weighting is None else weighting,
            method=self.method,
            split_by=self.split_by,
            quantile_k=self.quantile_k,
            quantile_method=self.quantile_method,
            controls=self.control_states() if controls is None else controls,
        )


def _with_defaults(controls: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: spec.default if controls.get(name) is None else controls[name]
        for name, spec in CONTROL_SETTINGS.items()
    }
