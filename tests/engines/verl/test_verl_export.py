"""``eapo data export-verl`` writes parquet that verl's RLHFDataset reads."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

import pyarrow.parquet as pq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from typer.testing import CliRunner  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402

from eapo.cli import app  # noqa: E402
from eapo.data import build_messages, load  # noqa: E402
from eapo.engines.verl.parquet import VERL_COLUMNS  # noqa: E402


def test_export_writes_what_rlhf_dataset_reads(tmp_path, tiny_tokenizer):
    result = CliRunner().invoke(
        app,
        [
            "data",
            "export-verl",
            "demo",
            "--out",
            str(tmp_path),
            "--split",
            "train",
            "--split",
            "dev",
            "--limit",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "train: 4 rows" in result.output
    records = load("demo", split="train", limit=4)

    table = pq.read_table(tmp_path / "train.parquet")
    assert tuple(table.column_names) == VERL_COLUMNS

    dataset = RLHFDataset(
        data_files=[str(tmp_path / "train.parquet")],
        tokenizer=tiny_tokenizer,
        config=OmegaConf.create(
            {"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": True}
        ),
        processor=None,
    )
    assert len(dataset) == 4
    for position, record in enumerate(records):
        item = dataset[position]
        assert item["raw_prompt"] == build_messages(record, "en")  # the prompt the TRL trainer renders
        assert item["data_source"] == "eapo/demo"
        assert item["reward_model"]["ground_truth"] == record.reference
        assert item["extra_info"]["question"] == record.question
        assert item["extra_info"]["id"] == record.id
        assert item["index"] == position  # verl reads the row index from extra_info.index

    dev = pq.read_table(tmp_path / "dev.parquet").to_pylist()
    assert [row["extra_info"]["split"] for row in dev] == ["dev"] * len(dev)


def test_overlong_prompts_are_filtered_by_verl_with_our_chat_messages(tmp_path, tiny_tokenizer):
    """RLHFDataset tokenizes our messages through the tokenizer's chat template to filter by length."""
    result = CliRunner().invoke(
        app, ["data", "export-verl", "demo", "--out", str(tmp_path), "--split", "train"]
    )
    assert result.exit_code == 0, result.output
    lengths = [
        len(
            tiny_tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)[
                "input_ids"
            ]
        )
        for row in pq.read_table(tmp_path / "train.parquet").to_pylist()
    ]
    limit = sorted(lengths)[len(lengths) // 2]
    assert 0 < sum(length <= limit for length in lengths) < len(lengths)
    dataset = RLHFDataset(
        data_files=[str(tmp_path / "train.parquet")],
        tokenizer=tiny_tokenizer,
        config=OmegaConf.create({"max_prompt_length": limit, "filter_overlong_prompts": True}),
        processor=None,
    )
    assert len(dataset) == sum(length <= limit for length in lengths)


def test_unknown_loader_is_an_error_not_a_file(tmp_path):
    result = CliRunner().invoke(app, ["data", "export-verl", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown dataset loader 'nope'" in result.output
    assert not list(tmp_path.iterdir())
