"""Sharded training (FSDP2) on CPU processes, and the final model gathered from the shards.

Two things the stack does not do by itself (accelerate 1.15, transformers 5.17, TRL 1.16), and one
it does silently:

* **accelerate drops FSDP on CPU processes.** ``accelerate launch --config_file
  configs/accelerate/fsdp.yaml`` (environment ``ACCELERATE_USE_FSDP``, ``FSDP_*``) or
  ``TrainingArguments.fsdp`` asks for an FSDP plugin, but ``AcceleratorState`` switches to ``FSDP``
  only from its GPU-like types; a multi-process CPU group (``MULTI_CPU``, gloo: what ``cpu=True``
  forms) keeps DDP without a word. PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) runs on
  CPU over gloo, and accelerate's FSDP2 paths (``fsdp2_prepare_model``, ``get_state_dict``, the
  sharded checkpoint writers) take no CUDA-only step, so :func:`enable_fsdp_on_cpu` makes the switch
  accelerate makes on a GPU.
* **The final model is gathered from every process.** With ``SHARDED_STATE_DICT`` (the checkpoint
  format of ``configs/accelerate/fsdp.yaml``) ``Trainer.save_model`` writes no weights at all;
  :func:`full_state_dict` switches it to the full state dict for the final save.

* **accelerate drops DeepSpeed where ``ACCELERATE_USE_CPU`` is set** in the environment, again
  running DDP; :func:`check_deepspeed_kept` refuses that run. Otherwise DeepSpeed (ZeRO-3 included)
  runs on CPU processes as accelerate sets it up.

Generation needs nothing here: under FSDP every forward all-gathers each layer's shards, so a process
whose rollouts all ended must keep stepping until every process has finished; ``fully_shard`` marks
the modules it manages, and transformers' ``generate`` then runs in step (``synced_gpus``).
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)


def requested_fsdp_plugin(plugin_args: dict[str, Any] | None = None):
    """The FSDP plugin this process was asked for: from ``TrainingArguments.fsdp_plugin_args``, else
    from ``accelerate launch``'s environment (``ACCELERATE_USE_FSDP=true``, ``FSDP_*``); ``None``."""
    from accelerate.utils import FullyShardedDataParallelPlugin, str_to_bool

    if plugin_args is not None:
        return FullyShardedDataParallelPlugin(**plugin_args)
    if str_to_bool(os.environ.get("ACCELERATE_USE_FSDP", "false")):
        return FullyShardedDataParallelPlugin()
    return None


def enable_fsdp_on_cpu(accelerator, plugin_args: dict[str, Any] | None = None) -> bool:
    """Switch an accelerator that formed a multi-process CPU group (``MULTI_CPU``) to FSDP when this
    process was asked for it (:func:`requested_fsdp_plugin`), as accelerate does itself for GPU groups;
    True when it switched.

    Must run before the accelerator prepares a model (``Trainer.create_accelerator_and_postprocess``
    is the place): the switch decides which wrapper ``prepare`` applies.
    """
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    from eapo.config import ConfigError

    if accelerator.distributed_type != DistributedType.MULTI_CPU:
        return False  # one process, or a GPU group (accelerate applies FSDP there itself)
    plugin = requested_fsdp_plugin(plugin_args)
    if plugin is None:
        return False
    if plugin.fsdp_version != 2:
        raise ConfigError(
            f"FSDP on CPU processes needs fsdp_version: 2 (FSDP2, torch's fully_shard) in the accelerate "
            f"config; got fsdp_version: {plugin.fsdp_version} (FSDP1 runs on CUDA streams)"
        )
    if accelerator.mixed_precision != "no":
        raise ConfigError(
            f"FSDP on CPU processes trains in the model's dtype: set mixed_precision: 'no' in the accelerate "
            f"config (got {accelerator.mixed_precision!r})"
        )
    state = AcceleratorState()
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP  # as AcceleratorState does on GPUs
    logger.info(
        "FSDP2 on %d CPU processes (gloo): reshard_after_forward=%s, checkpoints %s",
        accelerator.num_processes,
        plugin.reshard_after_forward,
        getattr(plugin.state_dict_type, "name", plugin.state_dict_type),
    )
    return True


def check_deepspeed_kept(accelerator) -> None:
    """Refuse a run that asked for DeepSpeed (``accelerate launch`` with ``zero2.yaml``/``zero3.yaml``)
    and got DDP: accelerate drops DeepSpeed without a word when ``ACCELERATE_USE_CPU`` is set in the
    environment (its DeepSpeed launcher does not set it from ``use_cpu``). DeepSpeed runs on CPU
    processes without it: it picks its CPU accelerator and gloo itself."""
    from accelerate.utils import DistributedType, str_to_bool

    from eapo.config import ConfigError

    asked = str_to_bool(os.environ.get("ACCELERATE_USE_DEEPSPEED", "false"))
    if asked and accelerator.distributed_type == DistributedType.MULTI_CPU:
        raise ConfigError(
            "accelerate launch asked for DeepSpeed, but with ACCELERATE_USE_CPU set accelerate sets up DDP "
            "instead; unset ACCELERATE_USE_CPU (DeepSpeed runs on CPU processes by itself)"
        )


@contextmanager
def full_state_dict(accelerator):
    """While active, ``Trainer.save_model`` writes the full weights under FSDP, whatever the plugin's
    ``state_dict_type``: accelerate's route for "train sharded, save the final model full"
    (``set_state_dict_type``). Every process must call ``save_model`` inside it (the gathering is a
    collective); only the main process writes. No-op without FSDP."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is None:
        yield
        return
    saved = plugin.state_dict_type
    plugin.set_state_dict_type("FULL_STATE_DICT")
    try:
        yield
    finally:
        plugin.state_dict_type = saved
