"""The format reward r_fmt ∈ {0, 1}: the paper's check (tags present, in order, non-empty) by default, and
the strict mode (each tag once, nothing outside) as an option."""

from __future__ import annotations

import pytest

from eapo.rewards import make_reward
from eapo.rewards.format import FormatReward, format_ok, tags_present


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>reason</think><advice>rest</advice>", 1.0),
        ("\n <think>\nreason\n</think>\n\n<advice>\nrest\n</advice>\n", 1.0),
        ("<think>reason</think>", 0.0),  # advice missing
        ("<advice>rest</advice>", 0.0),  # think missing
        ("<think>reason<advice>rest</advice>", 0.0),  # think unclosed
        ("<think>reason</think><advice>rest", 0.0),  # advice unclosed
        ("<think>a</think><think>b</think><advice>rest</advice>", 0.0),  # duplicated
        ("<think>a</think><advice>r</advice><advice>s</advice>", 0.0),  # duplicated
        ("<think>a<advice>rest</advice></think>", 0.0),  # nested
        ("<advice>rest</advice><think>reason</think>", 0.0),  # out of order
        ("</think>reason<think><advice>rest</advice>", 0.0),  # close before open
        ("<think> </think><advice>rest</advice>", 0.0),  # empty think
        ("<think>reason</think><advice>\n\t</advice>", 0.0),  # empty advice
        ("Sure! <think>reason</think><advice>rest</advice>", 0.0),  # text outside
        ("<think>reason</think> then <advice>rest</advice>", 0.0),
        ("<think>reason</think><advice>rest</advice> bye", 0.0),
        ("<THINK>reason</THINK><advice>rest</advice>", 0.0),  # tags are case-sensitive
        ("", 0.0),
    ],
)
def test_strict_format(text: str, expected: float) -> None:
    assert make_reward("format", strict=True)(None, [text]) == [expected]


# The paper's check (strict=False, the default): tags present, in order, non-empty. Each case is
# scored by both modes: (text, lenient score, strict score).
LENIENT_CASES = [
    ("<think>reason</think><advice>rest</advice>", 1.0, 1.0),
    ("Sure! <think>reason</think><advice>rest</advice>", 1.0, 0.0),  # text before
    ("<think>reason</think> so then <advice>rest</advice>", 1.0, 0.0),  # text between
    ("<think>reason</think><advice>rest</advice> Hope this helps.", 1.0, 0.0),  # text after
    ("<think>a</think><think>b</think><advice>rest</advice>", 1.0, 0.0),  # repeated think
    ("<think>a</think><advice>r</advice><advice>s</advice>", 1.0, 0.0),  # repeated advice
    ("<think>a</think><advice>r</advice><think>again</think>", 1.0, 0.0),  # a later extra block
    ("<think>reason</think>", 0.0, 0.0),  # advice missing
    ("<advice>rest</advice>", 0.0, 0.0),  # think missing
    ("<think>reason<advice>rest</advice>", 0.0, 0.0),  # think never closed
    ("<think>reason</think><advice>rest", 0.0, 0.0),  # advice never closed (truncated)
    ("<think>a<advice>rest</advice></think>", 0.0, 0.0),  # advice only inside think
    ("<advice>rest</advice><think>reason</think>", 0.0, 0.0),  # out of order
    ("</think>reason<think><advice>rest</advice>", 0.0, 0.0),  # close before open
    ("<think> </think><advice>rest</advice>", 0.0, 0.0),  # empty think
    ("<think>reason</think><advice>\n\t</advice>", 0.0, 0.0),  # empty advice
    ("<think></think><think>b</think><advice>rest</advice>", 0.0, 0.0),  # the first think block is empty
    ("<THINK>reason</THINK><advice>rest</advice>", 0.0, 0.0),  # tags are case-sensitive
    ("", 0.0, 0.0),
]


@pytest.mark.parametrize(("text", "lenient", "strict"), LENIENT_CASES)
def test_the_papers_check_is_the_default_and_strict_is_an_option(text, lenient, strict) -> None:
    assert make_reward("format")(None, [text]) == [lenient]
    assert make_reward("format", strict=False)(None, [text]) == [lenient]
    assert tags_present(text) is (lenient == 1.0)
    assert make_reward("format", strict=True)(None, [text]) == [strict]


def test_strict_must_be_a_boolean() -> None:
    with pytest.raises(ValueError, match="strict must be true or false"):
        FormatReward(strict="no")


def test_text_outside_allowed_when_configured() -> None:
    reward = FormatReward(strict=True, allow_text_outside=True)
    assert reward(None, ["Sure! <think>r</think> so: <advice>a</advice> bye"]) == [1.0]
    # structure is still enforced, duplicates too
    assert reward(None, ["<advice>a</advice><think>r</think>"]) == [0.0]
    assert reward(None, ["<think>a</think><think>b</think><advice>r</advice>"]) == [0.0]


def test_custom_tags_prefix_and_chat_completions() -> None:
    reward = FormatReward(tags=["reasoning", "answer"])
    assert reward(None, ["<reasoning>r</reasoning><answer>42</answer>"]) == [1.0]
    assert reward(None, ["<think>r</think><advice>a</advice>"]) == [0.0]
    single = FormatReward(tags=["answer"])
    assert single(None, ["<answer>x</answer>"]) == [1.0]
    prefilled = FormatReward(prefix="<think>", strict=True)
    assert prefilled(None, ["reason</think><advice>a</advice>"]) == [1.0]
    assert prefilled(None, ["<think>reason</think><advice>a</advice>"]) == [0.0]  # now duplicated
    lenient_prefilled = FormatReward(prefix="<think>")
    assert lenient_prefilled(None, ["reason</think><advice>a</advice>"]) == [1.0]
    # "<think>" + "<think>reason</think>…": the first block holds "<think>reason", which is not blank
    assert lenient_prefilled(None, ["<think>reason</think><advice>a</advice>"]) == [1.0]
    assert lenient_prefilled(None, ["<advice>a</advice>"]) == [0.0]  # no </think>
    chat = [[{"role": "assistant", "content": "<think>r</think><advice>a</advice>"}]]
    assert make_reward("format")(None, chat) == [1.0]


def test_format_label_and_validation() -> None:
    assert FormatReward().label == "format (<think> then <advice>; present in order, non-empty)"
    # a prefix changes the scores, so it is part of the label that fingerprints stored scores
    assert FormatReward(prefix="<think>").label.endswith("non-empty; after '<think>')")
    assert (
        FormatReward(strict=True).label
        == "format (<think> then <advice>; strict: each once, in order, nothing outside)"
    )
    assert FormatReward(strict=True, allow_text_outside=True).label == (
        "format (<think> then <advice>; strict: each once, in order)"
    )
    assert format_ok("<a>x</a><b>y</b>", ("a", "b"))
    with pytest.raises(ValueError, match="plain names"):
        FormatReward(tags=["<think>"])
    with pytest.raises(ValueError, match="distinct"):
        FormatReward(tags=["think", "think"])
    with pytest.raises(ValueError, match="at least one"):
        FormatReward(tags=[])
    with pytest.raises(ValueError, match="prompts has 2 entries but completions has 1"):
        FormatReward()(["p", "q"], ["<think>r</think><advice>a</advice>"])
