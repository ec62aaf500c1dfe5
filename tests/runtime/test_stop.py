"""Stop strings: one rule (eapo.runtime.stop), and every backend's cutting code follows it.

The scripted vocabulary below has tokens that straddle the stop string ``</advice>``: ``"ice>\\n"``
completes it and writes a newline past it, ``"</advice>"`` is one whole token. The rule: the token that
completes the stop string is kept (trained, counted in the length), the text ends exactly at the end of
the stop string, everything after that token is dropped. The same row goes through the code each
backend uses: :func:`eapo.runtime.stop.end_completion` (the TRL trainer on every backend, and model.generate
/ continuous batching in eapo eval through TransformersGenerator._completion) and VLLMGenerator._completion
(vLLM stopped at the string itself and returned the straddling token).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eapo.runtime.generate import TransformersGenerator, VLLMGenerator
from eapo.runtime.stop import (
    check_stops,
    cut_text,
    end_completion,
    first_stop,
    stop_reason,
    stop_token_count,
)

EOS = 0
VOCAB = {
    EOS: "",
    1: "<advice>",
    2: "Rest",
    3: " well.",
    4: "</adv",
    5: "ice>\n",
    6: "more",
    7: "</advice>",
    8: "x",
}
STOPS = ["</advice>"]


def decode(ids) -> str:
    return "".join(VOCAB[i] for i in ids if i != EOS)


class ScriptedTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return decode(ids)


def test_the_first_stop_string_ends_first_and_the_longer_wins_a_tie():
    assert first_stop("a</advice>b###", ["###", "</advice>"]) == (10, "</advice>")
    assert first_stop("ab", ["###"]) is None
    assert first_stop("x</a>", ["a>", "</a>"]) == (5, "</a>")  # same end: the longer match
    assert cut_text("<advice>ok</advice>\nmore", STOPS) == ("<advice>ok</advice>", True)
    assert cut_text("no tag here", STOPS) == ("no tag here", False)


def test_the_token_that_completes_the_string_is_kept_and_what_follows_is_dropped():
    row = [1, 2, 3, 4, 5, 6, 6, EOS]  # "<advice>Rest well.</adv" + "ice>\n" + "moremore" + EOS
    assert stop_token_count(row, decode, STOPS) == 5  # "ice>\n" (the 5th token) completes it
    ids, text, reason = end_completion(row, decode, STOPS, {EOS})
    assert ids == [1, 2, 3, 4, 5]  # the straddling token stays, the EOS goes with what followed
    assert text == "<advice>Rest well.</advice>"  # its "\n" past the string does not
    assert reason == "string"


def test_rows_without_a_stop_string_end_at_eos_or_the_cap():
    assert end_completion([1, 2, 3, EOS], decode, STOPS, {EOS}) == (
        [1, 2, 3, EOS],
        "<advice>Rest well.",
        "eos",
    )
    assert end_completion([1, 2, 6, 6], decode, STOPS, {EOS}) == ([1, 2, 6, 6], "<advice>Restmoremore", "cap")
    assert end_completion([1, 2, 6], decode, (), {EOS}) == ([1, 2, 6], "<advice>Restmore", "cap")
    # no stop strings: nothing is cut even where the text holds one
    assert end_completion([1, 7, 6, EOS], decode, (), {EOS}) == (
        [1, 7, 6, EOS],
        "<advice></advice>more",
        "eos",
    )
    assert stop_reason(stopped_by_string=True, ended_with_eos=True) == "string"
    assert stop_reason(stopped_by_string=False, ended_with_eos=False) == "cap"


def test_every_backend_cuts_a_straddling_token_the_same_way():
    expected = ("<advice>Rest well.</advice>", 5, "string")
    # model.generate and continuous batching (eapo eval): the row as generate returns it, written on past
    # the string to its EOS and padded after it
    generator = TransformersGenerator.__new__(TransformersGenerator)
    generator.tokenizer, generator.eos_token_ids = ScriptedTokenizer(), [EOS]
    done = generator._completion([1, 2, 3, 4, 5, 6, 8, EOS, EOS, EOS], STOPS)
    assert (done.text, done.num_tokens, done.stop_reason, done.finished) == (*expected, True)
    # vLLM: it stopped at the string itself; its token_ids end with the straddling token
    vllm = VLLMGenerator.__new__(VLLMGenerator)
    vllm.tokenizer = ScriptedTokenizer()
    output = SimpleNamespace(token_ids=[1, 2, 3, 4, 5], finish_reason="stop", stop_reason="</advice>")
    done = vllm._completion(output, STOPS)
    assert (done.text, done.num_tokens, done.stop_reason, done.finished) == (*expected, True)
    # the TRL trainer (vLLM, generate and paged rows alike) and verl: end_completion on the raw row
    ids, text, reason = end_completion([1, 2, 3, 4, 5, 6, 8], decode, STOPS, {EOS})
    assert (text, len(ids), reason) == expected


def test_a_whole_token_stop_string_and_eos_and_cap_on_the_eval_backends():
    generator = TransformersGenerator.__new__(TransformersGenerator)
    generator.tokenizer, generator.eos_token_ids = ScriptedTokenizer(), [EOS]
    whole = generator._completion([1, 2, 7, 6, EOS], STOPS)
    assert (whole.text, whole.num_tokens, whole.stop_reason) == ("<advice>Rest</advice>", 3, "string")
    eos = generator._completion([1, 2, EOS, EOS], STOPS)
    assert (eos.text, eos.num_tokens, eos.stop_reason, eos.finished) == ("<advice>Rest", 3, "eos", True)
    cap = generator._completion([1, 2, 6], STOPS)
    assert (cap.text, cap.num_tokens, cap.stop_reason, cap.finished) == ("<advice>Restmore", 3, "cap", False)
    vllm = VLLMGenerator.__new__(VLLMGenerator)
    vllm.tokenizer = ScriptedTokenizer()
    by_eos = vllm._completion(SimpleNamespace(token_ids=[1, 2, EOS], finish_reason="stop", stop_reason=None))
    assert (by_eos.text, by_eos.num_tokens, by_eos.stop_reason) == ("<advice>Rest", 3, "eos")
    by_cap = vllm._completion(SimpleNamespace(token_ids=[1, 2, 6], finish_reason="length", stop_reason=None))
    assert (by_cap.text, by_cap.num_tokens, by_cap.stop_reason, by_cap.finished) == (
        "<advice>Restmore",
        3,
        "cap",
        False,
    )


def test_stop_strings_are_checked():
    assert check_stops(None) == ()
    assert check_stops(["</advice>", "###"]) == ("</advice>", "###")
    with pytest.raises(ValueError, match="rollout.stop must be a list of strings.*wrap it in a list"):
        check_stops("</advice>")
    with pytest.raises(ValueError, match=r"rollout.stop must hold non-empty strings, got \[''\]"):
        check_stops(["</advice>", ""])


def test_rollout_stop_in_the_config():
    from eapo.config import ConfigError, load_config

    assert load_config(None, ["rollout.stop=['</advice>']"]).rollout.stop == ["</advice>"]
    assert load_config(None).rollout.stop == []
    with pytest.raises(ConfigError, match="rollout.stop"):
        load_config(None, ["rollout.stop=['']"])
    with pytest.raises(ConfigError, match="logging.rollouts"):
        load_config(None, ["logging.rollouts=-1"])
