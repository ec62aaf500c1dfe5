"""The n-gram repetition penalty: hand-computed values, short answers, its options, TRL's call, the
composite, and text repeated after ``</advice>``."""

from __future__ import annotations

import pytest

from eapo.rewards import REWARD_COMPONENTS, make_composite, make_reward
from eapo.rewards.repetition import RepetitionPenalty, repeated_ngram_share, repetition_penalty

ANSWER = "<think>It is a mild burn.</think><advice>Cool the burn under running water.</advice>"


def test_share_of_repeated_ngrams_by_hand() -> None:
    # TRL's docstring example, on words: bigrams of "a b c d" are all distinct -> 0;
    # "e e e e e" has 4 bigrams, all (e, e): 1 - 1/4 = 0.75
    assert repeated_ngram_share(["a", "b", "c", "d"], 2) == 0.0
    assert repeated_ngram_share(["e"] * 5, 2) == 0.75
    # "a b c a b c": trigrams abc, bca, cab, abc -> 3 distinct of 4: 1 - 3/4 = 0.25
    assert repeated_ngram_share(list("abcabc"), 3) == 0.25
    assert repeated_ngram_share(["a", "b"], 3) == 0.0  # fewer tokens than n: no n-gram, no penalty
    assert repeated_ngram_share([], 1) == 0.0


def test_penalty_by_hand() -> None:
    reward = make_reward("repetition")  # n = 3, max_penalty = -1, word level, whole completion
    texts = [
        "Cool the burn under running water.",  # 6 words, 4 distinct trigrams: 0
        "go go go go go",  # 3 trigrams, all (go, go, go): 1 - 1/3 = 2/3 -> -2/3
        # 12 words "cool the burn" ×4: trigrams 10, distinct 3 (ctb, tbc, bct): 1 - 3/10 -> -0.7
        "Cool the burn. " * 4,
        "Too short",  # 2 words < n: 0.0, as TRL and open-r1
        "",
    ]
    assert reward(None, texts) == [0.0, pytest.approx(-2 / 3), pytest.approx(-0.7), 0.0, 0.0]
    # max_penalty scales: -0.5 · 0.7 = -0.35; a score of 0 is 0.0, not -0.0
    half = make_reward("repetition", max_penalty=-0.5)
    assert half(None, texts[:3]) == [0.0, pytest.approx(-1 / 3), pytest.approx(-0.35)]
    assert str(half(None, texts[:1])[0]) == "0.0"


def test_levels() -> None:
    # word level drops punctuation and case: "Burn. burn, BURN" is three times "burn" -> 1 - 1/2 with n = 2
    assert repetition_penalty("Burn. burn, BURN", ngram_size=2) == -0.5
    # char level: "abab" -> bigrams ab, ba, ab: 1 - 2/3
    assert repetition_penalty("ab ab", ngram_size=2, level="char") == pytest.approx(-1 / 3)
    # auto: CJK text is read by character, "烫伤烫伤" -> bigrams 烫伤, 伤烫, 烫伤: 1 - 2/3
    assert repetition_penalty("烫伤烫伤", ngram_size=2, level="auto") == pytest.approx(-1 / 3)
    # word level makes each CJK character a token too, so auto differs only where CJK is mixed in
    assert repetition_penalty("go go go", ngram_size=2, level="auto") == -0.5  # 1 - 1/2


def test_text_repeated_after_the_closing_tag_scores_lower() -> None:
    reward = make_reward("repetition")
    repeated = ANSWER + " Cool the burn under running water." * 3
    clean, trailing = reward(None, [ANSWER, repeated])
    # clean: 15 words "think it is a mild burn think advice cool the burn under running water advice"
    # (tags are words too), 13 trigrams, all distinct -> 0.
    # trailing: 15 + 3·6 = 33 words, 31 trigrams; new ones after the 13: (water advice cool),
    # (running water cool), (water cool the); every other one repeats -> 16 distinct: -(1 - 16/31)
    assert clean == 0.0
    assert trailing == pytest.approx(-15 / 31)
    assert trailing < clean
    # the <advice> block alone is the same in both: extract=advice cannot see the trailing text
    advice_only = make_reward("repetition", extract="advice")
    assert advice_only(None, [ANSWER, repeated]) == [0.0, 0.0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ngram_size": 0}, "ngram_size must be an int >= 1"),
        ({"ngram_size": 2.0}, "ngram_size must be an int >= 1"),
        ({"max_penalty": 0}, "max_penalty must be a finite number < 0.*weight 0"),
        ({"max_penalty": 1.0}, "max_penalty must be a finite number < 0"),
        ({"max_penalty": float("-inf")}, "max_penalty must be a finite number < 0"),
        ({"max_penalty": "-1"}, "max_penalty must be a finite number < 0"),
        ({"level": "token"}, "unknown level 'token'"),
        ({"extract": "<advice>"}, "unknown extract mode"),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_reward("repetition", **options)


def test_called_as_trl_calls_a_reward_function() -> None:
    """TRL 1.16's GRPOTrainer._calculate_rewards passes everything by keyword (chat messages here)."""
    reward = make_reward("repetition", ngram_size=2)
    completions = [
        [{"role": "assistant", "content": "a b c d"}],  # bigrams all distinct: 0
        [{"role": "assistant", "content": "e e e e e"}],  # 4 bigrams, 1 distinct: -0.75
    ]
    values = reward(
        prompts=[[{"role": "user", "content": "q"}]] * 2,
        completions=completions,
        completion_ids=[[1, 2, 3, 4], [5, 5, 5, 5, 5]],
        reference=["r", "r"],
        trainer_state=None,
        log_extra=lambda *a: None,
        log_metric=lambda *a: None,
    )
    assert values == [0.0, -0.75]
    # TRL's own, on the ids of the same completions (one id per word here), gives the same numbers
    from trl.rewards import get_repetition_penalty_reward

    assert (
        get_repetition_penalty_reward(ngram_size=2, max_penalty=-1.0)([[1, 2, 3, 4], [5, 5, 5, 5, 5]])
        == values
    )
    assert reward.__name__ == "repetition"


def test_in_a_composite() -> None:
    composite = make_composite({"format": 0.5, "repetition": 0.5}, parallel=False)
    repeated = ANSWER + " Cool the burn under running water." * 3
    result = composite.score(None, [ANSWER, repeated], None)
    penalty = result.components["repetition"][1]
    assert result.components["format"] == [1.0, 1.0]  # the lenient format check passes both
    assert result.rewards == [pytest.approx(0.5), pytest.approx(0.5 + 0.5 * penalty)]
    assert "repetition penalty (3-grams, word level, max -1, whole completion)" in composite.label


def test_registered_and_default_options() -> None:
    assert REWARD_COMPONENTS["repetition"].build is RepetitionPenalty
    reward = RepetitionPenalty()
    assert (reward.ngram_size, reward.max_penalty, reward.level, reward.extract) == (3, -1.0, "word", "whole")
