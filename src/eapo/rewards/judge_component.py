"""The LLM judge as a reward component: its options from a run's configuration (``reward.judge``: the
endpoint, its key's variable, the request settings, the cache under the run directory) and its
registration (:mod:`eapo.rewards.registry`: the ``llm_judge`` training reward, evaluated as LAAJ, the
judge on the response, with its own table). The client is :mod:`eapo.rewards.judge`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from eapo.rewards.judge import LLMJudge
from eapo.rewards.registry import EvalColumn, EvalScorer, EvalTable, RewardComponent, register_reward

__all__ = ["judge_cache_dir"]


def judge_cache_dir(cache_dir: str | None, run_dir: str | os.PathLike[str] | None) -> Path | None:
    """``reward.judge.cache_dir`` as a path: absolute as given, relative under ``run_dir`` (none without one)."""
    if cache_dir is None:
        return None
    path = Path(cache_dir).expanduser()
    if path.is_absolute():
        return path
    return Path(run_dir) / path if run_dir is not None else None


def _run_options(config: Any, options: dict[str, Any], run_dir: Path | None) -> dict[str, Any]:
    """The endpoint of ``reward.judge`` (URL, model, the NAME of its key's variable), its target and
    request settings, and its cache under the run directory; explicit options win."""
    judge = config.reward.judge
    completed = {
        "base_url": judge.base_url,
        "model": judge.model,
        "api_key_env": judge.api_key_env,
        "target": judge.target,
        "concurrency": judge.concurrency,
        "timeout": judge.timeout,
        "max_retries": judge.max_retries,
        "structured_output": judge.structured_output,
        **options,
    }
    cache_dir = judge_cache_dir(judge.cache_dir, run_dir)
    if cache_dir is not None:
        completed.setdefault("cache_dir", str(cache_dir))
    return completed


register_reward(
    RewardComponent(
        name="llm_judge",
        build=LLMJudge,
        title="LLM judge",
        help="[0, 1]: the appendix LLM-as-a-Judge prompts' weighted score of the <think> reasoning "
        "(target=think), the answer (response) or both, from an OpenAI-compatible endpoint",
        default_weight=0.3,
        run_options=_run_options,
        metrics=(
            "reward/llm_judge/<target>/<dimension>/mean",
            "reward/llm_judge/<target>/overall/mean",
            "reward/llm_judge/<target>/judged/mean",
            "reward/llm_judge/injection_frac",
        ),
        evaluation=EvalScorer(
            name="laaj",
            title="LAAJ",
            endpoint=True,
            options={"target": "response"},
            columns=(EvalColumn("laaj", "LAAJ", averages=("avg_laaj",), order=5),),
            tables=(
                EvalTable(
                    avg="avg_laaj",
                    heading="## With LLM-as-a-Judge",
                    lead="With LLM-as-a-Judge: ",
                    source="the paper's per-dataset tables with LLM-as-a-Judge",
                ),
            ),
        ),
    )
)
