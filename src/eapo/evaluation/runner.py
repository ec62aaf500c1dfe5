"""``run_eval``: resolve what to evaluate (a model, a run directory, or a training config's base model),
load the data and scorers, and call :func:`eapo.evaluation.harness.evaluate`.

Defaults come, in order, from the explicit arguments, the run's ``config.yaml`` (for a run
directory), the ``config`` file (a training config: evaluate its *base* model, the table's starting
point), then built-in defaults. The scorers are built through :func:`eapo.rewards.make_reward` with the
run's reward options, so evaluation scores exactly as training rewarded. The LAAJ judge is the
``--judge-*`` arguments' endpoint, else the run's (or config's) ``reward.judge`` when it names one;
it is checked before any generation.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from eapo.config import ConfigError
from eapo.evaluation.harness import (
    EVAL_CONFIG_FILE,
    EvalSettings,
    check_generation,
    evaluate,
    generation_fingerprint,
)
from eapo.evaluation.labels import run_label

logger = logging.getLogger(__name__)

__all__ = [
    "EvalError",
    "run_eval",
    "resolve_target",
    "build_scorers",
    "judge_settings",
    "DEFAULT_SCORERS",
    "SCORER_NAMES",
]

#: Scorers ``eapo eval`` runs by default (``laaj`` is added when a judge endpoint is given).
DEFAULT_SCORERS = ("rouge_l", "reranker", "format")
#: Column name -> reward component it is built from.
SCORER_NAMES = {"rouge_l": "rouge_l", "reranker": "reranker", "format": "format", "laaj": "llm_judge"}


class EvalError(ValueError):
    """The evaluation cannot start; the message says which argument or file is wrong."""


class EvalConfigError(EvalError, ConfigError):
    """A setting of the run's or ``--config``'s configuration is invalid (``eapo eval`` exits 2)."""


def resolve_target(
    model: str | None, config: str | os.PathLike | None, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """What to evaluate: ``{"model_path", "model", "display_name", "run_config", "run_dir"}``.

    ``model`` may be a run directory (its ``final/`` is evaluated), a model directory (a full model
    or a LoRA adapter), ``tiny``, ``smollm2-135m-instruct`` or a hub id. Without ``model``,
    ``config``'s ``model.name_or_path`` (the base model) is evaluated. ``overrides`` (``key=value``)
    apply to the run's or the config's configuration, e.g. ``reward.judge.base_url=...``.
    """
    from eapo.config import ConfigError, load_config
    from eapo.run_dir import CONFIG_FILE, FINAL_DIR, is_run_dir
    from eapo.runtime.models import resolve_model

    run_config = None
    run_dir = None
    overrides = list(overrides)
    if config is not None:
        try:
            run_config = load_config(config, overrides)
        except ConfigError as error:
            raise EvalConfigError(str(error), key=error.key) from None
    if model is None:
        if run_config is None:
            raise EvalError(
                "pass --model (a model, a run directory) or --config (evaluates that config's base model)"
            )
        model = run_config.model.name_or_path
        seed = run_config.train.seed
        display = f"{model} (base)"
    else:
        seed = run_config.train.seed if run_config is not None else 0
        display = model
    path = Path(model).expanduser()
    if path.is_dir() and is_run_dir(path) and not (path / "config.json").exists():
        run_dir = path
        if (path / CONFIG_FILE).exists():
            try:
                run_config = load_config(path / CONFIG_FILE, overrides)
            except ConfigError as error:  # load_config names the file
                raise EvalConfigError(str(error), key=error.key) from None
        final = path / FINAL_DIR
        if not final.exists():
            raise EvalError(
                f"{path} has no {FINAL_DIR}/ (training did not finish); finish it with `eapo train --resume "
                f"--output-dir {path} ...`, or evaluate a checkpoint: --model {path}/checkpoint-N"
            )
        model_path = str(final)
        display = run_label(path)
        recorded = str(path.resolve())
    else:
        try:
            model_path = resolve_model(model, seed=seed)
        except FileNotFoundError as error:
            raise EvalError(str(error)) from None
        recorded = str(Path(model_path).resolve()) if Path(model_path).exists() and model != "tiny" else model
        if model == "tiny" and seed:
            recorded = f"tiny(seed={seed})"
    if overrides and run_config is None:
        raise EvalError(
            f"the overrides {overrides} need a configuration to apply to: pass --config or a run directory as --model"
        )
    return {
        "model_path": model_path,
        "model": recorded,
        "display_name": display,
        "run_config": run_config,
        "run_dir": run_dir,
    }


def build_scorers(
    names: Sequence[str],
    *,
    reward_options: dict[str, dict[str, Any]] | None = None,
    rouge_level: str | None = None,
    reranker_backend: str | None = None,
    judge_base_url: str | None = None,
    judge_model: str | None = None,
    judge_api_key_env: str | None = "OPENAI_API_KEY",
    judge_cache_dir: str | os.PathLike | None = None,
    judge_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{column: reward function}`` through :func:`eapo.rewards.make_reward`.

    ``reward_options`` (a run's ``reward.options``) configure each component as in training; the
    keyword arguments override them. ``laaj`` is the LLM judge on the response (``target="response"``,
    the paper's LAAJ evaluation prompt); it is added when ``judge_base_url`` is given, with
    ``judge_options`` (timeout, retries, structured_output, ...) passed to :class:`~eapo.rewards.judge.LLMJudge`.
    """
    from eapo.rewards import make_reward

    reward_options = reward_options or {}
    names = list(dict.fromkeys(names))
    if judge_base_url and "laaj" not in names:
        names.append("laaj")
    unknown = [name for name in names if name not in SCORER_NAMES]
    if unknown:
        raise EvalError(f"unknown scorer(s) {unknown}; valid: {', '.join(SCORER_NAMES)}")
    scorers: dict[str, Any] = {}
    for name in names:
        component = SCORER_NAMES[name]
        options = dict(reward_options.get(component, {}))
        if name == "rouge_l" and rouge_level is not None:
            options["level"] = rouge_level
        if name == "reranker" and reranker_backend is not None:
            options["backend"] = reranker_backend
        if name == "laaj":
            if not judge_base_url or not judge_model:
                raise EvalError(
                    "the laaj scorer needs --judge-base-url and --judge-model (an OpenAI-compatible endpoint)"
                )
            options = {
                **{key: value for key, value in options.items() if key not in ("target",)},
                **(judge_options or {}),
                "base_url": judge_base_url,
                "model": judge_model,
                "api_key_env": judge_api_key_env,
                "target": "response",
            }
            if judge_cache_dir is not None:
                options["cache_dir"] = str(judge_cache_dir)
        try:
            scorers[name] = make_reward(component, **options)
        except (ValueError, ImportError, RuntimeError, FileNotFoundError) as error:
            raise EvalError(f"scorer {name!r}: {error}") from error
    return scorers


def judge_settings(
    config: Any, base_url: str | None, model: str | None, api_key_env: str | None
) -> tuple[str | None, str | None, str | None, dict[str, Any]]:
    """``(base_url, model, api_key_env, options)`` of the LAAJ judge.

    Explicit values (``eapo eval --judge-*``) win; the rest comes from ``config.reward.judge`` (a run's
    or a training config's), whose endpoint is used when ``base_url`` is not given. ``api_key_env``:
    a variable's name, ``""`` for no key, ``None`` for the config's when its endpoint is used (else
    ``OPENAI_API_KEY``).
    """
    judge = config.reward.judge if config is not None else None
    options: dict[str, Any] = {}
    configured_key: str | None = "OPENAI_API_KEY"
    if judge is not None:
        options = {
            "timeout": judge.timeout,
            "concurrency": judge.concurrency,
            "max_retries": judge.max_retries,
            "structured_output": judge.structured_output,
        }
        if base_url is None and judge.base_url and judge.model:
            base_url, model = judge.base_url, model or judge.model
            configured_key = judge.api_key_env  # the config's key goes with the config's endpoint
    key = configured_key if api_key_env is None else (api_key_env or None)
    return base_url, model, key, options


def _check_judge(scorers: dict[str, Any]) -> None:
    """An unreachable judge fails before any generation (else every LAAJ sample waits out its retries)."""
    from eapo.rewards.judge import JudgeError

    laaj = scorers["laaj"]
    try:
        laaj.check_reachable()
    except JudgeError as error:
        for scorer in scorers.values():
            if hasattr(scorer, "close"):
                scorer.close()
        raise EvalError(
            f"LAAJ: {error}. Start the judge (e.g. `eapo judge serve`), point --judge-base-url or "
            "reward.judge.base_url at it, or pass --no-judge"
        ) from None


def _data_label(name: str, path: str | None, split: str, limit: int | None) -> str:
    label = f"{name}:{split}"
    if path and name not in ("cmd", "rjua", "medquad"):
        label = f"{name}({path}):{split}"
    if limit is not None:
        label += f"[:{limit}]"
    return label


def prompt_drift(
    prompt: str, response_prefix: str, trained_prompt: str | None, trained_prefix: str | None
) -> list[str]:
    """Warnings for an evaluation whose prompt template or response prefix is not the run's training's
    (a model trained to answer one prompt, scored on another, can lose its format entirely)."""
    if trained_prompt is None:
        return []
    warnings = []
    if prompt != trained_prompt:
        warnings.append(
            f"evaluating with prompt {prompt!r}, but the run trained with {trained_prompt!r} "
            f"(data.prompt); pass --prompt {trained_prompt} to evaluate as trained"
        )
    if response_prefix != (trained_prefix or ""):
        warnings.append(
            f"evaluating with response prefix {response_prefix!r}, but the run trained with "
            f"{trained_prefix or ''!r} (data.response_prefix); pass --response-prefix "
            f"{trained_prefix or ''!r} to evaluate as trained"
        )
    return warnings


def run_eval(
    model: str | None = None,
    *,
    config: str | os.PathLike | None = None,
    output_dir: str | os.PathLike | None = None,
    data: str | None = None,
    data_path: str | None = None,
    split: str = "dev",
    limit: int | None = None,
    prompt: str | None = None,
    response_prefix: str | None = None,
    max_prompt_tokens: int | None = None,
    k: int = 8,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    backend: str = "auto",
    dtype: str = "auto",
    scorers: Sequence[str] = DEFAULT_SCORERS,
    rouge_level: str | None = None,
    reranker_backend: str | None = None,
    judge_base_url: str | None = None,
    judge_model: str | None = None,
    judge_api_key_env: str | None = None,
    judge: bool = True,
    overrides: Sequence[str] = (),
    n_resamples: int = 1000,
    progress: bool = False,
) -> tuple[dict[str, Any], Path]:
    """Evaluate and write ``results.json`` / ``results.csv`` / ``results.md`` / ``samples.jsonl``.

    Returns ``(results, output_dir)``. ``output_dir`` defaults to ``RUN_DIR/eval`` for a run directory.
    Generation defaults (temperature, top_p, max_new_tokens) are the run's rollout settings, else
    1.0, 1.0 and 512. The LAAJ judge: see :func:`judge_settings`; ``judge=False`` runs none.
    ``overrides`` (``key=value``) apply to the run's or the config's configuration.
    """
    from eapo.config import reward_options
    from eapo.data import DataError, default_prompt_for, load, render_prompts
    from eapo.runtime.generate import choose_backend, make_generator
    from eapo.runtime.models import load_tokenizer

    target = resolve_target(model, config, overrides)
    cfg = target["run_config"]
    if output_dir is None:
        if target["run_dir"] is None:
            raise EvalError(
                "pass --output-dir (it defaults to RUN_DIR/eval only when --model is a run directory)"
            )
        output_dir = target["run_dir"] / "eval"
    output_dir = Path(output_dir)
    with writing(output_dir):  # one process at a time writes an evaluation directory
        # Data and prompts: explicit > the run's / config's data section.
        data_options: dict[str, Any] = {}
        if data is None:
            if cfg is None:
                raise EvalError(
                    "pass --data (a loader name such as demo, rjua, cmd, medquad, jsonl) or a run directory"
                )
            data = cfg.data.name
            data_path = data_path if data_path is not None else cfg.data.path
            data_options = dict(cfg.data.options)
        elif cfg is not None and data == cfg.data.name and data_path is None:
            data_path = cfg.data.path
            data_options = dict(cfg.data.options)
        # Prompt template and response prefix: explicit (--prompt / --response-prefix) > the run's training
        # (kept on other data too: the model learnt to answer that prompt) > the dataset's default.
        trained_prompt = trained_prefix = None
        if cfg is not None:
            trained_prompt = cfg.data.prompt or default_prompt_for(cfg.data.name)
            trained_prefix = cfg.data.response_prefix
        if max_prompt_tokens is None and cfg is not None:
            max_prompt_tokens = cfg.data.max_prompt_tokens
        try:
            prompt = prompt or trained_prompt or default_prompt_for(data)
            records = load(data, data_path, split=split, limit=limit, **data_options)
        except (DataError, FileNotFoundError) as error:
            raise EvalError(f"data {data!r}: {error}") from error
        if not records:
            raise EvalError(f"data {data!r} split {split!r} has no records; check --split and --data-path")
        if response_prefix is None:
            response_prefix = trained_prefix or ""
        for warning in prompt_drift(prompt, response_prefix, trained_prompt, trained_prefix):
            logger.warning(warning)
        tokenizer = load_tokenizer(target["model_path"])
        prompts = render_prompts(
            records,
            tokenizer,
            prompt=prompt,
            max_prompt_tokens=max_prompt_tokens,
            response_prefix=response_prefix,
        )

        # Generation settings: explicit > the run's rollout settings > defaults.
        rollout = cfg.rollout if cfg is not None else None
        chosen_backend = choose_backend(backend)
        if backend == "auto" and rollout is not None and rollout.requested_engine() != "auto":
            # auto follows an engine the run (or config) chose explicitly, where that engine runs here: a
            # run pinned to generate is evaluated with model.generate, one pinned to vllm with vLLM
            try:
                chosen_backend = choose_backend(rollout.requested_engine())
            except (ImportError, RuntimeError):
                pass  # e.g. a vLLM run evaluated on a machine without vLLM: this device's choice
        settings = EvalSettings(
            k=k,
            temperature=temperature if temperature is not None else (rollout.temperature if rollout else 1.0),
            top_p=top_p if top_p is not None else (rollout.top_p if rollout else 1.0),
            max_new_tokens=max_new_tokens
            if max_new_tokens is not None
            else (rollout.max_completion_tokens if rollout else 512),
            seed=seed,
            batch_size=batch_size or (64 if chosen_backend in ("vllm", "paged") else 8),
            n_resamples=n_resamples,
        )
        # Refuse to mix samples before loading any model (a mismatch is a clear error, not a slow one).
        check_generation(
            output_dir / EVAL_CONFIG_FILE, generation_fingerprint(target["model"], settings.validate())
        )
        options = reward_options(cfg) if cfg is not None else {}
        if cfg is None or "prefix" not in cfg.reward.options.get("format", {}):
            # the format check reads prefix + completion: the prefix this evaluation's prompts end with
            options.setdefault("format", {})["prefix"] = response_prefix
        judge_base_url, judge_model, judge_api_key_env, judge_options = judge_settings(
            cfg, judge_base_url, judge_model, judge_api_key_env
        )
        scorer_map = build_scorers(
            scorers,
            reward_options=options,
            rouge_level=rouge_level,
            reranker_backend=reranker_backend,
            judge_base_url=judge_base_url if judge else None,
            judge_model=judge_model,
            judge_api_key_env=judge_api_key_env,
            judge_cache_dir=output_dir / "judge_cache",
            judge_options=judge_options,
        )
        if "laaj" in scorer_map:
            _check_judge(scorer_map)
        model_dtype = dtype if dtype != "auto" or cfg is None else cfg.model.dtype
        results = evaluate(
            records,
            list(prompts),
            scorer_map,
            output_dir,
            model=target["model"],
            data=_data_label(data, data_path, split, limit),
            generator=lambda: make_generator(
                target["model_path"],
                backend=chosen_backend,
                dtype=model_dtype,
                cache_implementation=rollout.cache_implementation if rollout else None,
                compile=rollout.compile if rollout else False,
                paged_options=dict(rollout.paged_options) if rollout else None,
                vllm_compile=rollout.vllm_compile if rollout else None,
                vllm_kv_cache_gib=rollout.vllm_kv_cache_gib if rollout else 1.0,
            ),
            settings=settings,
            display_name=target["display_name"],
            details={
                "backend": chosen_backend,
                "dtype": model_dtype,
                "split": split,
                "limit": limit,
                "prompt": prompt,
                "max_prompt_tokens": max_prompt_tokens,
                "response_prefix": response_prefix,
                "trained_prompt": trained_prompt,
                "trained_response_prefix": trained_prefix,
                "truncated_prompts": len(getattr(prompts, "truncated", [])),
                "model_path": target["model_path"],
            },
            progress=progress,
        )
        close = [getattr(s, "close", None) for s in scorer_map.values()]
        for fn in close:
            if fn is not None:
                fn()
        return results, output_dir


@contextlib.contextmanager
def writing(output_dir: Path) -> Iterator[None]:
    """Hold ``output_dir``'s lock (:class:`eapo.run_dir.DirectoryLock`) while evaluating into it: a second
    evaluation into the same directory is refused, naming the process that writes it. A directory this
    call created and left empty (the evaluation failed early) is removed again."""
    from eapo.run_dir import DirectoryBusyError, DirectoryLock

    created = not output_dir.exists()
    lock = DirectoryLock(output_dir, "eapo eval")
    try:
        lock.acquire()
    except DirectoryBusyError as error:
        raise EvalError(str(error)) from None
    try:
        yield
    finally:
        lock.release()
        if created and output_dir.is_dir() and not any(output_dir.iterdir()):
            output_dir.rmdir()
