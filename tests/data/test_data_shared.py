"""The real datasets in ../shared/data (skipped when absent): row counts from its README,
deterministic disjoint splits, field handling, and rendering through a chat template."""

from __future__ import annotations

import json

import pytest

from eapo.data import DataError, default_prompt_for, load, render_prompts


@pytest.fixture(scope="module")
def data_dir(shared_data):
    return shared_data


@pytest.mark.parametrize(
    ("name", "split", "rows"),
    [
        ("cmd", "all", 6539),
        ("cmd", "train", 6212),
        ("cmd", "dev", 327),
        ("rjua", "all", 211),
        ("rjua", "train", 169),
        ("rjua", "dev", 42),
        ("medquad", "train", 8309),
        ("medquad", "dev", 437),
        ("medquad", "all", 8746),
    ],
)
def test_row_counts_match_the_readme(data_dir, monkeypatch, name, split, rows):
    monkeypatch.setenv("EAPO_DATA_DIR", str(data_dir))
    records = load(name, split=split)
    assert len(records) == rows
    assert len(set(records.ids)) == rows
    assert records.skipped == []


@pytest.mark.parametrize("name", ["cmd", "rjua"])
def test_carved_splits_are_deterministic_and_disjoint(data_dir, name):
    path = data_dir / name
    train, dev = load(name, path, split="train"), load(name, path, split="dev")
    assert set(train.ids).isdisjoint(dev.ids)
    assert set(train.ids) | set(dev.ids) == set(load(name, path).ids)
    assert load(name, path, split="dev").ids == dev.ids  # same seed, same rows, same order
    assert load(name, path, split="dev", seed=1).ids != dev.ids


def test_medquad_files_are_disjoint(data_dir):
    train = load("medquad", data_dir / "medquad", split="train")
    dev = load("medquad", data_dir / "medquad", split="dev")
    assert set(train.ids).isdisjoint(dev.ids)


def test_paper_style_nine_to_one_fraction_split(data_dir):
    head = load("cmd", data_dir / "cmd", split=0.9)
    tail = load("cmd", data_dir / "cmd", split=(0.9, 1.0))
    assert (len(head), len(tail)) == (5885, 654)  # round(0.9 · 6539) = 5885
    assert set(head.ids).isdisjoint(tail.ids)


@pytest.mark.parametrize(
    ("name", "held_out"), [("cmd", "727 rows"), ("rjua", "213 rows"), ("medquad", "972 rows")]
)
def test_test_splits_are_held_out(data_dir, name, held_out):
    with pytest.raises(DataError, match=held_out):
        load(name, data_dir / name, split="test")


def test_cmd_fields(data_dir):
    first_line = (data_dir / "cmd" / "train.jsonl").read_text(encoding="utf-8").split("\n", 1)[0]
    raw = json.loads(first_line)
    record = load("cmd", data_dir / "cmd", limit=1)[0]
    assert record.id == raw["id"]
    assert record.question == f"{raw['title']}\n{raw['question']}"
    assert record.reference == raw["answer"]
    assert record.metadata["title"] == raw["title"]
    assert record.metadata["sub_department"] == raw["sub_department"]
    assert record.metadata["department"] == "内科"


def test_rjua_fields(data_dir):
    records = load("rjua", data_dir / "rjua")
    assert all({"context", "disease", "advice"} <= set(r.metadata) for r in records)
    assert records[0].metadata["context"].startswith("Context：")
    assert {r.id for r in records} >= {"652", "658"}  # same question, different answers: both kept


def test_real_prompts_render_through_a_chat_template(data_dir, char_tokenizer):
    from eapo.data import PROMPTS

    for name in ("cmd", "rjua", "medquad"):
        records = load(name, data_dir / name, split="dev", limit=8)
        prompt = default_prompt_for(name)
        tokenizer = char_tokenizer([*PROMPTS.values(), *(r.question for r in records)])
        # Character-level tokens: a prompt is (wrapper + instructions) + one token per question character.
        empty = render_prompts([""], tokenizer, prompt)[0]
        overhead = len(tokenizer(empty, add_special_tokens=False)["input_ids"])
        assert (
            overhead == len(empty) - 2 * len("<|im_start|>") - len("<|im_end|>") + 3
        )  # specials are 1 token
        budget = 60
        prompts = render_prompts(records, tokenizer, prompt, max_prompt_tokens=overhead + budget)
        assert prompts.truncated == [i for i, r in enumerate(records) if len(r.question) > budget]
        assert prompts.truncated  # these datasets have questions longer than 60 characters
        for record, text in zip(records, prompts, strict=True):
            assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
            assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == overhead + min(
                budget, len(record.question)
            )
            assert record.question[:budget] in text
        if name in ("cmd", "rjua"):
            assert f"患者咨询：{records[0].question[:budget]}<|im_end|>" in prompts[0]
