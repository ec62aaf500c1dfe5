"""Hand-derived values for group_advantages, positive_mask and weight_advantages."""

from __future__ import annotations

import math

import pytest
import torch

from eapo.core import group_advantages, positive_mask, weight_advantages

F64 = torch.float64


def t64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


# ---------------------------------------------------------------------------------------------
# group_advantages
# ---------------------------------------------------------------------------------------------


def test_group_scale_two_groups_of_two():
    # [1, 2]: mean 1.5, centred ±0.5, unbiased std sqrt(0.5); [3, 5]: mean 4, centred ±1, std sqrt(2).
    eps = 1e-6
    got = group_advantages(t64([1.0, 2.0, 3.0, 5.0]), 2, eps=eps)
    a = 0.5 / (math.sqrt(0.5) + eps)
    b = 1.0 / (math.sqrt(2.0) + eps)
    torch.testing.assert_close(got, t64([-a, a, -b, b]), rtol=1e-14, atol=0)


def test_group_scale_binary_rewards_with_an_equal_group():
    # [0, 1, 1]: mean 2/3, centred (-2/3, 1/3, 1/3), unbiased var (4/9 + 1/9 + 1/9) / 2 = 1/3.
    # [0, 0, 0]: all equal -> exactly 0.
    got = group_advantages(t64([0.0, 1.0, 1.0, 0.0, 0.0, 0.0]), 3, eps=0.0)
    s3 = math.sqrt(3.0)
    expected = t64([-2 / 3 * s3, 1 / 3 * s3, 1 / 3 * s3, 0.0, 0.0, 0.0])
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-15)
    assert torch.equal(got[3:], torch.zeros(3, dtype=F64))


def test_batch_scale_divides_by_whole_batch_unbiased_std():
    # batch [0, 1, 1, 0, 0, 0]: mean 1/3, sum of squared deviations 2·(2/3)² + 4·(1/3)² = 4/3,
    # unbiased var 4/15. Centring is still per group.
    eps = 1e-6
    got = group_advantages(t64([0.0, 1.0, 1.0, 0.0, 0.0, 0.0]), 3, scale="batch", eps=eps)
    std = math.sqrt(4 / 15)
    expected = t64([-2 / 3, 1 / 3, 1 / 3, 0.0, 0.0, 0.0]) / (std + eps)
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=0)


def test_none_scale_only_centres():
    got = group_advantages(t64([1.0, 2.0, 6.0, 4.0, 4.0, 4.0]), 3, scale="none")
    torch.testing.assert_close(got, t64([-2.0, -1.0, 3.0, 0.0, 0.0, 0.0]), rtol=0, atol=1e-15)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("eps", [1e-6, 0.0])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -7.3, 1e6, 1e-30])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_reward_groups_give_exact_zeros(scale, eps, value, dtype):
    rewards = torch.full((8,), value, dtype=dtype)
    got = group_advantages(rewards, 4, scale=scale, eps=eps)
    assert got.dtype == dtype
    assert torch.equal(got, torch.zeros(8, dtype=dtype))


def test_equal_group_next_to_varied_group_stays_zero_in_batch_scale():
    got = group_advantages(t64([0.1, 0.1, 0.1, 0.0, 1.0, 0.5]), 3, scale="batch")
    assert torch.equal(got[:3], torch.zeros(3, dtype=F64))
    assert (got[3:] != 0).tolist() == [True, True, False]


def test_dtypes():
    assert group_advantages(torch.tensor([0.0, 1.0]), 2).dtype == torch.float32
    assert group_advantages(torch.tensor([0.0, 1.0], dtype=torch.bfloat16), 2).dtype == torch.bfloat16
    ints = group_advantages(torch.tensor([0, 1, 1, 1]), 2, eps=0.0)
    assert ints.dtype == torch.float32
    r = 0.5 / math.sqrt(0.5)
    torch.testing.assert_close(ints, torch.tensor([-r, r, 0.0, 0.0]), rtol=1e-6, atol=0)


def test_output_carries_no_gradient():
    rewards = torch.tensor([0.0, 1.0], requires_grad=True)
    assert not group_advantages(rewards, 2).requires_grad


@pytest.mark.parametrize("group_size", [1, 0, -2])
def test_group_size_below_two_is_rejected(group_size):
    with pytest.raises(ValueError, match=rf"group_size must be an integer >= 2.*got {group_size}"):
        group_advantages(torch.zeros(4), group_size)


def test_non_integer_group_size_is_rejected():
    with pytest.raises(ValueError, match=r"group_size must be an integer >= 2.*got 2\.0"):
        group_advantages(torch.zeros(4), 2.0)  # type: ignore[arg-type]


def test_length_not_divisible_by_group_size_is_rejected():
    with pytest.raises(ValueError, match=r"length 5, which is not divisible by group_size=2"):
        group_advantages(torch.zeros(5), 2)


@pytest.mark.parametrize(
    ("bad", "index"), [(float("nan"), 2), (float("inf"), 5), (float("-inf"), 0), (float("nan"), 3)]
)
def test_non_finite_reward_is_rejected_naming_its_index(bad, index):
    rewards = torch.zeros(6)
    rewards[index] = bad
    with pytest.raises(ValueError, match=rf"reward at index {index} is not finite \({bad}\)"):
        group_advantages(rewards, 3)
    with pytest.raises(ValueError, match=rf"reward at index {index} is not finite"):
        positive_mask(rewards, 3)


def test_first_non_finite_index_is_named():
    rewards = torch.tensor([0.0, 1.0, 2.0, float("nan"), 1.0, float("inf")])
    with pytest.raises(ValueError, match=r"index 3 "):
        group_advantages(rewards, 2)


def test_two_dimensional_rewards_are_rejected():
    with pytest.raises(ValueError, match=r"rewards must be 1-D.*\(2, 2\)"):
        group_advantages(torch.zeros(2, 2), 2)


def test_unknown_scale_is_rejected():
    with pytest.raises(ValueError, match=r"unknown advantage scale 'std'; known: 'group', 'batch', 'none'"):
        group_advantages(torch.zeros(4), 2, scale="std")  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # torch warns about the std of zero groups
def test_empty_batch_gives_empty_advantages():
    for scale in ("group", "batch", "none"):
        assert group_advantages(torch.zeros(0), 4, scale=scale).shape == (0,)


# ---------------------------------------------------------------------------------------------
# positive_mask
# ---------------------------------------------------------------------------------------------


def test_positive_mask_hand_values():
    rewards = t64([0.0, 1.0, 1.0, 3.0, 1.0, 2.0])  # means 2/3 and 2
    assert positive_mask(rewards, 3).tolist() == [False, True, True, True, False, True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reward_equal_to_mean_is_not_flipped_by_rounding(dtype):
    # In float64, (0.1 + 0.2 + 0.3) / 3 = 0.20000000000000004 > 0.2: a naive r >= mean says False.
    assert (t64([0.1, 0.2, 0.3]).mean() > 0.2).item()
    assert positive_mask(torch.tensor([0.1, 0.2, 0.3], dtype=dtype), 3).tolist() == [False, True, True]
    # The reward equal to the mean also gets an advantage of exactly 0, not -tiny.
    assert group_advantages(torch.tensor([0.1, 0.2, 0.3], dtype=dtype), 3)[1].item() == 0.0


@pytest.mark.parametrize(
    "group", [[0.7, 0.1, 0.4], [0.3, 0.6, 0.9], [1.1, 2.2, 3.3], [0.1, 0.15, 0.2], [-0.3, -0.2, -0.1]]
)
def test_decimal_means_that_round_badly_stay_positive(group):
    for dtype in (torch.float32, torch.float64):
        mask = positive_mask(torch.tensor(group, dtype=dtype), 3)
        middle = sorted(range(3), key=group.__getitem__)[1]
        assert mask[middle].item(), (group, dtype)


@pytest.mark.parametrize("value", [0.1, 1 / 3, 0.7, -2.9, 0.0, 1e8])
@pytest.mark.parametrize("by", ["mean", "median"])
def test_equal_group_is_all_positive(value, by):
    for dtype in (torch.float32, torch.float64):
        for group_size in (2, 3, 7, 16):
            rewards = torch.full((2 * group_size,), value, dtype=dtype)
            assert positive_mask(rewards, group_size, by=by).all()


def test_median_split_differs_from_mean_with_an_outlier():
    rewards = t64([1.0, 5.0, 100.0, 1.0, 2.0, 3.0])  # [1, 5, 100]: mean 35.3, median 5; [1, 2, 3]: both 2
    assert positive_mask(rewards, 3, by="mean").tolist() == [False, False, True, False, True, True]
    assert positive_mask(rewards, 3, by="median").tolist() == [False, True, True, False, True, True]


def test_median_of_even_group_interpolates_the_middle_pair():
    # [1, 2, 3, 100]: median 2.5 (mean 26.5); [1, 2, 2, 3]: median 2.
    rewards = t64([3.0, 1.0, 100.0, 2.0, 2.0, 1.0, 3.0, 2.0])
    assert positive_mask(rewards, 4, by="median").tolist() == [
        True,
        False,
        True,
        False,
        True,
        False,
        True,
        True,
    ]
    assert positive_mask(rewards, 4, by="mean").tolist() == [
        False,
        False,
        True,
        False,
        True,
        False,
        True,
        True,
    ]


def test_positive_mask_accepts_integer_and_bool_rewards():
    assert positive_mask(torch.tensor([0, 1, 2, 2]), 2).tolist() == [False, True, True, True]
    assert positive_mask(torch.tensor([True, False, True, True]), 2).tolist() == [True, False, True, True]


def test_positive_mask_errors():
    with pytest.raises(ValueError, match=r"unknown split 'mode'; known: 'mean' \(the paper\), 'median'"):
        positive_mask(torch.zeros(4), 2, by="mode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"group_size must be an integer >= 2"):
        positive_mask(torch.zeros(4), 1)
    with pytest.raises(ValueError, match=r"not divisible by group_size=3"):
        positive_mask(torch.zeros(4), 3)


# ---------------------------------------------------------------------------------------------
# weight_advantages
# ---------------------------------------------------------------------------------------------


def test_weight_advantages_per_sequence():
    advantages = t64([1.0, -2.0, 3.0, -4.0])
    positive = torch.tensor([True, False, True, False])
    got = weight_advantages(advantages, positive, 0.5, 2.0)
    assert torch.equal(got, t64([0.5, -4.0, 1.5, -8.0]))


def test_weight_advantages_per_token_broadcasts_over_tokens():
    advantages = t64([[1.0, 2.0, -3.0], [-1.0, 0.5, 4.0]])
    got = weight_advantages(advantages, torch.tensor([True, False]), 0.25, 3.0)
    assert torch.equal(got, t64([[0.25, 0.5, -0.75], [-3.0, 1.5, 12.0]]))


def test_weight_advantages_keeps_dtype_and_accepts_integer_mask():
    advantages = torch.tensor([2.0, -2.0], dtype=torch.bfloat16)
    got = weight_advantages(advantages, torch.tensor([1, 0]), 0.5, 0.0)
    assert got.dtype == torch.bfloat16
    assert got.tolist() == [1.0, 0.0]


def test_weight_advantages_is_differentiable_in_advantages():
    advantages = t64([1.0, -2.0]).requires_grad_()
    weight_advantages(advantages, torch.tensor([True, False]), 0.3, 0.7).sum().backward()
    assert advantages.grad is not None
    torch.testing.assert_close(advantages.grad, t64([0.3, 0.7]), rtol=0, atol=0)


def test_weight_advantages_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match=r"positive has 3 entries but advantages has 4 sequences"):
        weight_advantages(torch.zeros(4), torch.ones(3, dtype=torch.bool), 1.0, 1.0)
