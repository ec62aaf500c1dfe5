"""The built distribution installs and trains: ``python -m build`` makes a wheel and an sdist; the wheel,
installed into a fresh virtual environment, runs the tiny preset with ``eapo train`` from a directory
outside the repository, so the presets and the bundled data must ship inside the package.

The wheel goes in with ``--no-deps``: the fresh environment reads its dependencies from this test
environment's site-packages (a ``.pth`` line, after its own, so eapo itself comes from the wheel), which
``make venv`` built from the same ``pyproject.toml`` requirements; the wheel's ``Requires-Dist`` is
checked against them. Installing torch and the rest again took most of this test's 2.5 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

import eapo

ROOT = Path(__file__).resolve().parents[1]

#: What must ship inside the package for an installed eapo to run its presets on its bundled data.
PACKAGED = (
    "eapo/configs/tiny.yaml",
    "eapo/configs/demo.yaml",
    "eapo/configs/paper_rjua.yaml",
    "eapo/configs/accelerate/zero3.yaml",
    "eapo/data/demo.jsonl",
    "eapo/data/prompts/en.txt",
    "eapo/py.typed",
)


def _run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(command)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_trains_the_tiny_preset(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    timings: dict[str, float] = {}

    # 1. wheel and sdist
    started = time.monotonic()
    _run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path / "dist"), str(ROOT)],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    timings["build"] = time.monotonic() - started
    wheel = tmp_path / "dist" / f"eapo-{eapo.__version__}-py3-none-any.whl"
    sdist = tmp_path / "dist" / f"eapo-{eapo.__version__}.tar.gz"
    assert wheel.exists() and sdist.exists(), sorted(p.name for p in (tmp_path / "dist").iterdir())
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [path for path in PACKAGED if path not in names]
    assert f"eapo-{eapo.__version__}.dist-info/entry_points.txt" in names
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {f"src/{path}" for path in PACKAGED} <= members and "pyproject.toml" in members

    # the wheel declares pyproject.toml's requirements (what make venv installs and this test reuses)
    from packaging.requirements import Requirement

    metadata = zipfile.ZipFile(wheel).read(f"eapo-{eapo.__version__}.dist-info/METADATA").decode()
    declared = [
        Requirement(line.split(":", 1)[1])
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {str(r) for r in declared if r.marker is None} == {str(Requirement(r)) for r in project}

    # 2. a fresh virtual environment holding the wheel; its dependencies are read from this environment's
    # site-packages, placed after the fresh one's own so that eapo itself is the wheel's
    started = time.monotonic()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env=env, timeout=300)
    fresh = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=tmp_path,
            env=env,
            timeout=60,
        ).stdout.strip()
    )
    (fresh / "zz_test_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            str(wheel),
        ],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    timings["install"] = time.monotonic() - started

    # 3. the installed package, not the checkout, runs the tiny preset by name from a directory of its own
    work = tmp_path / "elsewhere"
    work.mkdir()
    located = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import eapo, eapo.engines.trl.config; print(eapo.__file__, eapo.__version__)",
        ],
        cwd=work,
        env=env,
        timeout=300,
    ).stdout.split()
    assert Path(located[0]).is_relative_to(venv) and located[1] == eapo.__version__
    started = time.monotonic()
    _run(
        [
            str(venv / "bin" / "eapo"),
            "train",
            "--config",
            "tiny",
            "--output-dir",
            "run",
            "train.max_steps=2",
            "train.save_steps=0",
            "logging.progress=false",
        ],
        cwd=work,
        env=env,
        timeout=900,
    )
    timings["train"] = time.monotonic() - started
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[0]["eapo/w_pos"] == pytest.approx(0.2) and rows[0]["entropy/rollout"] > 0
    assert rows[0]["reward/rouge_l/mean"] >= 0 and "reward/format/mean" in rows[0]
    assert (work / "run" / "final" / "config.json").exists() and (work / "run" / "dynamics.png").exists()
    print("wheel test timings (s):", {key: round(value, 1) for key, value in timings.items()})
