"""What an evaluation is asked to do: one :class:`EvalSettings`, shared by ``eapo eval`` (which builds it
from its flags), :func:`eapo.evaluation.run_eval` (which fills what it leaves open from the run's
configuration) and ``eapo sweep`` / ``eapo study`` (which hold one for every evaluation they start,
pass it on as ``eapo eval`` flags, and reuse a ``results.json`` it :meth:`~EvalSettings.matches`).

A field left ``None`` means "the run's": the evaluated run's (or ``--config``'s) setting, else a
built-in default (see :func:`eapo.evaluation.run_eval`). What the resumable loop needs once that is
resolved — k, temperature, top_p, max_new_tokens, seed, batch size, bootstrap replicates — is
:class:`eapo.evaluation.harness.SamplingSettings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["default_scorers", "EvalSettings"]


def default_scorers() -> tuple[str, ...]:
    """The scorers ``eapo eval`` runs by default: each whose registration says so
    (:class:`eapo.rewards.EvalScorer` ``default``), those that fill the table first, in column order,
    then the others (the built-in ``rouge_l``, ``reranker``, ``format``; a judge's scorer, ``laaj``,
    is added when an endpoint is given)."""
    from eapo.rewards.registry import eval_columns, eval_scorers

    scorers = eval_scorers()
    in_table = list(dict.fromkeys(name for name, _ in eval_columns()))
    ordered = [*in_table, *(name for name in scorers if name not in in_table)]
    return tuple(name for name in ordered if scorers[name].default)


@dataclass(frozen=True)
class EvalSettings:
    """How to evaluate: the data, sampling and scoring of ``eapo eval`` (one field per flag)."""

    # --- data and prompts ------------------------------------------------------------------------
    data: str | None = None
    """Loader name (demo, rjua, cmd, medquad, jsonl, ...); None: the run's (or --config's) data."""
    data_path: str | None = None
    """Dataset file or directory; None: the run's when its data is evaluated."""
    split: str = "dev"
    """Split to evaluate: dev, test, train, all, or a fraction range."""
    limit: int | None = None
    """Evaluate at most this many prompts (None: all)."""
    prompt: str | None = None
    """Prompt template name or file; None: the run's training prompt, else the dataset's."""
    response_prefix: str | None = None
    """Text every response starts with (``""``: none); None: the run's ``data.response_prefix``."""
    max_prompt_tokens: int | None = None
    """Truncate longer questions; None: the run's ``data.max_prompt_tokens``."""

    # --- sampling --------------------------------------------------------------------------------
    k: int = 8
    """Samples per prompt (RL@k / RR@k take the best of them; the paper uses 8)."""
    temperature: float | None = None
    """Sampling temperature; None: the run's rollout temperature, else 1.0."""
    top_p: float | None = None
    """Nucleus sampling; None: the run's, else 1.0."""
    max_new_tokens: int | None = None
    """Response length cap; None: the run's ``rollout.max_completion_tokens``, else 512."""
    seed: int = 0
    """Seeds sampling and the bootstrap."""
    batch_size: int | None = None
    """Prompts per generation call; None: 64 with vLLM or paged, else 8."""
    stop: tuple[str, ...] | None = None
    """Stop strings (``()``: none); None: the run's ``rollout.stop``, else none (:mod:`eapo.runtime.stop`)."""
    backend: str = "auto"
    """Generation backend: auto, transformers, paged, vllm (:data:`eapo.runtime.generate.BACKENDS`)."""
    dtype: str = "auto"
    """Weights dtype: auto (the run's ``model.dtype``), float32, bfloat16, float16."""

    # --- scoring ---------------------------------------------------------------------------------
    scorers: tuple[str, ...] | None = None
    """Scorers (rouge_l, reranker, format, ...; laaj: see ``judge_*``); None: :func:`default_scorers`.
    A comma-separated string (the ``--scorers`` flag's form) is split."""
    scorer_settings: Mapping[str, str] = field(default_factory=dict)
    """How the scorers score, by the settings their registrations declare
    (:class:`eapo.rewards.ScorerSetting`: ``rouge_level``, ``reranker_backend``, ...): name -> value, each
    given one winning over the run's ``reward.options``; one left out (or None): the run's, else the
    component's default. A name no scorer declares, or a value it does not take, is a ValueError."""
    judge_base_url: str | None = None
    """OpenAI-compatible judge endpoint (enables LAAJ); None: the run's ``reward.judge`` when it names one."""
    judge_model: str | None = None
    """Judge model name; None: ``reward.judge.model``."""
    judge_api_key_env: str | None = None
    """Name of the variable holding the judge key (``""``: none); None: see
    :func:`eapo.evaluation.runner.judge_settings`."""
    judge: bool = True
    """False: no LAAJ, even where the run's configuration names a judge (``--no-judge``)."""
    n_resamples: int = 1000
    """Bootstrap replicates for the 95% intervals (``--bootstrap``)."""

    def __post_init__(self) -> None:
        if isinstance(self.scorers, str):
            names = tuple(name.strip() for name in self.scorers.split(",") if name.strip())
            object.__setattr__(self, "scorers", names)
        elif self.scorers is not None:
            object.__setattr__(self, "scorers", tuple(self.scorers))
        object.__setattr__(self, "scorer_settings", _checked_scorer_settings(self.scorer_settings))
        if self.stop is not None:
            from eapo.runtime.stop import check_stops

            object.__setattr__(self, "stop", check_stops(self.stop, where="--stop"))

    @property
    def scorer_names(self) -> tuple[str, ...]:
        """The scorers asked for (:func:`default_scorers` when ``scorers`` is None)."""
        return default_scorers() if self.scorers is None else self.scorers

    def cli_args(self) -> list[str]:
        """These settings as ``eapo eval`` flags (what a sweep passes to each evaluation, and records in
        ``sweep.json``): k, split, backend and seed always, every other field only when it is set."""
        args = [
            "--k",
            str(self.k),
            "--split",
            self.split,
            "--backend",
            self.backend,
            "--seed",
            str(self.seed),
        ]
        for name, flag in _OPTIONAL_FLAGS.items():
            value = getattr(self, name)
            if value is None:
                continue
            args += [flag, ",".join(value) if name == "scorers" else str(value)]
        defaults = {f.name: f.default for f in fields(self)}
        for name, value in self.scorer_settings.items():
            args += [_scorer_setting(name).flag, value]
        for name, flag in _FLAGS_OFF_DEFAULT.items():
            if getattr(self, name) != defaults[name]:
                args += [flag, str(getattr(self, name))]
        if self.stop is not None:
            args += [part for stop in self.stop for part in ("--stop", stop)] if self.stop else ["--no-stop"]
        if not self.judge:
            args.append("--no-judge")
        return args

    def matches(self, results: Mapping[str, Any], where: str | os.PathLike = "results.json") -> bool:
        """Whether an existing ``results.json`` (at ``where``, named by its errors) was produced with these
        settings (a sweep then reuses it). With stop strings asked for, a ``results.json`` without
        ``settings.stop`` (an older ``eapo eval``'s) is a ValueError."""
        settings = results.get("settings", {})
        checks = [
            results.get("k") == self.k,
            settings.get("split") == self.split,
            settings.get("limit") == self.limit,
        ]
        if self.temperature is not None:
            checks.append(settings.get("temperature") == self.temperature)
        if self.max_new_tokens is not None:
            checks.append(settings.get("max_new_tokens") == self.max_new_tokens)
        if self.stop is not None:
            if "stop" not in settings:
                raise ValueError(
                    f"{where} has no settings.stop (written by an older eapo eval, before it recorded the stop "
                    "strings); delete its directory to evaluate it again"
                )
            checks.append(list(settings["stop"]) == list(self.stop))
        from eapo.rewards.registry import eval_scorers

        labels = results.get("labels", {})
        requested = list(self.scorers or default_scorers())  # an empty list asks for the defaults here
        scorers = eval_scorers()
        if self.judge_base_url is not None:  # the scorers that call the judge's endpoint join them
            requested += [name for name, scorer in scorers.items() if scorer.endpoint]
        checks.append(all(name in labels for name in requested))
        for name, value in self.scorer_settings.items():  # a stored stand-in's are not the scores asked for
            scorer, setting = _registered_settings()[name]
            if value in setting.real and scorer in labels:
                checks.append("stand-in" not in labels[scorer])
        return all(checks)


def _registered_settings() -> dict[str, Any]:
    from eapo.rewards.registry import scorer_settings

    return scorer_settings()


def _scorer_setting(name: str) -> Any:
    return _registered_settings()[name][1]


def _checked_scorer_settings(given: Mapping[str, str | None] | None) -> dict[str, str]:
    """``scorer_settings`` as given, those set (not None) in registration order, each checked against the
    setting its scorer declares."""
    given = dict(given or {})
    registered = _registered_settings()
    unknown = [name for name in given if name not in registered]
    if unknown:
        raise ValueError(f"unknown scorer setting(s) {unknown}; valid: {', '.join(registered)}")
    checked = {}
    for name, (_, setting) in registered.items():
        if given.get(name) is not None:
            setting.check(given[name])
            checked[name] = given[name]
    return checked


#: Fields passed on as ``eapo eval`` flags when set (not None), in the order a sweep records them.
_OPTIONAL_FLAGS = {
    "limit": "--limit",
    "temperature": "--temperature",
    "max_new_tokens": "--max-new-tokens",
    "batch_size": "--batch-size",
    "scorers": "--scorers",
    "judge_base_url": "--judge-base-url",
    "judge_model": "--judge-model",
    "judge_api_key_env": "--judge-api-key-env",
    "data": "--data",
    "data_path": "--data-path",
    "prompt": "--prompt",
    "response_prefix": "--response-prefix",
    "max_prompt_tokens": "--max-prompt-tokens",
    "top_p": "--top-p",
}
#: Fields with a non-None default, passed on when they differ from it (``judge``: ``--no-judge``).
_FLAGS_OFF_DEFAULT = {"dtype": "--dtype", "n_resamples": "--bootstrap"}
