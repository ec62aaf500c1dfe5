"""``make demo``: the preset it picks (CPU or CUDA), the two presets' shapes, and the Makefile's steps."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eapo.config import load_config
from eapo.demo import demo_config, demo_preset

ROOT = Path(__file__).resolve().parents[1]


def test_preset_follows_cuda(monkeypatch):
    assert demo_preset(cuda=False) == "demo"
    assert demo_preset(cuda=True) == "demo_gpu"
    assert demo_config(cuda=False).name == "demo.yaml"
    assert demo_config(cuda=True).name == "demo_gpu.yaml"
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert demo_preset() == "demo_gpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert demo_preset() == "demo"


def test_module_prints_the_preset_for_this_machine():
    import torch

    out = subprocess.run(
        [sys.executable, "-m", "eapo.demo"], capture_output=True, text=True, check=True
    ).stdout.strip()
    expected = "demo_gpu.yaml" if torch.cuda.is_available() else "demo.yaml"
    assert Path(out).name == expected and Path(out).is_file()


def test_gpu_preset_is_the_cpu_demo_made_longer():
    cpu = load_config(ROOT / "configs" / "demo.yaml").to_dict()
    gpu = load_config(ROOT / "configs" / "demo_gpu.yaml").to_dict()
    cpu_prompts = cpu["train"]["max_steps"] * cpu["train"]["prompts_per_step"]
    gpu_prompts = gpu["train"]["max_steps"] * gpu["train"]["prompts_per_step"]
    assert gpu["train"]["max_steps"] > cpu["train"]["max_steps"]
    assert gpu["train"]["prompts_per_step"] >= cpu["train"]["prompts_per_step"]
    assert gpu_prompts >= 4 * cpu_prompts
    # the same task, reward, algorithm and sampling: only the length of the run differs
    for section in ("model", "rollout", "reward", "algorithm"):
        assert gpu[section] == cpu[section], section
    assert {**gpu["data"], "limit": cpu["data"]["limit"]} == cpu["data"]
    assert gpu["data"]["limit"] is None  # all 59 training prompts
    same_train = {
        k: v
        for k, v in cpu["train"].items()
        if k not in ("max_steps", "prompts_per_step", "micro_batch_size", "save_steps")
    }
    assert {k: gpu["train"][k] for k in same_train} == same_train


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize(
    ("override", "train_args", "engine"),
    [(None, "", None), ("my.yaml", "", None), (None, "train.seed=1", None), ("my.yaml", "", "verl")],
)
def test_make_demo_steps(tmp_path, override, train_args, engine):
    # A copy of the Makefile next to an up-to-date stamp, so `make -n` lists only the demo's commands.
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / ".venv").mkdir()
    stamp = tmp_path / ".venv" / ".eapo-installed"
    stamp.write_text("")
    import os

    os.utime(tmp_path / "pyproject.toml", (0, 0))
    args = ["make", "-n", "demo", "DEMO_DIR=runs/d", f"PY={sys.executable}"]
    if override:
        args.append(f"DEMO_CONFIG={override}")
    if train_args:
        args.append(f"DEMO_ARGS={train_args}")
    if engine:  # ENGINE=verl: the same commands in verl's environment, training on verl
        args.append(f"ENGINE={engine}")
    out = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    config = override or str(demo_config())
    venv = ".venv-verl" if engine == "verl" else ".venv"
    commands = [line.rstrip() for line in out.splitlines() if line.startswith(f"{venv}/bin/eapo")]
    assert commands == [
        f"{venv}/bin/eapo train --engine {engine or 'trl'} --config {config} --output-dir runs/d {train_args}".rstrip(),
        f"{venv}/bin/eapo eval --config {config} --k 4 --output-dir runs/d/base-eval",
        f"{venv}/bin/eapo eval --model runs/d --k 4 --output-dir runs/d/eval",
        f"{venv}/bin/eapo summary runs/d --base runs/d/base-eval",
    ]
