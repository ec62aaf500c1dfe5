"""Loop-versus-vectorised equivalence: eapo.core against naive per-group / per-token Python loops.

The references below are deliberately plain Python (floats, ``fractions.Fraction``, ``statistics``)
so that they share no code, and no tensor broadcasting, with the implementation they check.
"""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import pytest
import torch

from eapo.core import (
    aggregate_loss,
    group_advantages,
    kl_penalty,
    masked_mean,
    positive_mask,
    ppo_clip_per_token,
    weight_advantages,
)

SEEDS = range(12)
REWARD_KINDS = ["normal", "binary", "dyadic"]


# ---------------------------------------------------------------------------------------------
# Naive references
# ---------------------------------------------------------------------------------------------


def ref_group_advantages(rewards: list[float], group_size: int, scale: str, eps: float) -> list[float]:
    batch_std = statistics.stdev(rewards)
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        if all(r == group[0] for r in group):
            out.extend([0.0] * group_size)
            continue
        mean = math.fsum(group) / group_size
        for r in group:
            if scale == "group":
                out.append((r - mean) / (statistics.stdev(group) + eps))
            elif scale == "batch":
                out.append((r - mean) / (batch_std + eps))
            else:
                out.append(r - mean)
    return out


def ref_positive_mask(rewards: list[float], group_size: int, by: str) -> list[bool]:
    """Exact rational arithmetic: no rounding can flip a comparison."""
    out: list[bool] = []
    for start in range(0, len(rewards), group_size):
        group = [Fraction(r) for r in rewards[start : start + group_size]]
        centre = sum(group) / group_size if by == "mean" else statistics.median(group)
        out.extend(r >= centre for r in group)
    return out


def ref_weight_advantages(advantages: list, positive: list[bool], w_pos: float, w_neg: float) -> list:
    out = []
    for row, is_positive in zip(advantages, positive, strict=True):
        weight = w_pos if is_positive else w_neg
        out.append([weight * a for a in row] if isinstance(row, list) else weight * row)
    return out


def ref_policy_loss(logp, old_logp, advantages, mask, clip_low, clip_high, agg):
    """The PPO-clip loss of Eq. ``grpo`` (no KL term) from nested loops over sequences and tokens."""
    per_sequence_sums, per_sequence_counts = [], []
    for i in range(len(logp)):
        total = count = 0.0
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            advantage = advantages[i][t] if isinstance(advantages[i], list) else advantages[i]
            ratio = math.exp(logp[i][t] - old_logp[i][t])
            unclipped = ratio * advantage
            clipped = min(max(ratio, 1 - clip_low), 1 + clip_high) * advantage
            total += -min(unclipped, clipped)
            count += 1
        per_sequence_sums.append(total)
        per_sequence_counts.append(count)
    n_tokens = sum(per_sequence_counts)
    if agg == "token-mean":
        loss = sum(per_sequence_sums) / max(n_tokens, 1)
    elif agg == "seq-mean-token-mean":
        means = [s / max(c, 1) for s, c in zip(per_sequence_sums, per_sequence_counts, strict=True)]
        loss = sum(means) / len(means)
    else:
        loss = sum(per_sequence_sums) / len(per_sequence_sums)
    return loss


def ref_kl(logp: float, ref_logp: float, kind: str) -> float:
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    return math.exp(ref_logp - logp) - (ref_logp - logp) - 1


# ---------------------------------------------------------------------------------------------
# Random inputs
# ---------------------------------------------------------------------------------------------


def random_rewards(seed: int, kind: str, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    gen = torch.Generator().manual_seed(seed)
    num_prompts = int(torch.randint(1, 7, (1,), generator=gen))
    group_size = int(torch.randint(2, 9, (1,), generator=gen))
    n = num_prompts * group_size
    if kind == "normal":
        rewards = torch.randn(n, generator=gen, dtype=torch.float64) * 3 + 1
    elif kind == "binary":
        rewards = torch.randint(0, 2, (n,), generator=gen).to(torch.float64)
    else:  # dyadic values: exact in every float type, many ties and many means that are hit exactly
        rewards = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)[
            torch.randint(0, 4, (n,), generator=gen)
        ]
    if n > group_size:  # make one group constant
        rewards[:group_size] = rewards[0]
    if torch.unique(rewards).numel() == 1:  # keep the batch std non-zero
        rewards[-1] += 1.0
    return rewards.to(dtype), group_size


# ---------------------------------------------------------------------------------------------
# Equivalence tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", REWARD_KINDS)
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_group_advantages_match_loop(seed, kind, scale, dtype):
    rewards, group_size = random_rewards(seed, kind, dtype)
    values = rewards.tolist()
    got = group_advantages(rewards, group_size, scale=scale)
    expected = torch.tensor(ref_group_advantages(values, group_size, scale, 1e-6), dtype=dtype)
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(got, expected, **tol)
    assert torch.equal(got == 0, expected == 0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", REWARD_KINDS)
@pytest.mark.parametrize("by", ["mean", "median"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_positive_mask_matches_exact_loop(seed, kind, by, dtype):
    rewards, group_size = random_rewards(seed, kind, dtype)
    expected = ref_positive_mask(rewards.tolist(), group_size, by)
    assert positive_mask(rewards, group_size, by=by).tolist() == expected


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("per_token", [False, True])
def test_weight_advantages_match_loop(seed, per_token):
    gen = torch.Generator().manual_seed(seed)
    batch, tokens = (int(x) for x in torch.randint(1, 9, (2,), generator=gen))
    shape = (batch, tokens) if per_token else (batch,)
    advantages = torch.randn(*shape, generator=gen, dtype=torch.float64)
    positive = torch.rand(batch, generator=gen) < 0.5
    w_pos, w_neg = torch.rand(2, generator=gen, dtype=torch.float64).tolist()
    expected = ref_weight_advantages(advantages.tolist(), positive.tolist(), w_pos, w_neg)
    got = weight_advantages(advantages, positive, w_pos, w_neg)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_mean_matches_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    rows, cols = (int(x) for x in torch.randint(1, 9, (2,), generator=gen))
    values = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    mask = torch.rand(rows, cols, generator=gen) < 0.6
    kept = [
        v
        for vr, mr in zip(values.tolist(), mask.tolist(), strict=True)
        for v, m in zip(vr, mr, strict=True)
        if m
    ]
    expected_all = math.fsum(kept) / len(kept) if kept else 0.0
    assert masked_mean(values, mask).item() == pytest.approx(expected_all, rel=1e-12, abs=1e-14)
    expected_rows = []
    for vr, mr in zip(values.tolist(), mask.tolist(), strict=True):
        row = [v for v, m in zip(vr, mr, strict=True) if m]
        expected_rows.append(math.fsum(row) / len(row) if row else 0.0)
    torch.testing.assert_close(
        masked_mean(values, mask, dim=-1),
        torch.tensor(expected_rows, dtype=torch.float64),
        rtol=1e-12,
        atol=1e-14,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("per_token", [False, True])
def test_policy_loss_matches_loop(seed, agg, per_token):
    gen = torch.Generator().manual_seed(seed)
    batch, tokens = (int(x) for x in torch.randint(1, 9, (2,), generator=gen))
    old_logp = -torch.rand(batch, tokens, generator=gen, dtype=torch.float64) * 4
    logp = old_logp + torch.randn(batch, tokens, generator=gen, dtype=torch.float64) * 0.4
    shape = (batch, tokens) if per_token else (batch,)
    advantages = torch.randn(*shape, generator=gen, dtype=torch.float64)
    mask = (torch.rand(batch, tokens, generator=gen) < 0.7).to(torch.float64)
    clip_low, clip_high = 0.2, float(torch.empty(1).uniform_(0.2, 0.3, generator=gen))
    per_token = ppo_clip_per_token(logp, old_logp, advantages, clip_low=clip_low, clip_high=clip_high)
    loss = aggregate_loss(per_token, mask, agg)
    expected_loss = ref_policy_loss(
        logp.tolist(), old_logp.tolist(), advantages.tolist(), mask.tolist(), clip_low, clip_high, agg
    )
    assert loss.item() == pytest.approx(expected_loss, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_penalty_matches_loop(seed, kind):
    gen = torch.Generator().manual_seed(seed)
    batch, tokens = (int(x) for x in torch.randint(1, 9, (2,), generator=gen))
    logp = -torch.rand(batch, tokens, generator=gen, dtype=torch.float64) * 5
    ref_logp = -torch.rand(batch, tokens, generator=gen, dtype=torch.float64) * 5
    expected = [
        [ref_kl(a, b, kind) for a, b in zip(row_a, row_b, strict=True)]
        for row_a, row_b in zip(logp.tolist(), ref_logp.tolist(), strict=True)
    ]
    got = kl_penalty(logp, ref_logp, kind=kind)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-13, atol=1e-14)
