"""Human labels for runs ("W-REINFORCE (w+=0.2, w−=1)", "EAPO (w0=0.1)") read from a run's config.

Tables and figures label a run by its method and the weights that identify it: W-REINFORCE always
shows ``w+`` and ``w−`` (its rows differ only there), EAPO shows ``w0`` plus any non-default clip or
``w−``, and GRPO / PSR / NSR show only weights that differ from their definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eapo.config import read_config_tree
from eapo.core import ENTROPY_CONTROLS, make_weighting, method_scheme

__all__ = ["METHOD_NAMES", "METHOD_ORDER", "effective_weights", "method_label", "run_config", "run_label"]

METHOD_NAMES = {
    "grpo": "GRPO",
    "psr": "PSR",
    "nsr": "NSR",
    "w_reinforce": "W-REINFORCE",
    "qae": "QAE",
    "eapo": "EAPO",
    "eapo_pi": "EAPO-PI",
    # the entropy-control presets, named by their registrations (eapo.core.controls)
    **{name: control.label or name for name, control in ENTROPY_CONTROLS.items()},
}
#: The paper's row order, then the entropy-control presets (eapo.core.ENTROPY_CONTROLS).
METHOD_ORDER = tuple(METHOD_NAMES)
_SYMBOLS = {
    "w_pos": "w+",
    "w_neg": "w−",
    "w0": "w0",
    "w_min": "w_min",
    "w_max": "w_max",
    "anchor_steps": "anchor",
    "integral_gain": "k_I",
}


def effective_weights(method: str, overrides: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The scheme's parameters after applying ``overrides`` to its defaults (``eapo.core.make_weighting``)."""
    scheme = make_weighting(
        method_scheme(method), **{k: v for k, v in (overrides or {}).items() if v is not None}
    )
    if scheme.needs_entropy:
        a = scheme
        return {
            "w0": a.w0,
            "w_min": a.w_min,
            "w_max": a.w_max,
            "w_neg": scheme.w_neg,
            "anchor_steps": a.anchor_steps,
            "integral_gain": a.integral_gain,
        }
    return {"w_pos": scheme.w_pos, "w_neg": scheme.w_neg}


def _number(value: float) -> str:
    return f"{value:g}"


def method_label(method: str, overrides: Mapping[str, Any] | None = None) -> str:
    """``"W-REINFORCE (w+=0.2, w−=1)"``, ``"EAPO (w0=0.2)"``, ``"GRPO"``."""
    name = METHOD_NAMES.get(method, method)
    try:
        weights = effective_weights(method, overrides)
        defaults = effective_weights(method)
    except ValueError:
        return name
    if method == "w_reinforce":
        shown = ["w_pos", "w_neg"]
    elif method in ("eapo", "eapo_pi"):
        shown = ["w0"] + (["integral_gain"] if method == "eapo_pi" else [])
        shown += [
            key
            for key in ("w_min", "w_max", "w_neg", "anchor_steps", "integral_gain")
            if weights[key] != defaults[key] and key not in shown
        ]
    else:
        shown = [key for key in weights if weights[key] != defaults[key]]
    if not shown:
        return name
    return f"{name} (" + ", ".join(f"{_SYMBOLS[key]}={_number(weights[key])}" for key in shown) + ")"


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
    keys = ("w_pos", "w_neg", "w0", "w_min", "w_max", "anchor_steps")
    label = method_label(method, {key: algorithm.get(key) for key in keys})
    if with_seed:
        seed = (config.get("train") or {}).get("seed")
        if seed is not None:
            label += f" seed {seed}"
    return label
