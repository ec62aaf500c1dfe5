"""One config, either engine: every ``algorithm.*`` key the TRL engine's YAML tree accepts is taken by
``algorithm.eapo.*`` on verl, or refused there with where verl sets it instead."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("verl")

from eapo.config.algorithm import AlgorithmConfig  # noqa: E402
from eapo.engines.verl.settings import VERL_NATIVE_KEYS, algorithm_for_trainer, setting_keys  # noqa: E402

TREE_KEYS = [f.name for f in dataclasses.fields(AlgorithmConfig)]


def test_every_tree_key_is_taken_or_refused_with_a_reason():
    assert sorted(set(setting_keys()) | set(VERL_NATIVE_KEYS)) == sorted(TREE_KEYS)
    assert not set(setting_keys()) & set(VERL_NATIVE_KEYS)


@pytest.mark.parametrize("key", sorted(VERL_NATIVE_KEYS))
def test_a_verl_native_key_names_verls_option(key):
    with pytest.raises(
        ValueError, match=rf"algorithm.eapo.{key} is verl's own option on verl: set actor|algorithm"
    ):
        algorithm_for_trainer({"adv_estimator": "eapo", "eapo": {key: 1}})


def test_split_by_and_anchor_steps_are_taken_as_on_trl():
    algorithm = algorithm_for_trainer(
        {"adv_estimator": "eapo", "eapo": {"split_by": "median", "anchor_steps": 2, "w0": 0.5}}
    )
    assert (algorithm.split_by, algorithm.weights["anchor_steps"], algorithm.weights["w0"]) == (
        "median",
        2,
        0.5,
    )
    weighting = algorithm.make_weighting()
    assert weighting.anchor_steps == 2 and weighting.w0 == 0.5
    with pytest.raises(ValueError, match=r"algorithm.eapo.split_by='mode' is invalid; valid: mean, median"):
        algorithm_for_trainer({"adv_estimator": "eapo", "eapo": {"split_by": "mode"}})
    with pytest.raises(ValueError, match=r"algorithm.eapo.anchor_steps does not apply to method 'psr'"):
        algorithm_for_trainer({"adv_estimator": "psr", "eapo": {"anchor_steps": 2}})
