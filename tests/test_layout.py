"""The package's layers, read from its imports (issue 27): every import runs down the pipeline, the two
engines sit side by side."""

from __future__ import annotations

from eapo.testing import layers


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
