"""A reward component that lives outside eapo: importing this module registers it, and nothing under
``src/`` names it. ``test_registered_component.py`` checks that it is then configured, scored, evaluated,
tabled, plotted and summarised like a built-in component."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eapo.rewards import (
    EvalColumn,
    EvalScorer,
    EvalTable,
    RewardComponent,
    ScorerSetting,
    as_text,
    register_reward,
)


class KeywordReward:
    """1.0 when the completion holds ``keyword`` (case-insensitive), else 0.0; ``None`` for an empty one."""

    name = "keyword"

    def __init__(self, keyword: str = "water") -> None:
        self.keyword = keyword.lower()
        self.label = f"keyword ({keyword!r} present)"
        self.__name__ = self.name

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]:
        texts = [as_text(completion).lower() for completion in completions]
        return [None if not text else float(self.keyword in text) for text in texts]


def _run_options(config: Any, options: dict[str, Any], run_dir: Path | None) -> dict[str, Any]:
    """The keyword defaults to the first word of the run's data name (an explicit one wins)."""
    return {"keyword": config.data.name.split("-")[0], **options}


COMPONENT = register_reward(
    RewardComponent(
        name="keyword",
        build=KeywordReward,
        title="Keyword",
        help="{0, 1}: the completion holds the keyword",
        light=True,
        run_options=_run_options,
        metrics=(),
        panels=(("reward/keyword/mean", "Keyword share"),),
        evaluation=EvalScorer(
            settings=(ScorerSetting("keyword", "keyword", "The keyword an evaluation looks for."),),
            columns=(
                EvalColumn("keyword", "Keyword", averages=("avg", "avg_keyword"), strict=True, order=4.5),
                EvalColumn("kw_at_k", "KW@{k}", per_prompt="best", averages=("avg_keyword",), order=6),
            ),
            tables=(
                EvalTable(
                    avg="avg_keyword",
                    heading="## With the keyword",
                    lead="With the keyword: ",
                    source="a test's table",
                ),
            ),
        ),
    )
)
