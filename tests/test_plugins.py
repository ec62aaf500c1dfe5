"""Your own scheme, control and reward in a module of your own (issue 48): ``tests/plugins/toy_plugin.py``
registers a weighting scheme with a setting of its own, an entropy control and a reward component with an
option of its own (``toy_length``), nothing under ``src/`` names them, and ``EAPO_PLUGINS`` (or a config's
``plugins:``) makes them usable everywhere a built-in one is. The verl plugin path is
``tests/engines/verl/test_verl_plugins.py``."""

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
    """With EAPO_PLUGINS set, the scheme, its own setting, the control and the reward component (its weight
    and option in the config, its scores and metrics in the composite) are in every derived view."""
    out = _python(
        """
import json
from eapo import EAPOConfig
from eapo.config import load_config, reward_settings
from eapo.rewards import make_composite
from eapo.core import Algorithm, methods
from eapo.evaluation.labels import method_label
from eapo.sweep.plan import grid_targets
config = load_config(TINY_PATH, ["algorithm.method=tilted", "algorithm.tilt=0.3", "algorithm.token_floor=0.5"])
args = EAPOConfig(output_dir="unused", use_cpu=True, method="tilted", tilt=0.3, token_floor=0.5)
rewarded = load_config(TINY_PATH, ["reward.weights.toy_length=0.5", "reward.options.toy_length.target=20"])
weights, options, _ = reward_settings(rewarded)
scored = make_composite(weights, **options).score(["q", "q"], ["drink water", "x" * 30], ["drink water"] * 2)
print(json.dumps({
    "reward": [weights, options["toy_length"], scored.components["toy_length"], scored.metrics["reward/toy_length/mean"]],
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
    # tiny.yaml's format 0.2 and Rouge-L 0.8, and the plugin's component: 11 / 20 and 30 / 20 capped at 1
    assert views["reward"][:2] == [{"format": 0.2, "rouge_l": 0.8, "toy_length": 0.5}, {"target": 20}]
    assert views["reward"][2:] == [pytest.approx([0.55, 1.0]), pytest.approx(0.775)]


def test_a_bad_setting_of_the_plugin_is_refused_like_a_built_in_one():
    """A bad value of the scheme's setting, and a bad option of the reward component (light: built when the
    config is loaded), are refused when the config is loaded, naming their keys."""
    out = _python(
        """
from eapo.config import ConfigError, load_config
for overrides in (
    ["algorithm.method=tilted", "algorithm.tilt=1.5"],
    ["reward.weights.toy_length=0.5", "reward.options.toy_length.target=0"],
):
    try:
        load_config(TINY_PATH, overrides)
    except ConfigError as error:
        print(error)
""".replace("TINY_PATH", repr(str(TINY))),
        EAPO_PLUGINS="toy_plugin",
    )
    assert "algorithm.tilt=1.5 is invalid; valid: a number in [0, 1], or null" in out
    assert "reward.options.toy_length is invalid: toy_length: target must be an integer >= 1, got 0" in out


#: The toy reward's option in the training test: a completion of 32 characters or more would score 1 (the
#: tiny model writes 24 byte tokens at most, so each completion scores its own length / 32).
TOY_TARGET = 32
#: The training test's composite: tiny.yaml's format 0.2 + Rouge-L 0.8, and the plugin's component.
TOY_WEIGHTS = {"format": 0.2, "rouge_l": 0.8, "toy_length": 0.5}


def toy_length(completion: str, target: int = TOY_TARGET) -> float:
    """The plugin's score, by hand: min(1, characters / target)."""
    return min(1.0, len(completion) / target)


def test_eapo_train_runs_the_plugins_scheme_control_and_reward_on_trl(tmp_path):
    """A config's ``plugins:`` (no EAPO_PLUGINS: the command line reads the list first, so the scheme's own
    ``tilt`` is a key of the config's algorithm section and ``toy_length`` a key of ``reward.weights``),
    two steps on the tiny model: w+ = tilt and w- = 1 - tilt every step, the control's token weight
    logged, and the plugin's reward component in the composite, with its option and its weight: each
    rollout's ``toy_length`` is min(1, characters / 32) of its completion, its total 0.2·format +
    0.8·Rouge-L + 0.5·toy_length, its advantage and polarity those of the totals, and each step's
    ``reward/toy_length/mean`` and ``reward/mean`` the means of the step's rollouts."""
    import yaml

    tree = yaml.safe_load(TINY.read_text())
    tree["plugins"] = ["toy_plugin"]
    tree["algorithm"] = {**tree.get("algorithm", {}), "method": "tilted", "tilt": 0.3, "token_floor": 0.5}
    tree["algorithm"].pop("w0", None)
    tree["reward"]["weights"] = dict(TOY_WEIGHTS)
    tree["reward"]["options"]["toy_length"] = {"target": TOY_TARGET}
    tree["logging"] = {**tree.get("logging", {}), "rollouts": 1}
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

    import torch

    from eapo.core.step import grouped_polarity_advantages
    from eapo.run_dir import read_rollouts

    rollouts = read_rollouts(run_dir)
    assert [r["step"] for r in rollouts] == [1] * 8 + [2] * 8  # 2 prompts × 4 rollouts a step
    for row in steps:
        step = [r for r in rollouts if r["step"] == row["step"]]
        toy = [toy_length(r["completion"]) for r in step]
        for r, score in zip(step, toy, strict=True):
            assert set(r["rewards"]) == set(TOY_WEIGHTS)
            assert r["rewards"]["toy_length"] == pytest.approx(score, abs=1e-12)
            total = sum(alpha * r["rewards"][name] for name, alpha in TOY_WEIGHTS.items())
            assert r["reward"] == pytest.approx(total, abs=1e-6)
        assert row["reward/toy_length/mean"] == pytest.approx(sum(toy) / len(toy), abs=1e-6)
        # the totals with the toy score are what the step trained on: GRPO's advantages of them, split at
        # the group's mean and weighted w+ = tilt, w- = 1 - tilt
        totals = torch.tensor([r["reward"] for r in step])
        advantages, positive, _ = grouped_polarity_advantages(
            totals, [r["prompt_index"] for r in step], 0.3, 0.7
        )
        assert [r["advantage"] for r in step] == pytest.approx(advantages.tolist(), abs=1e-5)
        assert [(r["polarity"], r["weight"]) for r in step] == [
            ("D+", 0.3) if p else ("D-", 0.7) for p in positive.tolist()
        ]
        assert row["reward/mean"] == pytest.approx(sum(r["reward"] for r in step) / len(step), abs=1e-6)
    # the component's scores differ between rollouts, so its mean and the totals' are no constant
    assert len({r["rewards"]["toy_length"] for r in rollouts}) > 1


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


def test_the_examples_reward_component_is_configured_and_scored():
    """examples/plugin/concise_answer.py (docs/guide/plugins.md), loaded beside mixed_weights: its weight and
    option come from the config, a bad option is refused naming its key, and the composite scores it
    (max_chars 10: the answer "drink water and rest" is 20 characters, 10 / 20 = 0.5; "rest" is 1; no
    answer 0)."""
    env = _env(EAPO_PLUGINS="mixed_weights,concise_answer")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "examples" / "plugin"), env["PYTHONPATH"]])
    code = """
import json
from eapo.config import ConfigError, load_config, reward_settings
from eapo.rewards import make_composite
config = load_config(TINY_PATH, ["reward.weights.concise=0.5", "reward.options.concise.max_chars=10"])
weights, options, _ = reward_settings(config)
completions = ["<think>x</think><advice>drink water and rest</advice>", "<advice>rest</advice>", "<think>x</think>"]
scored = make_composite(weights, **options).score(["q"] * 3, completions, ["drink water"] * 3)
try:
    load_config(TINY_PATH, ["reward.weights.concise=0.5", "reward.options.concise.max_chars=0"])
except ConfigError as error:
    refused = str(error)
print(json.dumps([weights, options["concise"], scored.components["concise"], refused]))
""".replace("TINY_PATH", repr(str(TINY)))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    weights, options, scores, refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert weights == {"format": 0.2, "rouge_l": 0.8, "concise": 0.5} and options == {"max_chars": 10}
    assert scores == [0.5, 1.0, 0.0]
    assert "reward.options.concise is invalid: concise: max_chars must be an integer >= 1, got 0" in refused
