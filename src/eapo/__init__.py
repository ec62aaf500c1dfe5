"""eapo: Entropy-driven Adaptive Positive-negative sample weighting for Policy Optimization.

The algorithm core is :mod:`eapo.core` (pure tensor maths). Rewards live in :mod:`eapo.rewards`,
datasets and prompts in :mod:`eapo.data`, the ``eapo train`` recipe in :mod:`eapo.train`, evaluation,
plots and sweeps in :mod:`eapo.evaluation`, :mod:`eapo.plot`, :mod:`eapo.sweep`, and the verl
plugin in :mod:`eapo.engines.verl`.

In a TRL script, ``from eapo import EAPOTrainer, EAPOConfig`` replaces ``GRPOTrainer, GRPOConfig``
(:mod:`eapo.engines.trl.trainer`, :mod:`eapo.engines.trl.config`). Both are imported on first use, so ``import eapo``
stays light (no torch, no TRL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from eapo import _moved  # noqa: E402

_moved.install()  # an import of a moved module names its new path

__all__ = ["EAPOConfig", "EAPOTrainer", "__version__"]

#: Lazily imported names -> the module that defines them.
_LAZY = {"EAPOConfig": "eapo.engines.trl.config", "EAPOTrainer": "eapo.engines.trl.trainer"}

if TYPE_CHECKING:
    from eapo.engines.trl.config import EAPOConfig
    from eapo.engines.trl.trainer import EAPOTrainer


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eapo' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
