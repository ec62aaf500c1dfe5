"""The RL engines EAPO runs in, side by side: :mod:`eapo.engines.trl` (TRL's ``GRPOTrainer``, one node)
and :mod:`eapo.engines.verl` (a verl plugin, clusters).

Each is a thin adapter: it moves tensors into :class:`eapo.core.step.EAPOStep` (group statistics, the
polarity split, ``(w+, w-)``, ``H_0``, the ``eapo/*`` metrics, the state file ``eapo_state.json``) and
the weighted advantages back into its engine's loss. The engines import the layers below them
(:mod:`eapo.core`, :mod:`eapo.rewards`, :mod:`eapo.data`, :mod:`eapo.runtime`), never each other.

Until eapo 0.1 this module chose rollout backends; that is :mod:`eapo.runtime.backends` now, and the
old names raise an :class:`ImportError` that says so.
"""

from __future__ import annotations

from eapo.runtime import backends as _backends

#: Names this module held before it became the engines' package: the backends module's public names.
_MOVED_NAMES = frozenset(_backends.__all__)


def __getattr__(name: str):
    if name in _MOVED_NAMES:
        raise ImportError(f"eapo.engines.{name} moved to eapo.runtime.backends.{name}: import it from there")
    raise AttributeError(f"module 'eapo.engines' has no attribute {name!r}")
