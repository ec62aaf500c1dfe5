"""Evaluation in the EAPO paper's terms: Rouge-L, Reranker, RL@k, RR@k, LAAJ and its two Avgs (``avg``
over Rouge-L, Reranker, RL@k, RR@k; ``avg_laaj`` over Rouge-L, Reranker, LAAJ), with 95%
bootstrap confidence intervals over prompts, from ``k`` samples per prompt scored by the same
reward components as training (:mod:`eapo.rewards`). Every scorer, column, Avg and table comes from
the components' registrations (:mod:`eapo.rewards.registry`), so a component registered anywhere is
evaluated and tabled like the built-in ones.

* :mod:`~eapo.evaluation.metrics` — the metric definitions and the bootstrap (pure NumPy);
* :mod:`~eapo.evaluation.settings` — :class:`EvalSettings`, what an evaluation is asked to do (shared by
  ``eapo eval``, ``run_eval`` and ``eapo sweep`` / ``eapo study``), and :func:`default_scorers`;
* :mod:`~eapo.runtime.generate` — sampling with vLLM or transformers (LoRA adapters via peft);
* :mod:`~eapo.evaluation.harness` — the resumable loop: reuse stored samples → generate → score →
  aggregate → write, with the resolved :class:`SamplingSettings`;
* :mod:`~eapo.evaluation.runner` — ``run_eval``: model / run directory / config resolution (``eapo eval``);
* :mod:`~eapo.evaluation.report` — Markdown and CSV tables in the paper's layout;
* :mod:`~eapo.evaluation.answers` — the answers' shape beside the scores: cut at the cap, text after the
  closing tag, distinct 4-grams (pure Python).

Departures from the paper: it does not state its sampling temperature or which split it scores
(its "test set"); here temperature defaults to the run's rollout temperature and the split to
``dev`` (pass ``--split test`` for the final numbers). Offline, the reranker is a bi-encoder
stand-in, and every table says so.

The names below are imported on first use (as :mod:`eapo` does), so reading
:func:`default_scorers` or :class:`EvalSettings` — the ``eapo eval`` and ``eapo sweep`` flags' defaults
— does not import torch, and ``eapo --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

#: Each exported name -> the module that defines it (imported on first use).
_LAZY = {
    "EVAL_CONFIG_FILE": "eapo.evaluation.harness",
    "RESULTS_CSV": "eapo.evaluation.harness",
    "RESULTS_FILE": "eapo.evaluation.harness",
    "RESULTS_MD": "eapo.evaluation.harness",
    "SAMPLES_FILE": "eapo.evaluation.harness",
    "EvalMismatchError": "eapo.evaluation.harness",
    "SamplingSettings": "eapo.evaluation.harness",
    "evaluate": "eapo.evaluation.harness",
    "load_samples": "eapo.evaluation.harness",
    "avg_columns": "eapo.evaluation.metrics",
    "table_columns": "eapo.evaluation.metrics",
    "metric_keys": "eapo.evaluation.metrics",
    "aggregate": "eapo.evaluation.metrics",
    "bootstrap_ci": "eapo.evaluation.metrics",
    "per_prompt_values": "eapo.evaluation.metrics",
    "EvalConfigError": "eapo.evaluation.runner",
    "EvalError": "eapo.evaluation.runner",
    "build_scorers": "eapo.evaluation.runner",
    "judge_settings": "eapo.evaluation.runner",
    "resolve_target": "eapo.evaluation.runner",
    "run_eval": "eapo.evaluation.runner",
    "default_scorers": "eapo.evaluation.settings",
    "answer_shape": "eapo.evaluation.answers",
    "answer_shape_of_samples": "eapo.evaluation.answers",
    "EvalSettings": "eapo.evaluation.settings",
}

if TYPE_CHECKING:
    from eapo.evaluation.answers import answer_shape, answer_shape_of_samples
    from eapo.evaluation.harness import (
        EVAL_CONFIG_FILE,
        RESULTS_CSV,
        RESULTS_FILE,
        RESULTS_MD,
        SAMPLES_FILE,
        EvalMismatchError,
        SamplingSettings,
        evaluate,
        load_samples,
    )
    from eapo.evaluation.metrics import (
        aggregate,
        avg_columns,
        bootstrap_ci,
        metric_keys,
        per_prompt_values,
        table_columns,
    )
    from eapo.evaluation.runner import (
        EvalConfigError,
        EvalError,
        build_scorers,
        judge_settings,
        resolve_target,
        run_eval,
    )
    from eapo.evaluation.settings import (
        EvalSettings,
        default_scorers,
    )

__all__ = [
    "EVAL_CONFIG_FILE",
    "RESULTS_CSV",
    "RESULTS_FILE",
    "RESULTS_MD",
    "SAMPLES_FILE",
    "EvalError",
    "EvalConfigError",
    "EvalMismatchError",
    "EvalSettings",
    "SamplingSettings",
    "aggregate",
    "answer_shape",
    "answer_shape_of_samples",
    "avg_columns",
    "bootstrap_ci",
    "build_scorers",
    "default_scorers",
    "evaluate",
    "judge_settings",
    "load_samples",
    "metric_keys",
    "per_prompt_values",
    "resolve_target",
    "run_eval",
    "table_columns",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eapo.evaluation' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
