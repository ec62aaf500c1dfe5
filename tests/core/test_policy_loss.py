"""Hand-derived values and gradients for the paper's PPO-clip objective (ppo_clip_per_token aggregated by
aggregate_loss), aggregate_loss and kl_penalty."""

from __future__ import annotations

import math

import pytest
import torch

from eapo.core import KL_ESTIMATORS, LOSS_AGGREGATIONS, aggregate_loss, kl_penalty, ppo_clip_per_token

F64 = torch.float64

# A hand-worked batch: old_logp = 0, so the ratio ρ = exp(logp) is set directly.
#   seq 0, A = +1, ratios (1.0, 1.5, 0.5), mask (1, 1, 1):
#     ρ=1.0: min(1.0, 1.0) = 1.0            -> -1.0
#     ρ=1.5: min(1.5, 1.2) = 1.2  (clipped) -> -1.2
#     ρ=0.5: min(0.5, 0.8) = 0.5            -> -0.5   (A > 0: no clip below)
#   seq 1, A = -2, ratios (0.5, 1.5, 1.1), mask (1, 1, 0):
#     ρ=0.5: min(-1.0, -1.6) = -1.6 (clipped) -> 1.6
#     ρ=1.5: min(-3.0, -2.4) = -3.0           -> 3.0  (A < 0: no clip above)
#     ρ=1.1: padding                          -> ignored
RATIOS = [[1.0, 1.5, 0.5], [0.5, 1.5, 1.1]]
ADVANTAGES = [1.0, -2.0]
MASK = [[1, 1, 1], [1, 1, 0]]


def policy_loss(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"):
    """Eq. ``grpo`` without the KL term, from eapo.core's two pieces (as the TRL engine forms it)."""
    per_token = ppo_clip_per_token(logp, old_logp, advantages, clip_low=clip_low, clip_high=clip_high)
    return aggregate_loss(per_token, mask, agg)


def hand_batch():
    logp = torch.log(torch.tensor(RATIOS, dtype=F64))
    return logp, torch.zeros_like(logp), torch.tensor(ADVANTAGES, dtype=F64), torch.tensor(MASK, dtype=F64)


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("token-mean", (-1.0 - 1.2 - 0.5 + 1.6 + 3.0) / 5),  # 0.38
        ("seq-mean-token-mean", ((-1.0 - 1.2 - 0.5) / 3 + (1.6 + 3.0) / 2) / 2),  # (-0.9 + 2.3) / 2 = 0.7
        ("seq-mean-token-sum", ((-1.0 - 1.2 - 0.5) + (1.6 + 3.0)) / 2),  # 0.95
    ],
)
def test_policy_loss_hand_values(agg, expected):
    logp, old_logp, advantages, mask = hand_batch()
    loss = policy_loss(logp, old_logp, advantages, mask, agg=agg)
    assert loss.shape == ()
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_default_aggregation_is_the_papers_seq_mean_token_mean():
    logp, old_logp, advantages, mask = hand_batch()
    assert aggregate_loss(ppo_clip_per_token(logp, old_logp, advantages), mask).item() == pytest.approx(
        0.7, rel=1e-12
    )


def test_asymmetric_clip_range():
    # clip_low = 0.1, clip_high = 0.3: ρ=1.5, A=+1 -> 1.3; ρ=0.5, A=-2 -> 0.9·(-2) = -1.8.
    logp, old_logp, advantages, mask = hand_batch()
    loss = policy_loss(logp, old_logp, advantages, mask, clip_low=0.1, clip_high=0.3, agg="token-mean")
    assert loss.item() == pytest.approx((-1.0 - 1.3 - 0.5 + 1.8 + 3.0) / 5, rel=1e-12)


def test_no_clipping_inside_the_trust_region():
    logp = torch.log(torch.tensor([[0.9, 1.1, 1.0]], dtype=F64))
    loss = policy_loss(logp, torch.zeros_like(logp), torch.tensor([0.5], dtype=F64), torch.ones(1, 3))
    assert loss.item() == pytest.approx(-0.5 * (0.9 + 1.1 + 1.0) / 3, rel=1e-12)


def test_per_token_advantages_equal_broadcast_per_sequence_ones():
    logp, old_logp, advantages, mask = hand_batch()
    for agg in LOSS_AGGREGATIONS:
        per_sequence = policy_loss(logp, old_logp, advantages, mask, agg=agg)
        per_token = policy_loss(logp, old_logp, advantages[:, None].expand(2, 3), mask, agg=agg)
        assert per_token.item() == pytest.approx(per_sequence.item(), rel=1e-15)


def test_per_token_advantages_hand_values():
    logp = torch.log(torch.tensor([[1.5, 1.5]], dtype=F64))
    advantages = torch.tensor([[1.0, -1.0]], dtype=F64)
    # token 0: min(1.5, 1.2) = 1.2 (clipped); token 1: min(-1.5, -1.2) = -1.5.
    loss = policy_loss(logp, torch.zeros_like(logp), advantages, torch.ones(1, 2), agg="token-mean")
    assert loss.item() == pytest.approx((-1.2 + 1.5) / 2, rel=1e-12)


def test_gradient_hand_values_token_mean():
    # d/dlogp of -ρA/N is -ρA/N on unclipped tokens and 0 where the clipped branch is active.
    logp, old_logp, advantages, mask = hand_batch()
    logp.requires_grad_()
    old_logp.requires_grad_()
    policy_loss(logp, old_logp, advantages, mask, agg="token-mean").backward()
    expected = torch.tensor([[-1.0 / 5, 0.0, -0.5 / 5], [0.0, 3.0 / 5, 0.0]], dtype=F64)
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)
    assert old_logp.grad is None  # no gradient into the behaviour policy


def test_gradient_hand_values_seq_mean_token_mean():
    logp, old_logp, advantages, mask = hand_batch()
    logp.requires_grad_()
    policy_loss(logp, old_logp, advantages, mask).backward()
    # seq 0 has 3 tokens, seq 1 has 2; then the mean over 2 sequences.
    expected = torch.tensor([[-1.0 / 6, 0.0, -0.5 / 6], [0.0, 3.0 / 4, 0.0]], dtype=F64)
    torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)


def test_bool_mask_equals_float_mask():
    logp, old_logp, advantages, mask = hand_batch()
    for agg in LOSS_AGGREGATIONS:
        a = policy_loss(logp, old_logp, advantages, mask, agg=agg)
        b = policy_loss(logp, old_logp, advantages, mask.bool(), agg=agg)
        assert a.item() == b.item()


def test_policy_loss_errors():
    logp, old_logp, advantages, mask = hand_batch()
    with pytest.raises(
        ValueError, match=r"unknown loss aggregation 'sum'; known: token-mean, seq-mean-token-mean"
    ):
        policy_loss(logp, old_logp, advantages, mask, agg="sum")


def _random_point(seed: int, per_token: bool, clip_low: float, clip_high: float):
    """Small float64 inputs whose ratios stay at least 1e-3 away from the clip boundaries."""
    gen = torch.Generator().manual_seed(seed)
    ratios = torch.empty(3, 4, dtype=F64).uniform_(0.5, 1.6, generator=gen)
    near_boundary = ((ratios - (1 - clip_low)).abs() < 1e-3) | ((ratios - (1 + clip_high)).abs() < 1e-3)
    ratios = torch.where(near_boundary, torch.full_like(ratios, 1.0), ratios)
    old_logp = -torch.rand(3, 4, dtype=F64, generator=gen) * 3
    logp = old_logp + torch.log(ratios)
    shape = (3, 4) if per_token else (3,)
    advantages = torch.randn(*shape, dtype=F64, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=F64)
    return logp, old_logp, advantages, mask


@pytest.mark.parametrize("agg", list(LOSS_AGGREGATIONS))
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.2, 0.28)])
def test_policy_loss_gradcheck(agg, per_token, clip):
    clip_low, clip_high = clip
    logp, old_logp, advantages, mask = _random_point(len(agg) + 7 * per_token, per_token, clip_low, clip_high)
    ratios = torch.exp(logp - old_logp)
    assert ((ratios - (1 - clip_low)).abs() > 1e-4).all() and ((ratios - (1 + clip_high)).abs() > 1e-4).all()
    # Both branches of the clip must be exercised for the check to mean something.
    assert ((ratios > 1 + clip_high) | (ratios < 1 - clip_low)).any()

    def loss_of(logp_, advantages_):
        return policy_loss(
            logp_, old_logp, advantages_, mask, clip_low=clip_low, clip_high=clip_high, agg=agg
        )

    inputs = (logp.clone().requires_grad_(), advantages.clone().requires_grad_())
    assert torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)
    assert torch.autograd.gradgradcheck(loss_of, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# aggregate_loss
# ---------------------------------------------------------------------------------------------


def test_aggregate_loss_modes_hand_values():
    loss = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]], dtype=F64)
    assert aggregate_loss(loss, mask, "token-mean").item() == pytest.approx(20.0 / 5, rel=1e-15)
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(
        (2.5 + 10.0) / 2, rel=1e-15
    )
    assert aggregate_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(
        (10.0 + 10.0) / 2, rel=1e-15
    )
    assert aggregate_loss(loss, mask).item() == pytest.approx(6.25, rel=1e-15)


def test_aggregate_loss_fully_masked_sequence_counts_as_zero():
    loss = torch.tensor([[1.0, 3.0], [5.0, 7.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [0, 0]], dtype=F64)
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == 1.0
    assert aggregate_loss(loss, mask, "token-mean").item() == 2.0


def test_aggregate_loss_unknown_mode():
    with pytest.raises(
        ValueError, match=r"unknown loss aggregation 'mean'; known: token-mean, seq-mean-token-mean, "
    ):
        aggregate_loss(torch.zeros(1, 1), torch.ones(1, 1), "mean")


# ---------------------------------------------------------------------------------------------
# kl_penalty
# ---------------------------------------------------------------------------------------------


def test_kl_estimators_hand_values():
    logp = torch.tensor([[-1.0, -2.0, -0.3]], dtype=F64)
    ref_logp = torch.tensor([[-1.5, -0.5, -0.3]], dtype=F64)
    # k1 = logp - ref; k2 = ½ (logp - ref)²; k3 = e^{ref - logp} - (ref - logp) - 1.
    k1 = [0.5, -1.5, 0.0]
    k2 = [0.125, 1.125, 0.0]
    k3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.5) - 1.5 - 1, 0.0]
    torch.testing.assert_close(kl_penalty(logp, ref_logp, kind="k1"), torch.tensor([k1], dtype=F64))
    torch.testing.assert_close(kl_penalty(logp, ref_logp, kind="k2"), torch.tensor([k2], dtype=F64))
    torch.testing.assert_close(kl_penalty(logp, ref_logp, kind="k3"), torch.tensor([k3], dtype=F64))
    torch.testing.assert_close(kl_penalty(logp, ref_logp), torch.tensor([k3], dtype=F64))
    torch.testing.assert_close(kl_penalty(logp, ref_logp, kind="low_var_kl"), torch.tensor([k3], dtype=F64))


def test_k1_and_k3_expectations_are_the_exact_kl():
    # Σ_x π(x) k(x) = KL(π ‖ π_ref) for k1 and k3 (unbiased), computed exactly over the support.
    gen = torch.Generator().manual_seed(3)
    logp = torch.log_softmax(torch.randn(6, dtype=F64, generator=gen), dim=-1)
    ref_logp = torch.log_softmax(torch.randn(6, dtype=F64, generator=gen), dim=-1)
    probs = logp.exp()
    kl = (probs * (logp - ref_logp)).sum()
    for kind in ("k1", "k3"):
        expectation = (probs * kl_penalty(logp, ref_logp, kind=kind)).sum()
        torch.testing.assert_close(expectation, kl, rtol=1e-12, atol=1e-14)
    assert (kl_penalty(logp, ref_logp, kind="k3") >= 0).all()


def test_kl_gradient_flows_into_logp():
    logp = torch.tensor([-1.0, -2.0], dtype=F64, requires_grad=True)
    ref_logp = torch.tensor([-1.5, -0.5], dtype=F64)
    kl_penalty(logp, ref_logp, kind="k3").sum().backward()
    # d/dlogp [e^{ref-logp} - (ref-logp) - 1] = 1 - e^{ref-logp}.
    expected = torch.tensor([1 - math.exp(-0.5), 1 - math.exp(1.5)], dtype=F64)
    torch.testing.assert_close(logp.grad, expected, rtol=1e-14, atol=0)


def test_kl_unknown_kind():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "low_var_kl"}
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k4'; known: k1, k2, k3, low_var_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), kind="k4")
