"""``eapo data export-verl`` without verl installed: the columns and values it writes.

(That verl's RLHFDataset reads the files is tested in test_verl_export.py, where verl is installed.)
"""

from __future__ import annotations

import importlib.util

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import eapo.engines.verl as plugin
from eapo.cli import app
from eapo.data import build_messages, load
from eapo.engines.verl.parquet import VERL_COLUMNS, verl_rows


def test_rows_follow_verls_layout():
    records = load("demo", split="dev", limit=2)
    rows = verl_rows(records, prompt="en", data_source="eapo/demo", split="dev")
    assert rows[1] == {
        "data_source": "eapo/demo",
        "prompt": build_messages(records[1], "en"),
        "ability": "medical_qa",
        "reward_model": {"style": "model", "ground_truth": records[1].reference},
        "extra_info": {"split": "dev", "index": 1, "id": records[1].id, "question": records[1].question},
    }


def test_rows_hold_the_questions_they_are_given_and_the_whole_one_in_extra_info():
    records = load("demo", split="dev", limit=2)
    rows = verl_rows(
        records, prompt="en", data_source="eapo/demo", split="dev", questions=["cut", "also cut"]
    )
    assert [row["prompt"] for row in rows] == [build_messages("cut", "en"), build_messages("also cut", "en")]
    assert [row["extra_info"]["question"] for row in rows] == [record.question for record in records]
    with pytest.raises(ValueError, match="1 questions for 2 records"):
        verl_rows(records, prompt="en", data_source="eapo/demo", split="dev", questions=["one"])


def test_cli_writes_one_parquet_per_split(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "data",
            "export-verl",
            "demo",
            "--out",
            str(tmp_path),
            "--split",
            "0:0.5",
            "--prompt",
            "rjua_en",
            "--limit",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "0-0.5.parquet")
    assert tuple(table.column_names) == VERL_COLUMNS
    rows = table.to_pylist()
    records = load("demo", split=(0.0, 0.5), limit=3)
    assert [row["prompt"] for row in rows] == [build_messages(record, "rjua_en") for record in records]
    assert [row["reward_model"]["ground_truth"] for row in rows] == [record.reference for record in records]
    assert {row["extra_info"]["split"] for row in rows} == {"0:0.5"}


def test_without_verl_the_trainer_names_raise_naming_the_extra():
    """The package imports without verl (the export above needs it to); what needs verl says so."""
    if importlib.util.find_spec("verl") is not None:
        assert plugin.VERL_INSTALLED is True
        assert "EAPOVerlTrainer" in plugin.__all__
        return
    assert plugin.VERL_INSTALLED is False
    assert "EAPOVerlTrainer" not in plugin.__all__
    with pytest.raises(ImportError, match=r"needs verl.*eapo\[verl\]"):
        from eapo.engines.verl import EAPOVerlTrainer  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        plugin.nonexistent  # noqa: B018
