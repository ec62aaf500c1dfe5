"""extract_think / extract_answer: the shared readers of the paper's <think>/<advice> structure."""

from __future__ import annotations

import pytest

from eapo.rewards import as_text, extract_answer, extract_think, prompt_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think> reasoning </think><advice>a</advice>", "reasoning"),
        ("reasoning</think>\n<advice>a</advice>", "reasoning"),  # template opened <think> in the prompt
        ("<think>cut off mid-thought", "cut off mid-thought"),
        ("<think>first</think><think>second</think>", "first"),
        ("<think>  </think><advice>a</advice>", None),
        ("no tags at all", None),
        ("", None),
    ],
)
def test_extract_think(text: str, expected: str | None) -> None:
    assert extract_think(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>r</think>\n<advice> take rest </advice>", "take rest"),
        ("<think>r</think>\n<advice> truncated advice", "truncated advice"),
        ("<think>r</think>\n plain answer ", "plain answer"),
        ("  just text  ", "just text"),
        # an <advice> mentioned inside the reasoning is not the answer
        ("<think>I will write <advice>x</advice> later</think> final", "final"),
        ("<think>r</think><advice></advice>", ""),
    ],
)
def test_extract_answer_advice(text: str, expected: str) -> None:
    assert extract_answer(text) == expected
    assert extract_answer(text, "advice") == expected


def test_extract_answer_whole_and_other_tags() -> None:
    text = "<think>r</think><answer>42</answer>"
    assert extract_answer(text, "whole") == text
    assert extract_answer(text, "answer") == "42"
    with pytest.raises(ValueError, match="unknown extract mode"):
        extract_answer(text, "<advice>")


def test_text_coercion_of_chat_messages() -> None:
    assert as_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"
    assert as_text({"role": "assistant", "content": "x"}) == "x"
    assert as_text(None) == ""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q1"},
        {"role": "user", "content": "q2"},
    ]
    assert prompt_text(messages) == "q2"
    assert prompt_text("plain") == "plain"
    with pytest.raises(TypeError, match="cannot read text"):
        as_text(3.5)
