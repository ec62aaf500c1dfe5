"""The core API example (docs/guide/concepts.md) runs as written, and the CLI lists its subcommands.
The README's own quick starts are run by tests/test_docs.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_core_example_runs_and_gives_the_commented_weights():
    page = ROOT / "docs" / "guide" / "concepts.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, f"{page} has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], str(page), "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["w_pos"] == pytest.approx(0.15) and namespace["w_neg"] == 1.0
    assert namespace["A"][4:].abs().sum() == 0  # the equal-reward group
    assert namespace["pos"].tolist() == [True, False, True, False, True, True, True, True]
    assert namespace["state"]["anchor_sum"] == pytest.approx(1.20)


def test_cli_help_lists_the_subcommands():
    out = subprocess.run(
        [sys.executable, "-m", "eapo.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("train", "eval", "plot", "sweep", "data", "weights"):
        assert re.search(rf"^\W*{command}\b", out.stdout, flags=re.M), f"'{command}' missing from eapo --help"


def test_weights_command_prints_the_eapo_trajectory():
    out = subprocess.run(
        [sys.executable, "-m", "eapo.cli", "weights", "--entropies", "2.0,1.0,3.0,40.0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*\d+\s", line)]
    assert [float(r[2]) for r in rows] == [0.2, 0.1, 0.3, 2.0]  # the last one clipped at w_max


def test_unknown_method_is_a_clear_cli_error():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "eapo.cli",
            "train",
            "--config",
            str(ROOT / "configs" / "tiny.yaml"),
            "algorithm.method=x",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "valid: grpo, psr, nsr, w_reinforce, qae, eapo, eapo_pi" in out.stderr
