"""Module paths that moved, and the import hook that names their new home.

``import eapo.trainer`` (a path from before the engines were laid side by side) raises a
:class:`ModuleNotFoundError` that names ``eapo.engines.trl.trainer`` instead of a bare "No module
named". The paths users type in configs and launch scripts keep working instead:
``pkg://eapo.integrations.verl`` and the ``verl.plugins`` entry point (:mod:`eapo.integrations.verl`).
"""

from __future__ import annotations

import importlib.abc
import sys

#: old module path -> new module path
MOVED_MODULES: dict[str, str] = {
    "eapo.models": "eapo.runtime.models",
    "eapo.vllm_server": "eapo.runtime.vllm_server",
    "eapo.vllm_engine": "eapo.engines.trl.vllm (TRL's colocated engine) or eapo.runtime.vllm (start_llm, "
    "cpu_engine_options, VLLMEngineError)",
    "eapo.trainer": "eapo.engines.trl.trainer",
    "eapo.policy_forward": "eapo.engines.trl.policy_forward",
    "eapo.callbacks": "eapo.engines.trl.callbacks",
    "eapo.validation": "eapo.engines.trl.validation",
    "eapo.sharding": "eapo.engines.trl.sharding",
    "eapo.trl_config": "eapo.engines.trl.config",
    "eapo.integrations.verl_parquet": "eapo.engines.verl.parquet",
    "eapo.integrations.verl.estimators": "eapo.engines.verl.estimators",
    "eapo.integrations.verl.trainer": "eapo.engines.verl.trainer",
    "eapo.integrations.verl.entropy_control": "eapo.engines.verl.entropy_control",
    "eapo.integrations.verl.reward": "eapo.engines.verl.reward",
    "eapo.evaluation.generate": "eapo.runtime.generate",
    "eapo.study_paper": "eapo.study.paper",
    "eapo.study_power": "eapo.study.power",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Raises for a moved path before any other finder looks (a file left behind cannot shadow it)."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        raise ModuleNotFoundError(f"{fullname} moved to {new}: import it from there", name=fullname)


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
