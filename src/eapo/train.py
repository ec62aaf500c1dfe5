"""The ``eapo train`` recipe: setup → data → reward → trainer → train → save → plot.

It reads top to bottom; the maths is in :mod:`eapo.core`, the TRL hooks in :mod:`eapo.engines.trl.trainer`
and the run-directory contract in :mod:`eapo.run_dir`. Scale-out needs no code change:
``accelerate launch [--config_file configs/accelerate/{ddp,fsdp,zero3}.yaml] -m eapo.cli train ...``
runs the same recipe under DDP, FSDP2 or DeepSpeed, on GPUs or CPU processes (:mod:`eapo.engines.trl.sharding`).
``rollout.backend`` picks the rollout backend (``auto``: vLLM, else transformers' continuous batching
on a GPU, plain ``generate`` on CPU; see :mod:`eapo.runtime.backends`).
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

from eapo.config import (
    ConfigError,
    RunConfig,
    check_judge_settings,
    config_changes,
    dump_config,
    reward_settings,
)
from eapo.engines.trl import args as trl_args
from eapo.run_dir import (
    CONFIG_FILE,
    FINAL_DIR,
    LOCK_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    ProcessFailedError,
    WriteFailedError,
    atomic_write_text,
    complete_checkpoints,
    describe_write_error,
    fail_together,
    is_run_dir,
    read_metrics,
    remove_incomplete_checkpoints,
    truncate_metrics,
)

logger = logging.getLogger(__name__)


class RunError(RuntimeError):
    """The run cannot start; the message says why and what to do."""


def run(
    config: RunConfig,
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
    if config.engine == "verl":  # the same config, run by verl's main_ppo (eapo.engines.verl.launch)
        return _run_on_verl(config, Path(output_dir), resume=resume, callbacks=callbacks)
    from accelerate import PartialState

    # cpu=True where there is no accelerator: the only way accelerate (and TrainingArguments, which
    # must agree) forms a gloo process group under torchrun / accelerate launch on CPU; otherwise
    # every process would train alone on the whole batch.
    state = PartialState(cpu=trl_args.use_cpu())
    config.validate()
    rollout = trl_args.rollout_plan(
        config
    )  # a backend this machine cannot run fails here, before any loading
    trl_args.check_batch_split(config, state.num_processes)
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


def _train(config: RunConfig, launch: _Launch, *, state, rollout, callbacks: list[Any] | None) -> None:
    """:func:`run`'s steps 2-9, inside the launch that owns the run directory."""
    run_dir, checkpoint = launch.run_dir, launch.checkpoint

    # 2. The policy (TRL loads it, and its frozen reference, from this path).
    from eapo.runtime.models import load_tokenizer, resolve_model

    try:
        # The main process builds a model cached on first use (tiny, the embedded SmolLM2) before the
        # others look: under a process group save_pretrained writes weights only on rank 0, so a copy
        # built by another rank would have none.
        with fail_together("loading the model"):
            if state.is_main_process:
                model_path = resolve_model(config.model.name_or_path, seed=config.train.seed)
        if not state.is_main_process:
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

    from eapo.engines.trl.callbacks import MetricsCallback, ProgressCallback
    from eapo.engines.trl.trainer import EAPOTrainer

    metrics_callback = MetricsCallback(run_dir, tensorboard=trl_args.writes_tensorboard(config))
    all_callbacks: list[Any] = [metrics_callback, *(callbacks or [])]
    if config.logging.progress:
        all_callbacks.append(ProgressCallback(metrics_callback))
    from eapo.runtime.vllm import VLLMEngineError

    try:
        trainer = EAPOTrainer(
            model=model_path,
            reward_funcs=[trl_args.reward_function(reward)],
            args=trl_args.grpo_args(
                config, run_dir, num_processes=state.num_processes, model_path=model_path
            ),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=trl_args.lora_config(config, model_path),
            callbacks=all_callbacks,
            validation=validation,
            vllm_settings=trl_args.vllm_settings(config, rollout),
            lm_head=config.train.lm_head,
            share_frozen_layers=config.train.share_frozen_layers,
        )
    except VLLMEngineError as error:  # the colocated engine could not start: say why and what to do
        raise RunError(str(error)) from error
    launch.trainer = trainer
    trainer.remove_callback(PrinterCallback)  # our progress bar and metrics.jsonl replace its raw dict prints
    if rollout.compile and rollout.backend == "generate":
        # TRL builds its GenerationConfig with disable_compile=True; a static cache on CUDA compiles when allowed.
        trainer.generation_config.disable_compile = False
    logger.info("rollout backend: %s", rollout.describe())
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
    # Every process returns once final/ and summary.json exist (leaving fail_together waits for all of
    # them), so a caller may read them on any rank.
    with fail_together(f"writing {SUMMARY_FILE}"):
        if state.is_main_process:
            summary = {
                "global_step": trainer.state.global_step,
                "train_runtime_s": time.time() - started,
                "train_loss": train_loss,
                "method": config.algorithm.method,
                "weighting": repr(trainer.weighting),
                "model_path": model_path,
                "rollout/backend": rollout.backend,
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


def _run_on_verl(config: RunConfig, run_dir: Path, *, resume: bool, callbacks: list[Any] | None) -> Path:
    """``engine: verl``: :func:`eapo.engines.verl.launch.run_verl`, then the dynamics figure."""
    from eapo.engines.verl.launch import VerlRunError, run_verl

    if callbacks:
        raise ConfigError(
            "callbacks are transformers TrainerCallbacks, which only engine=trl runs", key="engine"
        )
    try:
        run_verl(config, run_dir, resume=resume)
    except VerlRunError as error:
        raise RunError(str(error)) from error
    if config.logging.plot:
        _plot(run_dir)
    return run_dir


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
        from eapo.run_dir import DirectoryBusyError

        with fail_together("taking the run directory's lock"):
            if self.is_main:
                try:
                    self.lock.acquire()  # creates the directory
                except DirectoryBusyError as error:
                    raise RunError(str(error)) from None
        return self

    def start(self, config: RunConfig) -> None:
        """Write config.yaml; on resume cut metrics and validation back to the checkpoint and drop the
        checkpoints a failed write left incomplete (never resumed from)."""
        with fail_together(f"writing {CONFIG_FILE}"):
            if self.is_main:
                self._write_start(config)

    def _write_start(self, config: RunConfig) -> None:
        """:meth:`start`'s writes, which the main process alone makes."""
        from eapo.engines.trl.validation import truncate_validation

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
            if not isinstance(error, RunError | WriteFailedError | ProcessFailedError):  # they say it all
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


def build_dataset(config: RunConfig, tokenizer):
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


def _records_and_prompts(config: RunConfig, tokenizer, split: str, limit: int | None):
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


def build_validation(config: RunConfig, model_path: str, reward, run_dir: Path):
    """The fixed dev subset of ``train.eval_split`` answered every ``train.eval_steps`` steps, scored by ``reward``."""
    from eapo.engines.trl.validation import VALIDATION_FILE, Validation
    from eapo.runtime.models import load_tokenizer

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
        stop=tuple(r.stop),
        seed=t.seed,
        batch_size=t.micro_batch_size,
        output=run_dir / VALIDATION_FILE,
    )


def build_reward(config: RunConfig, run_dir: str | Path | None = None):
    """The configured composite reward; a component whose endpoint cannot be reached (one with
    ``check_reachable``: the LLM judge) fails here, before any training.

    The judge's disk cache (``reward.judge.cache_dir``) lies under ``run_dir`` when relative; without
    ``run_dir`` a relative cache directory means no cache.
    """
    from eapo.rewards import make_composite

    weights, options, missing = reward_settings(config, run_dir)
    composite = make_composite(weights, missing=missing, **options)
    for name, component in getattr(composite, "components", {}).items():
        if not callable(getattr(component, "check_reachable", None)):
            continue  # a component that calls no endpoint
        try:
            component.check_reachable()
        except Exception as error:
            raise RunError(
                f"reward {name!r}: the endpoint of {component.label} cannot be reached: {error}"
            ) from error
    return composite


def base_model_id(name_or_path: str) -> str:
    """The base model a run's model card names: the hub id of an embedded model
    (``smollm2-135m-instruct`` -> ``HuggingFaceTB/SmolLM2-135M-Instruct``), else the configured name."""
    from eapo.runtime.models import EMBEDDED_MODELS

    embedded = EMBEDDED_MODELS.get(name_or_path)
    return embedded.hub_id if embedded is not None else name_or_path


# --------------------------------------------------------------------------------------------
# Run-directory helpers
# --------------------------------------------------------------------------------------------


def _inspect_run_dir(run_dir: Path, config: RunConfig, *, resume: bool) -> Path | None:
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
    saved = run_dir / CONFIG_FILE
    try:
        changed = list(config_changes(saved, config)) if saved.exists() else []
    except ConfigError as error:
        changed = [f"unreadable: {error}"]
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
    the only writer, saves them; the others wait until ``final/`` is in place, and a failed write raises
    :class:`eapo.run_dir.WriteFailedError` on every process (:func:`eapo.run_dir.fail_together`)."""
    from eapo.engines.trl.sharding import full_state_dict

    final = run_dir / FINAL_DIR
    staging = run_dir / f".{FINAL_DIR}.tmp"
    if is_main:
        shutil.rmtree(staging, ignore_errors=True)
    try:
        with fail_together("writing the final model"):
            with full_state_dict(trainer.accelerator):
                trainer.save_model(str(staging))
            if is_main:
                tokenizer.save_pretrained(str(staging))
                trainer.create_model_card(model_name=run_dir.name)  # RUN_DIR/README.md, naming the base model
                # the card replaces PEFT's empty template
                shutil.copyfile(run_dir / "README.md", staging / "README.md")
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


def _plot(run_dir: Path) -> None:
    from eapo.plot import plot_runs

    if read_metrics(run_dir):
        plot_runs([run_dir], run_dir / "dynamics.png")
