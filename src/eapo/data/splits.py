"""Deterministic, seeded splits: pure functions over row counts, no I/O.

Two kinds of split share one shuffle, ``random.Random(seed).shuffle(list(range(n)))`` (the
method ``../shared/data`` used for its own splits):

* **carved dev split** -- the first ``dev_size(n, dev_fraction)`` shuffled positions are ``dev``,
  the rest ``train`` (:func:`carve_dev`); used where a dataset ships no dev file.
* **fraction range** -- ``(start, stop)`` keeps shuffled positions ``[round(start·n), round(stop·n))``
  (:func:`fraction_indices`). A float ``f`` means ``(0, f)``, so ``split=0.9`` is the first 90%
  (the paper's 9:1 train part) and ``split=(0.9, 1.0)`` the remaining 10%; ranges that share a
  seed and do not overlap never share a row.
"""

from __future__ import annotations

import math
import random

from eapo.data.records import DataError

#: Named splits :func:`eapo.data.load` understands.
SPLIT_NAMES = ("train", "dev", "test", "all")
#: Other spellings accepted for the dev split.
SPLIT_ALIASES = {"valid": "dev", "validation": "dev", "val": "dev"}

Split = str | tuple[float, float]


def normalize_split(split: object) -> Split:
    """Return a split name from :data:`SPLIT_NAMES` or a ``(start, stop)`` fraction range.

    Accepts a name (or alias), a float ``f`` in ``(0, 1]`` (= ``(0.0, f)``), a 2-sequence
    ``(start, stop)`` with ``0 <= start < stop <= 1``, and the string forms ``"0.9"`` and
    ``"0.9:1.0"`` (for the command line and YAML).
    """
    if isinstance(split, str):
        text = split.strip().lower()
        if text in SPLIT_NAMES:
            return text
        if text in SPLIT_ALIASES:
            return SPLIT_ALIASES[text]
        try:
            if ":" in text:
                start, stop = text.split(":", 1)
                return _fraction_range(float(start or 0.0), float(stop or 1.0))
            return _fraction_range(0.0, float(text))
        except ValueError:
            pass
        raise DataError(
            f"unknown split {split!r}; use one of {', '.join(SPLIT_NAMES)}, a fraction such as 0.9 "
            "(the first 90% after a seeded shuffle) or a range such as (0.9, 1.0) / '0.9:1.0'"
        )
    if isinstance(split, bool):
        raise DataError(f"split must be a name, a fraction or a (start, stop) range, got {split!r}")
    if isinstance(split, int | float):
        return _fraction_range(0.0, float(split))
    if isinstance(split, tuple | list) and len(split) == 2:
        start, stop = split
        if isinstance(start, int | float) and isinstance(stop, int | float) and not isinstance(start, bool):
            return _fraction_range(float(start), float(stop))
    raise DataError(f"split must be a name, a fraction or a (start, stop) range, got {split!r}")


def _fraction_range(start: float, stop: float) -> tuple[float, float]:
    if not (math.isfinite(start) and math.isfinite(stop) and 0.0 <= start < stop <= 1.0):
        raise DataError(
            f"a fraction split needs 0 <= start < stop <= 1 (a float f means (0, f)), got ({start}, {stop})"
        )
    return (start, stop)


def seeded_permutation(n: int, seed: int) -> list[int]:
    """The positions ``0..n-1`` shuffled by ``random.Random(seed)``; the same for the same ``(n, seed)``."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


def fraction_indices(n: int, start: float, stop: float, seed: int) -> list[int]:
    """Row positions of the fraction range ``[start, stop)`` of a seeded shuffle of ``n`` rows."""
    lo, hi = round(start * n), round(stop * n)
    return seeded_permutation(n, seed)[lo:hi]


def dev_size(n: int, dev_fraction: float) -> int:
    """Rows in a carved dev split: ``round(dev_fraction·n)``, at least 1 when the fraction is > 0,
    and never all ``n`` rows (train keeps at least one)."""
    if not (math.isfinite(dev_fraction) and 0.0 <= dev_fraction < 1.0):
        raise DataError(f"dev_fraction must be in [0, 1), got {dev_fraction}")
    if n < 2 or dev_fraction == 0.0:
        return 0
    return min(max(1, round(dev_fraction * n)), n - 1)


def carve_dev(n: int, dev_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split ``n`` rows into ``(train_positions, dev_positions)``: dev is the first
    :func:`dev_size` positions of the seeded shuffle, train the rest (both in shuffled order)."""
    order = seeded_permutation(n, seed)
    k = dev_size(n, dev_fraction)
    return order[k:], order[:k]
