"""The composite reward Σ α_k r_k: NaN-aware combination, metric keys, the registry."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eapo.rewards import REWARD_COMPONENTS, CompositeResult, combine, make_composite, make_reward, summarize
from eapo.rewards.composite import CompositeReward
from eapo.testing import Fault, JudgeServer

GOOD = "<think>可能是胃炎</think><advice>患者可能是胃炎</advice>"
BAD = "患者可能是胃炎"


class Constant:
    """A reward returning fixed scores, to pin the combination arithmetic."""

    def __init__(self, name: str, scores: list[float | None]) -> None:
        self.name = name
        self.label = f"constant {name}"
        self.scores = scores

    def __call__(self, prompts, completions, references, **kwargs) -> list[float | None]:
        return list(self.scores)


def test_combine_by_default_leaves_a_partly_scored_sample_unscorable() -> None:
    components = {"a": [1.0, None, None, 1.0], "b": [0.5, 0.5, None, None], "zero": [None, 0.0, 1.0, 1.0]}
    weights = {"a": 0.5, "b": 0.5, "zero": 0.0}
    # sample 0: 0.5 + 0.25 (the α = 0 component does not count, scored or not); 1, 3: a weighted
    # component is missing → no total, so no sample is scored on other criteria than its group; 2: nothing
    assert combine(components, weights) == [0.75, None, None, None]
    assert combine(components, weights, missing="unscorable") == [0.75, None, None, None]
    with pytest.raises(ValueError, match="missing='drop' is invalid; valid: unscorable, renormalize"):
        combine(components, weights, missing="drop")


def test_combine_renormalises_over_available_components_by_hand() -> None:
    components = {"a": [1.0, None, None], "b": [0.5, 0.5, None], "c": [0.0, 1.0, None]}
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    totals = combine(components, weights, missing="renormalize")
    # sample 0: 0.5·1 + 0.3·0.5 + 0.2·0 = 0.65
    # sample 1: a missing → (0.3·0.5 + 0.2·1) · (1.0 / 0.5) = 0.35 · 2 = 0.7
    # sample 2: nothing scored → None
    assert totals == [pytest.approx(0.65, abs=1e-15), pytest.approx(0.7, abs=1e-15), None]


def test_combine_keeps_the_paper_scale_when_weights_do_not_sum_to_one() -> None:
    totals = combine({"a": [1.0, None], "b": [0.5, 0.5]}, {"a": 2.0, "b": 1.0}, missing="renormalize")
    # 2·1 + 1·0.5 = 2.5; with a missing: 1·0.5 · 3/1 = 1.5
    assert totals == [pytest.approx(2.5), pytest.approx(1.5)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.floats(0, 1)), st.one_of(st.none(), st.floats(0, 1))),
        min_size=1,
        max_size=20,
    ),
    st.floats(0.01, 5),
    st.floats(0.01, 5),
)
def test_combine_properties(rows: list[tuple], alpha_a: float, alpha_b: float) -> None:
    components = {"a": [r[0] for r in rows], "b": [r[1] for r in rows]}
    weights = {"a": alpha_a, "b": alpha_b}
    totals = combine(components, weights, missing="renormalize")
    strict = combine(components, weights)  # unscorable: a total only where both scored, then the same
    for (a, b), total, strict_total in zip(rows, totals, strict, strict=True):
        assert strict_total == (total if a is not None and b is not None else None)
        if a is None and b is None:
            assert total is None
        elif a is not None and b is not None:
            assert total == pytest.approx(alpha_a * a + alpha_b * b)
        else:
            present = a if a is not None else b
            assert total == pytest.approx((alpha_a + alpha_b) * present)
        if total is not None:
            assert -1e-12 <= total <= alpha_a + alpha_b + 1e-12


@pytest.mark.parametrize("missing", ["unscorable", "renormalize"])
def test_score_reports_components_and_metric_keys(missing: str) -> None:
    reward = CompositeReward(
        {"x": 0.6, "y": 0.4},
        {"x": Constant("x", [1.0, 0.0, None, 0.5]), "y": Constant("y", [0.0, 1.0, None, None])},
        missing=missing,
    )
    result = reward.score(None, ["c"] * 4, ["r"] * 4)
    assert isinstance(result, CompositeResult)
    if missing == "unscorable":  # sample 3 lacks y: no total
        assert result.rewards == [pytest.approx(0.6), pytest.approx(0.4), None, None]
        assert (
            result.metrics["reward/mean"] == pytest.approx(0.5) and result.metrics["reward/none_frac"] == 0.5
        )
        assert result.metrics["reward/std"] == pytest.approx(0.1)
        assert result.metrics["reward/y/none_frac"] == 0.5
        reward.close()
        return
    assert result.rewards == [pytest.approx(0.6), pytest.approx(0.4), None, pytest.approx(0.5)]
    assert result.components == {"x": [1.0, 0.0, None, 0.5], "y": [0.0, 1.0, None, None]}
    metrics = result.metrics
    assert metrics["reward/x/mean"] == pytest.approx(0.5)
    assert metrics["reward/x/std"] == pytest.approx(math.sqrt(((0.5**2) * 2 + 0) / 3))
    assert metrics["reward/x/none_frac"] == 0.25
    assert (
        metrics["reward/y/mean"] == 0.5
        and metrics["reward/y/std"] == 0.5
        and metrics["reward/y/none_frac"] == 0.5
    )
    assert metrics["reward/mean"] == pytest.approx(0.5) and metrics["reward/none_frac"] == 0.25
    assert metrics["reward/std"] == pytest.approx(math.sqrt((0.01 + 0.01 + 0.0) / 3))
    assert reward(None, ["c"] * 4, ["r"] * 4) == result.rewards
    reward.close()


def test_all_none_component_reports_nan_not_a_crash() -> None:
    assert summarize([None, None]) == (
        pytest.approx(math.nan, nan_ok=True),
        pytest.approx(math.nan, nan_ok=True),
        1.0,
    )
    assert summarize([]) == (pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True), 0.0)


def test_make_composite_from_the_registry() -> None:
    assert set(REWARD_COMPONENTS) == {"format", "rouge_l", "reranker", "llm_judge", "overlong", "repetition"}
    reward = make_composite({"format": 0.2, "rouge_l": 0.8}, rouge_l={"level": "char"}, parallel=False)
    result = reward.score(None, [GOOD, BAD], ["可能胃炎", "可能胃炎"])
    # GOOD: format 1, Rouge-L of "患者可能是胃炎" vs "可能胃炎" = 8/11; BAD: format 0, whole text = the same answer
    assert result.components["format"] == [1.0, 0.0]
    assert result.components["rouge_l"] == [pytest.approx(8 / 11), pytest.approx(8 / 11)]
    assert result.rewards == [pytest.approx(0.2 + 0.8 * 8 / 11), pytest.approx(0.8 * 8 / 11)]
    assert "0.2·format" in reward.label and "Rouge-L" in reward.label


def test_zero_weight_components_are_logged_but_not_summed() -> None:
    reward = make_composite({"format": 1.0, "rouge_l": 0.0})
    result = reward.score(None, [GOOD], ["完全不同"])
    assert result.rewards == [1.0]
    assert "reward/rouge_l/mean" in result.metrics
    reward.close()


def test_composite_validation_messages() -> None:
    with pytest.raises(ValueError, match="unknown reward component 'bleu'"):
        make_composite({"bleu": 1.0})
    with pytest.raises(ValueError, match="finite number >= 0"):
        make_composite({"format": -1.0})
    with pytest.raises(ValueError, match="at least one reward weight must be > 0"):
        make_composite({"format": 0.0})
    with pytest.raises(ValueError, match="options given for \\['rouge_l'\\]"):
        make_composite({"format": 1.0}, rouge_l={"level": "char"})
    with pytest.raises(
        ValueError,
        match="does not take option\\(s\\) \\['levle'\\]; it accepts \\['level', 'extract', 'lowercase'\\]",
    ):
        make_composite({"rouge_l": 1.0}, rouge_l={"levle": "char"})
    with pytest.raises(ValueError, match="unknown reward component"):
        make_reward("rouge")


@pytest.mark.parametrize("missing", ["unscorable", "renormalize"])
def test_composite_with_the_judge_exposes_dimension_metrics(missing: str) -> None:
    with JudgeServer(scores={"logical_coherence": 100, "medical_knowledge_accuracy": 50}) as server:
        reward = make_composite(
            {"format": 0.5, "llm_judge": 0.5},
            missing=missing,
            llm_judge={
                "base_url": server.base_url,
                "model": server.model,
                "api_key_env": None,
                "timeout": 2.0,
            },
        )
        server.inject("BROKEN", Fault.malformed(), Fault.malformed())
        try:
            result = reward.score(["q1", "BROKEN"], [GOOD, GOOD], ["ref", "ref"])
        finally:
            reward.close()
    # judge: 0.35·100 + 0.30·50 + 0.20·80 + 0.15·80 = 35 + 15 + 16 + 12 = 78 → 0.78
    assert result.components["llm_judge"] == [pytest.approx(0.78), None]
    # a failed judge call: no total (the default), or format alone rescaled to the full weight
    failed = None if missing == "unscorable" else pytest.approx(1.0)
    assert result.rewards == [pytest.approx(0.5 * 1.0 + 0.5 * 0.78), failed]
    assert result.metrics["reward/none_frac"] == (0.5 if missing == "unscorable" else 0.0)
    assert result.metrics["reward/llm_judge/none_frac"] == 0.5
    assert result.metrics["reward/llm_judge/think/logical_coherence/mean"] == 100.0
    assert result.metrics["reward/llm_judge/think/overall/mean"] == pytest.approx(78.0)
    assert result.details["llm_judge"][0]["think/medical_knowledge_accuracy"] == 50.0
