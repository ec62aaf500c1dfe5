"""vLLM as a generation runtime, shared by training (:mod:`eapo.engines.trl.vllm`), evaluation
(:mod:`eapo.runtime.generate`) and the judge's server (:mod:`eapo.runtime.vllm_server`).

The one place that knows how vLLM runs on a CPU (:func:`cpu_engine_options`, as ``LLM(...)`` options;
:func:`cpu_server_flags`, the same settings as ``vllm serve`` flags), how an engine starts so that a
model it cannot run fails at start (:func:`start_llm`), and the process environment it needs
(:func:`prepare_vllm_environment`). It imports neither TRL nor vLLM at module level.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "GIB",
    "VLLMEngineError",
    "cpu_engine_options",
    "cpu_server_flags",
    "start_llm",
    "prepare_vllm_environment",
    "refresh_tied_lm_heads",
]

GIB = 1 << 30


class VLLMEngineError(ValueError):
    """vLLM cannot load or run the model on this device; the message names the cause and the fix."""


def cpu_engine_options(kv_cache_gib: float) -> dict[str, Any]:
    """``LLM(...)`` options of an engine on a CPU.

    * ``kv_cache_memory_bytes``: a fixed KV cache (else vLLM reserves ``gpu_memory_utilization`` of the
      machine's memory and refuses to start when less is free);
    * ``enable_chunked_prefill=False``: when a batch's prompts pass ``max_num_batched_tokens`` vLLM
      splits a prefill and rewinds that request's seeded generator with ``Generator.set_offset``,
      which only CUDA generators have ("CPU Generator does not use offset": 24 seeded prompts of 400
      tokens failed, measured). Without chunking vLLM sizes a step to the context length.
    """
    return {"kv_cache_memory_bytes": int(kv_cache_gib * GIB), "enable_chunked_prefill": False}


def cpu_server_flags(kv_cache_gib: float) -> list[str]:
    """:func:`cpu_engine_options` as ``vllm serve`` flags (``--kv-cache-memory-bytes N
    --no-enable-chunked-prefill``): the server and the colocated engine run on a CPU with the same settings."""
    argv: list[str] = []
    for key, value in cpu_engine_options(kv_cache_gib).items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv


def start_llm(model: str, *, fix: str, **kwargs: Any):
    """``vllm.LLM(model=model, **kwargs)``, then one greedy token from a one-token prompt: some kernels
    refuse a model only on first use (vLLM's CPU attention supports head sizes 32, 64, 80, 96, 112, 128,
    160, 192, 224, 256 and 512), and a run should fail at start, not at its first step. Any failure is a
    :class:`VLLMEngineError` naming the model, vLLM's reason and ``fix``."""
    prepare_vllm_environment()
    from vllm import LLM, SamplingParams

    try:
        llm = LLM(model=model, **kwargs)
        llm.generate(
            [{"prompt_token_ids": [0]}], SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False
        )
    except Exception as error:  # noqa: BLE001 - whatever vLLM raises, the user gets the cause and the fix
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else ""
        raise VLLMEngineError(
            f"vLLM cannot run the model {model}: {type(error).__name__}: {reason[:500]}. {fix}"
        ) from error
    return llm


def prepare_vllm_environment() -> None:
    """Run vLLM's engine inside this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) unless the user chose.

    In-process, a script that builds an ``LLM`` at import time works (a spawned engine process would
    re-import it), and on a small CPU the engine does not compete with the trainer from another process.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def refresh_tied_lm_heads(model: Any) -> int:
    """Re-process every LM head that shares its weight with an input embedding (vLLM ``apply_model`` hook).

    vLLM's layerwise reload re-processes only the embedding of a tied pair; on a CPU the head keeps the
    packed (oneDNN) copy of its weights from before the reload. Re-running the head's
    ``process_weights_after_loading`` rebuilds it from the reloaded weights (a no-op on CUDA, where the
    head reads the shared parameter directly). Returns how many heads were refreshed.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    embedding_storage = {
        module.weight.data_ptr()
        for module in model.modules()
        if isinstance(module, VocabParallelEmbedding) and not isinstance(module, ParallelLMHead)
    }
    refreshed = 0
    for module in model.modules():
        if isinstance(module, ParallelLMHead) and module.weight.data_ptr() in embedding_storage:
            module.quant_method.process_weights_after_loading(module)
            refreshed += 1
    return refreshed
