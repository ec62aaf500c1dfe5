"""The entropy-driven positive weight ``w+_t = clip(w0 · H_t / H_0, w_min, w_max)`` (Eq. ``dynamic_weight``;
closed form of the recursion in the appendix "Formula Derivation") and the registry of weighting schemes
(:data:`WEIGHTING_SCHEMES`, each a :class:`Scheme` carrying what other code needs), filled by
:func:`register_weighting` as verl's ``register_adv_est``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from eapo.core.settings import Setting, SettingError, at_least, check_settings, settings_by_name

# ---------------------------------------------------------------------------------------------
# The weights' settings, declared once (every other view of them is derived: eapo.core.settings)
# ---------------------------------------------------------------------------------------------

_PAPER = "EAPO paper, Section 5.1"

#: Every weight a scheme may take, by name. Which scheme takes which: :data:`WEIGHTING_SCHEMES`;
#: each scheme's defaults: :func:`scheme_defaults`.
WEIGHT_SETTINGS: dict[str, Setting] = settings_by_name(
    [
        Setting(
            "w_pos",
            float,
            "Fixed positive weight w+ (fixed schemes; default: the scheme's, eapo.core.scheme_defaults).",
            at_least(0),
            citation=_PAPER,
            symbol="w+",
        ),
        Setting(
            "w_neg",
            float,
            "Negative weight w- (every scheme; default: the scheme's, eapo.core.scheme_defaults).",
            at_least(0),
            citation=_PAPER,
            symbol="w−",
        ),
        Setting(
            "w0",
            float,
            "EAPO base positive weight w0 in w+_t = clip(w0 · H_t / H_0, w_min, w_max).",
            at_least(0),
            default=0.2,
            citation="EAPO paper, Eq. dynamic_weight; 0.2 in Section 5.1",
        ),
        Setting("w_min", float, "EAPO lower clip of w+.", at_least(0), default=0.0, citation=_PAPER),
        Setting("w_max", float, "EAPO upper clip of w+.", at_least(0), default=2.0, citation=_PAPER),
        Setting(
            "integral_gain",
            float,
            "EAPO's integral term k_I: w+_t = clip(w0 · H_t / H_0 + k_I · I_t, w_min, w_max) with "
            "I_t = Σ_s≤t (H_s / H_0 − 1) (conditional integration while w+ is clipped). 0: the paper's EAPO "
            "exactly; > 0: w+ keeps moving until H_t returns to H_0, so the equilibrium entropy no longer "
            "depends on w0 (docs/guide/entropy-controls.md, 'EAPO with an integral term').",
            at_least(0),
            default=0.0,
            citation="eapo's option (a PI form of Eq. dynamic_weight); 0 is the paper's",
            symbol="k_I",
        ),
        Setting(
            "anchor_steps",
            int,
            "EAPO: steps whose rollout entropies are averaged into H_0 (1: the paper's first-step anchor).",
            at_least(1),
            default=1,
            citation="eapo's option; 1 is the paper's",
            symbol="anchor",
        ),
    ]
)

#: The eapo scheme's own defaults, from the declarations above.
_EAPO_DEFAULTS: dict[str, Any] = {
    key: WEIGHT_SETTINGS[key].default for key in ("w0", "w_min", "w_max", "anchor_steps", "integral_gain")
}


# ---------------------------------------------------------------------------------------------
# Entropy-driven positive weight (Eq. dynamic_weight) and the weighting-scheme registry
# ---------------------------------------------------------------------------------------------


def _check_entropy(entropy: float) -> float:
    value = float(entropy)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"rollout entropy must be finite and > 0, got {value!r}; check that the completion mask is "
            "not empty and the logits are finite"
        )
    return value


class WeightingScheme(Protocol):
    """One interface for every polarity weighting: ``weights(entropy) -> (w_pos, w_neg)``."""

    name: str
    needs_entropy: bool

    def weights(self, entropy: float | None) -> tuple[float, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class FixedWeighting:
    """Constant ``(w_pos, w_neg)``: GRPO (1, 1), PSR (1, 0), NSR (0, 1), W-REINFORCE (0.1, 1), and QAE (GRPO's
    weights with its own split, ``split_by="quantile"``: core's step splits and centres there). Build it with
    :func:`make_weighting` (or :meth:`eapo.core.Algorithm.make_weighting`), which hold the weights to their
    declarations; the constructor trusts them."""

    needs_entropy = False

    def __init__(self, name: str, w_pos: float, w_neg: float, split_by: str | None = None) -> None:
        self.name = name
        self.w_pos = float(w_pos)
        self.w_neg = float(w_neg)
        #: the polarity split this scheme implies (None: the run's ``split_by``)
        self.split_by = split_by

    def weights(self, entropy: float | None = None) -> tuple[float, float]:
        return self.w_pos, self.w_neg

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "w_pos": self.w_pos, "w_neg": self.w_neg}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state.get("w_pos"), state.get("w_neg")) != (self.w_pos, self.w_neg):
            raise ValueError(
                f"checkpointed weights (w_pos={state.get('w_pos')}, w_neg={state.get('w_neg')}) differ from the "
                f"configured ({self.w_pos}, {self.w_neg}); resume with the same algorithm settings"
            )

    def __repr__(self) -> str:
        return f"FixedWeighting(name={self.name!r}, w_pos={self.w_pos}, w_neg={self.w_neg})"


class EntropyAdaptiveWeighting:
    """EAPO: ``w+_t = clip(w0 · H_t / H_0, w_min, w_max)`` (Eq. ``dynamic_weight`` of the EAPO paper), fixed ``w-``.

    ``H_0`` is the mean of the first ``anchor_steps`` rollout entropies (``anchor_steps = 1`` is the
    paper: "the rollout entropy recorded at the first training step, fixed thereafter"). During the
    anchor steps the weight is ``clip(w0, w_min, w_max)``. The closed form equals the paper's
    recursion ``w_t = w_{t-1} · H_t / H_{t-1}`` (appendix "Formula Derivation") without its error
    accumulation. Build it with :func:`make_weighting` (or :meth:`eapo.core.Algorithm.make_weighting`),
    which hold the settings to their declarations; the constructor trusts them.

    **Integral term** (``integral_gain`` k_I > 0; 0, the default, is the paper's EAPO exactly). The paper's
    rule is a proportional controller of the relative error ``e_t = H_t / H_0 − 1`` with gain ``w0``
    (``w0 · H_t / H_0 = w0 + w0 · e_t``), so it settles where ``w+`` reaches the weight ``w*`` at which
    the positives' pull on entropy cancels the negatives': ``H*/H_0 = w*/w0``, a level set by ``w0``.
    With ``I_t = I_{t−1} + e_t`` after the anchor steps,

        ``w+_t = clip(w0 · H_t / H_0 + k_I · I_t, w_min, w_max)``

    stops moving only where ``e = 0``: the equilibrium entropy is ``H_0`` whatever ``w0`` (while ``w*``
    lies in ``[w_min, w_max]``), with ``I* = (w* − w0) / k_I``. Anti-windup: while the unclipped weight is
    beyond a bound and ``e_t`` pushes it further out, ``I`` is not accumulated (conditional integration).
    """

    needs_entropy = True

    def __init__(
        self,
        name: str = "eapo",
        w0: float = _EAPO_DEFAULTS["w0"],
        w_min: float = _EAPO_DEFAULTS["w_min"],
        w_max: float = _EAPO_DEFAULTS["w_max"],
        w_neg: float = 1.0,
        anchor_steps: int = _EAPO_DEFAULTS["anchor_steps"],
        integral_gain: float = _EAPO_DEFAULTS["integral_gain"],
    ) -> None:
        self.name = name
        self.w0, self.w_min, self.w_max, self.anchor_steps = w0, w_min, w_max, anchor_steps
        self.integral_gain = float(integral_gain)
        self.w_neg = float(w_neg)
        self._anchor_sum = 0.0
        self._anchor_count = 0
        #: ``I_t``: the accumulated relative entropy error since the anchor (0 without the integral term).
        self.integral = 0.0

    @property
    def h0(self) -> float | None:
        """The anchor entropy ``H_0``, or None until ``anchor_steps`` entropies have been seen."""
        if self._anchor_count < self.anchor_steps:
            return None
        return self._anchor_sum / self._anchor_count

    def _clip(self, value: float) -> float:
        return min(max(value, self.w_min), self.w_max)

    def _step(self, entropy: float) -> tuple[float, float]:
        """``(w+, the integral after this step)`` for ``H_t = entropy`` past the anchor, state unchanged."""
        h0 = self.h0
        proportional = self.w0 * entropy / h0  # the paper's term, computed as the paper's closed form
        if self.integral_gain == 0.0:
            return self._clip(proportional), self.integral
        error = entropy / h0 - 1.0
        integral = self.integral + error
        raw = proportional + self.integral_gain * integral
        if (raw > self.w_max and error > 0) or (raw < self.w_min and error < 0):
            integral = self.integral  # conditional integration: no windup while clipped
            raw = proportional + self.integral_gain * integral
        return self._clip(raw), integral

    def update(self, entropy: float) -> float:
        """Record this step's rollout entropy ``H_t`` and return ``w+_t``."""
        entropy = _check_entropy(entropy)
        if self._anchor_count < self.anchor_steps:  # an anchor step: H_t goes into H_0, w+ = w0
            self._anchor_sum += entropy
            self._anchor_count += 1
            return self._clip(self.w0)
        w_pos, self.integral = self._step(entropy)
        return w_pos

    def weights(self, entropy: float | None) -> tuple[float, float]:
        if entropy is None:
            raise ValueError("the 'eapo' weighting needs this step's rollout entropy, got None")
        return self.update(entropy), self.w_neg

    def metrics(self) -> dict[str, float]:
        """``eapo/integral`` (``I_t``) when the integral term is on; nothing for the paper's EAPO."""
        return {"eapo/integral": self.integral} if self.integral_gain > 0 else {}

    def state_dict(self) -> dict[str, Any]:
        """The settings and the anchor; ``integral_gain`` and ``integral`` only with the integral term (the
        paper's EAPO keeps the layout it always had)."""
        state = {
            "name": self.name,
            "w0": self.w0,
            "w_min": self.w_min,
            "w_max": self.w_max,
            "w_neg": self.w_neg,
            "anchor_steps": self.anchor_steps,
            "anchor_sum": self._anchor_sum,
            "anchor_count": self._anchor_count,
        }
        if self.integral_gain > 0:
            state.update(integral_gain=self.integral_gain, integral=self.integral)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` (no ``integral_gain``: 0, the paper's EAPO).

        Raises:
            KeyError: the anchor is missing. ValueError: a setting differs from the configured one.
        """
        merged = {"integral_gain": 0.0, **state}  # state_dict writes the integral term only when on
        missing = {"anchor_sum", "anchor_count"} - set(merged)
        if missing:
            raise KeyError(f"the eapo weighting's state is missing {sorted(missing)}")
        for key in ("w0", "w_min", "w_max", "w_neg", "anchor_steps", "integral_gain"):
            if key in merged and merged[key] != getattr(self, key):
                raise ValueError(
                    f"checkpointed {key}={merged[key]} differs from the configured {key}={getattr(self, key)}; "
                    "resume with the same algorithm settings"
                )
        self._anchor_sum = float(merged["anchor_sum"])
        self._anchor_count = int(merged["anchor_count"])
        self.integral = float(merged.get("integral", 0.0))

    def __repr__(self) -> str:
        return (
            f"EntropyAdaptiveWeighting(w0={self.w0}, w_min={self.w_min}, w_max={self.w_max}, "
            f"w_neg={self.w_neg}, anchor_steps={self.anchor_steps}, integral_gain={self.integral_gain})"
        )


@dataclass(frozen=True)
class Scheme:
    """A weighting scheme, registered whole: everything other code needs about it.

    Attributes:
        name: ``algorithm.method`` (and verl's estimator name unless ``estimator`` says otherwise).
        build: ``build(name, **weights) -> WeightingScheme``; its keyword defaults are the scheme's
            defaults (:func:`scheme_defaults`).
        accepts: the weight settings it takes (keys of :data:`WEIGHT_SETTINGS`).
        label: its name in tables, legends and reports.
        help: one sentence for ``--help`` and the docs.
        shown: the weights its label always shows (``W-REINFORCE (w+=0.1, w−=1)``); the others only
            where they differ from the scheme's defaults.
        grid: the weights an unscoped ``eapo sweep --grid KEY=...`` varies on this scheme.
        split_by: the polarity split the scheme implies (QAE's ``quantile``), or None (the run's).
        estimator: verl's advantage-estimator name where it must differ from ``name`` (verl has its
            own ``grpo``).
        declares: settings of its own, added to :data:`WEIGHT_SETTINGS` when it registers (a plugin's
            scheme with a gain of its own).
    """

    name: str
    build: Callable[..., WeightingScheme]
    accepts: tuple[str, ...]
    label: str = ""
    help: str = ""
    shown: tuple[str, ...] = ()
    grid: tuple[str, ...] = ()
    split_by: str | None = None
    estimator: str = ""
    declares: tuple[Setting, ...] = ()

    @property
    def defaults(self) -> dict[str, Any]:
        """The weights the scheme uses when unset: its builder's keyword defaults, by key it accepts."""
        parameters = inspect.signature(self.build).parameters
        return {key: parameters[key].default for key in self.accepts if key in parameters}

    @property
    def needs_entropy(self) -> bool:
        """Whether its ``w+`` needs the step's rollout entropy (a scheme built with its defaults says)."""
        return bool(self.build(self.name).needs_entropy)

    @property
    def verl_estimator(self) -> str:
        """The name verl's ``algorithm.adv_estimator`` calls it by."""
        return self.estimator or self.name


#: name -> :class:`Scheme`, in registration order; filled by :func:`register_weighting` (as verl's
#: ``register_adv_est``). Defaults are the paper's (Section 5.1).
WEIGHTING_SCHEMES: dict[str, Scheme] = {}


def register_scheme(scheme: Scheme) -> Scheme:
    """Add ``scheme`` to :data:`WEIGHTING_SCHEMES` (its own settings to :data:`WEIGHT_SETTINGS`).

    Raises:
        ValueError: the name is taken by another builder, a setting is declared twice, or the scheme
            accepts a setting no one declares.
    """
    existing = WEIGHTING_SCHEMES.get(scheme.name)
    if existing is not None and existing.build is not scheme.build:
        raise ValueError(f"weighting scheme {scheme.name!r} is already registered to {existing.build!r}")
    declared = settings_by_name([*WEIGHT_SETTINGS.values(), *scheme.declares])
    unknown = sorted(set(scheme.accepts) - set(declared))
    if unknown:
        raise ValueError(f"weighting scheme {scheme.name!r} accepts undeclared settings {unknown}")
    WEIGHT_SETTINGS.update(declared)
    WEIGHTING_SCHEMES[scheme.name] = scheme
    return scheme


def register_weighting(
    name: str,
    accepts: tuple[str, ...],
    *,
    label: str = "",
    help: str = "",
    shown: tuple[str, ...] = (),
    grid: tuple[str, ...] = (),
    split_by: str | None = None,
    estimator: str = "",
    declares: tuple[Setting, ...] = (),
) -> Callable[[Callable[..., WeightingScheme]], Callable[..., WeightingScheme]]:
    """Register a weighting scheme's builder under ``name`` (a decorator; :class:`Scheme` says what each
    argument carries). The builder is called as ``builder(name, **weights)`` with weights among
    ``accepts``."""

    def decorator(builder: Callable[..., WeightingScheme]) -> Callable[..., WeightingScheme]:
        register_scheme(
            Scheme(
                name,
                builder,
                tuple(accepts),
                label=label or name,
                help=help,
                shown=tuple(shown),
                grid=tuple(grid),
                split_by=split_by,
                estimator=estimator,
                declares=tuple(declares),
            )
        )
        return builder

    return decorator


_FIXED_KEYS = ("w_pos", "w_neg")


#: The fixed schemes' default (w+, w−), the paper's (Section 5.1), with their labels and help; each
#: is overridable per run.
_FIXED = {
    "grpo": (1.0, 1.0, "GRPO", "GRPO: every rollout's advantage as is (w+, w−) = (1, 1)."),
    "psr": (1.0, 0.0, "PSR", "Positive-sample reinforcement: only D+ moves (1, 0)."),
    "nsr": (0.0, 1.0, "NSR", "Negative-sample reinforcement: only D− moves (0, 1)."),
    "w_reinforce": (0.1, 1.0, "W-REINFORCE", "Weighted REINFORCE: positives down-weighted (0.1, 1)."),
}


def _fixed(default_pos: float, default_neg: float) -> Callable[..., FixedWeighting]:
    def build(name: str, *, w_pos: float = default_pos, w_neg: float = default_neg) -> FixedWeighting:
        return FixedWeighting(name, w_pos=w_pos, w_neg=w_neg)

    return build


for _name, (_pos, _neg, _label, _help) in _FIXED.items():
    register_weighting(
        _name,
        _FIXED_KEYS,
        label=_label,
        help=_help,
        shown=_FIXED_KEYS if _name == "w_reinforce" else (),
        grid=_FIXED_KEYS if _name == "w_reinforce" else (),  # the paper's fixed-weight table
        estimator="eapo_grpo" if _name == "grpo" else "",  # verl has its own grpo estimator
    )(_fixed(_pos, _neg))


@register_weighting(
    "qae",
    _FIXED_KEYS,
    label="QAE",
    help="QAE: GRPO's weights with the group's K-quantile as baseline and split (split_by=quantile).",
    split_by="quantile",
)
def _qae(name: str, *, w_pos: float = 1.0, w_neg: float = 1.0) -> FixedWeighting:
    """QAE (Wu et al. 2025, arXiv 2509.22611): GRPO's weights with the group's K-quantile as baseline and
    split (``split_by=quantile``, ``quantile_k`` 0.4 by default)."""
    return FixedWeighting(name, w_pos=w_pos, w_neg=w_neg, split_by="quantile")


_EAPO_KEYS = ("w0", "w_min", "w_max", "w_neg", "anchor_steps", "integral_gain")


def _entropy_adaptive(default_gain: float) -> Callable[..., EntropyAdaptiveWeighting]:
    def build(
        name: str,
        *,
        w0: float = _EAPO_DEFAULTS["w0"],
        w_min: float = _EAPO_DEFAULTS["w_min"],
        w_max: float = _EAPO_DEFAULTS["w_max"],
        w_neg: float = 1.0,
        anchor_steps: int = _EAPO_DEFAULTS["anchor_steps"],
        integral_gain: float = default_gain,
    ) -> EntropyAdaptiveWeighting:
        return EntropyAdaptiveWeighting(
            name,
            w0=w0,
            w_min=w_min,
            w_max=w_max,
            w_neg=w_neg,
            anchor_steps=anchor_steps,
            integral_gain=integral_gain,
        )

    return build


#: ``eapo_pi``'s default integral gain: a relative entropy error held for one step moves w+ by as much
#: as w0's paper value (0.2) does; the closed-loop test checks it settles for every w0 tried.
EAPO_PI_GAIN = 0.2

register_weighting(
    "eapo",
    _EAPO_KEYS,
    label="EAPO",
    help="EAPO: w+_t = clip(w0 · H_t / H_0, w_min, w_max), fixed w− (Eq. dynamic_weight).",
    shown=("w0",),
    grid=("w0", "w_min", "w_max"),  # the paper's sensitivity table
)(_entropy_adaptive(_EAPO_DEFAULTS["integral_gain"]))
register_weighting(
    "eapo_pi",
    _EAPO_KEYS,
    label="EAPO-PI",
    help="EAPO with the integral term: w+_t = clip(w0 · H_t / H_0 + k_I · I_t, w_min, w_max), k_I 0.2.",
    shown=("w0", "integral_gain"),
)(_entropy_adaptive(EAPO_PI_GAIN))


def make_weighting(name: str, **overrides: Any) -> WeightingScheme:
    """Build the weighting scheme registered as ``name`` (:data:`WEIGHTING_SCHEMES`), its weights held to
    their declarations and to the scheme once (:func:`check_weights`; the constructors trust them).

    ``overrides`` replace the scheme's defaults (the keys its registration ``accepts``); ``None`` values
    are ignored.
    """
    scheme = _scheme(name)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return scheme.build(name, **check_weights(name, name, overrides))


def scheme_defaults(name: str) -> dict[str, Any]:
    """The weights scheme ``name`` uses when they are unset: its builder's defaults, by key it accepts
    (``eapo``: w0 0.2, w_min 0, w_max 2, w_neg 1, anchor_steps 1; ``psr``: w_pos 1, w_neg 0; ...)."""
    return _scheme(name).defaults


def check_weights(method: str, scheme: str, values: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """The set weights of ``values`` (None: unset) held to their declarations and to the scheme, the one
    "does not apply" rule of every view of the settings.

    Args:
        method: the method as the user wrote it (named in the error).
        scheme: its weighting scheme (``method`` itself, or ``grpo`` for an entropy-control preset).
        values: weight key -> value or None; keys outside :data:`WEIGHT_SETTINGS` raise.
        where: the prefix of the keys in errors (``"algorithm."``, ``"EAPOConfig."``, ``"algorithm.eapo."``).

    Raises:
        SettingError: a key that does not apply to the scheme, a value out of range, or ``w_min > w_max``.
    """
    accepted = _scheme(scheme).accepts
    weights = check_settings(WEIGHT_SETTINGS, values, where, nullable=True)
    for key in weights:
        if key not in accepted:
            raise SettingError(
                f"{where}{key} does not apply to method {method!r}; it accepts {', '.join(accepted)}",
                f"{where}{key}",
            )
    if "w_min" in accepted:
        resolved = {**scheme_defaults(scheme), **weights}
        if resolved["w_min"] > resolved["w_max"]:
            shown = [
                f"{where}{key}={resolved[key]}" + ("" if key in weights else " (default)")
                for key in ("w_min", "w_max")
            ]
            raise SettingError(
                f"{shown[0]} must be <= {shown[1]} (w+ is clipped to [w_min, w_max])",
                f"{where}w_min" if "w_min" in weights else f"{where}w_max",
            )
    return weights


def _scheme(name: str) -> Scheme:
    if name not in WEIGHTING_SCHEMES:
        raise ValueError(f"unknown weighting scheme {name!r}; known: {', '.join(WEIGHTING_SCHEMES)}")
    return WEIGHTING_SCHEMES[name]
