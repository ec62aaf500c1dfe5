"""Hypothesis property tests for the invariants eapo.core promises."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eapo.core import (
    EntropyAdaptiveWeighting,
    group_advantages,
    make_weighting,
    positive_mask,
    weight_advantages,
)

FAST = settings(max_examples=60, deadline=None)

entropies = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
weights = st.floats(min_value=0.0, max_value=5.0, allow_nan=False)
scales = st.sampled_from(["group", "batch", "none"])
float_dtypes = st.sampled_from([torch.float32, torch.float64])


@st.composite
def weight_settings(draw):
    w_min = draw(weights)
    w_max = draw(st.floats(min_value=w_min, max_value=w_min + 5.0))
    return {
        "w0": draw(weights),
        "w_min": w_min,
        "w_max": w_max,
        "anchor_steps": draw(st.integers(min_value=1, max_value=4)),
    }


@st.composite
def grouped_rewards(draw, max_groups: int = 5, max_group_size: int = 8):
    group_size = draw(st.integers(min_value=2, max_value=max_group_size))
    num_prompts = draw(st.integers(min_value=1, max_value=max_groups))
    values = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=32)
    return draw(
        st.lists(values, min_size=group_size * num_prompts, max_size=group_size * num_prompts)
    ), group_size


# ---------------------------------------------------------------------------------------------
# Eq. dynamic_weight
# ---------------------------------------------------------------------------------------------


@FAST
@given(config=weight_settings(), trajectory=st.lists(entropies, min_size=1, max_size=12))
def test_w_pos_always_within_bounds(config, trajectory):
    weight = EntropyAdaptiveWeighting(**config)
    for entropy in trajectory:
        assert config["w_min"] <= weight.update(entropy) <= config["w_max"]


@FAST
@given(config=weight_settings(), trajectory=st.lists(entropies, min_size=1, max_size=12))
def test_w_pos_is_the_clipped_entropy_ratio(config, trajectory):
    weight = EntropyAdaptiveWeighting(**config)
    k = config["anchor_steps"]
    for step, entropy in enumerate(trajectory):
        got = weight.update(entropy)
        if step < k:
            expected = config["w0"]
        else:
            h0 = math.fsum(trajectory[:k]) / k
            expected = config["w0"] * entropy / h0
        expected = min(max(expected, config["w_min"]), config["w_max"])
        assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-300)


@FAST
@given(
    config=weight_settings(),
    trajectory=st.lists(entropies, min_size=2, max_size=12),
    data=st.data(),
)
def test_state_round_trip_gives_the_same_next_weights(config, trajectory, data):
    split = data.draw(st.integers(min_value=0, max_value=len(trajectory) - 1))
    original = EntropyAdaptiveWeighting(**config)
    for entropy in trajectory[:split]:
        original.update(entropy)
    resumed = EntropyAdaptiveWeighting(**config)
    resumed.load_state_dict(original.state_dict())
    for entropy in trajectory[split:]:
        assert resumed.update(entropy) == original.update(entropy)


@FAST
@given(
    name=st.sampled_from(["grpo", "psr", "nsr", "w_reinforce", "eapo"]),
    trajectory=st.lists(entropies, min_size=2, max_size=8),
    data=st.data(),
)
def test_scheme_state_round_trip_gives_the_same_next_weights(name, trajectory, data):
    split = data.draw(st.integers(min_value=0, max_value=len(trajectory) - 1))
    original = make_weighting(name)
    for entropy in trajectory[:split]:
        original.weights(entropy)
    resumed = make_weighting(name)
    resumed.load_state_dict(original.state_dict())
    assert [resumed.weights(h) for h in trajectory[split:]] == [
        original.weights(h) for h in trajectory[split:]
    ]


# ---------------------------------------------------------------------------------------------
# Advantages and polarity
# ---------------------------------------------------------------------------------------------


@FAST
@given(
    batch=grouped_rewards(),
    w_pos=st.floats(min_value=1e-3, max_value=10.0),
    w_neg=st.floats(min_value=1e-3, max_value=10.0),
    scale=scales,
    dtype=float_dtypes,
)
def test_weighted_advantages_keep_the_sign_of_the_advantages(batch, w_pos, w_neg, scale, dtype):
    values, group_size = batch
    rewards = torch.tensor(values, dtype=dtype)
    advantages = group_advantages(rewards, group_size, scale=scale)
    positive = positive_mask(rewards, group_size)
    weighted = weight_advantages(advantages, positive, w_pos, w_neg)
    assert torch.equal(torch.sign(weighted), torch.sign(advantages))
    # Polarity and advantage agree: A > 0 only on D+, A < 0 only on D-.
    assert not (advantages > 0)[~positive].any()
    assert not (advantages < 0)[positive].any()


@FAST
@given(
    values=st.lists(
        st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32), min_size=1, max_size=6
    ),
    group_size=st.integers(min_value=2, max_value=9),
    scale=scales,
    eps=st.sampled_from([1e-6, 0.0]),
    dtype=float_dtypes,
)
def test_equal_reward_groups_give_zero_advantages_and_are_all_positive(values, group_size, scale, eps, dtype):
    rewards = torch.tensor(values, dtype=dtype).repeat_interleave(group_size)  # one constant group per value
    assert torch.equal(group_advantages(rewards, group_size, scale=scale, eps=eps), torch.zeros_like(rewards))
    assert positive_mask(rewards, group_size).all()
    assert positive_mask(rewards, group_size, by="median").all()


@FAST
@given(
    centre=st.integers(min_value=-1000, max_value=1000),
    offsets=st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=4),
    unit=st.sampled_from([0.1, 0.2, 0.3, 1 / 3, 0.7, 1e-3, 3.14159, 1e3]),
    dtype=float_dtypes,
    permutation_seed=st.integers(min_value=0, max_value=2**16),
)
def test_reward_equal_to_the_mean_is_positive_with_zero_advantage(
    centre, offsets, unit, dtype, permutation_seed
):
    # [c, c ± d_1, ..., c ± d_k] · unit has mean exactly c · unit in real arithmetic; each value is
    # rounded separately, so a naive float mean lands a few units of rounding away from it.
    integers = [centre] + [centre + d for d in offsets] + [centre - d for d in offsets]
    order = torch.randperm(len(integers), generator=torch.Generator().manual_seed(permutation_seed)).tolist()
    integers = [integers[i] for i in order]
    rewards = torch.tensor([k * unit for k in integers], dtype=dtype)
    where = integers.index(centre)
    assert positive_mask(rewards, len(integers))[where]
    assert group_advantages(rewards, len(integers))[where].item() == 0.0
    # Every other reward is split exactly as integer arithmetic says.
    expected = [k >= centre for k in integers]
    assert positive_mask(rewards, len(integers)).tolist() == expected


@FAST
@given(
    eighths=st.lists(st.integers(min_value=-8000, max_value=8000), min_size=2, max_size=24),
    group_size=st.sampled_from([2, 3, 4]),
    scale=scales,
    shift_eighths=st.integers(min_value=-800, max_value=800),
)
def test_advantages_are_shift_invariant(eighths, group_size, scale, shift_eighths):
    # Multiples of 1/8 are exact in float64, so r + shift is exact and only the mean rounds.
    eighths = eighths[: len(eighths) // group_size * group_size] or [0] * group_size
    rewards = torch.tensor(eighths, dtype=torch.float64) / 8
    shifted = torch.tensor([k + shift_eighths for k in eighths], dtype=torch.float64) / 8
    a = group_advantages(rewards, group_size, scale=scale)
    b = group_advantages(shifted, group_size, scale=scale)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.equal(a == 0, b == 0)
