"""eapo: Entropy-driven Adaptive Positive-negative sample weighting for Policy Optimization.

The package reads in pipeline order; each layer imports only the layers above it in this list
(``tests/test_layout.py`` checks it):

1. :mod:`eapo.core` — EAPO's maths as pure tensor functions: advantages and the polarity split, the
   weighting schemes and ``w+_t``, entropy, losses, the field's entropy controls, and
   :class:`eapo.core.step.EAPOStep`, the one owner of a training step's decision.
2. :mod:`eapo.data` (datasets, splits, prompts), :mod:`eapo.rewards` (the reward components of
   :data:`eapo.rewards.REWARD_COMPONENTS` and their composite) and :mod:`eapo.run_dir` (the run-directory contract, atomic writes).
3. :mod:`eapo.config` — the typed ``eapo train`` configuration (YAML + ``key=value`` overrides).
4. :mod:`eapo.runtime` — what generates text: model sources, generation backends, vLLM (in-process
   and as a server), generators.
5. :mod:`eapo.engines` — the RL engines side by side, each a thin adapter over ``eapo.core``:
   :mod:`eapo.engines.trl` (TRL's ``GRPOTrainer``) and :mod:`eapo.engines.verl` (a verl plugin).
6. :mod:`eapo.evaluation` — the evaluation harness, metrics with intervals, reports.
7. Recipes: :mod:`eapo.train` (``eapo train``), :mod:`eapo.sweep`, :mod:`eapo.study`, :mod:`eapo.plot`,
   :mod:`eapo.summary`.
8. :mod:`eapo.cli` and :mod:`eapo.commands` — the command line (``make demo`` runs :mod:`eapo.demo`).

In a TRL script, ``from eapo import EAPOTrainer, EAPOConfig`` replaces ``GRPOTrainer, GRPOConfig``
(:mod:`eapo.engines.trl.trainer`, :mod:`eapo.engines.trl.config`). Both are imported on first use, so
``import eapo`` stays light (no torch, no TRL).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Your own schemes, controls and reward components (eapo.plugins): imported before any of eapo's views of
# the registries is built, in every process that imports eapo.
if os.environ.get("EAPO_PLUGINS"):
    from eapo.plugins import load_plugins

    load_plugins()

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
