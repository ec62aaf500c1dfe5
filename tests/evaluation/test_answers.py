"""The answer-shape summary (:mod:`eapo.evaluation.answers`) on hand-counted answers, and the controls
study's table (its README) reproduced by the library function."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from eapo.evaluation.answers import (
    DEFAULT_CLOSE_TAG,
    answer_shape,
    answer_shape_of_samples,
    close_tag_of,
    close_tag_of_label,
    close_tag_of_scorers,
    cut_at_cap,
    distinct_ngram_ratio,
    tail_after_close,
)
from eapo.rewards import make_reward

ROOT = Path(__file__).resolve().parents[2]

CLEAN = "<advice>drink water</advice>"  # 28 characters, nothing after the tag
TRAILING = "<advice>rest</advice> blah blah blah blah blah"  # 21 + 25 characters: 25 after the tag
CUT = "<advice>rest and rest and rest"  # no closing tag: ran to the cap


def test_three_answers_hand_counted():
    shape = answer_shape([CLEAN, TRAILING, CUT], [False, False, True])
    assert len(CLEAN) == 28 and len(TRAILING) == 46
    assert shape["n"] == 3
    assert shape["cut_at_cap"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["no_close_tag"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["text_after_close"] == pytest.approx(1 / 3, abs=1e-15)
    assert shape["wrote_on"] == pytest.approx(1 / 3, abs=1e-15)  # 25 > 20 characters
    assert shape["chars_after_close"] == pytest.approx(25 / 3, abs=1e-15)  # (0 + 25 + 0) / 3
    assert shape["share_after_close"] == pytest.approx((25 / 46) / 3, abs=1e-15)
    # CLEAN has 2 words (no 4-gram: left out); TRAILING 6 words, 4-grams (R b b b) (b b b b) (b b b b):
    # 2 unique of 3; CUT 5 words, (r a r a) (a r a r): 2 of 2
    assert shape["distinct_ngrams"] == pytest.approx((2 / 3 + 1) / 2, abs=1e-15)
    assert (shape["close_tag"], shape["split"], shape["ngram"], shape["wrote_on_chars"]) == (
        "</advice>",
        "first",
        4,
        20,
    )


def test_whitespace_after_the_tag_is_not_text_but_counts_as_characters():
    shape = answer_shape(["<advice>a</advice>\n\n", "<advice>a</advice> ok"], [False, False])
    assert shape["text_after_close"] == 0.5
    assert shape["chars_after_close"] == pytest.approx((2 + 3) / 2, abs=1e-15)
    assert shape["wrote_on"] == 0.0
    assert shape["no_close_tag"] == 0.0


def test_first_and_last_closing_tag():
    looped = "<advice>a</advice> <advice>a</advice> x"  # 18 + 21 characters
    assert tail_after_close(looped) == " <advice>a</advice> x"
    assert tail_after_close(looped, split="last") == " x"
    assert tail_after_close("no tag here") is None
    first = answer_shape([looped], [True])
    last = answer_shape([looped], [True], split="last")
    assert first["wrote_on"] == 1.0 and last["wrote_on"] == 0.0  # 21 > 20, 2 not
    assert first["chars_after_close"] == 21.0 and last["chars_after_close"] == 2.0
    assert first["share_after_close"] == pytest.approx(21 / 39, abs=1e-15)
    assert last["share_after_close"] == pytest.approx(2 / 39, abs=1e-15)
    # each result carries the other split's two figures too
    assert (first["text_after_last_close"], first["chars_after_last_close"]) == (1.0, 2.0)
    assert (last["text_after_first_close"], last["chars_after_first_close"]) == (1.0, 21.0)
    clean = answer_shape(["<advice>a</advice>  "], [False])
    assert (clean["text_after_close"], clean["text_after_last_close"], clean["chars_after_last_close"]) == (
        0.0,
        0.0,
        2.0,
    )
    with pytest.raises(ValueError, match="'first' or 'last'"):
        answer_shape([looped], [True], split="middle")


def test_distinct_ngrams_of_a_known_repetition():
    # 8 words, 5 4-grams; "the cat sat on" occurs twice: 4 unique of 5
    assert distinct_ngram_ratio("the cat sat on the cat sat on") == pytest.approx(0.8, abs=1e-15)
    assert distinct_ngram_ratio("a b c a b c", n=2) == pytest.approx(3 / 5, abs=1e-15)
    assert distinct_ngram_ratio("one two three four") == 1.0
    assert distinct_ngram_ratio("too short") is None
    assert distinct_ngram_ratio("") is None
    with pytest.raises(ValueError, match="n must be >= 1"):
        distinct_ngram_ratio("a", n=0)


def test_empty_and_mismatched_inputs():
    shape = answer_shape([], [])
    assert shape["n"] == 0
    assert all(
        shape[key] is None
        for key in (
            "cut_at_cap",
            "no_close_tag",
            "text_after_close",
            "wrote_on",
            "chars_after_close",
            "share_after_close",
            "distinct_ngrams",
        )
    )
    with pytest.raises(ValueError, match="one flag per text"):
        answer_shape(["a"], [])
    with pytest.raises(ValueError, match="close_tag"):
        answer_shape(["a"], [False], close_tag="")
    assert answer_shape([""], [True])["share_after_close"] == 0.0  # an empty answer: no characters after


def test_cut_at_the_cap_reads_stop_reason():
    assert cut_at_cap({"stop_reason": "cap", "finished": False})
    assert not cut_at_cap({"stop_reason": "string", "finished": True})
    assert not cut_at_cap({"stop_reason": "eos"})
    samples = [
        {"completion": CLEAN, "finished": True, "stop_reason": "eos"},
        {"completion": TRAILING, "finished": True, "stop_reason": "string"},
        {"completion": CUT, "finished": False, "stop_reason": "cap"},
    ]
    assert answer_shape_of_samples(samples) == answer_shape([CLEAN, TRAILING, CUT], [False, False, True])


def test_a_sample_without_stop_reason_is_a_clear_error():
    """Samples written before eapo eval recorded stop_reason are not read by ``finished`` (issue 48)."""
    with pytest.raises(
        ValueError, match=r"sample 'q1' #2 has no stop_reason: written before .* fresh --output-dir"
    ):
        cut_at_cap({"id": "q1", "sample": 2, "completion": CUT, "finished": False})


def test_the_closing_tag_comes_from_the_format_rewards_tags():
    assert close_tag_of(("think", "advice")) == DEFAULT_CLOSE_TAG == "</advice>"
    assert close_tag_of(["reasoning", "answer"]) == "</answer>"
    with pytest.raises(ValueError, match="at least one tag"):
        close_tag_of(())
    answer = make_reward("format", tags=["reasoning", "answer"], prefix="<reasoning>")
    assert close_tag_of_scorers({"rouge_l": make_reward("rouge_l"), "format": answer}) == "</answer>"
    assert close_tag_of_scorers({"rouge_l": make_reward("rouge_l")}) == "</advice>"  # no format scorer
    # results.json records the format scorer's label, which names its tags
    assert close_tag_of_label(answer.label) == "</answer>"
    assert close_tag_of_label(make_reward("format", strict=True).label) == "</advice>"
    assert close_tag_of_label(
        "format (<think> then <advice>; present in order, non-empty; after '<think>')"
    ) == ("</advice>")
    assert close_tag_of_label(None) == close_tag_of_label("Rouge-L F1") == "</advice>"
    shape = answer_shape(["<answer>x</answer> and more and more and more"], [False], close_tag="</answer>")
    assert shape["wrote_on"] == 1.0 and shape["close_tag"] == "</answer>"


def test_the_controls_studys_table_is_reproduced():
    """docs/results/study-cpu-controls/answers.py calls the library function and prints the README's table."""
    study = ROOT / "docs" / "results" / "study-cpu-controls"
    script = runpy.run_path(str(study / "answers.py"))
    readme = (study / "README.md").read_text(encoding="utf-8").splitlines()
    start = readme.index(
        "  | Configuration | Answers | Cut at the cap | Wrote on after `</advice>` | Characters after it "
        "| Distinct 4-grams |"
    )
    quoted = [line.removeprefix("  ") for line in readme[start : start + 10]]
    assert script["table"]().splitlines() == quoted
