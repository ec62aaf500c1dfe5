"""vLLM as the rollout backend of training (TRL's colocate mode), on a GPU or on a CPU.

TRL 1.16 builds its ``VLLMGeneration`` inside ``GRPOTrainer.__init__`` with no hook for three things
a faithful run needs; :class:`ColocateVLLMGeneration` adds them and :func:`colocated_vllm` makes TRL
build it instead of its own class:

1. **The policy's dtype.** TRL's ``LLM(...)`` passes no ``dtype``, and vLLM's ``auto`` downcasts a
   float32 checkpoint to bfloat16: the rollouts came from a bf16 copy of an fp32 policy (importance
   ratios 0.61-1.23 at step 1, identical weights, measured on SmolLM2). Here vLLM runs in the dtype the
   trainer holds the weights in.
2. **A weight sync that works on a CPU.** TRL's colocate sync calls ``model.load_weights`` per
   parameter, which fails on vLLM's CPU build (its linear layers repack their weights for oneDNN and
   drop the parameters' ``weight_loader``). vLLM's own layerwise reload (``reload_weights`` through
   ``LLM.collective_rpc``) reloads and re-processes every layer, on CPU and GPU alike. One limit of it
   (vLLM's reload module lists it) bites models whose LM head is tied to the embeddings, as SmolLM2's
   is: only the embedding is re-processed, and on a CPU the head keeps the oneDNN-packed copy of the
   *old* weights, so after the first update vLLM sampled from stale logits (mean |Δ log p| 2e-2 after a
   1% perturbation, measured). :func:`refresh_tied_lm_heads` re-processes such heads after each reload
   (through ``LLM.apply_model``): the difference returns to the fp32 floor (4e-6 mean).
3. **CPU sizing and seeding.** On a CPU vLLM reserves ``gpu_memory_utilization`` of the machine's
   memory for its KV cache (and refuses to start when less is free); here the cache gets a fixed size
   (``rollout.vllm_kv_cache_gib``). The engine's sampler seed follows ``train.seed`` (TRL seeds it with
   the process index only, so two seeds of a run would share their vLLM seed).

With LoRA the adapters are merged into the weights vLLM receives (TRL's ``_iter_named_params``) and
unmerged afterwards, so vLLM serves exactly the policy being trained.
"""

from __future__ import annotations

import functools
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from trl.generation.vllm_generation import VLLMGeneration

from eapo.runtime.vllm import GIB, cpu_engine_options, refresh_tied_lm_heads, start_llm

logger = logging.getLogger(__name__)

__all__ = [
    "VLLMSettings",
    "ColocateVLLMGeneration",
    "colocated_vllm",
    "refresh_tied_lm_heads",
]


@dataclass(frozen=True)
class VLLMSettings:
    """What :class:`ColocateVLLMGeneration` adds to TRL's colocated ``LLM(...)``.

    Args:
        dtype: the policy's weight dtype (``float32``, ``bfloat16``, ``float16``): vLLM runs in it.
        enforce_eager: no torch.compile / CUDA graphs (starts in seconds; see ``bench/rollout.py``).
        device: ``cpu`` or ``cuda``.
        kv_cache_bytes: the KV cache's size on a CPU (``None``: vLLM sizes it from
            ``gpu_memory_utilization``, as on a GPU).
        seed: the sampler's seed; process ``i`` of a tensor-parallel group size ``tp`` uses ``seed + i // tp``.
    """

    dtype: str
    enforce_eager: bool
    device: str = "cpu"
    kv_cache_bytes: int | None = None
    seed: int = 0


class ColocateVLLMGeneration(VLLMGeneration):
    """TRL's ``VLLMGeneration`` with the policy's dtype, a CPU-capable weight sync and CPU sizing (see
    the module docstring). Server mode is TRL's, unchanged."""

    def __init__(self, *args: Any, settings: VLLMSettings, **kwargs: Any) -> None:
        self.settings = settings
        super().__init__(*args, **kwargs)

    def _init_vllm(self) -> None:
        if self.mode != "colocate":
            super()._init_vllm()
            return
        import torch
        from trl.trainer.utils import ensure_master_addr_port

        accelerator, tp = self.accelerator, self.tensor_parallel_size
        if accelerator.num_processes % tp:
            raise ValueError(
                f"vllm tensor_parallel_size ({tp}) must divide the number of processes ({accelerator.num_processes})"
            )
        if tp > 1:  # as TRL: groups of tp consecutive ranks share one engine
            self.tp_group, _ = torch.distributed.new_subgroups_by_enumeration(
                [list(range(i * tp, (i + 1) * tp)) for i in range(accelerator.num_processes // tp)]
            )
        # vLLM's external launcher reads the process layout from the environment (as TRL sets it).
        os.environ["RANK"] = str(accelerator.process_index)
        os.environ["LOCAL_RANK"] = str(accelerator.local_process_index)
        os.environ["WORLD_SIZE"] = str(accelerator.num_processes)
        ensure_master_addr_port()
        settings = self.settings
        # as TRL on a GPU (vLLM v1's memory profiler misreads its 32768 default); on a CPU see cpu_engine_options
        memory: dict[str, Any] = {
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_num_batched_tokens": 4096,
        }
        if settings.kv_cache_bytes is not None:
            memory = cpu_engine_options(settings.kv_cache_bytes / GIB)
        self.llm = start_llm(
            self.model.name_or_path,
            quantization=_bitsandbytes_quantization(self.model),  # as TRL: a 4-bit (QLoRA) policy
            fix="Train this model with rollout.backend=generate (model.generate), or use a model vLLM supports.",
            dtype=settings.dtype,
            enforce_eager=settings.enforce_eager,
            tensor_parallel_size=tp,
            max_model_len=self.max_model_length,
            max_num_seqs=self.max_num_seqs,
            enable_sleep_mode=self.enable_sleep_mode,
            model_impl=self.model_impl,
            distributed_executor_backend="external_launcher",
            seed=settings.seed + accelerator.process_index // tp,  # identical within a TP group
            logprobs_mode="processed_logprobs",  # after temperature: what the importance ratio needs
            trust_remote_code=self.trust_remote_code,
            **memory,
        )
        if self.enable_sleep_mode:
            self.llm.sleep(level=2)
        self._llm_weights_sleeping = self.enable_sleep_mode
        accelerator.wait_for_everyone()

    def sync_weights(self) -> None:
        """Push the policy's current weights (LoRA merged) into the colocated engine with vLLM's
        layerwise reload, refresh tied LM heads, and drop the prefix cache (it holds old keys/values)."""
        if self.mode != "colocate":
            super().sync_weights()
            return
        if self.enable_sleep_mode:  # level-2 sleep discarded the weights: map them before loading
            self.llm.wake_up(tags=["weights"])
            self._llm_weights_sleeping = False
        self.llm.collective_rpc(
            "reload_weights",
            # TRL's iterator: gathers ZeRO-3/FSDP shards, merges LoRA and unmerges it once exhausted
            kwargs={"weights_iterator": self._iter_named_params(), "is_checkpoint_format": True},
        )
        self.llm.apply_model(refresh_tied_lm_heads)
        self.llm.reset_prefix_cache()


def _bitsandbytes_quantization(model: Any) -> str | None:
    """``"bitsandbytes"`` for a policy with 4-bit bitsandbytes layers (vLLM loads it quantized, as TRL
    asks); 8-bit layers cannot be served in flight."""
    from transformers import is_bitsandbytes_available

    if not is_bitsandbytes_available():
        return None
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            return "bitsandbytes"
        if isinstance(module, bnb.nn.Linear8bitLt):
            raise ValueError("vLLM does not support in-flight 8-bit quantization (bitsandbytes Linear8bitLt)")
    return None


@contextmanager
def colocated_vllm(settings: VLLMSettings | None):
    """While active, ``GRPOTrainer.__init__`` builds a :class:`ColocateVLLMGeneration` with ``settings``
    (``None``: TRL's own class, e.g. without vLLM)."""
    if settings is None:
        yield
        return
    import trl.trainer.grpo_trainer as grpo_trainer

    original = grpo_trainer.VLLMGeneration
    grpo_trainer.VLLMGeneration = functools.partial(ColocateVLLMGeneration, settings=settings)
    try:
        yield
    finally:
        grpo_trainer.VLLMGeneration = original
