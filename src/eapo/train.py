"""The ``eapo train`` recipe: setup → data → reward → trainer → train → save → plot.

It reads top to bottom; the maths is in :mod:`eapo.core`, the TRL hooks in :mod:`eapo.trainer`
and the run-directory contract in :mod:`eapo.run_dir`. Scale-out needs no code change:
``accelerate launch [--config_file configs/accelerate/{ddp,fsdp,zero3}.yaml] -m eapo.cli train ...``
runs the same recipe under DDP, FSDP2 or DeepSpeed, on GPUs or CPU processes (:mod:`eapo.sharding`).
``rollout.engine`` picks the rollout engine (``auto``: vLLM, else transformers' continuous batching
on a GPU, plain ``generate`` on CPU; see :mod:`eapo.engines`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from eapo.config import ConfigError, EAPOConfig, dump_config
from eapo.run_dir import (
    CONFIG_FILE,
    FINAL_DIR,
    LOCK_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    WriteFailedError,
    atomic_write_text,
    complete_checkpoints,
    describe_write_error,
    is_run_dir,
    read_metrics,
    remove_incomplete_checkpoints,
    truncate_metrics,
)

logger = logging.getLogger(__name__)


class RunError(RuntimeError):
    """The run cannot start; the message says why and what to do."""


def run(
    config: EAPOConfig,
    output_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: list[Any] | None = None,
) -> Path:
    """Train one configuration into ``output_dir`` and return the run directory.

    ``callbacks`` are extra ``transformers.TrainerCallback`` objects (e.g. custom logging).

    Every setting is checked before anything is loaded or written. A launch that fails before its
    first optimisation step leaves nothing behind (a new run directory is removed again, an existing
    one loses only what this launch added), so the corrected command just works; a failure after it
    keeps everything written so far and raises :class:`RunError` saying how to resume. While the run
    trains, the main process holds the directory's lock (:class:`eapo.run_dir.DirectoryLock`).
    """
    from accelerate import PartialState

    # cpu=True where there is no accelerator: the only way accelerate (and TrainingArguments, which
    # must agree) forms a gloo process group under torchrun / accelerate launch on CPU; otherwise
    # every process would train alone on the whole batch.
    state = PartialState(cpu=use_cpu())
    config.validate()
    rollout = rollout_plan(config)  # an engine this machine cannot run fails here, before any loading
    check_batch_split(config, state.num_processes)
    check_judge_settings(config)

    # 1. The run directory: refuse to overwrite another run; on resume, find the last full checkpoint.
    run_dir = Path(output_dir)
    checkpoint = _inspect_run_dir(run_dir, config, resume=resume)
    # Every process has looked at the directory before the main one writes into it (else another
    # process would take the fresh config.yaml for an earlier run's and refuse to start).
    state.wait_for_everyone()
    with _Launch(run_dir, is_main=state.is_main_process, checkpoint=checkpoint) as launch:
        _train(config, launch, state=state, rollout=rollout, callbacks=callbacks)
    return run_dir


def _train(config: EAPOConfig, launch: _Launch, *, state, rollout, callbacks: list[Any] | None) -> None:
    """:func:`run`'s steps 2-9, inside the launch that owns the run directory."""
    run_dir, checkpoint = launch.run_dir, launch.checkpoint

    # 2. The policy (TRL loads it, and its frozen reference, from this path).
    from eapo.models import load_tokenizer, resolve_model

    try:
        # The main process builds a model cached on first use (tiny, the embedded SmolLM2) before the
        # others look: under a process group save_pretrained writes weights only on rank 0, so a copy
        # built by another rank would have none.
        with state.main_process_first():
            model_path = resolve_model(config.model.name_or_path, seed=config.train.seed)
        tokenizer = load_tokenizer(model_path)
    except Exception as error:
        raise RunError(
            f"model.name_or_path={config.model.name_or_path!r} cannot be loaded: {error}"
        ) from error

    # 3. Prompts and references.
    dataset = build_dataset(config, tokenizer)
    if len(dataset) < config.train.prompts_per_step:
        raise RunError(
            f"the dataset has {len(dataset)} prompts, fewer than one step's train.prompts_per_step="
            f"{config.train.prompts_per_step}; lower train.prompts_per_step or use more data (data.limit)"
        )

    # 4. The composite reward (the same scorer as `eapo eval`); the judge is checked before step 1.
    reward = build_reward(config, run_dir)

    # 5. The dev subset validated every train.eval_steps steps (the weighting scheme comes with the
    #    trainer's arguments: grpo_args carries the method's weighting scheme and its weights).
    for note in config.algorithm.inert_controls():
        logger.warning(note)
    validation = build_validation(config, model_path, reward, run_dir) if config.train.eval_steps else None

    # 6. The trainer.
    from transformers.trainer_callback import PrinterCallback

    from eapo.callbacks import MetricsCallback, ProgressCallback
    from eapo.trainer import EAPOTrainer

    metrics_callback = MetricsCallback(run_dir, tensorboard=writes_tensorboard(config))
    all_callbacks: list[Any] = [metrics_callback, *(callbacks or [])]
    if config.logging.progress:
        all_callbacks.append(ProgressCallback(metrics_callback))
    from eapo.vllm_engine import VLLMEngineError

    try:
        trainer = EAPOTrainer(
            model=model_path,
            reward_funcs=[reward_function(reward)],
            args=grpo_args(config, run_dir, num_processes=state.num_processes, model_path=model_path),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(config, model_path),
            callbacks=all_callbacks,
            validation=validation,
            vllm_settings=vllm_settings(config, rollout),
            lm_head=config.train.lm_head,
            share_frozen_layers=config.train.share_frozen_layers,
            entropy_control=entropy_control_settings(config),
        )
    except VLLMEngineError as error:  # the colocated engine could not start: say why and what to do
        raise RunError(str(error)) from error
    launch.trainer = trainer
    trainer.remove_callback(PrinterCallback)  # our progress bar and metrics.jsonl replace its raw dict prints
    if rollout.compile and rollout.engine == "generate":
        # TRL builds its GenerationConfig with disable_compile=True; a static cache on CUDA compiles when allowed.
        trainer.generation_config.disable_compile = False
    logger.info("rollout engine: %s", rollout.describe())
    trainer.base_model_id = base_model_id(config.model.name_or_path)  # named by the model card

    # 7. Everything is accepted: the run's config.yaml (on resume, metrics cut back to the checkpoint).
    launch.start(config)

    # 8. Train (TRL restores model, optimizer, scheduler, RNG and data position; EAPOTrainer the scheme).
    started = time.time()
    if checkpoint is not None and 0 < config.train.max_steps <= launch.start_step:
        # Every step is done (the last launch failed writing final/): the checkpoint's weights are the
        # final ones. trainer.train would take one step more (it checks max_steps after a step).
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state.global_step = launch.start_step
        train_loss = None
    else:
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        train_loss = result.training_loss

    # 9. Save the final model or adapter atomically (every process: a sharded model is gathered from
    #    all of them), the summary and the dynamics figure.
    _save_final(trainer, tokenizer, run_dir, is_main=state.is_main_process)
    if state.is_main_process:
        summary = {
            "global_step": trainer.state.global_step,
            "train_runtime_s": time.time() - started,
            "train_loss": train_loss,
            "method": config.algorithm.method,
            "weighting": repr(trainer.weighting),
            "model_path": model_path,
            "rollout/engine": rollout.engine,
            "rollout": dataclasses.asdict(rollout),
            # how the processes shared the work: NO (one), MULTI_CPU / MULTI_GPU (DDP), FSDP, DEEPSPEED
            "distributed": str(trainer.accelerator.distributed_type.value),
            "num_processes": state.num_processes,
            "final_metrics": metrics_callback.last,
        }
        atomic_write_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2, default=str))
        if config.logging.plot:
            _plot(run_dir)
    close = getattr(reward, "close", None)
    if close is not None:
        close()
    # The other processes return once final/ and summary.json exist, so a caller may read them on any rank.
    state.wait_for_everyone()


class _Launch:
    """One launch of a run in its directory: the main process holds the directory's lock from the
    first write to the end; a failure before the launch's first optimisation step removes what the
    launch added (the whole directory when it created it), one after it keeps everything and becomes
    a :class:`RunError` that says how to resume."""

    def __init__(self, run_dir: Path, *, is_main: bool, checkpoint: Path | None) -> None:
        from eapo.run_dir import DirectoryLock

        self.run_dir = run_dir
        self.is_main = is_main
        self.checkpoint = checkpoint
        self.start_step = _checkpoint_step(checkpoint) if checkpoint is not None else 0
        self.trainer: Any = None
        self.created = not run_dir.exists()
        self.before = set() if self.created else {child.name for child in run_dir.iterdir()}
        self.lock = DirectoryLock(run_dir, "eapo train")

    def __enter__(self) -> _Launch:
        if self.is_main:
            from eapo.run_dir import DirectoryBusyError

            try:
                self.lock.acquire()  # creates the directory
            except DirectoryBusyError as error:
                raise RunError(str(error)) from None
        return self

    def start(self, config: EAPOConfig) -> None:
        """Write config.yaml; on resume cut metrics and validation back to the checkpoint and drop the
        checkpoints a failed write left incomplete (never resumed from)."""
        from eapo.validation import truncate_validation

        if not self.is_main:
            return
        atomic_write_text(self.run_dir / CONFIG_FILE, dump_config(config))
        remove_incomplete_checkpoints(self.run_dir)
        if self.checkpoint is not None:
            truncate_metrics(self.run_dir, self.start_step)
            truncate_validation(self.run_dir, self.start_step)
            logger.info("resuming %s from %s (step %d)", self.run_dir, self.checkpoint.name, self.start_step)
        elif self.before & {METRICS_FILE, CONFIG_FILE}:
            truncate_metrics(self.run_dir, 0)
            truncate_validation(self.run_dir, 0)
            logger.info("no complete checkpoint in %s: starting from step 0", self.run_dir)

    def steps_done(self) -> int:
        """Optimisation steps this launch completed."""
        if self.trainer is None:
            return 0
        return max(0, self.trainer.state.global_step - self.start_step)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: Any) -> bool:
        try:
            if error is None or not self.is_main:
                return False
            steps = self.steps_done()
            if steps == 0:
                self._remove_what_this_launch_added()
                return False
            checkpoints = complete_checkpoints(self.run_dir)
            resumes_from = (
                f"{checkpoints[-1].name}" if checkpoints else "step 0 (no complete checkpoint was written)"
            )
            cause = str(error) if isinstance(error, RunError) else f"{type(error).__name__}: {error}"
            hint = (
                f"training stopped at step {self.trainer.state.global_step} ({steps} step(s) done by this "
                f"launch): {cause}. Everything written so far is kept in {self.run_dir}; the same command "
                f"with --resume (same config and overrides) continues from {resumes_from}"
            )
            if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: keep their meaning
                logger.error(hint)
                return False
            if not isinstance(error, RunError | WriteFailedError):  # those say all there is to say
                logger.error("training failed", exc_info=(kind, error, traceback))
            raise RunError(hint) from error
        finally:
            self.lock.release()

    def _remove_what_this_launch_added(self) -> None:
        if self.created:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            logger.info("removed %s: the launch failed before its first step", self.run_dir)
            return
        for child in self.run_dir.iterdir():
            if child.name not in self.before and child.name != LOCK_FILE:
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Building blocks (each usable on its own)
# --------------------------------------------------------------------------------------------


def build_dataset(config: EAPOConfig, tokenizer):
    """Load records, render the paper's prompt through the chat template, return a ``datasets.Dataset``."""
    from datasets import Dataset

    from eapo.data import DataError

    try:
        records, prompts = _records_and_prompts(config, tokenizer, config.data.split, config.data.limit)
    except DataError as error:
        raise RunError(
            f"data.name={config.data.name!r} (data.path={config.data.path!r}, data.split="
            f"{config.data.split!r}) cannot be loaded: {error}"
        ) from error
    return Dataset.from_list(
        [
            {
                "prompt": text,
                "reference": record.reference,
                "question": record.question,
                "record_id": record.id,
            }
            for text, record in zip(prompts, records, strict=True)
        ]
    )


def _records_and_prompts(config: EAPOConfig, tokenizer, split: str, limit: int | None):
    from eapo.data import default_prompt_for, load, render_prompts

    data = config.data
    records = load(data.name, data.path, split=split, limit=limit, **data.options)
    prompt = data.prompt or default_prompt_for(data.name)
    return records, render_prompts(
        records,
        tokenizer,
        prompt=prompt,
        max_prompt_tokens=data.max_prompt_tokens,
        response_prefix=data.response_prefix,
    )


def build_validation(config: EAPOConfig, model_path: str, reward, run_dir: Path):
    """The fixed dev subset of ``train.eval_split`` answered every ``train.eval_steps`` steps, scored by ``reward``."""
    from eapo.models import load_tokenizer
    from eapo.validation import VALIDATION_FILE, Validation

    t, r = config.train, config.rollout
    tokenizer = load_tokenizer(model_path)  # its own: generation switches it to left padding
    try:
        records, prompts = _records_and_prompts(config, tokenizer, t.eval_split, t.eval_limit)
    except Exception as error:
        raise RunError(
            f"train.eval_steps={t.eval_steps} validates on split train.eval_split={t.eval_split!r} of "
            f"data.name={config.data.name!r}, which cannot be loaded: {error}"
        ) from error
    return Validation(
        prompts=list(prompts),
        references=[record.reference for record in records],
        questions=[record.question for record in records],
        ids=[record.id for record in records],
        scorer=reward,
        tokenizer=tokenizer,
        every=t.eval_steps,
        greedy=t.eval_sampling == "greedy",
        temperature=r.temperature,
        top_p=r.top_p,
        max_new_tokens=r.max_completion_tokens,
        seed=t.seed,
        batch_size=t.micro_batch_size,
        output=run_dir / VALIDATION_FILE,
    )


def build_reward(config: EAPOConfig, run_dir: str | Path | None = None):
    """The configured composite reward; an unreachable judge endpoint fails here, before any training.

    The judge's disk cache (``reward.judge.cache_dir``) lies under ``run_dir`` when relative; without
    ``run_dir`` a relative cache directory means no cache.
    """
    from eapo.config import reward_options
    from eapo.rewards import make_composite

    weights = {name: alpha for name, alpha in config.reward.weights.items() if alpha}
    unknown = sorted(set(config.reward.options) - set(config.reward.weights))
    configured = reward_options(config)
    if unknown:
        raise ConfigError(
            f"reward.options has {unknown}, which reward.weights does not list ({list(config.reward.weights)})"
        )
    options = {name: opts for name, opts in configured.items() if name in weights}
    check_judge_settings(config)
    if "llm_judge" in weights:
        judge = config.reward.judge
        options["llm_judge"] = {
            "base_url": judge.base_url,
            "model": judge.model,
            "api_key_env": judge.api_key_env,
            "target": judge.target,
            "concurrency": judge.concurrency,
            "timeout": judge.timeout,
            "max_retries": judge.max_retries,
            "structured_output": judge.structured_output,
            **options.get("llm_judge", {}),
        }
        cache_dir = judge_cache_dir(judge.cache_dir, run_dir)
        if cache_dir is not None:
            options["llm_judge"].setdefault("cache_dir", str(cache_dir))
    composite = make_composite(weights, missing=config.reward.missing, **options)
    judge_scorer = composite.components.get("llm_judge") if hasattr(composite, "components") else None
    if judge_scorer is not None:
        try:
            judge_scorer.check_reachable()
        except Exception as error:
            raise RunError(
                f"the LLM judge at {config.reward.judge.base_url} cannot be reached: {error}"
            ) from error
    return composite


def check_judge_settings(config: EAPOConfig) -> None:
    """A weighted LLM judge needs an endpoint and a model (checked before anything is loaded)."""
    judge = config.reward.judge
    if config.reward.weights.get("llm_judge") and (not judge.base_url or not judge.model):
        raise ConfigError(
            "reward.weights.llm_judge > 0 needs reward.judge.base_url and reward.judge.model "
            "(an OpenAI-compatible endpoint), or set reward.weights.llm_judge=0",
            key="reward.weights.llm_judge",
        )


def check_batch_split(config: EAPOConfig, num_processes: int) -> None:
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


def judge_cache_dir(cache_dir: str | None, run_dir: str | Path | None) -> Path | None:
    """``reward.judge.cache_dir`` as a path: absolute as given, relative under ``run_dir``."""
    if cache_dir is None:
        return None
    path = Path(cache_dir).expanduser()
    if path.is_absolute():
        return path
    return Path(run_dir) / path if run_dir is not None else None


def reward_function(composite):
    """Adapt the composite scorer to TRL's reward-function interface (logs per-component metrics)."""

    def eapo_reward(prompts, completions, reference, question=None, log_metric=None, **_: Any):
        result = composite.score(prompts, completions, reference, questions=question)
        if log_metric is not None:
            for key, value in result.metrics.items():
                log_metric(key, value)
        return result.rewards

    return eapo_reward


def entropy_control_settings(config: EAPOConfig):
    """What ``EAPOTrainer`` needs beyond TRL's options for the entropy controls (``algorithm.*``)."""
    from eapo.trainer import EntropyControlSettings

    a = config.algorithm
    return EntropyControlSettings(
        loss_mode=a.loss_mode,
        clip_cov_ratio=a.clip_cov_ratio,
        clip_cov_lb=a.clip_cov_lb,
        clip_cov_ub=a.clip_cov_ub,
        kl_cov_ratio=a.kl_cov_ratio,
        ppo_kl_coef=a.ppo_kl_coef,
        entropy_target_ratio=a.entropy_target_ratio if a.entropy_target is None else None,
    )


def rollout_plan(config: EAPOConfig, facts=None):
    """The engine, dtype and attention kernel this run uses on this device (see :mod:`eapo.engines`)."""
    from eapo.engines import EngineError, device_facts, plan_rollout

    m, r = config.model, config.rollout
    try:
        return plan_rollout(
            facts if facts is not None else device_facts(),
            engine=r.requested_engine(),
            dtype=m.dtype,
            attn_implementation=m.attn_implementation,
            cache_implementation=r.cache_implementation,
            compile=r.compile,
            vllm_compile=r.vllm_compile,
            vllm_mode=r.vllm_mode,
        )
    except EngineError as error:
        raise ConfigError(str(error)) from None


def grpo_args(
    config: EAPOConfig, run_dir: Path, *, num_processes: int = 1, facts=None, model_path: str | None = None
):
    """Translate the typed config into the trainer's arguments, an :class:`eapo.trl_config.EAPOConfig` (TRL's
    ``GRPOConfig`` with the weighting settings: the same class a TRL script passes). ``model_path`` (the
    resolved policy) tells DDP whether to search for unused parameters."""
    import torch

    from eapo import trl_config

    t, r, a = config.train, config.rollout, config.algorithm
    check_batch_split(config, num_processes)
    per_process = t.prompts_per_step * r.num_generations // num_processes
    rollout = rollout_plan(config, facts)
    dtype = rollout.dtype
    cuda = torch.cuda.is_available() if facts is None else facts.cuda
    model_init_kwargs: dict[str, Any] = {"dtype": dtype}
    if rollout.attn_implementation is not None:
        model_init_kwargs["attn_implementation"] = rollout.attn_implementation
    tf32 = True if cuda and dtype == "float32" and _tf32_available() else None  # fp32 weights, TF32 matmuls
    return trl_config.EAPOConfig(
        output_dir=str(run_dir),
        per_device_train_batch_size=t.micro_batch_size,
        gradient_accumulation_steps=per_process // t.micro_batch_size,
        num_generations=r.num_generations,
        max_completion_length=r.max_completion_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup_ratio,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        max_steps=t.max_steps,
        num_train_epochs=t.num_epochs,
        seed=t.seed,
        data_seed=t.seed,
        beta=a.beta,
        epsilon=a.epsilon,
        epsilon_high=a.epsilon_high,
        # the entropy controls TRL has (eapo.core.entropy_control lists them; Clip-Cov / KL-Cov are eapo's)
        entropy_coef=a.entropy_coef,
        use_adaptive_entropy=a.adaptive_entropy,
        # an H_0-anchored target (entropy_target null) is set by EAPOTrainer at step 1; 0 until then
        entropy_target=a.entropy_target if a.entropy_target is not None else 0.0,
        entropy_coef_delta=a.entropy_coef_delta,
        entropy_coef_min=a.entropy_coef_min,
        entropy_coef_max=a.entropy_coef_max,
        top_entropy_quantile=a.top_entropy_quantile,
        loss_type=a.loss_type,
        num_iterations=a.num_iterations,
        scale_rewards=a.scale_rewards,
        use_bias_correction_kl=a.kl_bias_correction,
        method=a.weighting_method(),  # an entropy-control preset trains GRPO's weights (its controls: above)
        **a.weighting_overrides(),
        split_by=a.split_by,
        entropy_agg=a.entropy_agg,
        **vllm_importance_args(r),
        use_vllm=rollout.engine == "vllm",
        vllm_mode=r.vllm_mode,
        vllm_server_base_url=r.vllm_server_base_url,
        vllm_gpu_memory_utilization=r.vllm_gpu_memory_utilization,
        vllm_max_model_length=r.vllm_max_model_length
        or config.data.max_prompt_tokens + r.max_completion_tokens,
        use_transformers_continuous_batching=rollout.engine == "paged",
        transformers_continuous_batching_config=paged_options(r.paged_options, cuda=cuda),
        cache_implementation=rollout.cache_implementation,
        pad_to_multiple_of=64
        if rollout.compile and rollout.engine == "generate"
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


def writes_tensorboard(config: EAPOConfig) -> bool:
    """eapo's TensorBoard writer (RUN_DIR/tensorboard, the contract's keys): ``logging.tensorboard`` and
    ``tensorboard`` in ``logging.report_to``."""
    return config.logging.tensorboard and "tensorboard" in config.logging.report_to


def trackers(config: EAPOConfig) -> list[str]:
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


def vllm_settings(config: EAPOConfig, rollout):
    """What the colocated vLLM engine adds to TRL's (``eapo.vllm_engine``): the policy's dtype, eager or
    compiled, the KV cache's size on a CPU, the seed. ``None`` when vLLM is not the engine or runs as a
    server."""
    if rollout.engine != "vllm" or config.rollout.vllm_mode != "colocate":
        return None
    from eapo.vllm_engine import GIB, VLLMSettings

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


def base_model_id(name_or_path: str) -> str:
    """The base model a run's model card names: the hub id of an embedded model
    (``smollm2-135m-instruct`` -> ``HuggingFaceTB/SmolLM2-135M-Instruct``), else the configured name."""
    from eapo.models import EMBEDDED_MODELS

    embedded = EMBEDDED_MODELS.get(name_or_path)
    return embedded.hub_id if embedded is not None else name_or_path


def lora_config(config: EAPOConfig, model_path: str | None = None):
    """peft's ``LoraConfig`` for ``model.lora`` (``None`` when LoRA is off). ``model.lora.layers=N``
    (the last N layers) reads the layer count from ``model_path``'s config."""
    lora = config.model.lora
    if not lora.enabled:
        return None
    from peft import LoraConfig

    layers = lora.layers
    if isinstance(layers, int):
        if model_path is None:
            raise ConfigError(
                "model.lora.layers=N (the last N layers) needs the model's path to count its layers"
            )
        from transformers import AutoConfig

        total = AutoConfig.from_pretrained(model_path).num_hidden_layers
        if layers > total:  # layers >= 1 is checked by EAPOConfig.validate
            raise ConfigError(
                f"model.lora.layers={layers}: the model has {total} decoder layers; use 1 to {total}"
            )
        layers = list(range(total - layers, total))
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        layers_to_transform=layers,
        task_type="CAUSAL_LM",
    )


def use_cpu() -> bool:
    """Train on CPU: no CUDA/XPU/MPS device, or ``accelerate launch --cpu`` (``ACCELERATE_USE_CPU``)."""
    import torch
    from accelerate.utils import str_to_bool

    return not torch.accelerator.is_available() or bool(
        str_to_bool(os.environ.get("ACCELERATE_USE_CPU", "0"))
    )


# --------------------------------------------------------------------------------------------
# Run-directory helpers
# --------------------------------------------------------------------------------------------


def _changed_settings(saved: Path, config: EAPOConfig) -> list[str]:
    """The dotted keys whose values differ between a run's saved config.yaml and ``config``. The saved
    file is read through this version's defaults, so settings added since the run started (with their
    defaults) do not count as changes."""
    if not saved.exists():
        return []
    from eapo.config import load_config

    try:
        before = load_config(saved).to_dict()
    except ConfigError as error:
        return [f"unreadable: {error}"]

    def flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    old, new = flat(before), flat(config.to_dict())
    return [key for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]


def _inspect_run_dir(run_dir: Path, config: EAPOConfig, *, resume: bool) -> Path | None:
    """Read (never write) ``run_dir``: refuse to overwrite another run, and on resume check the
    settings and return the last complete checkpoint (``None``: start from step 0)."""
    existing = run_dir.exists() and is_run_dir(run_dir)
    if existing and not resume:
        raise RunError(
            f"{run_dir} already holds a run (config.yaml/metrics.jsonl); pass --resume to continue it "
            "or choose another --output-dir"
        )
    if not (resume and existing):
        return None
    changed = _changed_settings(run_dir / CONFIG_FILE, config)
    if changed:
        raise RunError(
            f"{run_dir / CONFIG_FILE} differs from this run's configuration ({', '.join(changed)}); resume "
            "with the same config and overrides (or start a new --output-dir)"
        )
    checkpoints = complete_checkpoints(run_dir)
    checkpoint = checkpoints[-1] if checkpoints else None
    if checkpoint is None and (run_dir / FINAL_DIR).exists():
        raise RunError(f"{run_dir} has already finished (final/ exists) and has no checkpoint to resume")
    return checkpoint


def _checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.split("-")[-1])


def _save_final(trainer, tokenizer, run_dir: Path, *, is_main: bool) -> None:
    """``final/``: the full model (or LoRA adapter) and tokenizer, written into a staging directory and
    renamed into place. Every process calls it: under FSDP or ZeRO-3 each holds a shard, and
    ``save_model`` gathers the full weights from all of them (a collective) before the main process,
    the only writer, saves them; the others wait until ``final/`` is in place."""
    from eapo.sharding import full_state_dict

    final = run_dir / FINAL_DIR
    staging = run_dir / f".{FINAL_DIR}.tmp"
    if is_main:
        shutil.rmtree(staging, ignore_errors=True)
    try:
        with full_state_dict(trainer.accelerator):
            trainer.save_model(str(staging))
        if is_main:
            tokenizer.save_pretrained(str(staging))
            trainer.create_model_card(model_name=run_dir.name)  # RUN_DIR/README.md, naming the base model
            shutil.copyfile(run_dir / "README.md", staging / "README.md")  # replaces PEFT's empty template
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
    except Exception as error:  # a full disk, a quota: nothing half-written stays
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
        raise WriteFailedError(
            f"writing the final model into {staging} (renamed to {final} once complete) failed: "
            f"{describe_write_error(error)}; the half-written copy was removed"
        ) from error
    trainer.accelerator.wait_for_everyone()


def _plot(run_dir: Path) -> None:
    from eapo.plot import plot_runs

    if read_metrics(run_dir):
        plot_runs([run_dir], run_dir / "dynamics.png")
