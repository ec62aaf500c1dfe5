"""``run_eval``: resolve what to evaluate (a model, a run directory, or a training config's base model),
load the data and scorers, and call :func:`eapo.evaluation.harness.evaluate`.

Each setting comes, in order, from the :class:`~eapo.evaluation.settings.EvalSettings` (``eapo eval``'s
flags), the run's ``config.yaml`` (for a run directory), the ``config`` file (a training config:
evaluate its *base* model, the table's starting point), then built-in defaults. The scorers are built
through :func:`eapo.rewards.make_reward` with the run's reward options, so evaluation scores exactly
as training rewarded. The LAAJ judge is the ``--judge-*`` arguments' endpoint, else the run's (or
config's) ``reward.judge`` when it names one; it is checked before any generation.

``run_eval`` reads in that order: :func:`resolve_target` (the model and its run) → :func:`load_inputs`
(records and prompts) → :func:`sampling_settings` → :func:`eval_scorers` → the harness.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eapo.config import ConfigError
from eapo.evaluation.harness import (
    EVAL_CONFIG_FILE,
    SamplingSettings,
    check_generation,
    evaluate,
    generation_fingerprint,
)
from eapo.evaluation.labels import run_label
from eapo.evaluation.settings import EvalSettings

logger = logging.getLogger(__name__)

__all__ = [
    "EvalError",
    "run_eval",
    "resolve_target",
    "build_scorers",
    "judge_settings",
    "eval_scorers",
]


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
    overrides: dict[str, dict[str, Any]] | None = None,
    judge_base_url: str | None = None,
    judge_model: str | None = None,
    judge_api_key_env: str | None = "OPENAI_API_KEY",
    judge_cache_dir: str | os.PathLike | None = None,
    judge_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{scorer: reward function}`` through :func:`eapo.rewards.make_reward`; the scorers are the
    components' evaluation scorers (:class:`eapo.rewards.EvalScorer`).

    ``reward_options`` (a run's, :func:`eapo.config.reward_options`) configure each component as in
    training; ``overrides`` (scorer -> options, e.g. ``--rouge-level``'s) and the scorer's own evaluation
    options win over them. A scorer that calls the judge's endpoint (``endpoint``: LAAJ, the judge on the
    response) is added when ``judge_base_url`` is given, with ``judge_options`` (timeout, retries,
    structured_output, ...) and its cache in ``judge_cache_dir``.
    """
    from eapo.rewards import make_reward, registry

    reward_options = reward_options or {}
    overrides = overrides or {}
    registered = registry.eval_scorers()
    names = list(dict.fromkeys(names))
    if judge_base_url:
        names += [name for name, scorer in registered.items() if scorer.endpoint and name not in names]
    unknown = [name for name in names if name not in registered]
    if unknown:
        raise EvalError(f"unknown scorer(s) {unknown}; valid: {', '.join(registered)}")
    scorers: dict[str, Any] = {}
    for name in names:
        scorer = registered[name]
        component = registry.scorer_component(name).name
        options = {
            key: value
            for key, value in reward_options.get(component, {}).items()
            if key not in scorer.options
        }
        options.update(overrides.get(name, {}))
        if scorer.endpoint:
            if not judge_base_url or not judge_model:
                raise EvalError(
                    f"the {name} scorer needs --judge-base-url and --judge-model (an OpenAI-compatible endpoint)"
                )
            options.update(judge_options or {})
            options.update(base_url=judge_base_url, model=judge_model, api_key_env=judge_api_key_env)
            if judge_cache_dir is not None:
                options["cache_dir"] = str(judge_cache_dir)
        options.update(scorer.options)
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
    """An unreachable judge fails before any generation (else every sample of a scorer that calls it
    waits out its retries)."""
    from eapo.rewards import registry
    from eapo.rewards.judge_transport import JudgeError

    registered = registry.eval_scorers()
    for name, scorer in scorers.items():
        if name not in registered or not registered[name].endpoint:
            continue
        try:
            scorer.check_reachable()
        except JudgeError as error:
            for other in scorers.values():
                if hasattr(other, "close"):
                    other.close()
            raise EvalError(
                f"{registered[name].title}: {error}. Start the judge (e.g. `eapo judge serve`), point "
                "--judge-base-url or reward.judge.base_url at it, or pass --no-judge"
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
    settings: EvalSettings | None = None,
    *,
    model: str | None = None,
    config: str | os.PathLike | None = None,
    output_dir: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    progress: bool = False,
) -> tuple[dict[str, Any], Path]:
    """Evaluate ``model`` (see :func:`resolve_target`) as ``settings`` ask and write ``results.json`` /
    ``results.csv`` / ``results.md`` / ``samples.jsonl``.

    Returns ``(results, output_dir)``. ``output_dir`` defaults to ``RUN_DIR/eval`` for a run directory.
    What ``settings`` leave open (None) comes from the run's or ``config``'s configuration: its data and
    prompt, its rollout's temperature, top_p and max_new_tokens (else 1.0, 1.0 and 512), its reward
    options and judge (see :func:`judge_settings`). ``overrides`` (``key=value``) apply to that
    configuration.
    """
    settings = settings or EvalSettings()
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
        inputs = load_inputs(settings, cfg, target["model_path"])
        rollout = cfg.rollout if cfg is not None else None
        backend = _choose_backend(settings.backend, rollout)
        sampling = sampling_settings(settings, rollout, backend)
        # Refuse to mix samples before loading any model (a mismatch is a clear error, not a slow one).
        check_generation(
            output_dir / EVAL_CONFIG_FILE, generation_fingerprint(target["model"], sampling.validate())
        )
        scorers = eval_scorers(settings, cfg, inputs.response_prefix, output_dir)
        dtype = settings.dtype if settings.dtype != "auto" or cfg is None else cfg.model.dtype
        results = evaluate(
            inputs.records,
            inputs.prompts,
            scorers,
            output_dir,
            model=target["model"],
            data=inputs.label,
            generator=functools.partial(_make_generator, target["model_path"], backend, dtype, rollout),
            settings=sampling,
            display_name=target["display_name"],
            details={
                "backend": backend,
                "dtype": dtype,
                "split": settings.split,
                "limit": settings.limit,
                **inputs.details,
                "model_path": target["model_path"],
            },
            progress=progress,
        )
        for scorer in scorers.values():
            if getattr(scorer, "close", None) is not None:
                scorer.close()
        return results, output_dir


@dataclass
class EvalInputs:
    """The records an evaluation scores and their rendered prompts, and how they were chosen."""

    records: list[Any]
    prompts: list[str]
    label: str
    """The data as ``results.json`` records it, e.g. ``"rjua:dev[:100]"``."""
    response_prefix: str
    """The text every prompt ends with (and the format check reads before each completion)."""
    details: dict[str, Any]
    """The prompt settings ``results.json["settings"]`` records (prompt, max_prompt_tokens, ...)."""


def load_inputs(settings: EvalSettings, cfg: Any, model_path: str) -> EvalInputs:
    """Load the data and render its prompts with ``model_path``'s tokenizer.

    The data: ``settings.data``, else the run's (``cfg``'s); the run's path and loader options go with
    the run's data. The prompt template and response prefix: ``settings``, else the run's training (kept
    on other data too: the model learnt to answer that prompt), else the dataset's default; a template
    or prefix other than the training's is warned about (:func:`prompt_drift`).
    """
    from eapo.data import DataError, default_prompt_for, load, render_prompts
    from eapo.runtime.models import load_tokenizer

    data, data_path, data_options = settings.data, settings.data_path, {}
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
    trained_prompt = trained_prefix = None
    if cfg is not None:
        trained_prompt = cfg.data.prompt or default_prompt_for(cfg.data.name)
        trained_prefix = cfg.data.response_prefix
    max_prompt_tokens = settings.max_prompt_tokens
    if max_prompt_tokens is None and cfg is not None:
        max_prompt_tokens = cfg.data.max_prompt_tokens
    try:
        prompt = settings.prompt or trained_prompt or default_prompt_for(data)
        records = load(data, data_path, split=settings.split, limit=settings.limit, **data_options)
    except (DataError, FileNotFoundError) as error:
        raise EvalError(f"data {data!r}: {error}") from error
    if not records:
        raise EvalError(
            f"data {data!r} split {settings.split!r} has no records; check --split and --data-path"
        )
    response_prefix = settings.response_prefix
    if response_prefix is None:
        response_prefix = trained_prefix or ""
    for warning in prompt_drift(prompt, response_prefix, trained_prompt, trained_prefix):
        logger.warning(warning)
    prompts = render_prompts(
        records,
        load_tokenizer(model_path),
        prompt=prompt,
        max_prompt_tokens=max_prompt_tokens,
        response_prefix=response_prefix,
    )
    return EvalInputs(
        records=records,
        prompts=list(prompts),
        label=_data_label(data, data_path, settings.split, settings.limit),
        response_prefix=response_prefix,
        details={
            "prompt": prompt,
            "max_prompt_tokens": max_prompt_tokens,
            "response_prefix": response_prefix,
            "trained_prompt": trained_prompt,
            "trained_response_prefix": trained_prefix,
            "truncated_prompts": len(getattr(prompts, "truncated", [])),
        },
    )


def _choose_backend(requested: str, rollout: Any) -> str:
    """The generation backend: ``requested``; ``auto`` follows a rollout backend the run (or config) chose
    explicitly, where that backend runs here (a run pinned to generate is evaluated with model.generate,
    one pinned to vllm with vLLM), else this device's choice."""
    from eapo.runtime.generate import choose_backend

    chosen = choose_backend(requested)
    if requested == "auto" and rollout is not None and rollout.backend != "auto":
        try:
            chosen = choose_backend(rollout.backend)
        except (ImportError, RuntimeError):
            pass  # e.g. a vLLM run evaluated on a machine without vLLM: this device's choice
    return chosen


def sampling_settings(settings: EvalSettings, rollout: Any, backend: str) -> SamplingSettings:
    """``settings``' sampling, what it leaves open taken from the run's ``rollout`` (else 1.0, 1.0, 512
    and no stop strings)
    and the batch size from the ``backend`` (64 prompts per call with vLLM or paged, else 8)."""
    temperature, top_p, max_new_tokens = settings.temperature, settings.top_p, settings.max_new_tokens
    return SamplingSettings(
        k=settings.k,
        temperature=temperature if temperature is not None else (rollout.temperature if rollout else 1.0),
        top_p=top_p if top_p is not None else (rollout.top_p if rollout else 1.0),
        max_new_tokens=max_new_tokens
        if max_new_tokens is not None
        else (rollout.max_completion_tokens if rollout else 512),
        seed=settings.seed,
        batch_size=settings.batch_size or (64 if backend in ("vllm", "paged") else 8),
        n_resamples=settings.n_resamples,
        stop=settings.stop if settings.stop is not None else tuple(rollout.stop if rollout else ()),
    )


def eval_scorers(settings: EvalSettings, cfg: Any, response_prefix: str, output_dir: Path) -> dict[str, Any]:
    """``{scorer: reward function}`` as ``settings`` ask, configured as the run's training rewarded (its
    ``reward.options``); a scorer with a ``prefix_option`` (the format check) reads ``response_prefix`` +
    completion unless the run set that option, and the ``scorer_settings`` given win (``rouge_level``: the
    Rouge-L scorer's ``level``; :class:`eapo.rewards.ScorerSetting`). A scorer that calls the judge is
    checked before any generation (:func:`_check_judge`)."""
    from eapo.config import reward_options
    from eapo.rewards import registry

    options = reward_options(cfg) if cfg is not None else {}
    overrides: dict[str, dict[str, Any]] = {}
    for name, scorer in registry.eval_scorers().items():
        component = registry.scorer_component(name).name
        option = scorer.prefix_option
        if option is not None and (cfg is None or option not in cfg.reward.options.get(component, {})):
            # the check reads prefix + completion: the prefix this evaluation's prompts end with
            options.setdefault(component, {})[option] = response_prefix
        given = {setting.option: settings.scorer_settings.get(setting.name) for setting in scorer.settings}
        overrides[name] = {key: value for key, value in given.items() if value is not None}
    judge_base_url, judge_model, judge_api_key_env, judge_options = judge_settings(
        cfg, settings.judge_base_url, settings.judge_model, settings.judge_api_key_env
    )
    scorers = build_scorers(
        settings.scorer_names,
        reward_options=options,
        overrides=overrides,
        judge_base_url=judge_base_url if settings.judge else None,
        judge_model=judge_model,
        judge_api_key_env=judge_api_key_env,
        judge_cache_dir=output_dir / "judge_cache",
        judge_options=judge_options,
    )
    _check_judge(scorers)
    return scorers


def _make_generator(model_path: str, backend: str, dtype: str, rollout: Any) -> Any:
    """The generator, with the run's rollout options (called only when something is left to generate)."""
    from eapo.runtime.generate import make_generator

    return make_generator(
        model_path,
        backend=backend,
        dtype=dtype,
        cache_implementation=rollout.cache_implementation if rollout else None,
        compile=rollout.compile if rollout else False,
        paged_options=dict(rollout.paged_options) if rollout else None,
        vllm_compile=rollout.vllm_compile if rollout else None,
        vllm_kv_cache_gib=rollout.vllm_kv_cache_gib if rollout else 1.0,
    )


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
