"""The typed ``eapo train`` config as TRL's arguments: what the recipe (:mod:`eapo.train`) hands
:class:`~eapo.engines.trl.trainer.EAPOTrainer`.

:func:`grpo_args` translates every loss-affecting setting explicitly (TRL's defaults are not the paper's),
:func:`lora_config` builds peft's ``LoraConfig``, :func:`vllm_settings` what the trainer adds to TRL's
vLLM setup, :func:`reward_function` the composite
reward as TRL's reward-function interface.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from eapo.config import ConfigError, RunConfig
from eapo.runtime.models import lora_config  # re-exported: the TRL recipe's LoRA config

__all__ = [
    "check_batch_split",
    "reward_function",
    "rollout_plan",
    "grpo_args",
    "writes_tensorboard",
    "trackers",
    "ddp_find_unused_parameters",
    "paged_options",
    "vllm_settings",
    "vllm_importance_args",
    "lora_config",
    "use_cpu",
]


def check_batch_split(config: RunConfig, num_processes: int) -> None:
    """A step's completions split evenly into ``num_processes`` × micro-batches (TRL needs it)."""
    t = config.train
    completions_per_step = t.prompts_per_step * config.rollout.num_generations
    per_process = completions_per_step // num_processes
    if completions_per_step % num_processes or per_process % t.micro_batch_size:
        raise ConfigError(
            f"{completions_per_step} completions per step (train.prompts_per_step × rollout.num_generations) "
            f"cannot be split into {num_processes} processes × micro-batches of train.micro_batch_size="
            f"{t.micro_batch_size}",
            key="train.micro_batch_size",
        )


def reward_function(composite):
    """Adapt the composite scorer to TRL's reward-function interface (logs per-component metrics; the
    completions' lengths in tokens reach the components as ``completion_lengths``; the last batch's
    component scores stay on the function as ``last_components``, which the trainer's ``rollouts.jsonl``
    reads)."""

    def eapo_reward(
        prompts, completions, reference, question=None, log_metric=None, completion_ids=None, **_: Any
    ):
        lengths = None if completion_ids is None else [len(ids) for ids in completion_ids]
        result = composite.score(
            prompts, completions, reference, questions=question, completion_lengths=lengths
        )
        if log_metric is not None:
            for key, value in result.metrics.items():
                log_metric(key, value)
        eapo_reward.last_components = result.components  # each component's scores: rollouts.jsonl
        return result.rewards

    return eapo_reward


def rollout_plan(config: RunConfig, facts=None):
    """The rollout backend, dtype and attention kernel this run uses on this device (see :mod:`eapo.runtime.backends`)."""
    from eapo.runtime.backends import BackendError, device_facts, plan_rollout

    m, r = config.model, config.rollout
    try:
        return plan_rollout(
            facts if facts is not None else device_facts(),
            backend=r.backend,
            dtype=m.dtype,
            attn_implementation=m.attn_implementation,
            cache_implementation=r.cache_implementation,
            compile=r.compile,
            vllm_compile=r.vllm_compile,
            vllm_mode=r.vllm_mode,
        )
    except BackendError as error:
        raise ConfigError(str(error)) from None


def grpo_args(
    config: RunConfig, run_dir: Path, *, num_processes: int = 1, facts=None, model_path: str | None = None
):
    """Translate the typed config into the trainer's arguments, an :class:`eapo.engines.trl.config.EAPOConfig` (TRL's
    ``GRPOConfig`` with the weighting settings: the same class a TRL script passes). ``model_path`` (the
    resolved policy) tells DDP whether to search for unused parameters."""
    import torch

    from eapo.engines.trl import config as trl_config

    t, r = config.train, config.rollout
    check_batch_split(config, num_processes)
    per_process = t.prompts_per_step * r.num_generations // num_processes
    rollout = rollout_plan(config, facts)
    dtype = rollout.dtype
    cuda = torch.cuda.is_available() if facts is None else facts.cuda
    model_init_kwargs: dict[str, Any] = {"dtype": dtype}
    if rollout.attn_implementation is not None:
        model_init_kwargs["attn_implementation"] = rollout.attn_implementation
    tf32 = True if cuda and dtype == "float32" and _tf32_available() else None  # fp32 weights, TF32 matmuls
    # the algorithm (weights, split, controls, objective): the tree's resolved value, held, not validated again
    return trl_config.EAPOConfig.from_algorithm(
        config.algorithm.resolved(),
        output_dir=str(run_dir),
        per_device_train_batch_size=t.micro_batch_size,
        gradient_accumulation_steps=per_process // t.micro_batch_size,
        num_generations=r.num_generations,
        max_completion_length=r.max_completion_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        stop=list(r.stop) or None,
        log_rollouts=config.logging.rollouts,
        mask_truncated_completions=False,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_ratio,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        max_steps=t.max_steps,
        num_train_epochs=t.num_epochs,
        seed=t.seed,
        data_seed=t.seed,
        **vllm_importance_args(r),
        use_vllm=rollout.backend == "vllm",
        vllm_mode=r.vllm_mode,
        vllm_server_base_url=r.vllm_server_base_url,
        vllm_gpu_memory_utilization=r.vllm_gpu_memory_utilization,
        vllm_max_model_length=r.vllm_max_model_length
        or config.data.max_prompt_tokens + r.max_completion_tokens,
        use_transformers_continuous_batching=rollout.backend == "paged",
        transformers_continuous_batching_config=paged_options(r.paged_options, cuda=cuda),
        cache_implementation=rollout.cache_implementation,
        pad_to_multiple_of=64
        if rollout.compile and rollout.backend == "generate"
        else None,  # few prompt shapes -> few recompilations
        model_init_kwargs=model_init_kwargs,
        dataloader_pin_memory=cuda,
        bf16=cuda and dtype == "bfloat16",
        fp16=cuda and dtype == "float16",
        tf32=tf32,
        gradient_checkpointing=config.model.gradient_checkpointing,
        ddp_find_unused_parameters=ddp_find_unused_parameters(model_path),
        save_strategy="steps" if t.save_steps > 0 else "no",
        save_steps=t.save_steps if t.save_steps > 0 else 500,
        save_total_limit=t.save_total_limit,
        logging_steps=1,
        report_to=trackers(config) or "none",
        project=config.logging.project,
        run_name=Path(run_dir).name,
        disable_tqdm=True,
        remove_unused_columns=False,
        log_completions=False,
        use_cpu=use_cpu(),  # several CPU processes then train as one (gloo), see run()
    )


def writes_tensorboard(config: RunConfig) -> bool:
    """eapo's TensorBoard writer (RUN_DIR/tensorboard, the contract's keys): ``logging.tensorboard`` and
    ``tensorboard`` in ``logging.report_to``."""
    return config.logging.tensorboard and "tensorboard" in config.logging.report_to


def trackers(config: RunConfig) -> list[str]:
    """``logging.report_to`` as TRL's ``report_to``: transformers' integrations (wandb, trackio, mlflow,
    ...). TensorBoard is left out: eapo writes its own events (:func:`writes_tensorboard`)."""
    return [name for name in config.logging.report_to if name != "tensorboard"]


#: Config attributes that count a mixture of experts' experts (transformers' names across model families).
_EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def ddp_find_unused_parameters(model_path: str | None) -> bool:
    """DDP's ``find_unused_parameters`` for the policy at ``model_path``: True only for a mixture of
    experts, where a batch may route no token to an expert whose parameters then get no gradient. A
    dense model (and a LoRA adapter on one) uses every trainable parameter in every forward; there the
    search costs a traversal of the autograd graph per step and a warning that it found nothing
    (transformers turns it on unless gradient checkpointing is on). ``None`` (no model to read): False."""
    if model_path is None:
        return False
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    text = config.get_text_config()
    return any((getattr(text, name, None) or 0) > 0 for name in _EXPERT_COUNTS)


def paged_options(options: dict[str, Any], *, cuda: bool) -> dict[str, Any] | None:
    """``rollout.paged_options`` for TRL; on a CPU with no cache size given, ``max_memory_percent: 0.1``:
    transformers 5.17 otherwise sizes the paged cache from the machine's free memory (12 GB resident
    for 2 tiny steps on this 24 GB machine, measured; 2.9 GB with a tenth)."""
    options = dict(options)
    if not cuda and not {"max_memory_percent", "num_blocks"} & options.keys():
        options["max_memory_percent"] = 0.1
    return options or None


def vllm_settings(config: RunConfig, rollout):
    """What the colocated vLLM engine adds to TRL's (``eapo.engines.trl.vllm``): the policy's dtype, eager or
    compiled, the KV cache's size on a CPU, the seed. ``None`` when vLLM is not the rollout backend or runs as a
    server."""
    if rollout.backend != "vllm" or config.rollout.vllm_mode != "colocate":
        return None
    from eapo.engines.trl.vllm import GIB, VLLMSettings

    return VLLMSettings(
        dtype=rollout.dtype,
        enforce_eager=not rollout.compile,
        device=rollout.device,
        kv_cache_bytes=int(config.rollout.vllm_kv_cache_gib * GIB) if rollout.device == "cpu" else None,
        seed=config.train.seed,
    )


def vllm_importance_args(rollout) -> dict[str, Any]:
    """``rollout.vllm_importance_correction`` / ``vllm_importance_cap`` as TRL's ``vllm_importance_sampling_*``."""
    mode = rollout.vllm_importance_correction
    return {
        "vllm_importance_sampling_correction": mode != "none",
        "vllm_importance_sampling_mode": "token_truncate" if mode == "none" else mode,  # unused when none
        "vllm_importance_sampling_clip_min": None,
        "vllm_importance_sampling_clip_max": rollout.vllm_importance_cap,
    }


def _tf32_available() -> bool:
    from transformers.utils import is_torch_tf32_available

    return is_torch_tf32_available()


def use_cpu() -> bool:
    """Train on CPU: no CUDA/XPU/MPS device, or ``accelerate launch --cpu`` (``ACCELERATE_USE_CPU``)."""
    import torch
    from accelerate.utils import str_to_bool

    return not torch.accelerator.is_available() or bool(
        str_to_bool(os.environ.get("ACCELERATE_USE_CPU", "0"))
    )
