"""The format reward r_fmt ∈ {0, 1}: the paper's <think>…</think><advice>…</advice> structure."""

from __future__ import annotations

import pytest

from eapo.rewards import make_reward
from eapo.rewards.format import FormatReward, format_ok


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
def test_default_format(text: str, expected: float) -> None:
    assert make_reward("format")(None, [text]) == [expected]


def test_text_outside_allowed_when_configured() -> None:
    reward = FormatReward(allow_text_outside=True)
    assert reward(None, ["Sure! <think>r</think> so: <advice>a</advice> bye"]) == [1.0]
    # structure is still enforced
    assert reward(None, ["<advice>a</advice><think>r</think>"]) == [0.0]


def test_custom_tags_prefix_and_chat_completions() -> None:
    reward = FormatReward(tags=["reasoning", "answer"])
    assert reward(None, ["<reasoning>r</reasoning><answer>42</answer>"]) == [1.0]
    assert reward(None, ["<think>r</think><advice>a</advice>"]) == [0.0]
    single = FormatReward(tags=["answer"])
    assert single(None, ["<answer>x</answer>"]) == [1.0]
    prefilled = FormatReward(prefix="<think>")
    assert prefilled(None, ["reason</think><advice>a</advice>"]) == [1.0]
    assert prefilled(None, ["<think>reason</think><advice>a</advice>"]) == [0.0]  # now duplicated
    chat = [[{"role": "assistant", "content": "<think>r</think><advice>a</advice>"}]]
    assert make_reward("format")(None, chat) == [1.0]


def test_format_label_and_validation() -> None:
    assert FormatReward().label == "format (<think> then <advice>)"
    assert format_ok("<a>x</a><b>y</b>", ("a", "b"))
    with pytest.raises(ValueError, match="plain names"):
        FormatReward(tags=["<think>"])
    with pytest.raises(ValueError, match="distinct"):
        FormatReward(tags=["think", "think"])
    with pytest.raises(ValueError, match="at least one"):
        FormatReward(tags=[])
    with pytest.raises(ValueError, match="prompts has 2 entries but completions has 1"):
        FormatReward()(["p", "q"], ["<think>r</think><advice>a</advice>"])
