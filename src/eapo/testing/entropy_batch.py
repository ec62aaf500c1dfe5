"""One batch of per-token entropies with uneven lengths, and its ``H_t`` under each aggregation by hand.

The TRL trainer's test (``tests/test_train.py``) and the verl trainer's (``tests/engines/verl``, run in verl's
environment) feed this same batch through their own paths and compare with :data:`H_T`, so the two
engines are held to one definition of the rollout entropy (``eapo.core.rollout_entropy``).

Rows (one per rollout; the third has no response token, like verl's padding rows)::

    [0.5, 1.0, 1.5]   sum 3, mean 1
    [2.0]             sum 2, mean 2
    []                counts in neither aggregation
    [1.0, 3.0]        sum 4, mean 2

token-mean = (3 + 2 + 4) / 6 = 1.5; seq-mean-token-mean = (1 + 2 + 2) / 3 = 5/3.

The whole step (:mod:`eapo.core.step`) on both engines: :data:`STEP_SCORES` are the rewards of eight
rollouts, two groups of four in TRL's contiguous layout (``ROWS`` twice as their per-token
entropies), two of them unscorable (NaN), so each group has three scored rollouts. Step ``t`` has the
entropies ``ROWS × STEP_ENTROPY_SCALES[t]``; :func:`step_expected` gives, by hand, what both engines
must produce for the ``eapo`` scheme at its defaults (w0 0.2, w_min 0, w_max 2, w- 1): ``H_t``,
``(w+, w-)``, the advantages, the metrics and the state after the step.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ROWS",
    "H_T",
    "padded",
    "STEP_SCORES",
    "STEP_GROUP_SIZE",
    "STEP_ENTROPY_SCALES",
    "step_rows",
    "step_expected",
]

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


# --- the whole step ------------------------------------------------------------------------------

NAN = float("nan")
#: Rewards, groups of :data:`STEP_GROUP_SIZE` contiguous rows; NaN: unscorable.
STEP_SCORES: tuple[float, ...] = (0.9, NAN, 0.4, 0.2, 0.1, 0.6, NAN, 0.2)
STEP_GROUP_SIZE = 4
#: Step t's per-token entropies are ``ROWS`` (twice) times this: H_t = 1.5, 1.8 under token-mean.
STEP_ENTROPY_SCALES: tuple[float, ...] = (1.0, 1.2)


def step_rows(step: int) -> tuple[tuple[float, ...], ...]:
    """The eight rollouts' per-token entropies at ``step`` (0-based): ``ROWS`` twice, scaled."""
    scale = STEP_ENTROPY_SCALES[step]
    return tuple(tuple(value * scale for value in row) for row in ROWS + ROWS)


def step_expected(step: int, *, eps: float, agg: str = "token-mean") -> dict[str, Any]:
    """What the ``eapo`` scheme's step ``step`` (0-based, after the earlier steps) must give on both
    engines: ``advantages`` (8 floats), ``metrics`` and ``state``, computed here by hand."""
    h = [H_T[agg] * scale for scale in STEP_ENTROPY_SCALES]
    h0 = h[0]
    w_pos = 0.2 if step == 0 else min(max(0.2 * h[step] / h0, 0.0), 2.0)
    w_neg = 1.0
    advantages = [0.0] * len(STEP_SCORES)
    positives = 0
    for start in range(0, len(STEP_SCORES), STEP_GROUP_SIZE):
        rows = [i for i in range(start, start + STEP_GROUP_SIZE) if STEP_SCORES[i] == STEP_SCORES[i]]
        values = [STEP_SCORES[i] for i in rows]
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        for i, value in zip(rows, values, strict=True):
            positive = value >= mean
            positives += positive
            advantages[i] = (w_pos if positive else w_neg) * (value - mean) / (std + eps)
    scored = sum(1 for value in STEP_SCORES if value == value)
    return {
        "advantages": advantages,
        "metrics": {
            "entropy/rollout": h[step],
            "eapo/H0": h0,
            "eapo/w_pos": w_pos,
            "eapo/w_neg": w_neg,
            "eapo/frac_positive": positives / scored,
            "eapo/num_unscored": float(len(STEP_SCORES) - scored),
        },
        "state": {
            "method": "eapo",
            "first_entropy": h0,
            "controls": {},
            "weighting": {
                "name": "eapo",
                "w0": 0.2,
                "w_min": 0.0,
                "w_max": 2.0,
                "w_neg": 1.0,
                "anchor_steps": 1,
                "anchor_sum": h0,
                "anchor_count": 1,
            },
        },
    }
