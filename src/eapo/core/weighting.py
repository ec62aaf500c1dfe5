"""The entropy-driven positive weight ``w+_t = clip(w0 · H_t / H_0, w_min, w_max)`` (Eq. ``dynamic_weight``;
closed form of the recursion in the appendix "Formula Derivation") and the registry of weighting schemes
(:data:`WEIGHTING_SCHEMES`), filled by :func:`register_weighting` as verl's ``register_adv_est``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
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
        ),
        Setting(
            "w_neg",
            float,
            "Negative weight w- (every scheme; default: the scheme's, eapo.core.scheme_defaults).",
            at_least(0),
            citation=_PAPER,
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
        ),
        Setting(
            "anchor_steps",
            int,
            "EAPO: steps whose rollout entropies are averaged into H_0 (1: the paper's first-step anchor).",
            at_least(1),
            default=1,
            citation="eapo's option; 1 is the paper's",
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


def _check_weight(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


class FixedWeighting:
    """Constant ``(w_pos, w_neg)``: GRPO (1, 1), PSR (1, 0), NSR (0, 1), W-REINFORCE (0.1, 1), and QAE (GRPO's
    weights with its own split, ``split_by="quantile"``: core's step splits and centres there)."""

    needs_entropy = False

    def __init__(self, name: str, w_pos: float, w_neg: float, split_by: str | None = None) -> None:
        self.name = name
        self.w_pos = _check_weight("w_pos", w_pos)
        self.w_neg = _check_weight("w_neg", w_neg)
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
    accumulation.

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
        if not (math.isfinite(w0) and w0 >= 0):
            raise ValueError(f"w0 must be finite and >= 0, got {w0}")
        if not (w_min <= w_max):
            raise ValueError(f"w_min ({w_min}) must be <= w_max ({w_max})")
        if w_min < 0:
            raise ValueError(f"w_min must be >= 0 (a negative weight flips the update), got {w_min}")
        if not isinstance(anchor_steps, int) or anchor_steps < 1:
            raise ValueError(f"anchor_steps must be an integer >= 1, got {anchor_steps!r}")
        if not (math.isfinite(integral_gain) and integral_gain >= 0):
            raise ValueError(f"integral_gain must be finite and >= 0, got {integral_gain}")
        self.name = name
        self.w0, self.w_min, self.w_max, self.anchor_steps = w0, w_min, w_max, anchor_steps
        self.integral_gain = float(integral_gain)
        self.w_neg = _check_weight("w_neg", w_neg)
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


#: name -> (builder, the override keys it accepts), filled by :func:`register_weighting`. Defaults
#: are the paper's (Section 5.1).
WEIGHTING_SCHEMES: dict[str, tuple[Callable[..., WeightingScheme], tuple[str, ...]]] = {}


def register_weighting(
    name: str, accepts: tuple[str, ...]
) -> Callable[[Callable[..., WeightingScheme]], Callable[..., WeightingScheme]]:
    """Register a weighting scheme's builder under ``name`` (as verl's ``register_adv_est``).

    The builder is called as ``builder(name, **overrides)`` with overrides among ``accepts``.
    Registering another builder under a taken name raises.
    """

    def decorator(builder: Callable[..., WeightingScheme]) -> Callable[..., WeightingScheme]:
        existing = WEIGHTING_SCHEMES.get(name)
        if existing is not None and existing[0] is not builder:
            raise ValueError(f"weighting scheme {name!r} is already registered to {existing[0]!r}")
        WEIGHTING_SCHEMES[name] = (builder, tuple(accepts))
        return builder

    return decorator


_FIXED_KEYS = ("w_pos", "w_neg")


#: The fixed schemes' default (w+, w−), the paper's (Section 5.1); each is overridable per run.
FIXED_WEIGHTS: dict[str, tuple[float, float]] = {
    "grpo": (1.0, 1.0),
    "psr": (1.0, 0.0),
    "nsr": (0.0, 1.0),
    "w_reinforce": (0.1, 1.0),
}


def _fixed(default_pos: float, default_neg: float) -> Callable[..., FixedWeighting]:
    def build(name: str, *, w_pos: float = default_pos, w_neg: float = default_neg) -> FixedWeighting:
        return FixedWeighting(name, w_pos=w_pos, w_neg=w_neg)

    return build


for _name, (_pos, _neg) in FIXED_WEIGHTS.items():
    register_weighting(_name, _FIXED_KEYS)(_fixed(_pos, _neg))


@register_weighting("qae", _FIXED_KEYS)
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

register_weighting("eapo", _EAPO_KEYS)(_entropy_adaptive(_EAPO_DEFAULTS["integral_gain"]))
register_weighting("eapo_pi", _EAPO_KEYS)(_entropy_adaptive(EAPO_PI_GAIN))


def make_weighting(name: str, **overrides: Any) -> WeightingScheme:
    """Build the weighting scheme registered as ``name`` (:data:`WEIGHTING_SCHEMES`).

    ``overrides`` replace the scheme's defaults (:func:`scheme_defaults`), among the keys it accepts
    (:data:`WEIGHTING_SCHEMES`); ``None`` values are ignored.
    """
    builder, accepted = _scheme(name)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(overrides) - set(accepted))
    if unknown:
        raise ValueError(f"weighting scheme {name!r} does not take {unknown}; it accepts {list(accepted)}")
    return builder(name, **overrides)


def scheme_defaults(name: str) -> dict[str, Any]:
    """The weights scheme ``name`` uses when they are unset: its builder's defaults, by key it accepts."""
    builder, accepted = _scheme(name)
    parameters = inspect.signature(builder).parameters
    return {key: parameters[key].default for key in accepted if key in parameters}


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
    _, accepted = _scheme(scheme)
    weights = check_settings(WEIGHT_SETTINGS, values, where)
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


def _scheme(name: str) -> tuple[Callable[..., WeightingScheme], tuple[str, ...]]:
    if name not in WEIGHTING_SCHEMES:
        raise ValueError(f"unknown weighting scheme {name!r}; known: {', '.join(WEIGHTING_SCHEMES)}")
    return WEIGHTING_SCHEMES[name]
