"""One config, either engine: every ``algorithm.*`` key the TRL engine's YAML tree accepts is taken by
``algorithm.eapo.*`` on verl, or refused there with where verl sets it instead."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("verl")

from eapo.config.algorithm import AlgorithmConfig  # noqa: E402
from eapo.engines.verl.settings import SETTING_KEYS, VERL_NATIVE_KEYS, EapoSettings  # noqa: E402

TREE_KEYS = [f.name for f in dataclasses.fields(AlgorithmConfig)]


def test_every_tree_key_is_taken_or_refused_with_a_reason():
    assert sorted(set(SETTING_KEYS) | set(VERL_NATIVE_KEYS)) == sorted(TREE_KEYS)
    assert not set(SETTING_KEYS) & set(VERL_NATIVE_KEYS)


@pytest.mark.parametrize("key", sorted(VERL_NATIVE_KEYS))
def test_a_verl_native_key_names_verls_option(key):
    with pytest.raises(
        ValueError, match=rf"algorithm.eapo.{key} is verl's own option on verl: set actor|algorithm"
    ):
        EapoSettings.from_algorithm_config({"adv_estimator": "eapo", "eapo": {key: 1}})


def test_split_by_and_anchor_steps_are_taken_as_on_trl():
    settings = EapoSettings.from_algorithm_config(
        {"adv_estimator": "eapo", "eapo": {"split_by": "median", "anchor_steps": 2, "w0": 0.5}}
    )
    assert (settings.split_by, settings.weights) == ("median", {"anchor_steps": 2, "w0": 0.5})
    weighting = settings.build_weighting()
    assert weighting.anchor_steps == 2 and weighting.w0 == 0.5
    with pytest.raises(ValueError, match=r"algorithm.eapo.split_by='mode' is invalid; valid: mean, median"):
        EapoSettings.from_algorithm_config({"adv_estimator": "eapo", "eapo": {"split_by": "mode"}})
    with pytest.raises(ValueError, match=r"algorithm.eapo.anchor_steps does not apply to method 'psr'"):
        EapoSettings.from_algorithm_config({"adv_estimator": "psr", "eapo": {"anchor_steps": 2}})
