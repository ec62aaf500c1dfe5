"""The field's entropy controls beside EAPO: one module per control, registered whole.

Each module declares the control's settings once, its method preset (GRPO's weights plus the
control, composable with any weighting), its maths, the engine options it maps onto where an engine
has the control, its run state and its metrics, and registers them in one
:class:`~eapo.core.controls.registry.EntropyControl` (:mod:`eapo.core.controls.registry`). The
engines apply every registered control through the registry's generic readers, and run the maths of a
control they lack through one path each (its run state through core's step, its per-token weights in
the policy loss); a new control is a new module here plus its tests.

Each control's source, TRL 1.16 field and verl 0.9.1 option are its registration's (``source``,
``trl_fields``, ``verl_options`` of :data:`ENTROPY_CONTROLS`), tabled from there in
``docs/guide/entropy-controls.md``.

Registration order is import order below (the docs' tables and ``algorithm.*`` follow it).
"""

from __future__ import annotations

# Each module registers its control on import, in this order.
# isort: off
from eapo.core.controls import entropy_bonus  # noqa: F401
from eapo.core.controls import adaptive_entropy  # noqa: F401
from eapo.core.controls import clip_higher  # noqa: F401
from eapo.core.controls import clip_cov  # noqa: F401
from eapo.core.controls import kl_cov  # noqa: F401
from eapo.core.controls import top_entropy  # noqa: F401
from eapo.core.controls import entropic  # noqa: F401

# isort: on
from eapo.core.controls.adaptive_entropy import AdaptiveEntropyCoef
from eapo.core.controls.clip_cov import clip_cov_mask, clip_cov_policy_loss
from eapo.core.controls.kl_cov import kl_cov_mask, kl_cov_policy_loss
from eapo.core.controls.registry import (
    CONTROL_METRICS,
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    LOSS_MODES,
    EntropyControl,
    TokenInputs,
    actuator_panels,
    applied_by_eapo,
    clips_ratio,
    control_defaults,
    control_panels,
    control_problems,
    control_states,
    control_token_weights,
    is_on,
    policy_loss_of,
    register_entropy_control,
    resolve_controls,
    stray_settings,
    trl_control_args,
    trl_placeholder_fields,
    verl_control_options,
)
from eapo.core.controls.top_entropy import top_entropy_mask

__all__ = [
    "CONTROL_METRICS",
    "CONTROL_SETTINGS",
    "ENTROPY_CONTROLS",
    "LOSS_MODES",
    "EntropyControl",
    "register_entropy_control",
    "control_defaults",
    "control_problems",
    "stray_settings",
    "control_panels",
    "actuator_panels",
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
    "AdaptiveEntropyCoef",
    "clip_cov_mask",
    "clip_cov_policy_loss",
    "kl_cov_mask",
    "kl_cov_policy_loss",
    "top_entropy_mask",
]
