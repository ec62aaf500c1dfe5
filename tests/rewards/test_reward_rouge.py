"""Rouge-L F1: hand-computed values, a plain dynamic-programming LCS, and rouge-score / rouge-chinese."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rouge_chinese import Rouge as RougeChinese
from rouge_score import rouge_scorer

from eapo.rewards import make_reward
from eapo.rewards.rouge import RougeL, is_mostly_cjk, lcs_length, rouge_l_f1, rouge_l_scores, tokenize


def dp_lcs(a: list | str, b: list | str) -> int:
    """The textbook O(n·m) dynamic programme."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


class _CharTokenizer:
    """rouge-score tokenizer: one token per non-whitespace character (the paper's character level)."""

    def tokenize(self, text: str) -> list[str]:
        return [c for c in text if not c.isspace()]


# -- hand-computed values ------------------------------------------------------------------------


def test_char_level_chinese_by_hand() -> None:
    # LCS("患者可能是胃炎", "可能胃炎") = "可能胃炎" = 4; P = 4/7, R = 4/4; F = 2·(4/7)·1 / (4/7 + 1) = 8/11
    assert rouge_l_scores("患者可能是胃炎", "可能胃炎", level="char") == pytest.approx(
        (4 / 7, 1.0, 8 / 11), abs=1e-15
    )
    # whitespace is dropped at char level
    assert rouge_l_f1("患者 可能是\n胃炎", "可能 胃炎", level="char") == pytest.approx(8 / 11, abs=1e-15)
    # LCS("我今天很开心", "今天我很高兴") = "今天很" = 3 of 6 each: F = 0.5
    assert rouge_l_f1("我今天很开心", "今天我很高兴", level="char") == pytest.approx(0.5, abs=1e-15)


def test_char_level_latin_by_hand() -> None:
    # LCS("abcd", "acbd") = 3 ("abd"); P = R = 3/4
    assert rouge_l_f1("abcd", "acbd", level="char") == pytest.approx(0.75, abs=1e-15)
    assert rouge_l_f1("ABCD", "acbd", level="char") == pytest.approx(0.75, abs=1e-15)  # case-folded
    assert rouge_l_f1("ABCD", "acbd", level="char", lowercase=False) == 0.0


def test_word_level_english_by_hand() -> None:
    # [the cat sat on the mat] vs [the cat is on the mat]: LCS = 5 of 6 each → F = 5/6
    assert rouge_l_f1("The cat sat on the mat.", "the cat is on the mat", level="word") == pytest.approx(
        5 / 6, abs=1e-15
    )
    # [a b c d] vs [a c]: LCS = 2, P = 1/2, R = 1 → F = 2/3
    assert rouge_l_scores("a b c d", "a, c!", level="word") == pytest.approx((0.5, 1.0, 2 / 3), abs=1e-15)
    assert rouge_l_f1("cat", "act", level="word") == 0.0
    assert rouge_l_f1("cat", "act", level="char") == pytest.approx(2 / 3, abs=1e-15)


def test_word_tokens_split_cjk_and_drop_punctuation() -> None:
    assert tokenize("CT检查: 正常, don't_worry!", "word") == [
        "ct",
        "检",
        "查",
        "正",
        "常",
        "don",
        "t",
        "worry",
    ]
    assert tokenize("a b\tc", "char") == ["a", "b", "c"]


def test_auto_level_follows_the_reference() -> None:
    assert is_mostly_cjk("可能是胃炎 OK") and not is_mostly_cjk("gastritis 胃炎") and not is_mostly_cjk("  ")
    assert rouge_l_f1("cat", "act", level="auto") == 0.0  # English reference → word level
    assert rouge_l_f1("患者可能是胃炎", "可能胃炎", level="auto") == pytest.approx(8 / 11, abs=1e-15)


@pytest.mark.parametrize("level", ["char", "word", "auto"])
def test_empty_strings_score_zero(level: str) -> None:
    assert rouge_l_f1("", "abc", level=level) == 0.0
    assert rouge_l_f1("abc", "", level=level) == 0.0
    assert rouge_l_f1("", "", level=level) == 0.0
    assert rouge_l_f1(" \n ", "abc", level=level) == 0.0
    assert rouge_l_f1("...", "abc", level="word") == 0.0  # punctuation only: no word tokens


def test_scorer_extracts_the_answer_and_keeps_none_references() -> None:
    completion = "<think>可能胃炎可能胃炎</think>\n<advice>患者可能是胃炎</advice>"
    scorer = make_reward("rouge_l")
    assert scorer.name == "rouge_l" and scorer.label == "Rouge-L F1 (char level, answer = <advice>)"
    assert scorer(None, [completion, completion], ["可能胃炎", None]) == [
        pytest.approx(8 / 11, abs=1e-15),
        None,
    ]
    whole = make_reward("rouge_l", extract="whole")
    assert whole.label == "Rouge-L F1 (char level, whole completion)"
    # whole text, tags included: "<think>" 7 + 8 + "</think>" 8 + "<advice>" 8 + 7 + "</advice>" 9 = 47
    # characters once the newline is dropped; LCS with "可能胃炎" = 4; P = 4/47, R = 1, F1 = 8/51
    assert whole(None, [completion], ["可能胃炎"]) == [pytest.approx(8 / 51, abs=1e-15)]
    with pytest.raises(ValueError, match="unknown extract mode"):
        RougeL(extract="<advice>")
    with pytest.raises(ValueError, match="needs references"):
        scorer(None, [completion], None)
    with pytest.raises(ValueError, match="unknown level"):
        RougeL(level="token")


# -- agreement with a plain DP and with the reference implementations ------------------------------

_ALPHABET = "ab cd患者胃炎，。A"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=60), st.text(alphabet=_ALPHABET, max_size=60))
def test_lcs_matches_dynamic_programme_on_strings(a: str, b: str) -> None:
    assert lcs_length(a, b) == dp_lcs(a, b)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["the", "cat", "mat", "on", "胃炎", "a"]), max_size=40),
    st.lists(st.sampled_from(["the", "cat", "mat", "on", "胃炎", "a"]), max_size=40),
)
def test_lcs_matches_dynamic_programme_on_token_lists(a: list[str], b: list[str]) -> None:
    assert lcs_length(a, b) == dp_lcs(a, b)


def test_long_lcs_matches_dynamic_programme() -> None:
    import random

    generator = random.Random(0)
    a = "".join(generator.choice("患者可能是胃炎建议复查") for _ in range(700))
    b = "".join(generator.choice("患者可能是胃炎建议复查") for _ in range(150))
    assert lcs_length(a, b) == dp_lcs(a, b)  # several 64-bit blocks in the bit-parallel LCS


_rouge_score = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_CharTokenizer())
_CHINESE = "患者可能是胃炎建议复查，。"


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=_CHINESE + " ", max_size=80), st.text(alphabet=_CHINESE + " ", max_size=80))
def test_char_f1_is_bit_identical_to_rouge_score(prediction: str, reference: str) -> None:
    expected = _rouge_score.score(reference, prediction)["rougeL"]
    assert rouge_l_scores(prediction, reference, level="char") == (
        expected.precision,
        expected.recall,
        expected.fmeasure,
    )


@settings(max_examples=150, deadline=None)
@given(
    st.text(alphabet="abc de,.!A", min_size=0, max_size=80),
    st.text(alphabet="abc de,.!A", min_size=0, max_size=80),
)
def test_word_f1_is_bit_identical_to_rouge_score_default_tokenizer(prediction: str, reference: str) -> None:
    expected = rouge_scorer.RougeScorer(["rougeL"]).score(reference, prediction)["rougeL"].fmeasure
    assert rouge_l_f1(prediction, reference, level="word") == expected


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=_CHINESE, min_size=1, max_size=60), st.text(alphabet=_CHINESE, min_size=1, max_size=60)
)
def test_char_scores_match_rouge_chinese(prediction: str, reference: str) -> None:
    got = RougeChinese(metrics=["rouge-l"]).get_scores(" ".join(prediction), " ".join(reference))[0][
        "rouge-l"
    ]
    precision, recall, f1 = rouge_l_scores(prediction, reference, level="char")
    assert (precision, recall) == (got["p"], got["r"])
    # rouge-chinese adds 1e-8 to the F denominator; with its formula on our P, R the values coincide.
    assert 2.0 * ((precision * recall) / (precision + recall + 1e-8)) == pytest.approx(got["f"], abs=1e-15)
    assert f1 == pytest.approx(got["f"], abs=2e-8)
