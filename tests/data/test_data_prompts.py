"""Prompt templates, chat messages and rendering through a real chat template (a tiny
character-level tokenizer: one token per character, so token counts are hand-checkable)."""

from __future__ import annotations

import logging

import pytest

from eapo.data import (
    PROMPTS,
    DataError,
    DataFileNotFoundError,
    Record,
    build_messages,
    default_prompt_for,
    get_template,
    render_prompts,
)

PAPER_RJUA_EN = (
    "You are an expert physician with comprehensive clinical expertise in Chinese urology and andrology.\n"
    "Please read the patient's consultation carefully and respond according to the following steps:\n"
    "1. Perform clinical diagnostic reasoning within the <think> and </think> tags. The reasoning should "
    "encompass information acquisition and integration, disease hypothesis generation, hypothesis verification "
    "and exclusion, and clinical reasoning strategy.\n"
    "2. Provide the diagnostic conclusion together with recommendations for further diagnostic workup or "
    "treatment within the <advice> and </advice> tags.\n"
    "\n"
    "Patient consultation: {question}"
)


def test_registry_names_and_placeholders():
    assert set(PROMPTS) == {"rjua", "cmd", "rjua_en", "cmd_en", "en"}
    for name, template in PROMPTS.items():
        assert template.count("{question}") == 1, name
        assert template.endswith("{question}"), name
        for tag in ("<think>", "</think>", "<advice>", "</advice>"):
            assert tag in template, (name, tag)


def test_english_paper_prompts_are_verbatim():
    assert PROMPTS["rjua_en"] == PAPER_RJUA_EN
    assert PROMPTS["cmd_en"] == PAPER_RJUA_EN.replace(
        "in Chinese urology and andrology", "across all medical specialties in China"
    )


def test_chinese_prompts_render_the_paper_text():
    rjua, cmd = PROMPTS["rjua"], PROMPTS["cmd"]
    assert rjua.startswith("你是一名在中国泌尿外科和男科领域具有全面临床专业知识的专家医生。")
    assert cmd.startswith("你是一名在中国各个医学专科均具有全面临床专业知识的专家医生。")
    for template in (rjua, cmd):
        assert "1. 在<think>和</think>标签内进行临床诊断推理" in template
        assert "2. 在<advice>和</advice>标签内给出诊断结论" in template
        assert template.endswith("\n\n患者咨询：{question}")
    # Same instructions after the persona line.
    assert rjua.split("\n", 1)[1] == cmd.split("\n", 1)[1]


def test_default_prompt_for():
    assert default_prompt_for("cmd") == "cmd"
    assert default_prompt_for("rjua") == "rjua"
    for name in ("medquad", "demo", "jsonl", "csv", "parquet", "hf", "hf:org/data"):
        assert default_prompt_for(name) == "en"
    with pytest.raises(DataError, match="unknown dataset loader 'nope'"):
        default_prompt_for("nope")


def test_build_messages():
    record = Record("1", "Is {this} ok?", "Yes.")
    messages = build_messages(record, "en")
    assert messages == [{"role": "user", "content": PROMPTS["en"].replace("{question}", "Is {this} ok?")}]
    assert build_messages("头痛怎么办", "rjua")[0]["content"].endswith("患者咨询：头痛怎么办")


def test_template_file(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("Q: {question}\nA:\n", encoding="utf-8")
    assert build_messages("why?", str(path)) == [{"role": "user", "content": "Q: why?\nA:"}]
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.txt: prompt template has no \{question\} placeholder"):
        get_template(str(bad))
    with pytest.raises(DataFileNotFoundError, match="prompt template file not found"):
        get_template(str(tmp_path / "missing.txt"))
    with pytest.raises(DataError, match=r"unknown prompt 'zh'; known: cmd, cmd_en, en, rjua, rjua_en"):
        get_template("zh")


def test_render_through_chat_template(char_tokenizer):
    tokenizer = char_tokenizer([*PROMPTS.values(), "头痛怎么办"])
    records = [Record("1", "头痛怎么办", "休息"), Record("2", "Why?", "Because.")]
    prompts = render_prompts(records, tokenizer, "rjua")
    assert (
        prompts[0]
        == f"<|im_start|>user\n{PROMPTS['rjua'].replace('{question}', '头痛怎么办')}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompts.truncated == [] and prompts.chat_template


def test_render_truncates_only_the_question(char_tokenizer, caplog):
    tokenizer = char_tokenizer(list(PROMPTS.values()))
    template = PROMPTS["en"]
    # Character-level tokens: the chat wrapper is <|im_start|> + "user\n" + ... + <|im_end|> + "\n" +
    # <|im_start|> + "assistant\n" = 1 + 5 + 1 + 1 + 1 + 10 = 19 tokens, plus the template minus "{question}".
    overhead = 19 + len(template) - len("{question}")
    short, long = "Short?", "x" * 50 + "y" * 50
    max_tokens = overhead + 40
    with caplog.at_level(logging.WARNING, logger="eapo.data"):
        prompts = render_prompts([short, long, long], tokenizer, "en", max_prompt_tokens=max_tokens)
    assert prompts.truncated == [1, 2]
    assert "2 of 3 prompts exceeded max_prompt_tokens" in caplog.text
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": template.replace("{question}", "x" * 40)}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prompts[1] == expected and prompts[2] == expected
    assert len(tokenizer(prompts[1], add_special_tokens=False)["input_ids"]) == max_tokens
    assert prompts[0].count("Short?") == 1  # untouched
    assert len(render_prompts([long], tokenizer, "en", max_prompt_tokens=overhead + 100).truncated) == 0


def test_render_refuses_a_budget_smaller_than_the_instructions(char_tokenizer):
    tokenizer = char_tokenizer(list(PROMPTS.values()))
    with pytest.raises(
        DataError, match=r"prompt 'en' takes \d+ tokens before any question; max_prompt_tokens=50"
    ):
        render_prompts(["a long question " * 10], tokenizer, "en", max_prompt_tokens=50)
    with pytest.raises(DataError, match="max_prompt_tokens must be a positive integer"):
        render_prompts(["q"], tokenizer, "en", max_prompt_tokens=0)


def test_render_without_chat_template_falls_back_to_plain_text(char_tokenizer, caplog):
    tokenizer = char_tokenizer(list(PROMPTS.values()), chat_template=None)
    with caplog.at_level(logging.WARNING, logger="eapo.data"):
        prompts = render_prompts(["Why?"], tokenizer, "en")
    assert list(prompts) == [PROMPTS["en"].replace("{question}", "Why?")]
    assert not prompts.chat_template
    assert "has no chat template; using the plain prompt text" in caplog.text


def test_chat_template_kwargs_are_passed(char_tokenizer):
    tokenizer = char_tokenizer(
        list(PROMPTS.values()), chat_template="{{ flag }}|{{ messages[0]['content'] }}"
    )
    prompts = render_prompts(["Q"], tokenizer, "en", chat_template_kwargs={"flag": "on"})
    assert prompts[0] == "on|" + PROMPTS["en"].replace("{question}", "Q")


def test_truncation_never_leaves_half_a_character(byte_tokenizer):
    # Byte-level tokens: each of these Chinese characters is 3 tokens, so most cuts fall mid-character.
    question = "头痛怎么办" * 20
    overhead = len(
        byte_tokenizer(
            byte_tokenizer.apply_chat_template(
                [{"role": "user", "content": PROMPTS["rjua"].replace("{question}", "")}],
                tokenize=False,
                add_generation_prompt=True,
            ),
            add_special_tokens=False,
        )["input_ids"]
    )
    for budget in (1, 2, 3, 4, 10, 29):
        prompts = render_prompts([question], byte_tokenizer, "rjua", max_prompt_tokens=overhead + budget)
        kept = prompts[0].split("患者咨询：", 1)[1].split("<|im_end|>", 1)[0]
        assert "\ufffd" not in kept
        assert question.startswith(kept)
        assert len(kept) == budget // 3  # whole characters only
        assert prompts.truncated == [0]
