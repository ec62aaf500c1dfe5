"""H_t by eapo.core.rollout_entropy: hand values, the all-reduce contract, and the vLLM importance weights."""

from __future__ import annotations

import math

import pytest
import torch

from eapo.core import (
    ENTROPY_AGGREGATIONS,
    IMPORTANCE_CORRECTIONS,
    entropy_sums,
    importance_correction,
    importance_correction_counts,
    rollout_entropy,
)
from eapo.testing import entropy_batch

# ---------------------------------------------------------------------------------------------
# rollout_entropy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", ENTROPY_AGGREGATIONS)
def test_shared_batch_hand_values(agg):
    entropies, mask = entropy_batch.padded()
    assert rollout_entropy(entropies, mask, agg=agg) == pytest.approx(entropy_batch.H_T[agg], rel=1e-12)


def test_the_two_aggregations_differ_exactly_when_lengths_do():
    entropies, mask = entropy_batch.padded()
    assert entropy_batch.H_T["token-mean"] != entropy_batch.H_T["seq-mean-token-mean"]
    # equal lengths: every sequence has as many tokens, so both weightings agree
    equal = torch.tensor([[0.2, 0.4], [1.0, 3.0], [0.7, 0.1]])
    ones = torch.ones_like(equal)
    assert rollout_entropy(equal, ones, agg="token-mean") == pytest.approx(
        rollout_entropy(equal, ones, agg="seq-mean-token-mean"), rel=1e-12
    )


def test_default_is_token_mean_and_sums_are_the_numerator_and_denominator():
    entropies, mask = entropy_batch.padded()
    assert rollout_entropy(entropies, mask) == 1.5
    torch.testing.assert_close(entropy_sums(entropies, mask), torch.tensor([9.0, 6.0], dtype=torch.float64))
    torch.testing.assert_close(
        entropy_sums(entropies, mask, "seq-mean-token-mean"), torch.tensor([5.0, 3.0], dtype=torch.float64)
    )


@pytest.mark.parametrize("agg", ENTROPY_AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summed_shards_equal_the_whole_batch(agg, seed):
    """What the trainer's all-reduce does: each process's sums, added, give the H_t of the union."""
    generator = torch.Generator().manual_seed(seed)
    entropies = torch.rand(12, 9, generator=generator) * 3
    lengths = torch.randint(0, 10, (12,), generator=generator)
    mask = (torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)).float()
    whole = rollout_entropy(entropies, mask, agg=agg)
    shards = [entropy_sums(entropies[i : i + 4], mask[i : i + 4], agg) for i in range(0, 12, 4)]
    total = torch.stack(shards).sum(dim=0)
    assert rollout_entropy(entropies[:4], mask[:4], agg=agg, reduce=lambda _: total) == pytest.approx(
        whole, rel=1e-12
    )
    # and by hand from the definition
    rows = [entropies[i, : int(n)] for i, n in enumerate(lengths)]
    if agg == "token-mean":
        expected = float(torch.cat(rows).double().sum() / max(int(lengths.sum()), 1))
    else:
        means = [float(row.double().mean()) for row in rows if row.numel()]
        expected = sum(means) / max(len(means), 1)
    assert whole == pytest.approx(expected, rel=1e-12)


def test_bool_mask_and_no_gradient():
    entropies, mask = entropy_batch.padded()
    entropies.requires_grad_(True)
    sums = entropy_sums(entropies, mask.bool(), "token-mean")
    assert not sums.requires_grad and sums.dtype == torch.float64
    assert rollout_entropy(entropies, mask.bool()) == 1.5


def test_empty_mask_gives_zero_and_errors_name_the_problem():
    assert rollout_entropy(torch.ones(2, 3), torch.zeros(2, 3), agg="seq-mean-token-mean") == 0.0
    with pytest.raises(ValueError, match="unknown entropy aggregation 'seq-mean'; known: token-mean"):
        rollout_entropy(torch.ones(2, 3), torch.ones(2, 3), agg="seq-mean")
    with pytest.raises(ValueError, match=r"must have one shape \(B, T\)"):
        rollout_entropy(torch.ones(2, 3), torch.ones(2, 4))


# ---------------------------------------------------------------------------------------------
# importance_correction (TRL 1.16's vllm_importance_sampling_mode)
# ---------------------------------------------------------------------------------------------


def _logps():
    # log-ratios log π_old − log π_vllm per token: row 0 [ln 2, ln 2], row 1 [ln 4, −ln 8 (masked), ...]
    ln = math.log
    old = torch.tensor(
        [[ln(2.0), ln(2.0), 0.0], [ln(4.0), 0.0, 0.0], [0.0, ln(0.1), 0.0]], dtype=torch.float64
    )
    sampling = torch.zeros(3, 3, dtype=torch.float64)
    sampling[1, 1] = ln(8.0)  # masked: must not count
    sampling[2, 2] = math.nan  # vLLM gave no log-prob: ratio 1
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float64)
    return old, sampling, mask


def test_token_truncate_hand_values():
    old, sampling, mask = _logps()
    weights, affected = importance_correction(old, sampling, mask, mode="token_truncate", clip_max=3.0)
    # token ratios: row 0 [2, 2, 1], row 1 [4 → 3, 1, 1], row 2 [1, 0.1, 1]
    expected = torch.tensor([[2.0, 2.0, 1.0], [3.0, 1.0, 1.0], [1.0, 0.1, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    assert affected.tolist() == [[False, False, False], [True, False, False], [False, False, False]]
    # with C_min = 0.5 the 0.1 is raised to 0.5 too
    weights, affected = importance_correction(old, sampling, mask, mode="token_truncate", clip_min=0.5)
    assert weights[2, 1].item() == pytest.approx(0.5) and affected[2, 1]


def test_token_mask_zeroes_out_of_range_tokens():
    old, sampling, mask = _logps()
    weights, affected = importance_correction(
        old, sampling, mask, mode="token_mask", clip_min=0.5, clip_max=3.0
    )
    expected = torch.tensor([[2.0, 2.0, 1.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    counts = importance_correction_counts(affected, mask)
    # tokens: 2 of 6 unmasked affected; rows: 1 and 2 of 3
    torch.testing.assert_close(counts, torch.tensor([2.0, 6.0, 2.0, 3.0], dtype=torch.float64))


def test_sequence_modes_use_the_product_of_token_ratios():
    old, sampling, mask = _logps()
    # sequence ratios: row 0: 2·2 = 4, row 1: 4, row 2: 0.1
    weights, affected = importance_correction(old, sampling, mask, mode="sequence_mask", clip_max=3.0)
    assert weights.shape == (3, 1)
    torch.testing.assert_close(weights[:, 0], torch.tensor([0.0, 0.0, 0.1], dtype=torch.float64))
    counts = importance_correction_counts(affected, mask)
    # rows 0 and 1 zeroed: their 3 tokens of 6; 2 rows of 3
    torch.testing.assert_close(counts, torch.tensor([3.0, 6.0, 2.0, 3.0], dtype=torch.float64))
    weights, affected = importance_correction(old, sampling, mask, mode="sequence_truncate", clip_max=3.0)
    torch.testing.assert_close(weights[:, 0], torch.tensor([3.0, 3.0, 0.1], dtype=torch.float64))
    assert affected[:, 0].tolist() == [True, True, False]


def test_rows_without_tokens_count_in_neither_and_bad_modes_are_named():
    affected = torch.tensor([[True], [False]])
    mask = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    torch.testing.assert_close(
        importance_correction_counts(affected, mask), torch.tensor([0.0, 2.0, 0.0, 1.0], dtype=torch.float64)
    )
    assert IMPORTANCE_CORRECTIONS[-1] == "none"
    for mode in ("none", "sequence"):
        with pytest.raises(
            ValueError, match="valid: token_truncate, token_mask, sequence_truncate, sequence_mask$"
        ):
            importance_correction(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), mode=mode)
