"""Human labels for runs ("W-REINFORCE (w+=0.2, w−=1)", "EAPO (w0=0.1)") read from a run's config.

Tables and figures label a run by its method and the weights that identify it: the registration's label,
the weights it always shows (:attr:`eapo.core.Scheme.shown`), then any weight that differs from the
scheme's default, each by its declared symbol (:attr:`eapo.core.Setting.symbol`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eapo.config import read_config_tree
from eapo.core import (
    ENTROPY_CONTROLS,
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    check_weights,
    method_scheme,
    scheme_defaults,
)

__all__ = [
    "METHOD_NAMES",
    "METHOD_ORDER",
    "method_names",
    "effective_weights",
    "method_label",
    "run_config",
    "run_label",
]


def method_names() -> dict[str, str]:
    """``algorithm.method`` -> its label, from the registrations: the weighting schemes (the paper's row
    order), then the entropy-control presets."""
    return {
        **{name: scheme.label or name for name, scheme in WEIGHTING_SCHEMES.items()},
        **{name: control.label or name for name, control in ENTROPY_CONTROLS.items()},
    }


#: The labels of the methods registered at import (:func:`method_names` reads the registries as they are now).
METHOD_NAMES = method_names()
#: The paper's row order, then the entropy-control presets (eapo.core.ENTROPY_CONTROLS).
METHOD_ORDER = tuple(METHOD_NAMES)


def effective_weights(method: str, overrides: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The scheme's weights after applying ``overrides`` to its defaults: every weight it takes, in its
    registration's order (a weight it does not take raises ValueError)."""
    scheme = method_scheme(method)
    given = check_weights(method, scheme, {k: v for k, v in (overrides or {}).items() if v is not None})
    return {**scheme_defaults(scheme), **given}


def _number(value: float) -> str:
    return f"{value:g}"


def method_label(method: str, overrides: Mapping[str, Any] | None = None) -> str:
    """``"W-REINFORCE (w+=0.2, w−=1)"``, ``"EAPO (w0=0.2)"``, ``"GRPO"``: the registered label, the weights
    its registration always shows (:attr:`eapo.core.Scheme.shown`), then any other weight that differs from
    the scheme's default, each written by its declared symbol."""
    name = method_names().get(method, method)
    try:
        weights = effective_weights(method, overrides)
        defaults = effective_weights(method)
    except ValueError:
        return name
    shown = list(WEIGHTING_SCHEMES[method].shown) if method in WEIGHTING_SCHEMES else []
    shown += [key for key in weights if weights[key] != defaults[key] and key not in shown]
    if not shown:
        return name
    return (
        f"{name} ("
        + ", ".join(f"{WEIGHT_SETTINGS[key].shown_as}={_number(weights[key])}" for key in shown)
        + ")"
    )


def run_config(run_dir: str | Path) -> dict[str, Any]:
    """``RUN_DIR/config.yaml`` as a dict ({} when absent)."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return {}
    return read_config_tree(path)  # ConfigError (a ValueError) names the file


def run_label(run_dir: str | Path, *, with_seed: bool = False) -> str:
    """The label of a run directory from its ``config.yaml`` (the directory name without one)."""
    config = run_config(run_dir)
    algorithm = config.get("algorithm") or {}
    method = algorithm.get("method")
    if not method:
        return Path(run_dir).name
    label = method_label(method, {key: algorithm.get(key) for key in WEIGHT_SETTINGS})
    if with_seed:
        seed = (config.get("train") or {}).get("seed")
        if seed is not None:
            label += f" seed {seed}"
    return label
