"""``eapo train --engine verl``: one typed config, run by verl's ``main_ppo``, into eapo's run directory.

The recipe, top to bottom (:func:`run_verl`):

1. **Check.** :func:`verl_problems` lists every setting verl cannot honour, with the reason, before
   anything is written. The ``algorithm.eapo`` section is written from the tree's resolved
   :class:`eapo.core.Algorithm` (:meth:`~eapo.core.Algorithm.section`), which the plugin resolves in
   verl's processes (:func:`~eapo.engines.verl.settings.algorithm_for_trainer`).
2. **Inputs** under ``RUN_DIR/verl/`` (:class:`VerlLayout`):
   - the train and validation prompts as verl's parquet (:mod:`eapo.engines.verl.parquet`), rendered
     from the same records and prompt template as the TRL engine, an over-long question cut to fit
     ``data.max_prompt_tokens`` by the TRL engine's rule (:func:`write_data`);
   - the model as a directory verl loads (:func:`prepare_model`). ``data.response_prefix`` is
     appended to the chat template's generation prompt, so the prompt text is the TRL engine's. A
     LoRA adapter is built by eapo's own ``peft`` config (``model.lora.layers`` included) and handed
     to verl as ``lora_adapter_path``.
3. **Overrides.** :func:`verl_overrides` turns the typed config into ``main_ppo``'s Hydra overrides.
   Every loss-affecting option is set explicitly, because verl's defaults are not the paper's
   (weight decay 0.01, bf16 rollouts, ``token-mean``):
   - the estimator and ``algorithm.eapo.*``;
   - the objective: ``loss_agg_mode``, the KL loss, clip (dual clip off: :data:`NO_DUAL_CLIP`),
     ``ppo_epochs``, advantage scaling;
   - optimiser, rollout, data, checkpoints and validation;
   - eapo's reward through ``compute_score``;
   - eapo's agent loop, which applies ``rollout.stop`` (:mod:`eapo.engines.verl.rollouts`), and
     ``logging.rollouts`` as ``trainer.eapo.rollouts`` into ``RUN_DIR/rollouts.jsonl``.
   On a CPU, eapo's platform settings are added (:mod:`eapo.engines.verl.platform`).
4. **Launch.** ``python -m verl.trainer.main_ppo`` runs as a child that dies with this process.
   verl's per-step metrics are translated to eapo's keys (:data:`METRIC_KEYS`) and appended to
   ``metrics.jsonl`` as they are logged, flushed step by step.
5. **Finish.** ``eapo_state.json`` is copied from the last checkpoint, and ``final/`` is written
   atomically from it: verl's Hugging Face export (or the trained LoRA adapter) and the tokenizer.
   Then ``summary.json`` (``eapo.train.run`` draws the dynamics figure, as for TRL).

``--resume`` continues a killed run from its last complete checkpoint (verl's ``resume_mode=auto``).
eapo's trainer restores ``H_0`` and the controls' state from that checkpoint's ``eapo_state.json``,
and ``metrics.jsonl`` and ``rollouts.jsonl`` are cut back to it. The run directory is the TRL engine's (``config.yaml``,
``metrics.jsonl``, ``eapo_state.json``, ``final/``, ``summary.json``), so ``eapo eval``, ``eapo plot``,
``eapo sweep`` and ``eapo study`` read it unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from eapo.config import ConfigError, RunConfig, dump_config
from eapo.engines.verl.rollouts import AGENT_LOOP_NAME, STOP_SETTING
from eapo.engines.verl.settings import estimator_of
from eapo.run_dir import (
    CONFIG_FILE,
    FINAL_DIR,
    METRICS_FILE,
    ROLLOUTS_FILE,
    STEP_METRICS_FILE,
    SUMMARY_FILE,
    WriteFailedError,
    atomic_write_text,
    describe_write_error,
    is_run_dir,
    read_metrics,
    truncate_metrics,
)

__all__ = [
    "LOSS_AGG_MODES",
    "NO_DUAL_CLIP",
    "METRIC_KEYS",
    "VerlLayout",
    "VerlRunError",
    "verl_problems",
    "verl_overrides",
    "num_workers",
    "verl_metrics_row",
    "prepare_launch",
    "prepare_model",
    "restore_metrics",
    "trained_adapter",
    "run_verl",
]

logger = logging.getLogger(__name__)

#: ``algorithm.loss_type`` -> verl's ``actor.loss_agg_mode`` (the ones with the same aggregation).
LOSS_AGG_MODES: dict[str, str] = {
    "grpo": "seq-mean-token-mean",  # 1/|y_i| per sequence, mean over sequences: the paper's
    "bnpo": "token-mean",  # every token of the batch weighs the same
    "dapo": "token-mean",  # TRL normalises by the tokens of the whole (global) batch, as verl's token-mean
    "dr_grpo": "seq-mean-token-sum-norm",  # Dr. GRPO: sum over tokens / a constant (max completion length)
}

#: verl's dual-clip bound ``actor.clip_ratio_c`` (default 3), set so that dual clip never acts and the loss
#: is the paper's PPO-clip. verl's ``vanilla`` loss caps a token's loss at ``−c·A`` where ``A < 0`` (dual-clip
#: PPO, Ye et al. 2020, arXiv 1912.09729), a bound the paper's objective (Eq. ``grpo``) does not have. verl
#: asserts ``c > 1`` and clamps ``log ρ`` to [−20, 20] before the cap, so ``ρ <= e^20 ≈ 4.9e8 < c``.
NO_DUAL_CLIP = 1e9

#: ``rollout.vllm_importance_correction`` -> verl's ``algorithm.rollout_correction.rollout_is``.
ROLLOUT_IS: dict[str, str | None] = {"none": None, "token_truncate": "token", "sequence_truncate": "sequence"}

#: verl's metric -> eapo's key in ``metrics.jsonl`` (the TRL engine's names). verl's own keys stay beside them.
METRIC_KEYS: dict[str, str] = {
    "critic/score/mean": "reward/mean",
    "critic/score/max": "reward/max",
    "critic/score/min": "reward/min",
    "response_length/mean": "completion/mean_length",
    "response_length/max": "completions/max_length",
    "response_length/min": "completions/min_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    "actor/pg_loss": "loss",
    "actor/kl_loss": "kl",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "learning_rate",
    "actor/pg_clipfrac": "clip_ratio/region_mean",
    "actor/entropy": "entropy/train",
    "timing_s/step": "step_time",
}

#: Subfolders and files of ``RUN_DIR/verl``.
VERL_DIR = "verl"
#: The Hydra overrides of the last launch, one per line (what was run, for a reader and for tests).
OVERRIDES_FILE = "main_ppo_overrides.txt"


class VerlRunError(RuntimeError):
    """verl's run failed or cannot start; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class VerlLayout:
    """Where a verl run keeps its inputs and verl's own outputs, under ``RUN_DIR/verl``."""

    run_dir: Path

    @property
    def root(self) -> Path:
        return self.run_dir / VERL_DIR

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def adapter(self) -> Path:
        return self.root / "initial_adapter"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts"

    @property
    def log(self) -> Path:
        return self.root / "main_ppo.log"

    def verl_metrics(self, launch: int) -> Path:
        """verl's file logger truncates its file when it starts: one file per launch."""
        return self.root / f"verl_metrics.{launch}.jsonl"

    def launches(self) -> int:
        return len(list(self.root.glob("verl_metrics.*.jsonl")))

    def last_checkpoint(self) -> tuple[int, Path] | None:
        """verl's last complete checkpoint: ``latest_checkpointed_iteration.txt`` (written last by verl's
        save) pointing at a ``global_step_N`` that holds ``eapo_state.json``."""
        from eapo.core import STATE_FILE

        pointer = self.checkpoints / "latest_checkpointed_iteration.txt"
        if not pointer.exists():
            return None
        try:
            step = int(pointer.read_text().strip())
        except ValueError:
            return None
        folder = self.checkpoints / f"global_step_{step}"
        if not (folder / STATE_FILE).exists():
            return None
        return step, folder


# --------------------------------------------------------------------------------------------
# 1. What verl cannot honour
# --------------------------------------------------------------------------------------------


def verl_problems(config: RunConfig) -> list[str]:
    """Every setting of ``config`` that verl 0.9.1 cannot honour, one message each, with the reason and
    what to do (empty: the run can start)."""
    problems: list[str] = []
    a, r, t, m = config.algorithm, config.rollout, config.train, config.model
    if r.backend not in ("auto", "vllm"):
        problems.append(
            f"rollout.backend={r.backend!r}: verl's v1 trainer rolls out through an inference server only "
            "(vLLM here); use rollout.backend=auto or vllm"
        )
    if r.vllm_mode != "colocate" or r.vllm_server_base_url:
        problems.append(
            "rollout.vllm_mode=server / rollout.vllm_server_base_url: verl starts and syncs its own vLLM "
            "servers; leave rollout.vllm_mode=colocate"
        )
    if r.vllm_importance_correction not in ROLLOUT_IS:
        problems.append(
            f"rollout.vllm_importance_correction={r.vllm_importance_correction!r}: verl's rollout correction "
            f"has truncated importance weights only ({', '.join(ROLLOUT_IS)})"
        )
    if a.loss_type not in LOSS_AGG_MODES:
        problems.append(
            f"algorithm.loss_type={a.loss_type!r} has no verl loss_agg_mode with the same aggregation; "
            f"use one of {', '.join(LOSS_AGG_MODES)}"
        )
    if a.scale_rewards == "batch":
        problems.append(
            "algorithm.scale_rewards=batch: verl scales GRPO advantages by the group's std or not at all "
            "(norm_adv_by_std_in_grpo); use group or none"
        )
    if a.kl_bias_correction:
        problems.append(
            "algorithm.kl_bias_correction=true: verl's k3 (low_var_kl) has no importance-ratio factor; "
            "set it false (the paper's objective)"
        )
    if t.lr_scheduler not in ("constant", "cosine"):
        problems.append(
            f"train.lr_scheduler={t.lr_scheduler!r}: verl's optimiser schedules are constant and cosine"
        )
    if t.max_steps is None or t.max_steps <= 0:
        problems.append(
            "train.max_steps must be set (> 0) on verl: the run length is trainer.total_training_steps"
        )
    if t.lm_head != "auto":
        problems.append(
            f"train.lm_head={t.lm_head!r} chooses the TRL engine's log-prob head; verl computes its own: "
            "leave it auto"
        )
    if m.dtype not in ("auto", "float32", "bfloat16"):
        problems.append(f"model.dtype={m.dtype!r}: verl's FSDP engine runs float32 or bfloat16 here")
    if t.eval_steps and t.eval_sampling not in ("greedy", "sample"):
        problems.append(f"train.eval_sampling={t.eval_sampling!r}: verl validates greedy or sampled")
    workers = config.verl.workers or 1
    completions = t.prompts_per_step * r.num_generations
    if completions % workers or (completions // workers) % t.micro_batch_size:
        problems.append(
            f"verl.workers={workers}: verl splits each step's train.prompts_per_step × rollout.num_generations "
            f"= {completions} completions evenly over the workers, each share a multiple of "
            f"train.micro_batch_size={t.micro_batch_size}; choose workers and micro_batch_size that divide it"
        )
    interpolated = [stop for stop in r.stop if "${" in stop]
    if interpolated:
        problems.append(
            f"rollout.stop={interpolated!r}: verl's Hydra config would read '${{' as an interpolation; "
            "drop the '${' from the stop string"
        )
    return problems


# --------------------------------------------------------------------------------------------
# 2. Inputs: data and model
# --------------------------------------------------------------------------------------------


def write_data(config: RunConfig, layout: VerlLayout, model_path: str) -> dict[str, Path]:
    """The training prompts (``data.split``, ``data.limit``) and the validation prompts
    (``train.eval_split``, ``train.eval_limit``) as verl's parquet; returns ``{"train": ..., "val": ...}``.

    A question whose prompt (chat template and ``data.response_prefix`` included, counted by
    ``model_path``'s tokenizer) is over ``data.max_prompt_tokens`` is cut to fit by
    :func:`eapo.data.render_prompts`, the TRL engine's rule (the instructions are kept), so verl's agent
    loop never truncates a prompt itself (verl 0.9.1 would cut it from the left, the instructions first).
    """
    from eapo.data import DataError, default_prompt_for, load, render_prompts
    from eapo.engines.verl.parquet import verl_rows, write_verl_parquet
    from eapo.runtime.models import load_tokenizer

    data = config.data
    prompt = data.prompt or default_prompt_for(data.name)
    tokenizer = load_tokenizer(model_path)
    splits = {"train": (data.split, data.limit), "val": (config.train.eval_split, config.train.eval_limit)}
    written = {}
    for name, (split, limit) in splits.items():
        try:
            records = load(data.name, data.path, split=split, limit=limit, **data.options)
            rendered = render_prompts(
                records,
                tokenizer,
                prompt=prompt,
                max_prompt_tokens=data.max_prompt_tokens,
                response_prefix=data.response_prefix,
            )
            rows = verl_rows(
                records,
                prompt=prompt,
                data_source=f"eapo/{data.name}",
                split=split,
                questions=rendered.questions,
            )
        except DataError as error:
            raise VerlRunError(
                f"data.name={data.name!r} (data.path={data.path!r}, split {split!r}) cannot be loaded: {error}"
            ) from error
        written[name] = write_verl_parquet(rows, layout.data / f"{name}.parquet")
    return written


def prefixed_chat_template(template: str, prefix: str) -> str:
    """``template`` with ``prefix`` written after its generation prompt: the rendered prompt is then
    ``apply_chat_template(..., add_generation_prompt=True) + prefix``, the TRL engine's prompt text."""
    if not prefix:
        return template
    literal = json.dumps(prefix)  # a Jinja string literal (JSON escapes are Jinja's)
    return template + "{%- if add_generation_prompt %}{{ " + literal + " }}{%- endif %}"


def prepare_model(config: RunConfig, layout: VerlLayout, model_path: str) -> Path:
    """A directory verl loads the policy from: ``model_path``'s files linked, with the tokenizer's chat
    template prefixed by ``data.response_prefix`` (:func:`prefixed_chat_template`)."""
    from eapo.runtime.models import load_tokenizer

    source = Path(model_path)
    if not source.is_dir():
        from huggingface_hub import snapshot_download

        source = Path(snapshot_download(model_path))
    target = layout.model
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    tokenizer = load_tokenizer(str(source))
    for child in source.iterdir():
        if child.name.startswith(("tokenizer", "special_tokens", "chat_template", "vocab", "merges")):
            continue  # the tokenizer is saved below, with its template
        (target / child.name).symlink_to(child.resolve())
    template = tokenizer.chat_template
    if template is None:
        raise VerlRunError(
            f"{source}: the tokenizer has no chat template; verl renders prompts through apply_chat_template"
        )
    tokenizer.chat_template = prefixed_chat_template(template, config.data.response_prefix)
    tokenizer.save_pretrained(str(target))
    return target


def prepare_adapter(config: RunConfig, layout: VerlLayout, model_path: str) -> Path | None:
    """The untrained LoRA adapter built from ``model.lora`` by eapo's peft config (layers, dropout and
    modules as on TRL), for verl's ``lora_adapter_path``; None without LoRA."""
    from eapo.runtime.models import lora_config

    peft_config = lora_config(config, model_path)
    if peft_config is None:
        return None
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(config.train.seed)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    peft_model = get_peft_model(model, peft_config)
    if layout.adapter.exists():
        shutil.rmtree(layout.adapter)
    peft_model.save_pretrained(str(layout.adapter))
    return layout.adapter


# --------------------------------------------------------------------------------------------
# 3. The typed config as verl's overrides
# --------------------------------------------------------------------------------------------


def hydra_value(value: Any) -> str:
    """A Python value as a Hydra override value (strings quoted, so ``<think>`` or ``a,b`` stay strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    # Hydra's quoted strings keep a backslash as written, except in a run of them before a quote (the
    # escaped one, or the closing one): there each is doubled, and the quote escaped
    text = re.sub(r"(\\*)'", lambda match: match.group(1) * 2 + "\\'", str(value))
    text = re.sub(r"(\\+)$", lambda match: match.group(1) * 2, text)
    return f"'{text}'"


def _nested(prefix: str, values: Mapping[str, Any]) -> list[str]:
    """``+prefix.key=value`` for a nested mapping (Hydra adds keys absent from verl's schema with ``+``)."""
    out = []
    for key, value in values.items():
        if isinstance(value, Mapping):
            out += _nested(f"{prefix}.{key}", value)
        else:
            out.append(f"+{prefix}.{key}={hydra_value(value)}")
    return out


def algorithm_section(config: RunConfig) -> dict[str, Any]:
    """``algorithm.eapo`` for this config: its resolved algorithm's :meth:`eapo.core.Algorithm.section`
    (the method, every weight the scheme takes with its defaults written out, the step settings, and the
    control settings that differ from the method's preset)."""
    return config.algorithm.resolved().section()


def verl_overrides(
    config: RunConfig,
    layout: VerlLayout,
    *,
    model_dir: Path,
    adapter: Path | None,
    data: Mapping[str, Path],
    num_rows: int,
    resume: bool,
    cpu: bool,
) -> list[str]:
    """``main_ppo``'s Hydra overrides for ``config`` (see the module docstring)."""
    from eapo.config import reward_settings

    a, r, t, m = config.algorithm, config.rollout, config.train, config.model
    actor, rollout, ref = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
    dtype = "bfloat16" if m.dtype == "bfloat16" else "float32"
    precision = "bf16" if dtype == "bfloat16" else "fp32"
    completions = t.prompts_per_step * r.num_generations
    epochs = max(1, math.ceil(t.max_steps * t.prompts_per_step / max(num_rows, 1)))
    args = [
        # eapo: its trainer, the estimator, the weights, the step and the controls
        "trainer.use_v1=True",
        "trainer.v1.trainer_mode=eapo",
        f"algorithm.adv_estimator={estimator_of(a.weighting_method())}",
        *_nested("algorithm.eapo", algorithm_section(config)),
        f"algorithm.norm_adv_by_std_in_grpo={a.scale_rewards == 'group'}",
        "algorithm.use_kl_in_reward=False",
        # the objective (the paper's: seq-mean-token-mean, k3 KL loss to the reference, clip ε)
        f"{actor}.loss_agg_mode={LOSS_AGG_MODES.get(a.loss_type, a.loss_type)}",
        f"{actor}.use_kl_loss={a.beta > 0}",
        f"{actor}.kl_loss_coef={a.beta!r}",
        f"{actor}.kl_loss_type=low_var_kl",
        f"{actor}.clip_ratio_low={a.epsilon!r}",
        f"{actor}.clip_ratio_c={NO_DUAL_CLIP!r}",  # no dual clip: the paper's PPO-clip
        f"{actor}.ppo_epochs={a.num_iterations}",
        f"{actor}.ppo_mini_batch_size={t.prompts_per_step}",  # one optimiser step per rollout batch
        f"{actor}.ppo_micro_batch_size_per_gpu={t.micro_batch_size}",
        f"{actor}.use_dynamic_bsz=False",
        f"{actor}.shuffle=False",
        f"{actor}.entropy_coeff=0",  # an entropy bonus is a control: algorithm.eapo.entropy_coef sets it
        # the optimiser (verl's AdamW defaults weight_decay to 0.01)
        f"{actor}.optim.lr={t.learning_rate!r}",
        f"{actor}.optim.lr_scheduler_type={t.lr_scheduler}",
        f"{actor}.optim.lr_warmup_steps_ratio={t.warmup_ratio!r}",
        f"{actor}.optim.weight_decay={t.weight_decay!r}",
        f"{actor}.optim.betas=[0.9,0.999]",
        f"{actor}.grad_clip={t.max_grad_norm!r}",
        f"{actor}.optim.clip_grad={t.max_grad_norm!r}",
        # numerics: the config's dtype everywhere. verl's FSDP engine computes in its mixed-precision
        # param_dtype (bf16 unless set, under autocast) whatever the weights were loaded as, and its
        # rollouts default to bf16; ``fsdp_config.dtype`` is read by the Megatron engine only.
        f"{actor}.fsdp_config.model_dtype={precision}",
        f"{ref}.fsdp_config.model_dtype={precision}",
        f"+{actor}.fsdp_config.mixed_precision={{param_dtype:{precision},reduce_dtype:fp32,buffer_dtype:fp32}}",
        f"+{ref}.fsdp_config.mixed_precision={{param_dtype:{precision},reduce_dtype:fp32,buffer_dtype:fp32}}",
        f"{rollout}.dtype={dtype}",
        f"{actor}.fsdp_config.seed={t.seed}",
        f"{actor}.use_torch_compile=False",
        f"{ref}.use_torch_compile=False",
        # the policy
        f"actor_rollout_ref.model.path={hydra_value(str(model_dir))}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={m.gradient_checkpointing}",
        # rollouts
        f"{rollout}.n={r.num_generations}",
        f"{rollout}.temperature={r.temperature!r}",
        f"{rollout}.top_p={r.top_p!r}",
        f"{rollout}.top_k=-1",
        f"{rollout}.seed={t.seed}",
        f"{rollout}.calculate_log_probs=True",
        f"{rollout}.log_prob_micro_batch_size_per_gpu={t.micro_batch_size}",
        f"{ref}.log_prob_micro_batch_size_per_gpu={t.micro_batch_size}",
        f"{rollout}.enforce_eager={not r.vllm_compile}",
        f"{rollout}.gpu_memory_utilization={r.vllm_gpu_memory_utilization!r}",
        # validation: greedy (eapo's default) or sampled at the rollout temperature
        f"{rollout}.val_kwargs.do_sample={t.eval_sampling == 'sample'}",
        f"{rollout}.val_kwargs.temperature={r.temperature if t.eval_sampling == 'sample' else 0}",
        f"{rollout}.val_kwargs.n=1",
        # eapo's agent loop: verl's single-turn loop with rollout.stop (verl has no stop setting), which also
        # hands the reward each response's length in tokens (completion_lengths)
        f"{rollout}.agent.default_agent_loop={AGENT_LOOP_NAME}",
        # data
        f"data.train_files={hydra_value(str(data['train']))}",
        f"data.val_files={hydra_value(str(data['val']))}",
        f"data.train_batch_size={t.prompts_per_step}",
        f"data.max_prompt_length={config.data.max_prompt_tokens}",
        f"data.max_response_length={r.max_completion_tokens}",
        # verl 0.9.1's RL path reads no data.truncation: its agent loop left-truncates a prompt over
        # rollout.prompt_length (= data.max_prompt_length), which eapo's agent loop refuses instead;
        # write_data has cut every question to fit, as the TRL engine does
        "data.truncation=error",
        "data.filter_overlong_prompts=False",
        "data.shuffle=True",
        f"data.seed={t.seed}",
        # the reward: eapo's composite, scored by compute_score
        "reward.custom_reward_function.path=pkg://eapo.engines.verl",
        "reward.custom_reward_function.name=compute_score",
        # the loop, checkpoints (eapo_state.json in each), logs
        f"trainer.total_training_steps={t.max_steps}",
        f"trainer.total_epochs={epochs}",
        f"trainer.save_freq={t.save_steps if t.save_steps > 0 else t.max_steps}",
        f"trainer.max_actor_ckpt_to_keep={t.save_total_limit}",
        f"{actor}.checkpoint.save_contents=['model','optimizer','extra','hf_model']",
        f"{actor}.checkpoint.load_contents=['model','optimizer','extra']",
        f"trainer.resume_mode={'auto' if resume else 'disable'}",
        f"trainer.default_local_dir={hydra_value(str(layout.checkpoints))}",
        f"trainer.rollout_data_dir={hydra_value(str(layout.rollouts))}",
        f"trainer.test_freq={t.eval_steps if t.eval_steps else -1}",
        "trainer.val_before_train=False",
        "trainer.critic_warmup=0",
        "trainer.logger="
        + ("['console','file','tensorboard']" if config.logging.tensorboard else "['console','file']"),
        f"trainer.project_name={hydra_value(config.logging.project)}",
        f"trainer.experiment_name={hydra_value(layout.run_dir.name)}",
    ]
    if a.epsilon_high is None:
        args.append(f"{actor}.clip_ratio_high={a.epsilon!r}")
    if a.loss_type == "dr_grpo":
        args.append(f"{actor}.loss_scale_factor={r.max_completion_tokens}")
    mode = ROLLOUT_IS.get(r.vllm_importance_correction)
    args.append(f"algorithm.rollout_correction.rollout_is={hydra_value(mode)}")
    if mode is not None:
        args.append(f"algorithm.rollout_correction.rollout_is_threshold={r.vllm_importance_cap!r}")
    if adapter is not None:
        args += [
            f"actor_rollout_ref.model.lora_rank={m.lora.r}",
            f"actor_rollout_ref.model.lora_alpha={m.lora.alpha}",
            f"+actor_rollout_ref.model.lora_adapter_path={hydra_value(str(adapter))}",
            # vLLM gets the adapter merged into full weights each sync (as the TRL engine's vLLM does);
            # eapo's CPU platform has no adapter sync
            "actor_rollout_ref.model.lora.merge=True",
        ]
    if r.stop:
        args.append(f"+{STOP_SETTING}={hydra_value(list(r.stop))}")
    if config.logging.rollouts > 0:
        args += _nested(
            "trainer.eapo",
            {
                "rollouts": config.logging.rollouts,
                "rollouts_file": str(layout.run_dir.resolve() / ROLLOUTS_FILE),
            },
        )
    weights, options, missing = reward_settings(config, layout.run_dir)
    reward = "reward.custom_reward_function.reward_kwargs"
    kwargs = {"weights": weights, "options": options, "missing": missing}
    if r.stop:
        kwargs["stop"] = list(r.stop)  # also in the agent loop's extra_info; explicit for any reward manager
    args += _nested(reward, kwargs)
    workers = num_workers(config, cpu=cpu)
    if cpu:
        from eapo.engines.verl.platform import cpu_overrides

        max_len = config.data.max_prompt_tokens + r.max_completion_tokens
        platform = cpu_overrides(
            max_model_len=r.vllm_max_model_length or max_len,
            max_num_seqs=max(completions, 16),
            workers=workers,
        )
        ours = {arg.split("=", 1)[0] for arg in args}
        args += [arg for arg in platform if arg.split("=", 1)[0] not in ours]  # the config's value wins
    else:
        args += [
            "trainer.nnodes=1",
            f"trainer.n_gpus_per_node={workers}",
            f"{rollout}.name=vllm",
            f"{rollout}.tensor_model_parallel_size=1",
        ]
    return args


def num_workers(config: RunConfig, *, cpu: bool) -> int:
    """``verl.workers``, or where unset the GPUs present (1 on a CPU): verl's ``trainer.n_gpus_per_node``.

    Raises:
        ConfigError: ``verl.workers`` asks for more GPUs than this machine has.
    """
    if config.verl.workers is not None:
        if not cpu:
            import torch

            present = torch.cuda.device_count()
            if config.verl.workers > present:
                raise ConfigError(
                    f"verl.workers={config.verl.workers} but {present} GPUs are present; one worker per GPU",
                    key="verl.workers",
                )
        return config.verl.workers
    if cpu:
        return 1
    import torch

    return max(1, torch.cuda.device_count())


# --------------------------------------------------------------------------------------------
# 4. verl's metrics as eapo's
# --------------------------------------------------------------------------------------------


def verl_metrics_row(step: int, values: Mapping[str, Any]) -> dict[str, Any]:
    """One ``metrics.jsonl`` row from verl's step record: eapo's keys (:data:`METRIC_KEYS`; ``eapo/*``,
    ``entropy/rollout`` and the controls' keys are already eapo's), verl's own keys beside them."""
    row: dict[str, Any] = {"step": step}
    for key, value in values.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = float(value) if isinstance(value, float) else value
            row[key] = value
            if key in METRIC_KEYS:
                row[METRIC_KEYS[key]] = value
    return row


class _MetricsFollower:
    """Follows verl's metric file while ``main_ppo`` runs and appends each step, translated, to
    ``metrics.jsonl`` as soon as verl logged it (flushed and fsynced per step, so a kill loses no
    finished step). verl logs a step's record after its checkpoint, validation included."""

    def __init__(self, source: Path, target: Path, *, after_step: int) -> None:
        self.source, self.target, self.after_step = source, target, after_step
        self.steps: dict[int, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._offset = 0
        self._thread = threading.Thread(target=self._loop, name="eapo-verl-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.poll()

    def poll(self) -> None:
        if not self.source.exists():
            return
        with self.source.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        lines = chunk.split(b"\n")
        complete, rest = lines[:-1], lines[-1]
        self._offset += len(chunk) - len(rest)
        for line in complete:
            if not line.strip():
                continue
            record = json.loads(line)
            step = int(record["step"])
            if step <= self.after_step:
                continue  # logged before the checkpoint this launch resumed from: already in metrics.jsonl
            if step in self.steps:
                # verl 0.9.1 logs one record per step, validation included; a second one is not expected
                logger.warning("verl logged step %d twice; metrics.jsonl keeps the first record", step)
                continue
            self.steps[step] = record["data"]
            self._append(verl_metrics_row(step, record["data"]))

    def _append(self, row: Mapping[str, Any]) -> None:
        with self.target.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


# --------------------------------------------------------------------------------------------
# 5. The run
# --------------------------------------------------------------------------------------------


def restore_metrics(layout: VerlLayout, upto: int) -> list[int]:
    """``metrics.jsonl`` as a resume from step ``upto`` needs it: cut back to ``upto``, with every step
    up to it that it lacks put back in step order, from verl's logs of earlier launches or, for the
    checkpoint's own step, from the checkpoint's :data:`~eapo.run_dir.STEP_METRICS_FILE`. verl logs a
    step after its checkpoint and validation, so a kill in between leaves the step out of
    ``metrics.jsonl`` although the resume starts after it. Returns the steps put back."""
    path = layout.run_dir / METRICS_FILE
    rows = {
        row["step"]: row
        for row in (read_metrics(layout.run_dir) if path.exists() else [])
        if row.get("step", 0) <= upto
    }
    logged: dict[int, dict[str, Any]] = {}
    for source in sorted(layout.root.glob("verl_metrics.*.jsonl")):
        for line in source.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line (a kill mid-write)
            logged.setdefault(int(record["step"]), record["data"])
    checkpoint = layout.checkpoints / f"global_step_{upto}" / STEP_METRICS_FILE
    if upto not in logged and checkpoint.exists():
        logged[upto] = json.loads(checkpoint.read_text(encoding="utf-8"))["data"]
    restored = [step for step in range(1, upto + 1) if step not in rows and step in logged]
    for step in restored:
        rows[step] = verl_metrics_row(step, logged[step])
    atomic_write_text(path, "".join(json.dumps(rows[step]) + "\n" for step in sorted(rows)))
    return restored


def prepare_launch(
    config: RunConfig, layout: VerlLayout, model_path: str, *, resume: bool, cpu: bool
) -> list[str]:
    """Write the run's inputs under ``layout`` (data, model, LoRA adapter) and return ``main_ppo``'s
    overrides for them; raises :class:`VerlRunError` when the data has fewer prompts than one step."""
    import pyarrow.parquet as pq

    data = write_data(config, layout, model_path)
    model_dir = prepare_model(config, layout, model_path)
    adapter = prepare_adapter(config, layout, model_path)
    num_rows = pq.ParquetFile(data["train"]).metadata.num_rows
    if num_rows < config.train.prompts_per_step:
        raise VerlRunError(
            f"the dataset has {num_rows} prompts, fewer than one step's train.prompts_per_step="
            f"{config.train.prompts_per_step}; lower train.prompts_per_step or use more data (data.limit)"
        )
    return verl_overrides(
        config,
        layout,
        model_dir=model_dir,
        adapter=adapter,
        data=data,
        num_rows=num_rows,
        resume=resume,
        cpu=cpu,
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The launched ``main_ppo`` gets SIGKILL when this process dies (Linux), so a killed ``eapo train``
    leaves no trainer behind; Ray's processes die with their driver."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setsid()


def _environment(config: RunConfig, layout: VerlLayout, launch: int, *, cpu: bool) -> dict[str, str]:
    env = dict(os.environ)
    if cpu:
        from eapo.engines.verl.platform import cpu_env

        env.update(cpu_env(os.environ))
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(config.rollout.vllm_kv_cache_gib))))
    env["VERL_FILE_LOGGER_PATH"] = str(layout.verl_metrics(launch))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("RAY_DEDUP_LOGS", "0")
    if config.logging.tensorboard:
        env["TENSORBOARD_DIR"] = str(layout.run_dir / "tensorboard")
    return env


def _failure_reason(log: Path) -> str:
    """Why ``main_ppo`` failed, from its log, for the message: Hydra's refusal of an override (the lines
    before its ``HYDRA_FULL_ERROR`` hint), else the last raised error (``ValueError: ...``,
    ``ray.exceptions.ActorDiedError: ...``), else the last line that mentions an error or a death."""
    if not log.exists():
        return "no output"
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()[-600:]]
    for index in range(len(lines) - 1, -1, -1):
        if "HYDRA_FULL_ERROR" in lines[index]:
            before = lines[max(0, index - 6) : index]
            message = [
                line for line in before if line and "Warning" not in line and not line.startswith("=====")
            ]
            if message:
                return " ".join(message[-3:])[:500]
            break
    kept = [line for line in lines if line and not line.startswith("File ") and "Warning" not in line]
    raised = re.compile(r"(^|\s)[\w.]*(Error|Exception|Died)\b[^:(]*: ")
    mentioned = re.compile(r"(error|died|killed|SIGKILL|exit code)", re.IGNORECASE)
    for pattern in (raised, mentioned):
        for line in reversed(kept):
            if pattern.search(line):
                return line[:500]
    return kept[-1][:500] if kept else "no output"


def _check_resume(config: RunConfig, run_dir: Path, resume: bool) -> None:
    from eapo.config import config_changes

    existing = run_dir.exists() and is_run_dir(run_dir)
    if existing and not resume:
        raise VerlRunError(
            f"{run_dir} already holds a run (config.yaml/metrics.jsonl); pass --resume to continue it "
            "or choose another --output-dir"
        )
    if resume and existing:
        changed = (
            list(config_changes(run_dir / CONFIG_FILE, config)) if (run_dir / CONFIG_FILE).exists() else []
        )
        if changed:
            raise VerlRunError(
                f"{run_dir / CONFIG_FILE} differs from this run's configuration ({', '.join(changed)}); resume "
                "with the same config and overrides (or start a new --output-dir)"
            )


def run_verl(
    config: RunConfig,
    output_dir: str | Path,
    *,
    resume: bool = False,
    timeout_s: float | None = None,
    echo: Callable[[str], None] = logger.info,
) -> Path:
    """Train ``config`` with verl into ``output_dir`` (see the module docstring); returns the run directory.

    Raises :class:`ConfigError` for a setting verl cannot honour (before anything is written) and
    :class:`VerlRunError` when verl cannot start or fails; finished steps stay in ``metrics.jsonl``
    and the checkpoints, and ``--resume`` continues from the last one.
    """
    from eapo.engines.verl.platform import check_versions

    # 1. Check everything before writing anything.
    config.validate()
    problems = verl_problems(config)
    if problems:
        raise ConfigError(
            f"cannot run on verl: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if problems[1:] else "")
        )
    try:
        check_versions()
    except RuntimeError as error:
        raise VerlRunError(str(error)) from None
    import torch

    cpu = not torch.cuda.is_available()
    num_workers(config, cpu=cpu)  # more workers than GPUs: refused before anything is written
    run_dir = Path(output_dir)
    _check_resume(config, run_dir, resume)
    layout = VerlLayout(run_dir)
    checkpoint = layout.last_checkpoint() if resume else None
    start_step = checkpoint[0] if checkpoint else 0
    if resume and checkpoint is None and (run_dir / FINAL_DIR).exists():
        raise VerlRunError(f"{run_dir} has already finished (final/ exists)")

    # 2. Inputs.
    from eapo.runtime.models import resolve_model

    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / CONFIG_FILE, dump_config(config))
    truncate_metrics(run_dir, start_step)  # metrics.jsonl and rollouts.jsonl: nothing after the checkpoint
    if start_step:
        restore_metrics(layout, start_step)
    try:
        model_path = resolve_model(config.model.name_or_path, seed=config.train.seed)
    except Exception as error:
        raise VerlRunError(
            f"model.name_or_path={config.model.name_or_path!r} cannot be loaded: {error}"
        ) from error
    args = prepare_launch(config, layout, model_path, resume=resume, cpu=cpu)
    atomic_write_text(layout.root / OVERRIDES_FILE, "\n".join(args) + "\n")

    # 3. Launch, following verl's metrics into metrics.jsonl.
    launch = layout.launches()
    env = _environment(config, layout, launch, cpu=cpu)
    follower = _MetricsFollower(layout.verl_metrics(launch), run_dir / METRICS_FILE, after_step=start_step)
    started = time.time()
    echo(f"verl: main_ppo from step {start_step} ({layout.root / OVERRIDES_FILE})")
    with layout.log.open("a", encoding="utf-8") as log:
        log.write(f"\n===== launch {launch} at {time.strftime('%Y-%m-%d %H:%M:%S')} from step {start_step}\n")
        log.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", "verl.trainer.main_ppo", *args],
            cwd=layout.root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        follower.start()
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(process)
            code = None
        except BaseException:
            _kill(process)
            raise
        finally:
            follower.stop()
    wall = time.time() - started
    done = max(follower.steps, default=start_step)
    if code != 0:
        last = layout.last_checkpoint()
        reason = (
            "it ran past its time limit"
            if code is None
            else f"exit code {code}: {_failure_reason(layout.log)}"
        )
        raise VerlRunError(
            f"verl's main_ppo stopped at step {done} ({reason}); its log: {layout.log}. Finished steps are in "
            f"{run_dir / METRICS_FILE}; the same command with --resume continues from "
            f"{'step ' + str(last[0]) if last else 'step 0 (no complete checkpoint)'}"
        )

    # 4. Finish: the run state, the final model, the summary.
    last = layout.last_checkpoint()
    if last is None:
        raise VerlRunError(f"verl finished without a complete checkpoint in {layout.checkpoints}")
    from eapo.core import STATE_FILE

    shutil.copyfile(last[1] / STATE_FILE, run_dir / STATE_FILE)
    _save_final(
        config, last[1], str(model_path), run_dir, adapter_config=layout.adapter / "adapter_config.json"
    )
    rows = read_metrics(run_dir)
    summary = {
        "engine": "verl",
        "global_step": last[0],
        "train_runtime_s": wall,
        "method": config.algorithm.method,
        "model_path": model_path,
        "rollout/backend": "vllm",
        "device": "cpu" if cpu else "cuda",
        "num_launches": launch + 1,
        "final_metrics": rows[-1] if rows else {},
    }
    atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str))
    trained = f"steps {start_step + 1}-{last[0]}" if last[0] > start_step else f"no step left of {last[0]}"
    echo(f"verl: {trained} in {wall:.0f} s; run directory {run_dir}")
    return run_dir


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL ``main_ppo``'s whole session (the driver and what it started in it)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def trained_adapter(hf_export: Path, adapter_config: Path, out: Path) -> int:
    """The trained LoRA adapter, in peft's format, from verl's Hugging Face export of a LoRA actor.

    verl 0.9.1 exports a LoRA actor as the peft model's whole state dict (``base_model.model.…``, the
    adapter's tensors as ``….lora_A.default.weight``), with no adapter of its own. The adapter is its
    ``lora_*`` tensors under peft's saved names (without the adapter name ``default``), beside the
    ``adapter_config.json`` the run started from (eapo's own peft config: rank, alpha, targets, layers).
    Returns the number of tensors written."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    tensors = {}
    for weights in sorted(hf_export.glob("*.safetensors")):
        with safe_open(str(weights), "pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if ".lora_A." in key or ".lora_B." in key:
                    tensors[key.replace(".default.weight", ".weight")] = f.get_tensor(key).contiguous()
    if not tensors:
        raise VerlRunError(
            f"{hf_export} holds no LoRA tensors (lora_A / lora_B): verl's export of the LoRA actor changed"
        )
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(adapter_config, out / "adapter_config.json")
    return len(tensors)


def _save_final(
    config: RunConfig, checkpoint: Path, model_path: str, run_dir: Path, *, adapter_config: Path
) -> None:
    """``final/`` from verl's last checkpoint, staged and renamed: the trained LoRA adapter
    (:func:`trained_adapter`, LoRA) or the full model in Hugging Face format, with the model's own
    tokenizer (its chat template without the response prefix: ``eapo eval`` adds
    ``data.response_prefix`` itself, as for a TRL run)."""
    from eapo.runtime.models import load_tokenizer

    actor = checkpoint / "actor"
    hf = actor / "huggingface"
    staging = run_dir / f".{FINAL_DIR}.tmp"
    final = run_dir / FINAL_DIR
    shutil.rmtree(staging, ignore_errors=True)
    try:
        weights = list(hf.glob("*.safetensors")) + list(hf.glob("*.bin"))
        if not weights:
            raise VerlRunError(f"{hf} holds no weights: verl's hf_model export did not run")
        if config.model.lora.enabled:
            trained_adapter(hf, adapter_config, staging)
        else:
            shutil.copytree(hf, staging)
        load_tokenizer(model_path).save_pretrained(str(staging))
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except VerlRunError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteFailedError(
            f"writing the final model into {staging} (renamed to {final} once complete) failed: "
            f"{describe_write_error(error)}"
        ) from error
