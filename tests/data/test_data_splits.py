"""Seeded splits: hand-derived sizes, determinism, disjointness (eapo.data.splits)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eapo.data import DataError, carve_dev, fraction_indices, normalize_split, seeded_permutation
from eapo.data.splits import dev_size


def test_seeded_permutation_matches_random_shuffle():
    expected = list(range(10))
    random.Random(3).shuffle(expected)
    assert seeded_permutation(10, 3) == expected
    assert seeded_permutation(10, 3) == seeded_permutation(10, 3)
    assert seeded_permutation(10, 3) != seeded_permutation(10, 4)


@pytest.mark.parametrize(
    ("n", "fraction", "expected"),
    [
        (6539, 0.05, 327),  # CMD: round(326.95)
        (211, 0.2, 42),  # RJUA valid: round(42.2)
        (66, 0.1, 7),  # demo: round(6.6)
        (10, 0.01, 1),  # never empty when the fraction is > 0
        (2, 0.9, 1),  # train keeps at least one row
        (1, 0.5, 0),
        (0, 0.5, 0),
        (100, 0.0, 0),
    ],
)
def test_dev_size(n, fraction, expected):
    assert dev_size(n, fraction) == expected


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5, float("nan")])
def test_dev_size_rejects_bad_fractions(fraction):
    with pytest.raises(DataError, match="dev_fraction"):
        dev_size(10, fraction)


def test_carve_dev_is_the_head_of_the_shuffle():
    train, dev = carve_dev(20, 0.25, seed=7)
    order = seeded_permutation(20, 7)
    assert dev == order[:5]
    assert train == order[5:]


def test_fraction_indices_bounds():
    order = seeded_permutation(10, 0)
    assert fraction_indices(10, 0.0, 0.9, 0) == order[:9]
    assert fraction_indices(10, 0.9, 1.0, 0) == order[9:]
    assert (
        fraction_indices(7266, 0.0, 0.9, 0) == seeded_permutation(7266, 0)[:6539]
    )  # round(0.9·7266), as README


@given(n=st.integers(0, 500), cut=st.floats(0.01, 0.99), seed=st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_fraction_ranges_partition_the_rows(n, cut, seed):
    head = fraction_indices(n, 0.0, cut, seed)
    tail = fraction_indices(n, cut, 1.0, seed)
    assert set(head).isdisjoint(tail)
    assert sorted(head + tail) == list(range(n))


@given(n=st.integers(0, 500), fraction=st.floats(0.0, 0.95), seed=st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_carve_dev_partitions_the_rows(n, fraction, seed):
    train, dev = carve_dev(n, fraction, seed)
    assert set(train).isdisjoint(dev)
    assert sorted(train + dev) == list(range(n))
    assert len(dev) == dev_size(n, fraction)


@pytest.mark.parametrize(
    ("given_split", "expected"),
    [
        ("train", "train"),
        ("DEV", "dev"),
        ("validation", "dev"),
        ("valid", "dev"),
        ("test", "test"),
        ("all", "all"),
        (0.9, (0.0, 0.9)),
        (1, (0.0, 1.0)),
        ((0.9, 1.0), (0.9, 1.0)),
        ([0.25, 0.5], (0.25, 0.5)),
        ("0.9", (0.0, 0.9)),
        ("0.9:1.0", (0.9, 1.0)),
        (":0.5", (0.0, 0.5)),
        ("0.5:", (0.5, 1.0)),
    ],
)
def test_normalize_split(given_split, expected):
    assert normalize_split(given_split) == expected


@pytest.mark.parametrize(
    "bad", ["training", 0.0, 1.5, -0.2, (0.5, 0.5), (0.6, 0.4), True, None, (0.1, 0.2, 0.3)]
)
def test_normalize_split_rejects(bad):
    with pytest.raises(DataError):
        normalize_split(bad)


def test_unknown_split_name_lists_the_known_ones():
    with pytest.raises(DataError, match=r"train, dev, test, all"):
        normalize_split("training")
