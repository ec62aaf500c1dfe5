"""The typed configuration tree of an ``eapo train`` run, loaded from YAML with ``key=value`` overrides.

Sections: ``model``, ``data``, ``rollout``, ``reward``, ``algorithm``, ``train``, ``logging``, ``verl``. Every
field has a one-line help string and states, next to it, what it admits: ``valid=`` one of
:func:`at_least`, :func:`above`, :func:`between`, :func:`one_of`, :data:`NON_EMPTY`,
:func:`satisfies`, or :data:`ANY_OF_TYPE` where every value of its type is valid (a new field
without one fails ``tests/config/test_config_validation.py``). Validation happens once, in
:meth:`RunConfig.validate`: each setting against its own constraint, then the relations between
settings. Unknown keys are errors that list the valid ones. YAML files and overrides are read with
:class:`ConfigLoader`, so ``1e-5`` is a number.

One module per concern; every name is importable from ``eapo.config``:

* :mod:`eapo.config.fields` — what a field admits (:class:`Valid` and its builders), :func:`setting`
  (a field with its help string), :class:`ConfigError`, and the checks that hold a value to its field;
* :mod:`eapo.config.rollout` — the ``model`` (with ``model.lora``), ``data`` and ``rollout`` sections;
* :mod:`eapo.config.reward` — the ``reward`` section and its LLM judge (``reward.judge``);
* :mod:`eapo.config.algorithm` — the ``algorithm`` section: method, weights, objective, entropy controls;
* :mod:`eapo.config.train` — the ``train`` and ``logging`` sections;
* :mod:`eapo.config.verl` — the ``verl`` section (``verl.workers``);
* :mod:`eapo.config.tree` — :class:`RunConfig`, the tree of sections, and its validation;
* :mod:`eapo.config.load` — YAML files, ``key=value`` overrides, :func:`load_config`, :func:`dump_config`;
* :mod:`eapo.config.presets` — the packaged presets and :func:`resolve_config`, the one reading of a
  ``--config`` value (a file, or a preset's name).
"""

from __future__ import annotations

from eapo.config.algorithm import LOSS_TYPES, AlgorithmConfig
from eapo.config.fields import (
    ANY_OF_TYPE,
    NON_EMPTY,
    ConfigError,
    Valid,
    above,
    allowed,
    at_least,
    between,
    one_of,
    satisfies,
)
from eapo.config.load import (
    ConfigLoader,
    config_changes,
    config_from_tree,
    dump_config,
    load_config,
    parse_overrides,
    read_config_tree,
    yaml_load,
)
from eapo.config.presets import packaged_config, preset_names, resolve_config
from eapo.config.reward import STRUCTURED_OUTPUTS, JudgeConfig, RewardConfig
from eapo.config.rollout import DTYPES, ROLLOUT_BACKENDS, DataConfig, LoraSettings, ModelConfig, RolloutConfig
from eapo.config.train import LR_SCHEDULERS, TRACKERS, LoggingConfig, TrainConfig
from eapo.config.tree import (
    RunConfig,
    check_judge_settings,
    reward_options,
    reward_settings,
    setting_fields,
)
from eapo.config.verl import VerlConfig

# In the order the module held them before it became a package (the API reference lists them so).
__all__ = [
    "STRUCTURED_OUTPUTS",
    "ConfigError",
    "Valid",
    "at_least",
    "above",
    "between",
    "one_of",
    "satisfies",
    "NON_EMPTY",
    "ANY_OF_TYPE",
    "DTYPES",
    "ROLLOUT_BACKENDS",
    "LOSS_TYPES",
    "LR_SCHEDULERS",
    "LoraSettings",
    "ModelConfig",
    "DataConfig",
    "RolloutConfig",
    "JudgeConfig",
    "RewardConfig",
    "AlgorithmConfig",
    "TrainConfig",
    "TRACKERS",
    "LoggingConfig",
    "VerlConfig",
    "RunConfig",
    "setting_fields",
    "allowed",
    "ConfigLoader",
    "yaml_load",
    "parse_overrides",
    "read_config_tree",
    "load_config",
    "resolve_config",
    "preset_names",
    "packaged_config",
    "config_from_tree",
    "dump_config",
    "config_changes",
    "reward_options",
    "reward_settings",
    "check_judge_settings",
]
