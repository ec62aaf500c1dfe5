"""The package's layers, read from its imports (issue 27): every import runs down the pipeline, the two
engines sit side by side, and the paths that moved name their new home."""

from __future__ import annotations

import importlib

import pytest

from eapo.testing import layers

SRC = layers.DEFAULT_SRC


def test_every_module_has_a_layer():
    unplaced = []
    for importer, _, _ in layers.imports():
        try:
            layers.layer_of(importer)
        except ValueError as error:
            unplaced.append(str(error))
    assert unplaced == []


def test_every_import_runs_down_the_pipeline():
    assert layers.upward_imports() == []


def test_the_engines_sit_side_by_side():
    assert layers.engine_crossings() == []


def test_no_import_cycle_between_modules():
    assert layers.cycles() == []


def test_the_checks_see_an_upward_import_and_a_cycle(tmp_path):
    """The checks are not blind: a core module importing the TRL engine, and two recipes importing
    each other, are reported."""
    package = tmp_path / "eapo"
    (package / "core").mkdir(parents=True)
    (package / "engines" / "trl").mkdir(parents=True)
    (package / "core" / "bad.py").write_text("from eapo.engines.trl import trainer\n")
    (package / "engines" / "trl" / "trainer.py").write_text("from eapo.engines.verl import x\n")
    (package / "train.py").write_text("import eapo.plot\n")
    (package / "plot.py").write_text("from eapo.train import run\n")
    assert layers.upward_imports(tmp_path) == [
        "eapo.core.bad:1 imports eapo.engines.trl (layer 4 above 0)",
        "eapo.core.bad:1 imports eapo.engines.trl.trainer (layer 4 above 0)",
    ]
    assert layers.engine_crossings(tmp_path) == ["eapo.engines.trl.trainer:1 imports eapo.engines.verl"]
    assert layers.cycles(tmp_path) == ["eapo.plot -> eapo.train -> eapo.plot"]


@pytest.mark.parametrize("old", sorted(importlib.import_module("eapo._moved").MOVED_MODULES))
def test_a_moved_module_names_its_new_path(old):
    from eapo._moved import MOVED_MODULES

    if old.startswith("eapo.integrations.verl."):
        pytest.importorskip("verl")  # the old parent is the plugin itself, which needs verl
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(old)
    assert str(raised.value) == f"{old} moved to {MOVED_MODULES[old]}: import it from there"
    new = MOVED_MODULES[old].split(" ")[0]
    assert (SRC / (new.replace(".", "/") + ".py")).exists(), new  # the new path exists


def test_the_backend_names_of_old_eapo_engines_name_their_new_module():
    with pytest.raises(
        ImportError, match=r"eapo.engines.plan_rollout moved to eapo.runtime.backends.plan_rollout"
    ):
        from eapo.engines import plan_rollout  # noqa: F401
    from eapo.runtime.backends import plan_rollout  # noqa: F401  (there it is)


def test_the_lm_head_kernel_names_its_new_module():
    import eapo.core

    with pytest.raises(ImportError, match=r"eapo.engines.trl.lm_head.token_logprobs_and_entropy"):
        eapo.core.token_logprobs_and_entropy  # noqa: B018


def test_the_old_verl_plugin_path_is_the_plugin():
    """``pkg://eapo.integrations.verl`` in users' verl configs keeps loading the reward function."""
    pytest.importorskip("verl")
    import eapo.engines.verl
    import eapo.integrations.verl

    assert eapo.integrations.verl.compute_score is eapo.engines.verl.compute_score
