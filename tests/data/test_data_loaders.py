"""Loaders on small fixture files written by the tests: each loader, the options, the splits and
every bad-input case of issue 5."""

from __future__ import annotations

import json
import logging

import pytest

from eapo.data import LOADERS, DataError, DataFileNotFoundError, Record, RecordList, load

QA = [
    {"id": f"q{i}", "question": f"question {i}?", "answer": f"answer {i}.", "extra": i} for i in range(1, 21)
]


@pytest.fixture
def qa_file(write_jsonl):
    return write_jsonl("qa.jsonl", QA)


# ------------------------------------------------------------------------------ records & generic


def test_record_is_frozen_and_serialises():
    record = Record("a", "q", "r", {"k": 1})
    with pytest.raises(AttributeError):
        record.question = "other"
    assert record.to_dict() == {"id": "a", "question": "q", "reference": "r", "metadata": {"k": 1}}
    assert hash(record) == hash(Record("a", "q", "r", {"k": 2}))  # metadata is not hashed


def test_jsonl_loads_every_row_with_extras_in_metadata(qa_file):
    records = load("jsonl", path=qa_file)
    assert isinstance(records, RecordList) and isinstance(records, list)
    assert len(records) == 20
    assert records[0] == Record("q1", "question 1?", "answer 1.", {"extra": 1})
    assert records.files == [str(qa_file)] and records.skipped == [] and records.split == "all"


def test_field_mapping_and_synthesised_ids(write_jsonl):
    path = write_jsonl(
        "mapped.jsonl",
        [{"prompt": " What? ", "completion": "That.", "n": 1}, {"prompt": "Why?", "completion": "Because."}],
    )
    records = load("jsonl", path=path, question_field="prompt", reference_field="completion")
    assert [(r.id, r.question, r.reference) for r in records] == [
        ("mapped-1", "What?", "That."),  # no "id" field: <stem>-<line>; text is stripped
        ("mapped-2", "Why?", "Because."),
    ]
    assert records[0].metadata == {"n": 1}
    numbered = load(
        "jsonl",
        path=path,
        question_field="prompt",
        reference_field="completion",
        id_field="n",
        skip_bad_rows=True,
    )
    assert [r.id for r in numbered] == ["1"] and len(numbered.skipped) == 1  # explicit id_field is required


def test_id_field_none_numbers_rows(write_jsonl):
    path = write_jsonl(
        "dups.jsonl",
        [{"id": "x", "question": "a", "answer": "b"}, {"id": "x", "question": "c", "answer": "d"}],
    )
    records = load("jsonl", path=path, id_field=None)
    assert [r.id for r in records] == ["dups-1", "dups-2"]
    assert records[0].metadata == {"id": "x"}


def test_json_array_file(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(json.dumps(QA[:3]), encoding="utf-8")
    assert load("jsonl", path=path).ids == ["q1", "q2", "q3"]


def test_limit_keeps_the_first_rows(qa_file):
    assert load("jsonl", path=qa_file, limit=3).ids == ["q1", "q2", "q3"]
    assert len(load("jsonl", path=qa_file, limit=100)) == 20


def test_blank_lines_and_bom_are_tolerated(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_text("\ufeff" + json.dumps(QA[0]) + "\n\n   \n" + json.dumps(QA[1]) + "\n", encoding="utf-8")
    assert load("jsonl", path=path).ids == ["q1", "q2"]


def test_csv_loader(tmp_path):
    path = tmp_path / "qa.csv"
    path.write_text(
        'id,question,answer,source\n1,"How, exactly?","Like ""this"".",web\n2,Why?,Because.,book\n',
        encoding="utf-8",
    )
    records = load("csv", path=path)
    assert records[0] == Record("1", "How, exactly?", 'Like "this".', {"source": "web"})
    assert records.ids == ["1", "2"]


def test_parquet_loader(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "qa.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"uid": "a", "q": "Q1", "a": "A1"}, {"uid": "b", "q": "Q2", "a": "A2"}]), path
    )
    records = load("parquet", path=path, question_field="q", reference_field="a", id_field="uid")
    assert [(r.id, r.question, r.reference, r.metadata) for r in records] == [
        ("a", "Q1", "A1", {}),
        ("b", "Q2", "A2", {}),
    ]


def test_directory_of_split_files(write_jsonl, tmp_path):
    write_jsonl("ds/train.jsonl", QA[:10])
    write_jsonl("ds/valid.jsonl", QA[10:15])
    write_jsonl("ds/test.jsonl", QA[15:])
    directory = tmp_path / "ds"
    assert load("jsonl", path=directory, split="train").ids == [f"q{i}" for i in range(1, 11)]
    assert load("jsonl", path=directory, split="dev").ids == [f"q{i}" for i in range(11, 16)]
    assert load("jsonl", path=directory, split="validation").ids == [f"q{i}" for i in range(11, 16)]
    assert load("jsonl", path=directory, split="test").ids == [f"q{i}" for i in range(16, 21)]
    assert load("jsonl", path=directory).ids == [f"q{i}" for i in range(1, 21)]


def test_ambiguous_dev_files_are_an_error(write_jsonl, tmp_path):
    write_jsonl("ds/train.jsonl", QA[:2])
    write_jsonl("ds/dev.jsonl", QA[2:3])
    write_jsonl("ds/valid.jsonl", QA[3:4])
    with pytest.raises(DataError, match=r"several dev files \(dev.jsonl, valid.jsonl\)"):
        load("jsonl", path=tmp_path / "ds")


# ------------------------------------------------------------------------------ splits through load


def test_carved_splits_are_deterministic_disjoint_and_complete(qa_file):
    train = load("jsonl", path=qa_file, split="train")
    dev = load("jsonl", path=qa_file, split="dev")
    assert (len(train), len(dev)) == (19, 1)  # dev_fraction 0.05 of 20
    assert set(train.ids).isdisjoint(dev.ids)
    assert sorted(train.ids + dev.ids) == sorted(r["id"] for r in QA)
    assert load("jsonl", path=qa_file, split="dev").ids == dev.ids
    assert (
        load("jsonl", path=qa_file, split="dev", dev_fraction=0.25).ids[:1] == dev.ids
    )  # same shuffle, longer head
    assert len(load("jsonl", path=qa_file, split="dev", dev_fraction=0.25)) == 5


def test_seed_changes_the_carve(qa_file):
    dev_seeds = {
        tuple(load("jsonl", path=qa_file, split="dev", dev_fraction=0.25, seed=s).ids) for s in range(5)
    }
    assert len(dev_seeds) > 1


def test_fraction_splits(qa_file):
    head = load("jsonl", path=qa_file, split=0.9)
    tail = load("jsonl", path=qa_file, split=(0.9, 1.0))
    assert (len(head), len(tail)) == (18, 2)
    assert set(head.ids).isdisjoint(tail.ids)
    assert sorted(head.ids + tail.ids) == sorted(r["id"] for r in QA)
    assert load("jsonl", path=qa_file, split="0.9:1").ids == tail.ids


def test_test_split_absent_is_an_error(qa_file):
    with pytest.raises(DataError, match=r"no test split .*split='dev'"):
        load("jsonl", path=qa_file, split="test")


# ------------------------------------------------------------------------------ cmd / rjua / medquad


CMD_ROWS = [
    {
        "id": f"cmd-im-{i:06d}",
        "department": "内科",
        "department_en": "Internal Medicine",
        "sub_department": "心血管科",
        "title": f"高血压怎么办{i}？",
        "question": f"我血压高，头晕{i}",
        "answer": f"建议低盐饮食并规律服药{i}。",
        "source_file": "x.csv",
        "source_row": i,
        "split": "train",
    }
    for i in range(1, 41)
]


def test_cmd_question_is_title_then_question(write_jsonl, tmp_path):
    write_jsonl("cmd/train.jsonl", CMD_ROWS)
    records = load("cmd", path=tmp_path / "cmd")
    first = records[0]
    assert first.question == "高血压怎么办1？\n我血压高，头晕1"
    assert first.reference == "建议低盐饮食并规律服药1。"
    assert first.metadata["title"] == "高血压怎么办1？"
    assert first.metadata["sub_department"] == "心血管科" and first.metadata["department"] == "内科"
    assert load("cmd", path=tmp_path / "cmd", include_title=False)[0].question == "我血压高，头晕1"
    train, dev = (
        load("cmd", path=tmp_path / "cmd", split="train"),
        load("cmd", path=tmp_path / "cmd", split="dev"),
    )
    assert (len(train), len(dev)) == (38, 2) and set(train.ids).isdisjoint(dev.ids)


def test_cmd_title_not_repeated(write_jsonl):
    path = write_jsonl("c.jsonl", [{"id": "1", "title": "胃痛", "question": "胃痛怎么办", "answer": "就医"}])
    assert load("cmd", path=path)[0].question == "胃痛怎么办"


def test_cmd_reads_the_original_gb18030_csv(tmp_path):
    path = tmp_path / "样例_内科.csv"
    text = "department,title,ask,answer\n心血管科,高血压怎么办？,我血压高,低盐饮食\n肝病科,乙肝能治吗,体检发现乙肝,抗病毒治疗\n"
    path.write_bytes(text.encode("gb18030"))
    records = load("cmd", path=path, encoding="gb18030")
    assert [(r.id, r.question, r.reference) for r in records] == [
        ("样例_内科-2", "高血压怎么办？\n我血压高", "低盐饮食"),
        ("样例_内科-3", "乙肝能治吗\n体检发现乙肝", "抗病毒治疗"),
    ]
    assert records[0].metadata == {"sub_department": "心血管科", "title": "高血压怎么办？"}
    with pytest.raises(
        DataError, match=r"样例_内科.csv:2: cannot decode .* as utf-8; pass encoding=.*gb18030"
    ):
        load("cmd", path=path)


RJUA_ROWS = [
    {
        "id": str(i),
        "question": f"尿频尿急{i}",
        "answer": f"考虑膀胱炎{i}",
        "disease": "膀胱炎",
        "advice": "抗感染",
        "context": "Context：…",
        "split": "valid",
    }
    for i in range(1, 11)
]


def test_rjua_without_train_carves_from_valid(write_jsonl, tmp_path, caplog):
    write_jsonl("rjua/valid.jsonl", RJUA_ROWS)
    with caplog.at_level(logging.WARNING, logger="eapo.data"):
        train = load("rjua", path=tmp_path / "rjua", split="train")
    assert "seeded slices of the official valid split" in caplog.text
    dev = load("rjua", path=tmp_path / "rjua", split="dev")
    assert (len(train), len(dev)) == (8, 2)  # dev_fraction 0.2
    assert set(train.ids).isdisjoint(dev.ids)
    record = load("rjua", path=tmp_path / "rjua", limit=1)[0]
    assert record.metadata == {
        "disease": "膀胱炎",
        "advice": "抗感染",
        "context": "Context：…",
        "split": "valid",
    }


def test_rjua_with_official_train_uses_valid_as_dev(write_jsonl, tmp_path):
    write_jsonl("rjua/train.jsonl", RJUA_ROWS[:6])
    write_jsonl("rjua/valid.jsonl", RJUA_ROWS[6:])
    assert load("rjua", path=tmp_path / "rjua", split="train").ids == ["1", "2", "3", "4", "5", "6"]
    assert load("rjua", path=tmp_path / "rjua", split="dev").ids == ["7", "8", "9", "10"]


def test_medquad_uses_its_files(write_jsonl, tmp_path):
    rows = [
        {
            "id": f"GHR-{i}",
            "source": "GHR",
            "qtype": "frequency",
            "focus": "x",
            "question": f"Q{i} ?",
            "answer": f"A{i}",
        }
        for i in range(6)
    ]
    write_jsonl("medquad/train.jsonl", rows[:4])
    write_jsonl("medquad/dev.jsonl", rows[4:])
    assert load("medquad", path=tmp_path / "medquad", split="train").ids == [
        "GHR-0",
        "GHR-1",
        "GHR-2",
        "GHR-3",
    ]
    dev = load("medquad", path=tmp_path / "medquad", split="dev")
    assert dev.ids == ["GHR-4", "GHR-5"]
    assert dev[0].metadata == {"source": "GHR", "qtype": "frequency", "focus": "x"}


def test_builtin_loaders_read_eapo_data_dir(write_jsonl, tmp_path, monkeypatch):
    write_jsonl("data/medquad/train.jsonl", [{"id": "a", "question": "q", "answer": "r"}])
    monkeypatch.setenv("EAPO_DATA_DIR", str(tmp_path / "data"))
    assert load("medquad").ids == ["a"]


# ------------------------------------------------------------------------------ hf


def test_hf_loader_reads_a_local_dataset_folder(write_jsonl, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    write_jsonl("hfdata/train.jsonl", QA[:6])
    write_jsonl("hfdata/test.jsonl", QA[6:8])
    cache = str(tmp_path / "cache")
    folder = str(tmp_path / "hfdata")
    assert load(f"hf:{folder}", cache_dir=cache, split="test").ids == ["q7", "q8"]
    records = load("hf", path=folder, cache_dir=cache, split="train", dev_fraction=0.5)
    dev = load("hf", path=folder, cache_dir=cache, split="dev", dev_fraction=0.5)
    assert len(records) == 3 and len(dev) == 3 and set(records.ids).isdisjoint(dev.ids)
    assert records.files == [f"{folder}[train]", f"{folder}[test]"]
    assert records[0].metadata.keys() == {"extra"}


def test_hf_loader_errors(monkeypatch):
    import datasets

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'org/name' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(DataError, match=r"could not load dataset 'org/name'.*HF_DATASETS_OFFLINE"):
        load("hf:org/name")
    with pytest.raises(DataError, match="needs a dataset name"):
        load("hf")
    with pytest.raises(DataError, match="not both"):
        load("hf:org/name", path="other")


# ------------------------------------------------------------------------------ bad input


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataFileNotFoundError, match=f"no such file or directory: {missing}") as caught:
        load("jsonl", path=missing)
    assert isinstance(caught.value, FileNotFoundError)


def test_generic_loader_needs_a_path():
    with pytest.raises(DataError, match="loader 'csv' needs path="):
        load("csv")


def test_malformed_json_line_names_file_and_line(write_jsonl):
    path = write_jsonl("bad.jsonl", [QA[0], QA[1], '{"id": "q3", "question": "broken', QA[3]])
    with pytest.raises(DataError, match=rf"{path}:3: malformed JSON .*skip_bad_rows=True"):
        load("jsonl", path=path)


def test_skip_bad_rows_skips_logs_and_counts(write_jsonl, caplog):
    path = write_jsonl(
        "bad.jsonl", [QA[0], "not json", '["a list"]', {"id": "e", "question": "", "answer": "x"}, QA[1]]
    )
    with caplog.at_level(logging.WARNING, logger="eapo.data"):
        records = load("jsonl", path=path, skip_bad_rows=True)
    assert records.ids == ["q1", "q2"]
    assert len(records.skipped) == 3
    assert records.skipped[0].startswith(f"{path}:2: malformed JSON")
    assert records.skipped[1] == f"{path}:3: expected a JSON object, got list"
    assert records.skipped[2] == f"{path}:4: required field 'question' is empty"
    assert "skipped 3 bad row(s)" in caplog.text


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"id": "x", "question": "q"},
            r"bad.jsonl:2: missing required field 'answer' \(fields: id, question\); pass reference_field=",
        ),
        (
            {"id": "x", "answer": "a"},
            r"bad.jsonl:2: missing required field 'question' .*pass question_field=",
        ),
        ({"id": "x", "question": "  ", "answer": "a"}, r"bad.jsonl:2: required field 'question' is empty"),
        ({"id": "x", "question": "q", "answer": None}, r"bad.jsonl:2: required field 'answer' is empty"),
        ({"id": "x", "question": 5, "answer": "a"}, r"bad.jsonl:2: field 'question' must be text, got int"),
        (
            {"id": "q1", "question": "q", "answer": "a"},
            r"bad.jsonl:2: duplicate id 'q1' \(first at .*bad.jsonl:1\)",
        ),
    ],
)
def test_bad_rows_name_field_and_line(write_jsonl, row, message):
    path = write_jsonl("bad.jsonl", [QA[0], row])
    with pytest.raises(DataError, match=message):
        load("jsonl", path=path)


def test_undecodable_bytes_suggest_encoding(tmp_path):
    path = tmp_path / "gbk.jsonl"
    path.write_bytes(
        b'{"id": "1", "question": "q", "answer": "a"}\n'
        + json.dumps({"id": "2", "question": "头痛", "answer": "休息"}, ensure_ascii=False).encode("gb18030")
        + b"\n"
    )
    with pytest.raises(DataError, match=r"gbk.jsonl:2: cannot decode .* as utf-8; pass encoding="):
        load("jsonl", path=path)
    assert load("jsonl", path=path, encoding="gb18030")[1].question == "头痛"


def test_unknown_encoding(qa_file):
    with pytest.raises(DataError, match="unknown encoding 'latin-99'"):
        load("jsonl", path=qa_file, encoding="latin-99")


def test_csv_errors(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,question,reply\n1,q,a\n", encoding="utf-8")
    with pytest.raises(
        DataError, match=r"bad.csv:1: CSV header has no column 'answer' \(columns: id, question, reply\)"
    ):
        load("csv", path=path)
    path.write_text("id,question,answer\n1,q,a\n2,q,a,surplus\n3,,a\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.csv:3: 4 values for 3 columns"):
        load("csv", path=path)
    records = load("csv", path=path, skip_bad_rows=True)
    assert records.ids == ["1"] and records.skipped[1] == f"{path}:4: required field 'question' is empty"
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty CSV file"):
        load("csv", path=empty)


def test_wrong_file_type_for_loader(qa_file):
    with pytest.raises(DataError, match=r"is not a .csv file; use the loader for its type"):
        load("csv", path=qa_file)


def test_unknown_loader_lists_the_known_ones():
    with pytest.raises(
        DataError,
        match=r"unknown dataset loader 'cmdx'; known: cmd, rjua, medquad, jsonl, csv, parquet, hf, demo",
    ):
        load("cmdx")
    with pytest.raises(DataError, match=r"load\('jsonl', path='my.jsonl'\)"):
        load("my.jsonl")
    assert set(LOADERS) == {"cmd", "rjua", "medquad", "jsonl", "csv", "parquet", "hf", "demo"}


def test_unknown_and_invalid_options(qa_file):
    with pytest.raises(DataError, match=r"loader 'jsonl' does not take \['question_feild'\]; it accepts"):
        load("jsonl", path=qa_file, question_feild="q")
    with pytest.raises(DataError, match="include_title"):
        load("jsonl", path=qa_file, include_title=False)  # cmd-only option
    with pytest.raises(DataError, match="limit must be a positive integer"):
        load("jsonl", path=qa_file, limit=0)
    with pytest.raises(DataError, match="dev_fraction must be a number in"):
        load("jsonl", path=qa_file, dev_fraction=1.0)
    with pytest.raises(DataError, match="seed must be an integer"):
        load("jsonl", path=qa_file, seed="0")
    with pytest.raises(DataError, match="unknown split 'training'"):
        load("jsonl", path=qa_file, split="training")
    with pytest.raises(DataError, match="question_field and reference_field are both"):
        load("jsonl", path=qa_file, question_field="answer")


def test_missing_data_dir_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("EAPO_DATA_DIR", str(tmp_path))
    with pytest.raises(
        DataFileNotFoundError,
        match=rf"dataset directory {tmp_path / 'cmd'} does not exist \(EAPO_DATA_DIR={tmp_path}\); set EAPO_DATA_DIR",
    ):
        load("cmd")
    monkeypatch.delenv("EAPO_DATA_DIR")
    with pytest.raises(
        DataFileNotFoundError,
        match="no path= given and EAPO_DATA_DIR is not set; set EAPO_DATA_DIR to the folder",
    ):
        load("rjua")


def test_empty_dataset_directory(tmp_path):
    (tmp_path / "medquad").mkdir()
    with pytest.raises(
        DataFileNotFoundError, match=r"no split files in .*medquad \(looked for train.jsonl, dev.jsonl"
    ):
        load("medquad", path=tmp_path / "medquad")
