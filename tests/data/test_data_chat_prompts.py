"""Chat prompts (``.json``: several messages, the last holding ``{question}``): the packaged
``en_fewshot`` of the demo, custom files, rendering, truncation and the errors."""

from __future__ import annotations

import json
import logging

import pytest

from eapo.data import CHAT_PROMPTS, DataError, Record, build_messages, get_template, load, render_prompts
from eapo.data.prompts import get_messages
from eapo.rewards.format import format_ok


def test_packaged_fewshot_prompt():
    assert set(CHAT_PROMPTS) == {"en_fewshot"}
    messages = CHAT_PROMPTS["en_fewshot"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"] == "{question}"
    for tag in ("<think>", "</think>", "<advice>", "</advice>"):
        assert tag in messages[0]["content"]
    # the worked example is itself a perfectly formatted answer (the strict format reward gives it 1) ...
    assert format_ok(messages[2]["content"])
    # ... to a question that is not in the demo set (the example leaks no reference)
    assert messages[1]["content"] not in {record.question for record in load("demo", split="all")}


def test_build_messages_fills_only_the_last_message():
    messages = build_messages(Record(id="1", question="Is {this} ok?", reference="r"), "en_fewshot")
    assert messages[:-1] == CHAT_PROMPTS["en_fewshot"][:-1]
    assert messages[-1] == {"role": "user", "content": "Is {this} ok?"}
    assert get_messages("en") == [{"role": "user", "content": get_template("en")}]
    with pytest.raises(DataError, match="'en_fewshot' is a chat prompt"):
        get_template("en_fewshot")


def test_render_through_the_chat_template(char_tokenizer):
    texts = [m["content"] for m in CHAT_PROMPTS["en_fewshot"]]
    tokenizer = char_tokenizer(texts)
    (prompt,) = render_prompts(["Why?"], tokenizer, "en_fewshot")
    system, example_q, example_a, _ = texts
    assert prompt == (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{example_q}<|im_end|>\n"
        f"<|im_start|>assistant\n{example_a}<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_render_without_a_chat_template_joins_the_messages(char_tokenizer, caplog):
    tokenizer = char_tokenizer([m["content"] for m in CHAT_PROMPTS["en_fewshot"]], chat_template=None)
    with caplog.at_level(logging.WARNING, logger="eapo.data"):
        (prompt,) = render_prompts(["Why?"], tokenizer, "en_fewshot")
    assert prompt == "\n\n".join([*(m["content"] for m in CHAT_PROMPTS["en_fewshot"][:-1]), "Why?"])


def test_truncation_cuts_the_question_not_the_example(char_tokenizer):
    tokenizer = char_tokenizer([m["content"] for m in CHAT_PROMPTS["en_fewshot"]])
    (empty,) = render_prompts([""], tokenizer, "en_fewshot")
    overhead = len(tokenizer(empty, add_special_tokens=False)["input_ids"])
    prompts = render_prompts(["x" * 30 + "y" * 30], tokenizer, "en_fewshot", max_prompt_tokens=overhead + 30)
    assert prompts.truncated == [0]
    assert prompts[0] == empty.replace("user\n<|im_end|>", "user\n" + "x" * 30 + "<|im_end|>")


def _write(tmp_path, content) -> str:
    path = tmp_path / "p.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def test_custom_chat_prompt_file(tmp_path):
    path = _write(
        tmp_path, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q: {question}"}]
    )
    assert build_messages("why?", path) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q: why?"},
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"role": "user",\n "content": }]', r"p.json: chat prompt is not valid JSON \(line 2"),
        ({"role": "user", "content": "{question}"}, "must be a non-empty JSON list of messages"),
        ([{"role": "robot", "content": "{question}"}], r"message 0 must be \{\"role\": one of system, user"),
        (
            [{"role": "user", "content": "{question}"}, {"role": "assistant", "content": "A"}],
            "the last message",
        ),
        (
            [{"role": "user", "content": "no placeholder"}],
            "the last message must be the user message containing",
        ),
        (
            [{"role": "system", "content": "{question}"}, {"role": "user", "content": "{question}"}],
            "only the last message may contain",
        ),
    ],
)
def test_bad_chat_prompt_files_name_the_file(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(DataError, match=message) as error:
        build_messages("q", path)
    assert str(tmp_path / "p.json") in str(error.value)


def test_missing_chat_prompt_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="chat prompt file not found"):
        build_messages("q", str(tmp_path / "absent.json"))


def test_data_commands_show_chat_prompts():
    import typer
    from typer.testing import CliRunner

    from eapo.commands.data import register

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    runner = CliRunner()
    listed = runner.invoke(app, ["data", "list"])
    assert "prompts: cmd, cmd_en, en, rjua, rjua_en, en_fewshot (chat)" in listed.output
    shown = runner.invoke(app, ["data", "preview", "demo", "--n", "1", "--prompt", "en_fewshot"])
    assert shown.exit_code == 0, shown.output
    system, example_q, example_a, _ = (m["content"] for m in CHAT_PROMPTS["en_fewshot"])
    question = load("demo", split="all")[0].question
    expected = f"[system] {system}\n\n[user] {example_q}\n\n[assistant] {example_a}\n\n[user] {question}\n"
    assert expected in shown.output


def test_response_prefix_opens_the_answer_and_counts_towards_the_budget(char_tokenizer):
    tokenizer = char_tokenizer([m["content"] for m in CHAT_PROMPTS["en_fewshot"]] + ["<think>"])
    (plain,) = render_prompts(["Why?"], tokenizer, "en_fewshot")
    (opened,) = render_prompts(["Why?"], tokenizer, "en_fewshot", response_prefix="<think>")
    assert plain.endswith("<|im_start|>assistant\n")
    assert opened == plain + "<think>"
    # the prefix is part of the prompt's length: the question loses as many tokens as the prefix takes
    (empty,) = render_prompts([""], tokenizer, "en_fewshot")
    overhead = len(tokenizer(empty, add_special_tokens=False)["input_ids"])
    prefix_tokens = len(tokenizer("<think>", add_special_tokens=False)["input_ids"])
    (cut,) = render_prompts(
        ["x" * 30], tokenizer, "en_fewshot", max_prompt_tokens=overhead + 30, response_prefix="<think>"
    )
    assert (
        cut
        == empty.replace("user\n<|im_end|>", "user\n" + "x" * (30 - prefix_tokens) + "<|im_end|>") + "<think>"
    )
    plain_tokenizer = char_tokenizer(["Q: {question}", "<think>"], chat_template=None)
    (joined,) = render_prompts(["Why?"], plain_tokenizer, "en", response_prefix="<think>")
    assert joined.endswith("Why?<think>")
