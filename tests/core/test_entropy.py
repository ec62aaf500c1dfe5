"""Hand-derived values for masked_mean."""

from __future__ import annotations

import pytest
import torch

from eapo.core import masked_mean

F64 = torch.float64


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
