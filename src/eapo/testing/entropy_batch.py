"""One batch of per-token entropies with uneven lengths, and its ``H_t`` under each aggregation by hand.

The TRL trainer's test (``tests/train``) and the verl trainer's (``tests/verl_plugin``, run in verl's
environment) feed this same batch through their own paths and compare with :data:`H_T`, so the two
engines are held to one definition of the rollout entropy (``eapo.core.rollout_entropy``).

Rows (one per rollout; the third has no response token, like verl's padding rows)::

    [0.5, 1.0, 1.5]   sum 3, mean 1
    [2.0]             sum 2, mean 2
    []                counts in neither aggregation
    [1.0, 3.0]        sum 4, mean 2

token-mean = (3 + 2 + 4) / 6 = 1.5; seq-mean-token-mean = (1 + 2 + 2) / 3 = 5/3.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ROWS", "H_T", "padded"]

ROWS: tuple[tuple[float, ...], ...] = ((0.5, 1.0, 1.5), (2.0,), (), (1.0, 3.0))
H_T: dict[str, float] = {"token-mean": 1.5, "seq-mean-token-mean": 5.0 / 3.0}


def padded(padding: float = 7.0) -> tuple[Any, Any]:
    """``(entropies, mask)``, both ``(4, 3)`` float32, right-padded with ``padding`` (which must not count)."""
    import torch

    width = max(len(row) for row in ROWS)
    entropies = torch.full((len(ROWS), width), padding)
    mask = torch.zeros(len(ROWS), width)
    for index, row in enumerate(ROWS):
        if row:
            entropies[index, : len(row)] = torch.tensor(row)
            mask[index, : len(row)] = 1.0
    return entropies, mask
