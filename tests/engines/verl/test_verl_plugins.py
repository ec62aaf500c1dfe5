"""The verl plugin path of a plugin module (issue 48): ``tests/plugins/toy_plugin.py``'s scheme (with a
setting of its own) and control, named nowhere under ``src/``, run through eapo's verl plugin as the
built-ins do: ``algorithm.adv_estimator=tilted`` with ``algorithm.eapo.tilt`` and ``token_floor``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[3]
PLUGINS = ROOT / "tests" / "plugins"


def test_every_process_that_imports_verl_registers_the_plugins_estimator():
    """``import verl`` alone (what a Ray worker does: verl imports its plugins, eapo's among them, whose
    package imports EAPO_PLUGINS first) puts the plugin's scheme in verl's estimator registry."""
    env = {**os.environ, "EAPO_PLUGINS": "toy_plugin"}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print(get_adv_estimator_fn('tilted').__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "compute_tilted_advantage"


@pytest.fixture
def toy_plugin_imported(monkeypatch):
    """Import the toy plugin in this process, and unregister it afterwards: its scheme, setting, control and
    verl estimator would otherwise stay in the registries for every test after this one (the parity test of
    ``algorithm.eapo``'s keys, for one, would see ``tilt`` and ``token_floor``)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from eapo.core import CONTROL_SETTINGS, ENTROPY_CONTROLS, WEIGHT_SETTINGS, WEIGHTING_SCHEMES

    registries = (
        WEIGHT_SETTINGS,
        WEIGHTING_SCHEMES,
        CONTROL_SETTINGS,
        ENTROPY_CONTROLS,
        ADV_ESTIMATOR_REGISTRY,
    )
    saved = [dict(registry) for registry in registries]
    monkeypatch.syspath_prepend(str(PLUGINS))
    import toy_plugin  # (registers, as EAPO_PLUGINS does at import in a real process)

    yield toy_plugin
    for registry, before in zip(registries, saved, strict=True):
        registry.clear()
        registry.update(before)
    sys.modules.pop("toy_plugin", None)


def test_the_plugins_scheme_and_control_train_on_verl(verl_config, in_memory_tq, toy_plugin_imported):
    """Two steps of the eapo trainer with the plugin's estimator: w+ = tilt, w- = 1 - tilt, and the
    control's token weights in eapo's loss (its share logged)."""

    from eapo.engines.verl import EAPOVerlTrainer, register_estimators

    register_estimators()  # what the plugin entry point does once the registries are filled
    from test_verl_entropy_control import TinyPolicy, train

    verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 2
    verl_config.algorithm.adv_estimator = "tilted"
    verl_config.algorithm.eapo = {"tilt": 0.3, "token_floor": 0.5}
    trainer = EAPOVerlTrainer(verl_config)
    assert (trainer.algorithm.method, dict(trainer.algorithm.weights)) == ("tilted", {"tilt": 0.3})
    assert trainer.algorithm.controls["token_floor"] == 0.5
    history = train(trainer, in_memory_tq, 2, TinyPolicy(seed=3))
    for metrics, calls in history:
        assert (metrics["eapo/w_pos"], metrics["eapo/w_neg"]) == pytest.approx((0.3, 0.7))
        assert metrics["toy/token_floor"] == pytest.approx(0.5)
        assert len(calls) == 2


def test_the_plugin_is_unregistered_after_its_in_process_test():
    """The fixture of the test above restores the registries (this runs after the test that uses it)."""
    from eapo.core import WEIGHTING_SCHEMES
    from eapo.engines.verl.settings import setting_keys

    assert "tilted" not in WEIGHTING_SCHEMES and "tilt" not in setting_keys()
