"""Evaluation in the EAPO paper's terms: Rouge-L, Reranker, RL@k, RR@k, LAAJ and its two Avgs (``avg``
over Rouge-L, Reranker, RL@k, RR@k; ``avg_laaj`` over Rouge-L, Reranker, LAAJ), with 95%
bootstrap confidence intervals over prompts, from ``k`` samples per prompt scored by the same
reward components as training (:mod:`eapo.rewards`).

* :mod:`~eapo.evaluation.metrics` — the metric definitions and the bootstrap (pure NumPy);
* :mod:`~eapo.runtime.generate` — sampling with vLLM or transformers (LoRA adapters via peft);
* :mod:`~eapo.evaluation.harness` — the resumable generate → score → aggregate → write loop;
* :mod:`~eapo.evaluation.runner` — ``run_eval``: model / run directory / config resolution (``eapo eval``);
* :mod:`~eapo.evaluation.report` — Markdown and CSV tables in the paper's layout.

Departures from the paper: it does not state its sampling temperature or which split it scores
(its "test set"); here temperature defaults to the run's rollout temperature and the split to
``dev`` (pass ``--split test`` for the final numbers). Offline, the reranker is a bi-encoder
stand-in, and every table says so.
"""

from eapo.evaluation.harness import (
    EVAL_CONFIG_FILE,
    RESULTS_CSV,
    RESULTS_FILE,
    RESULTS_MD,
    SAMPLES_FILE,
    EvalMismatchError,
    EvalSettings,
    evaluate,
    load_samples,
)
from eapo.evaluation.metrics import (
    AVG_COLUMNS,
    COLUMNS,
    METRIC_KEYS,
    aggregate,
    bootstrap_ci,
    bootstrap_interval,
    per_prompt_values,
)
from eapo.evaluation.runner import (
    EvalConfigError,
    EvalError,
    build_scorers,
    judge_settings,
    resolve_target,
    run_eval,
)

__all__ = [
    "AVG_COLUMNS",
    "COLUMNS",
    "EVAL_CONFIG_FILE",
    "METRIC_KEYS",
    "RESULTS_CSV",
    "RESULTS_FILE",
    "RESULTS_MD",
    "SAMPLES_FILE",
    "EvalError",
    "EvalConfigError",
    "EvalMismatchError",
    "EvalSettings",
    "aggregate",
    "bootstrap_ci",
    "bootstrap_interval",
    "build_scorers",
    "evaluate",
    "judge_settings",
    "load_samples",
    "per_prompt_values",
    "resolve_target",
    "run_eval",
]
