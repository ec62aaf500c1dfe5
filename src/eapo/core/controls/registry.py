"""The registry of entropy controls: what a control declares, and the generic paths the engines read.

A control is one module of :mod:`eapo.core.controls` that registers one :class:`EntropyControl`
carrying everything about it: its settings (declared once, :class:`eapo.core.settings.Setting`), its
method preset, its maths (a policy loss, per-token weights of the policy loss, a run state), the engine
options it maps onto where TRL 1.16 or verl 0.9.1 has the control itself, and the metric keys it logs.
The engines never name a control: they apply every registered one through the generic readers here
(:func:`trl_control_args`, :func:`verl_control_options`, :func:`control_states`, :func:`policy_loss_of`,
:func:`applied_by_eapo`, :func:`control_token_weights`, :func:`clips_ratio`) and call the hooks a control
registers for what an engine does by its own means (``trl_applied_coef``, ``trl_token_mask``,
``trl_placeholders``, ``verl_selected``).

Where an engine has a control (it maps settings onto the engine's options), the engine runs it. Where it
does not, eapo runs the control's maths in that engine's loss, through one path per engine:

* its **run state** (``make_state``) is kept by core's step (:meth:`eapo.core.EAPOStep.control_inputs`):
  before each update the state gives the update's inputs (``loss_inputs()``, from the entropies up to
  the previous step), then this step's ``H_t`` moves it (``observe(H_t)``); a state whose
  ``observe_first`` is true is moved first, so its inputs read ``H_t`` too (EntroPIC). An input named like a
  setting that the engine has an option for replaces that option for the update (the adaptive
  coefficient is verl's ``entropy_coeff`` of that step); the others reach ``token_weights``;
* its **per-token weights** (``token_weights``) multiply the per-token policy loss (not the KL term),
  as TRL multiplies its top-entropy mask: a weight of 0 removes a token's policy gradient while it still
  counts in the aggregation's denominator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from eapo.core.settings import Setting, check_settings, settings_by_name

__all__ = [
    "LOSS_MODES",
    "CONTROL_METRICS",
    "EntropyControl",
    "ENTROPY_CONTROLS",
    "CONTROL_SETTINGS",
    "register_entropy_control",
    "control_defaults",
    "resolve_controls",
    "trl_control_args",
    "trl_placeholder_fields",
    "verl_control_options",
    "clips_ratio",
    "control_states",
    "policy_loss_of",
    "TokenInputs",
    "is_on",
    "applied_by_eapo",
    "control_token_weights",
    "control_problems",
    "stray_settings",
    "switched_problems",
    "state_from_settings",
    "check_resumed_settings",
    "finite",
    "control_panels",
    "actuator_panels",
]

#: ``algorithm.loss_mode`` values: the PPO-clip surrogate of the paper, or a covariance-selected variant.
LOSS_MODES: tuple[str, ...] = ("vanilla", "clip_cov", "kl_cov")

#: The titles ``eapo plot`` gives the shared control metrics (:data:`CONTROL_METRICS`).
CONTROL_METRIC_TITLES = {
    "entropy_control/coef": "Entropy coefficient (applied)",
    "entropy_control/clip_low_frac": "Lower-clip fraction (tokens)",
    "entropy_control/clip_high_frac": "Upper-clip fraction (tokens)",
    "entropy_control/cov_frac": "Clip-Cov / KL-Cov selected (share of tokens)",
    "entropy_control/top_entropy_frac": "Top-entropy tokens kept (share)",
}

#: The metric keys the entropy controls act through, the same on both engines (``eapo plot`` draws them).
CONTROL_METRICS = {
    "coef": "entropy_control/coef",  # the entropy coefficient applied to this update (bonus or adaptive)
    "clip_low_frac": "entropy_control/clip_low_frac",  # share of tokens the lower PPO clip acted on
    "clip_high_frac": "entropy_control/clip_high_frac",  # share of tokens the upper PPO clip acted on
    "cov_frac": "entropy_control/cov_frac",  # share of tokens Clip-Cov / KL-Cov selected
    "top_entropy_frac": "entropy_control/top_entropy_frac",  # share of tokens the top-entropy mask kept
}


@dataclass(frozen=True)
class TokenInputs:
    """What a control's per-token maths sees in one update (tensors ``(B, T)``, detached).

    Attributes:
        logp: log-probs of the sampled tokens under the policy being updated.
        old_logp: the same under the policy that sampled them.
        advantages: the (polarity-weighted) advantages, per token.
        mask: 1 on response tokens.
        entropy: per-token entropies of the update's forward (None unless the control ``needs_entropy``).
        settings: every control setting, resolved (:func:`resolve_controls`).
        step: this control's inputs to the update from its run state (``loss_inputs()``; {} without one).
        gather: concatenates a 1-D tensor over the data-parallel processes (None on one process).
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor | None
    settings: Mapping[str, Any]
    step: Mapping[str, float] = field(default_factory=dict)
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None


@dataclass(frozen=True)
class EntropyControl:
    """A control of the field, registered whole: settings, preset, maths, engine mappings and metrics.

    Attributes:
        name: the method preset's name (``algorithm.method``).
        label: its name in tables, legends and reports (``eapo.evaluation.labels.METHOD_NAMES``).
        source: the paper or code it comes from.
        preset: the ``algorithm.*`` values the preset sets where the user left them unset (the source's own).
        help: what the control does, in one sentence.
        declares: the settings the control introduces, each declared once here (``default``: the value
            that leaves the control off).
        trl_fields: where TRL 1.16 has the control: setting -> the ``GRPOConfig`` field it sets, or
            ``(field, convert)``.
        verl_options: where verl 0.9.1 has the control: setting -> the option under
            ``actor_rollout_ref.actor`` it sets (written when the setting is set).
        trl_moves: where TRL 1.16's trainer runs the control's controller itself: run-state attribute ->
            the trainer attribute (a dotted path) TRL moves, copied into the state before it is saved and
            back after it is loaded.
        trl_loss_only: where TRL 1.16 applies the control only inside its own loss: its ``GRPOConfig`` field
            -> what that field does there. Such a control cannot run on TRL where eapo forms the loss (a
            ``loss_mode``'s policy loss, or a control's token weights), and the field set to other than TRL's
            default is refused there, named with what it does.
        trl_reads: run-state attribute -> the trainer attribute TRL reads, set from the state whenever the
            state has it (not None): after each step's decision and after a load (an anchored target).
        trl_placeholders: setting -> the value its TRL field holds while the setting is None (unset: the run
            state sets it, ``trl_reads``, e.g. an H_0-anchored target), since TRL's own controller reads a
            number until then. ``EAPOConfig`` shows the field as None; a plain ``GRPOConfig`` always holds
            TRL's number, which is the setting's value while the control's ``switch`` is on there.
        trl_applied_coef: where TRL 1.16 runs the control and it decides the entropy coefficient TRL's loss
            applies: ``(the TRL trainer) -> that coefficient for the coming update`` (read before TRL's update
            moves it), or None while the trainer's fields leave the control off.
        trl_token_mask: where TRL 1.16 has the control as a per-token mask of its policy loss: ``(the TRL
            trainer, entropies (B, T), mask (B, T)) -> TRL's own mask (B, T)``, or None while the trainer's
            fields leave it off. Where eapo forms TRL's loss the mask multiplies it in, and its share of
            response tokens is logged as ``weight_metric`` on every update.
        policy_loss: where an engine lacks the control and ``loss_mode`` names it: the per-token loss that
            replaces the PPO-clip surrogate, ``(logp, old_logp, advantages, mask, values, *, clip_low,
            clip_high) -> (loss (B, T), selected (B, T) bool)``.
        make_state: the control's run state from the resolved settings (None when off): an object with
            ``anchor(h0)``, ``state_dict()`` and ``load_state_dict()`` that core's step anchors and saves,
            and, where an engine lacks the control, ``loss_inputs() -> dict`` and ``observe(H_t)``, and
            ``observe_first`` (default False) where the update's inputs read this step's ``H_t``
            (:meth:`eapo.core.EAPOStep.control_inputs`).
        token_weights: where an engine lacks the control, ``(TokenInputs) -> (B, T)`` weights multiplied
            into the per-token policy loss (a 0/1 mask or any non-negative weights).
        verl_selected: where verl 0.9.1 runs the control's policy loss (``loss_mode``): ``(TokenInputs,
            verl_metric) -> the share of response tokens it selected`` (logged as ``entropy_control/cov_frac``,
            as the TRL engine logs the ``selected`` of ``policy_loss``), None where it cannot say;
            ``verl_metric(key)`` is verl's own loss metric ``key`` as a number (None where absent), and the
            inputs' ``settings`` hold the control's settings as verl's actor config holds them.
        switch: the bool setting that turns the control on, where it has one (its other settings apply only
            with it).
        needs_entropy: the control's loss term reads the update's per-token entropies (its
            ``token_weights``, or an entropy term its run state sets per step).
        step_settings: settings whose value the run state gives per update (``loss_inputs()``), where
            eapo applies the control: an engine option they map onto is set per update, not in the config.
        weight_metric: the metric key logged as the share of response tokens' weight
            (the masked mean of ``token_weights``), where eapo applies them.
        inert: ``(resolved settings, the objective's options) -> notes``: settings that are set but cannot
            act in this configuration (a warning, not an error), each naming settings as ``{p}name``.
        problems: the rules between settings the control needs, ``(resolved settings) -> messages``: each
            message names settings as ``{p}name`` (``{p}``: the engine's prefix, ``algorithm.`` or
            ``algorithm.eapo.``); one declaration of the rule for every engine (:func:`control_problems`).
        metrics: the metric keys it logs: the shared :data:`CONTROL_METRICS` (``entropy_control/*``) it acts
            through, or keys under its own name (``entropic/alpha``) for its own state.
        panels: its own logged metrics ``eapo plot`` draws, ``(key, title)`` (e.g. a controller's state).
        actuators: the keys among its ``panels`` that a study's seed bands draw: what the control moves
            each step (EntroPIC's applied α).
    """

    name: str
    source: str
    preset: dict[str, Any] = field(default_factory=dict)
    help: str = ""
    declares: tuple[Setting, ...] = ()
    trl_fields: Mapping[str, str | tuple[str, Callable[[Any], Any]]] = field(default_factory=dict)
    verl_options: Mapping[str, str] = field(default_factory=dict)
    trl_moves: Mapping[str, str] = field(default_factory=dict)
    trl_reads: Mapping[str, str] = field(default_factory=dict)
    trl_loss_only: Mapping[str, str] = field(default_factory=dict)
    trl_placeholders: Mapping[str, Any] = field(default_factory=dict)
    trl_applied_coef: Callable[[Any], float | None] | None = None
    trl_token_mask: Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor | None] | None = None
    policy_loss: Callable[..., Any] | None = None
    make_state: Callable[[Mapping[str, Any]], Any] | None = None
    token_weights: Callable[[TokenInputs], torch.Tensor] | None = None
    verl_selected: Callable[[TokenInputs, Callable[[str], float | None]], float | None] | None = None
    switch: str | None = None
    needs_entropy: bool = False
    step_settings: tuple[str, ...] = ()
    weight_metric: str | None = None
    problems: Callable[[Mapping[str, Any]], list[str]] | None = None
    inert: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]] | None = None
    metrics: tuple[str, ...] = ()
    panels: tuple[tuple[str, str], ...] = ()
    actuators: tuple[str, ...] = ()
    label: str = ""


#: name -> :class:`EntropyControl`, in registration order. Filled by :func:`register_entropy_control`.
ENTROPY_CONTROLS: dict[str, EntropyControl] = {}

#: Every entropy-control setting, by name, in declaration order (each declared by one control).
CONTROL_SETTINGS: dict[str, Setting] = {}


def register_entropy_control(control: EntropyControl) -> EntropyControl:
    """Add a control to :data:`ENTROPY_CONTROLS` (verl's ``register_policy_loss`` pattern: the entry
    carries the behaviour). Its preset and mappings may only name declared settings (its own or an
    earlier control's)."""
    if control.name in ENTROPY_CONTROLS:
        raise ValueError(f"entropy control {control.name!r} is registered twice")
    declared = settings_by_name([*CONTROL_SETTINGS.values(), *control.declares])
    check_settings(declared, control.preset, f"the {control.name} preset's ")
    unknown = sorted((set(control.trl_fields) | set(control.verl_options)) - set(declared))
    if unknown:
        raise ValueError(f"entropy control {control.name!r} maps undeclared settings {unknown}")
    if not set(control.trl_placeholders) <= set(control.trl_fields):
        raise ValueError(
            f"entropy control {control.name!r}: trl_placeholders names a setting without a TRL field"
        )
    ENTROPY_CONTROLS[control.name] = control
    CONTROL_SETTINGS.clear()
    CONTROL_SETTINGS.update(declared)
    return control


def control_defaults() -> dict[str, Any]:
    """Every control setting's "off" value (its declared default), by name."""
    return {name: setting.default for name, setting in CONTROL_SETTINGS.items()}


def resolve_controls(method: str, values: Mapping[str, Any], *, fill_defaults: bool = True) -> dict[str, Any]:
    """Every control setting resolved: ``values`` where set (not None), else ``method``'s preset where it
    is one, else the declared default (off), or None with ``fill_defaults=False`` (the verl plugin: an
    unset control leaves verl's own option alone). The one resolution of presets for every engine."""
    preset = ENTROPY_CONTROLS[method].preset if method in ENTROPY_CONTROLS else {}
    resolved = {}
    for name, setting in CONTROL_SETTINGS.items():
        value = values.get(name)
        default = setting.default if fill_defaults else None
        resolved[name] = value if value is not None else preset.get(name, default)
    return resolved


# ---------------------------------------------------------------------------------------------
# The generic paths: how each engine applies every registered control
# ---------------------------------------------------------------------------------------------


def trl_control_args(values: Mapping[str, Any], *, placeholders: bool = True) -> dict[str, Any]:
    """TRL's ``GRPOConfig`` fields of every control that TRL has, from the resolved settings; an unset
    setting with a ``trl_placeholders`` entry gives its placeholder, or None with ``placeholders=False``
    (``EAPOConfig``'s view: the run state sets it)."""
    args: dict[str, Any] = {}
    for control in ENTROPY_CONTROLS.values():
        for key, target in control.trl_fields.items():
            name, convert = target if isinstance(target, tuple) else (target, None)
            value = values.get(key)
            if value is None and key in control.trl_placeholders:
                args[name] = control.trl_placeholders[key] if placeholders else None
            else:
                args[name] = convert(value) if convert is not None else value
    return args


def trl_placeholder_fields() -> dict[str, tuple[EntropyControl, str, Any]]:
    """Every TRL field a run state sets during the run (``trl_placeholders``): field -> (its control, the
    setting it holds, the number TRL's own controller reads until the state sets it)."""
    fields: dict[str, tuple[EntropyControl, str, Any]] = {}
    for control in ENTROPY_CONTROLS.values():
        for key, placeholder in control.trl_placeholders.items():
            target = control.trl_fields[key]
            fields[target if isinstance(target, str) else target[0]] = (control, key, placeholder)
    return fields


def verl_control_options(values: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """verl's ``actor_rollout_ref.actor`` options of every control that verl has: option -> (the eapo
    setting that sets it, its value), for the settings that are set."""
    options: dict[str, tuple[str, Any]] = {}
    for control in ENTROPY_CONTROLS.values():
        for key, option in control.verl_options.items():
            if values.get(key) is not None:
                options[option] = (key, values[key])
    return options


def control_states(values: Mapping[str, Any]) -> dict[str, Any]:
    """The run state of every control that keeps one and is on, by name (for :class:`eapo.core.EAPOStep`)."""
    states = {}
    for control in ENTROPY_CONTROLS.values():
        state = control.make_state(values) if control.make_state is not None else None
        if state is not None:
            states[control.name] = state
    return states


def policy_loss_of(loss_mode: str) -> Callable[..., Any] | None:
    """The per-token policy loss of the control ``loss_mode`` names (None for the paper's ``vanilla``)."""
    if loss_mode == "vanilla":
        return None
    control = ENTROPY_CONTROLS.get(loss_mode)
    if control is None or control.policy_loss is None:
        raise ValueError(f"loss_mode={loss_mode!r} names no registered control with a policy loss")
    return control.policy_loss


def clips_ratio(loss_mode: str) -> bool:
    """Whether the policy loss ``loss_mode`` names clips the ratio, so that the clip shares
    (``entropy_control/clip_low_frac``, ``clip_high_frac``) describe it: the paper's PPO-clip and any loss no
    control registers do; a control's loss does where its ``metrics`` list them (KL-Cov's does not clip)."""
    control = ENTROPY_CONTROLS.get(loss_mode)
    return control is None or CONTROL_METRICS["clip_low_frac"] in control.metrics


def is_on(control: EntropyControl, values: Mapping[str, Any]) -> bool:
    """Whether the resolved settings turn ``control`` on: one of its declared settings is set to a value
    other than its declared default (the value that leaves it off)."""
    return any(
        values.get(setting.name) is not None and values.get(setting.name) != setting.default
        for setting in control.declares
    )


def applied_by_eapo(engine: str, values: Mapping[str, Any]) -> list[EntropyControl]:
    """The controls that are on and that eapo applies itself on ``engine`` (``"trl"`` or ``"verl"``): those
    the engine has no option for (no ``trl_fields`` / ``verl_options``) and whose maths is per-token
    weights or a run state (a policy loss is selected by ``loss_mode`` instead, :func:`policy_loss_of`)."""
    if engine not in ("trl", "verl"):
        raise ValueError(f"engine must be trl or verl, got {engine!r}")
    applied = []
    for control in ENTROPY_CONTROLS.values():
        native = control.trl_fields if engine == "trl" else control.verl_options
        has_maths = control.token_weights is not None or control.make_state is not None
        if has_maths and not native and is_on(control, values):
            applied.append(control)
    return applied


def control_token_weights(
    controls: list[EntropyControl], make_inputs: Callable[[EntropyControl], TokenInputs]
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """The product of the ``token_weights`` of ``controls`` (``(B, T)``; None when none has any) and each
    control's ``weight_metric``: the mean weight over response tokens, over every process (``gather``).
    ``make_inputs(control)`` gives the control its :class:`TokenInputs` (its own ``step`` inputs)."""
    weights: torch.Tensor | None = None
    metrics: dict[str, float] = {}
    for control in controls:
        if control.token_weights is None:
            continue
        inputs = make_inputs(control)
        own = control.token_weights(inputs).detach()  # [B, T]
        if own.shape != inputs.mask.shape:
            raise ValueError(
                f"entropy control {control.name!r}: token_weights gave {tuple(own.shape)}, "
                f"expected {tuple(inputs.mask.shape)}"
            )
        weights = own if weights is None else weights * own
        if control.weight_metric is not None:
            valid = inputs.mask.bool()
            values = own[valid].float()
            if inputs.gather is not None:
                values = inputs.gather(values)
            metrics[control.weight_metric] = values.mean().item() if values.numel() else 0.0
    return weights, metrics


def stray_settings(values: Mapping[str, Any], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` set to other than their declared default (for a control's "applies only with"
    rule)."""
    return [
        name
        for name in names
        if values.get(name) is not None and values[name] != CONTROL_SETTINGS[name].default
    ]


def switched_problems(values: Mapping[str, Any], switch: str, names: tuple[str, ...], what: str) -> list[str]:
    """A switched control's "applies only with" rule: ``names`` set while the bool setting ``switch`` is off."""
    stray = stray_settings(values, names)
    if values[switch] or not stray:
        return []
    return [
        f"{{p}}{stray[0]} applies only to {what}: set {{p}}{switch}=true (or method={switch}), or remove it"
    ]


def state_from_settings(
    state_class: Callable[..., Any], values: Mapping[str, Any], switch: str, fields: Mapping[str, str]
) -> Any:
    """A control's run state from the resolved settings: None while the bool setting ``switch`` is off,
    else ``state_class`` with each field (``fields``: field -> setting) that is set, the class's own
    default for the others."""
    if not values.get(switch):
        return None
    return state_class(
        **{field: float(values[name]) for field, name in fields.items() if values.get(name) is not None}
    )


def finite(name: str, value: float) -> float:
    """``value`` as a float, refused (naming ``name``) unless finite: a controller's inputs and settings."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def check_resumed_settings(
    what: str, configured: Mapping[str, Any], target: float | None, state: Mapping[str, Any]
) -> None:
    """Refuse a resume whose saved settings (``state["settings"]``), or a configured fixed ``target``
    against the saved one, differ from this run's (a controller's ``load_state_dict``)."""
    changed = [key for key, value in state.get("settings", {}).items() if configured.get(key) != value]
    if target is not None and state.get("target") is not None and state["target"] != target:
        changed.append("target")
    if changed:
        key = changed[0]
        was = state["target"] if key == "target" else state["settings"][key]
        now = target if key == "target" else configured[key]
        raise ValueError(
            f"checkpointed {what} {key}={was} differs from the configured {key}={now}; "
            "resume with the same algorithm settings"
        )


def control_problems(values: Mapping[str, Any], prefix: str) -> list[str]:
    """Every registered control's rule broken by ``values`` (unset: the declared default), one message
    each, settings named with ``prefix`` (``algorithm.`` in the YAML, ``algorithm.eapo.`` on verl)."""
    resolved = {
        name: setting.default if values.get(name) is None else values[name]
        for name, setting in CONTROL_SETTINGS.items()
    }
    messages = []
    for control in ENTROPY_CONTROLS.values():
        if control.problems is not None:
            messages += [message.replace("{p}", prefix) for message in control.problems(resolved)]
    return messages


def actuator_panels() -> tuple[tuple[str, str], ...]:
    """``(metric key, title)`` of what the closed-loop controls move each step, for a study's seed bands:
    each registered control's ``actuators``, then the applied entropy coefficient (the shared metric the
    bonus and the adaptive coefficient act through)."""
    own = [
        panel
        for control in ENTROPY_CONTROLS.values()
        for panel in control.panels
        if panel[0] in control.actuators
    ]
    return (*own, (CONTROL_METRICS["coef"], CONTROL_METRIC_TITLES[CONTROL_METRICS["coef"]]))


def control_panels() -> tuple[tuple[str, str], ...]:
    """``(metric key, title)`` of every control metric ``eapo plot`` draws: the shared ones
    (:data:`CONTROL_METRIC_TITLES`), then each registered control's own ``panels``."""
    panels = list(CONTROL_METRIC_TITLES.items())
    for control in ENTROPY_CONTROLS.values():
        panels += [panel for panel in control.panels if panel not in panels]
    return tuple(panels)
