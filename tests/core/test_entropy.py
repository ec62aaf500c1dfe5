"""Hand-derived values for token_entropy and masked_mean; chunked entropy equals unchunked."""

from __future__ import annotations

import math

import pytest
import torch

from eapo.core import masked_mean, token_entropy

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# token_entropy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [1, 2, 7, 50257])
def test_uniform_logits_give_log_vocab(vocab):
    logits = torch.full((2, 3, vocab), 4.2)
    got = token_entropy(logits)
    assert got.shape == (2, 3)
    torch.testing.assert_close(got, torch.full((2, 3), math.log(vocab)), rtol=1e-6, atol=1e-6)


def test_two_outcome_distribution():
    # logits [0, ln 3] -> p = (1/4, 3/4); H = ln 4 - (3/4) ln 3.
    got = token_entropy(torch.tensor([0.0, math.log(3.0)], dtype=F64))
    assert got.shape == ()
    assert got.item() == pytest.approx(math.log(4.0) - 0.75 * math.log(3.0), rel=1e-14)


def test_temperature_divides_the_logits():
    # logits [0, ln 3] at T = 0.5 -> [0, 2 ln 3] -> p = (1/10, 9/10).
    logits = torch.tensor([0.0, math.log(3.0)], dtype=F64)
    expected = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))
    assert token_entropy(logits, temperature=0.5).item() == pytest.approx(expected, rel=1e-14)
    # ... and [0, 2 ln 3] at T = 2 is the (1/4, 3/4) distribution again.
    expected = math.log(4.0) - 0.75 * math.log(3.0)
    assert token_entropy(2 * logits, temperature=2.0).item() == pytest.approx(expected, rel=1e-14)


def test_three_outcome_distribution():
    # p = (1/2, 1/4, 1/4): H = (1/2) ln 2 + 2 · (1/4) ln 4 = (3/2) ln 2.
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]], dtype=F64)) + 11.0
    torch.testing.assert_close(token_entropy(logits), torch.full((2,), 1.5 * math.log(2.0), dtype=F64))


def test_near_deterministic_distribution_has_near_zero_entropy():
    got = token_entropy(torch.tensor([[100.0, 0.0, 0.0, 0.0]]))
    assert 0.0 <= got.item() < 1e-6
    # logits [10, 0]: q = 1 / (1 + e^10), H = -(q ln q + (1 - q) ln(1 - q)).
    q = 1.0 / (1.0 + math.exp(10.0))
    expected = -(q * math.log(q) + (1 - q) * math.log1p(-q))
    assert token_entropy(torch.tensor([10.0, 0.0], dtype=F64)).item() == pytest.approx(expected, rel=1e-12)


def test_entropy_is_shift_invariant_and_large_logits_are_stable():
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(token_entropy(logits + 1e4), token_entropy(logits), rtol=0, atol=5e-3)
    assert torch.isfinite(token_entropy(logits * 1e4)).all()


def test_dtypes():
    logits = torch.zeros(3, 5)
    assert token_entropy(logits).dtype == torch.float32
    assert token_entropy(logits.to(torch.bfloat16)).dtype == torch.float32
    assert token_entropy(logits.to(torch.float16)).dtype == torch.float32
    assert token_entropy(logits.to(F64)).dtype == F64


def test_empty_leading_dimensions():
    assert token_entropy(torch.zeros(0, 5)).shape == (0,)
    assert token_entropy(torch.zeros(2, 0, 5), chunk_size=3).shape == (2, 0)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 34, 35, 36, 4096])
def test_chunked_entropy_equals_unchunked(chunk_size):
    logits = 3 * torch.randn(5, 7, 33, generator=torch.Generator().manual_seed(chunk_size))
    whole = token_entropy(logits, chunk_size=logits.numel())
    torch.testing.assert_close(token_entropy(logits, chunk_size=chunk_size), whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        token_entropy(logits, temperature=0.7, chunk_size=chunk_size),
        token_entropy(logits, temperature=0.7, chunk_size=logits.numel()),
        rtol=0,
        atol=1e-6,
    )


def test_chunked_entropy_gradient_equals_unchunked():
    logits = torch.randn(3, 4, 6, dtype=F64, generator=torch.Generator().manual_seed(1))
    grads = []
    for chunk_size in (1, 5, 100):
        leaf = logits.clone().requires_grad_()
        token_entropy(leaf, chunk_size=chunk_size).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[2], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grads[1], grads[2], rtol=1e-12, atol=1e-14)


def test_entropy_gradcheck():
    logits = torch.randn(2, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: token_entropy(x, temperature=0.8, chunk_size=4), (logits,))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, r"temperature must be > 0, got 0.0"),
        ({"temperature": -1.0}, r"temperature must be > 0"),
        ({"chunk_size": 0}, r"chunk_size must be >= 1, got 0"),
    ],
)
def test_invalid_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        token_entropy(torch.zeros(2, 3), **kwargs)


# ---------------------------------------------------------------------------------------------
# masked_mean
# ---------------------------------------------------------------------------------------------


def test_masked_mean_over_all_elements():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [0, 1, 0]])
    assert masked_mean(values, mask).item() == pytest.approx(8.0 / 3.0, rel=1e-15)
    assert masked_mean(values, mask.bool()).item() == pytest.approx(8.0 / 3.0, rel=1e-15)


def test_masked_mean_along_a_dimension():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert torch.equal(masked_mean(values, mask, dim=-1), torch.tensor([1.5, 0.0], dtype=F64))
    assert torch.equal(masked_mean(values, mask, dim=0), torch.tensor([1.0, 2.0, 0.0], dtype=F64))


def test_masked_mean_ignores_values_under_the_mask_even_if_huge():
    values = torch.tensor([2.0, 1e30, 4.0])
    assert masked_mean(values, torch.tensor([1, 0, 1])).item() == 3.0


def test_masked_mean_of_empty_mask_is_zero():
    assert masked_mean(torch.tensor([1.0, 2.0]), torch.zeros(2)).item() == 0.0


def test_masked_mean_gradient():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64, requires_grad=True)
    masked_mean(values, torch.tensor([1, 0, 1, 1])).backward()
    assert values.grad is not None
    torch.testing.assert_close(values.grad, torch.tensor([1 / 3, 0.0, 1 / 3, 1 / 3], dtype=F64))


def test_masked_vocabulary_entries_contribute_nothing_and_no_nan_gradient():
    logits = torch.tensor([[0.0, 0.0, -float("inf")]], requires_grad=True)
    entropy = token_entropy(logits)
    torch.testing.assert_close(entropy, torch.tensor([math.log(2.0)]))
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()
