"""The embedded demo dataset: size, schema, word counts, variety."""

from __future__ import annotations

import json
from importlib import resources

from eapo.data import load


def _rows() -> list[dict]:
    text = resources.files("eapo.data").joinpath("demo.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_demo_file_schema():
    rows = _rows()
    assert len(rows) == 66
    assert all(set(row) == {"id", "topic", "question", "answer"} for row in rows)
    assert [row["id"] for row in rows] == [f"demo-{i:03d}" for i in range(1, 67)]
    assert len({row["question"] for row in rows}) == 66
    assert len({row["answer"] for row in rows}) == 66


def test_demo_references_are_50_to_150_words():
    counts = {row["id"]: len(row["answer"].split()) for row in _rows()}
    out_of_range = {k: v for k, v in counts.items() if not 50 <= v <= 150}
    assert out_of_range == {}


def test_demo_topics_are_varied():
    topics = {}
    for row in _rows():
        topics[row["topic"]] = topics.get(row["topic"], 0) + 1
    assert len(topics) >= 12
    for topic in (
        "cardiology",
        "respiratory",
        "gastroenterology",
        "endocrinology",
        "neurology",
        "infection",
        "dermatology",
        "paediatrics",
        "womens-health",
        "mental-health",
        "musculoskeletal",
        "medication-safety",
    ):
        assert topics[topic] == 5, topic


def test_demo_loads_without_a_data_dir(monkeypatch):
    monkeypatch.delenv("EAPO_DATA_DIR", raising=False)
    records = load("demo")
    assert len(records) == 66
    assert records[0].id == "demo-001" and records[0].metadata == {"topic": "cardiology"}
    train, dev = load("demo", split="train"), load("demo", split="dev")
    assert (len(train), len(dev)) == (59, 7)
    assert set(train.ids).isdisjoint(dev.ids)
    assert load("demo", split="dev").ids == dev.ids


def test_demo_takes_no_path(tmp_path):
    import pytest

    from eapo.data import DataError

    with pytest.raises(DataError, match="packaged with eapo and takes no path="):
        load("demo", path=tmp_path)
