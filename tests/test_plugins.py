"""Your own scheme and control in a module of your own (issue 48): ``tests/plugins/toy_plugin.py`` registers
a weighting scheme with a setting of its own and an entropy control, nothing under ``src/`` names them, and
``EAPO_PLUGINS`` (or a config's ``plugins:``) makes them usable everywhere a built-in one is. The verl
plugin path is ``tests/engines/verl/test_verl_plugins.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"
TINY = ROOT / "configs" / "tiny.yaml"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EAPO_PLUGINS"}
    path = [str(PLUGINS), str(ROOT / "src"), env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in path if p), **extra}


def _python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(**env), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_every_view_of_the_registries_has_the_plugins_entries():
    """With EAPO_PLUGINS set, the scheme, its own setting and the control are in every derived view."""
    out = _python(
        """
import json
from eapo import EAPOConfig
from eapo.config import load_config
from eapo.core import Algorithm, methods
from eapo.evaluation.labels import method_label
from eapo.sweep.plan import grid_targets
config = load_config(TINY_PATH, ["algorithm.method=tilted", "algorithm.tilt=0.3", "algorithm.token_floor=0.5"])
args = EAPOConfig(output_dir="unused", use_cpu=True, method="tilted", tilt=0.3, token_floor=0.5)
print(json.dumps({
    "methods": [m for m in methods() if m in ("tilted", "token_floor")],
    "yaml": dict(config.algorithm.resolved().weights),
    "yaml_floor": config.algorithm.resolved().controls["token_floor"],
    "trl": [args.tilt, args.token_floor, dict(args.algorithm.weights)],
    "same": args.algorithm == config.algorithm.resolved(),
    "label": method_label("tilted", {"tilt": 0.3}),
    "preset": Algorithm.resolve("token_floor").control_values()["token_floor"],
    "grid": grid_targets("tilt"),
    "weights": list(Algorithm.resolve("tilted", {"tilt": 0.3}).make_weighting().weights(None)),
}))
""".replace("TINY_PATH", repr(str(TINY))),
        EAPO_PLUGINS="toy_plugin",
    )
    views = json.loads(out.strip().splitlines()[-1])
    assert views["methods"] == ["tilted", "token_floor"]
    assert views["yaml"] == {"tilt": 0.3} and views["yaml_floor"] == 0.5
    assert views["trl"] == [0.3, 0.5, {"tilt": 0.3}]
    assert views["label"] == "Tilted (τ=0.3)" and views["preset"] == 0.5 and views["grid"] == ["tilted"]
    assert views["weights"] == pytest.approx([0.3, 0.7])


def test_a_bad_setting_of_the_plugin_is_refused_like_a_built_in_one():
    out = _python(
        """
from eapo.config import ConfigError, load_config
try:
    load_config(TINY_PATH, ["algorithm.method=tilted", "algorithm.tilt=1.5"])
except ConfigError as error:
    print(error)
""".replace("TINY_PATH", repr(str(TINY))),
        EAPO_PLUGINS="toy_plugin",
    )
    assert "algorithm.tilt=1.5 is invalid; valid: a number in [0, 1], or null" in out


def test_eapo_train_runs_the_plugins_scheme_and_control_on_trl(tmp_path):
    """A config's ``plugins:`` (no EAPO_PLUGINS: the command line reads the list first, so the scheme's own
    ``tilt`` is a key of the config's algorithm section), two steps on the tiny model: w+ = tilt and
    w- = 1 - tilt every step, the control's token weight logged."""
    import yaml

    tree = yaml.safe_load(TINY.read_text())
    tree["plugins"] = ["toy_plugin"]
    tree["algorithm"] = {**tree.get("algorithm", {}), "method": "tilted", "tilt": 0.3, "token_floor": 0.5}
    tree["algorithm"].pop("w0", None)
    config = tmp_path / "plugin.yaml"
    config.write_text(yaml.safe_dump(tree))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eapo.cli",
            "train",
            "--config",
            str(config),
            "--output-dir",
            str(run_dir),
            "train.max_steps=2",
            "train.save_steps=0",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "eapo/w_pos" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row["eapo/w_pos"] == pytest.approx(0.3) and row["eapo/w_neg"] == pytest.approx(0.7)
        assert row["toy/token_floor"] == pytest.approx(0.5)


def test_the_examples_plugin_works_from_the_command_line():
    """examples/plugin/mixed_weights.py (docs/guide/plugins.md): ``eapo weights --method mixed --mix 0.2``
    prints w+ = 0.8 and w- = 0.2 every step, its own option generated from the registration."""
    env = _env(EAPO_PLUGINS="mixed_weights")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "examples" / "plugin"), env["PYTHONPATH"]])
    done = subprocess.run(
        [sys.executable, "-m", "eapo.cli", "weights", "--method", "mixed", "--mix", "0.2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert rows and all(row[-2:] == ["0.8000", "0.20"] for row in rows)
