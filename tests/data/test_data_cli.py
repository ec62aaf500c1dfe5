"""``eapo data list / preview / stats`` (on a local Typer app, so other command modules are not needed)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from eapo.commands.data import register


@pytest.fixture
def invoke():
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["data", *args])


def test_list(invoke):
    result = invoke("list")
    assert result.exit_code == 0, result.output
    assert "cmd " in result.output and "demo " in result.output
    assert "prompts: cmd, cmd_en, en, rjua, rjua_en" in result.output


def test_preview_demo(invoke):
    result = invoke("preview", "demo", "--n", "2", "--split", "dev")
    assert result.exit_code == 0, result.output
    assert result.output.count("=== demo-") == 2
    assert "Patient question: " in result.output and "<advice>" in result.output
    assert "(2 shown from " in result.output


def test_preview_with_options_and_prompt_file(invoke, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"uid": "a", "q": "Why?", "a": "Because."}) + "\n", encoding="utf-8")
    template = tmp_path / "t.txt"
    template.write_text("Answer briefly: {question}", encoding="utf-8")
    result = invoke(
        "preview",
        "jsonl",
        "--path",
        str(data),
        "--prompt",
        str(template),
        "-o",
        "question_field=q",
        "-o",
        "reference_field=a",
        "-o",
        "id_field=uid",
    )
    assert result.exit_code == 0, result.output
    assert (
        "=== a ===" in result.output
        and "Answer briefly: Why?" in result.output
        and "Because." in result.output
    )


def test_stats(invoke, tmp_path):
    data = tmp_path / "qa.jsonl"
    rows = [{"id": str(i), "question": "q" * i, "answer": "a" * (2 * i)} for i in range(1, 21)]
    data.write_text("\n".join(map(json.dumps, rows)) + "\n", encoding="utf-8")
    result = invoke("stats", "jsonl", "--path", str(data))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"jsonl: 20 rows in {data}"
    assert "  train 19" in lines and "  dev   1" in lines
    assert any(line.startswith("  test  -  (absent") for line in lines)
    assert lines[-2].split() == ["question", "10.5", "19", "20"]  # median of 1..20; nearest-rank p95 = 19
    assert lines[-1].split() == ["reference", "21", "38", "40"]


def test_errors_exit_2_with_a_message(invoke, tmp_path):
    result = invoke("preview", "nosuch")
    assert result.exit_code == 2
    assert "unknown dataset loader 'nosuch'" in result.output
    result = invoke("stats", "jsonl", "--path", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2 and "no such file or directory" in result.output
    result = invoke("preview", "demo", "-o", "oops")
    assert result.exit_code == 2 and "expected KEY=VALUE" in result.output
