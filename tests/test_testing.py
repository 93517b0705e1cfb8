"""The shared comparison helpers must catch what they exist to catch."""

import pytest
import torch

from vlkernels.testing import assert_close_lowp, assert_topk_equal


def test_topk_equal_accepts_permuted_ties_and_boundary_choice():
    ref_v = torch.tensor([[5.0, 3.0, 3.0, 1.0]])
    ref_i = torch.tensor([[7, 2, 4, 0]])
    assert_topk_equal(ref_v, torch.tensor([[7, 4, 2, 0]]), ref_v, ref_i)
    # Boundary group (value 1.0) cut by K: another candidate with the same score is an equally valid pick.
    assert_topk_equal(ref_v, torch.tensor([[7, 2, 4, 9]]), ref_v, ref_i)


@pytest.mark.parametrize(
    "vals,idx,match",
    [
        ([[5.0, 3.0, 3.0, 1.0]], [[7, 2, 5, 0]], "indices"),
        ([[5.0, 3.0, 3.0, 1.5]], [[7, 2, 4, 0]], "close"),
        ([[5.0, 3.0, 3.0, 1.0]], [[7, 2, 2, 0]], "duplicate"),
    ],
)
def test_topk_equal_rejects(vals, idx, match):
    ref_v = torch.tensor([[5.0, 3.0, 3.0, 1.0]])
    ref_i = torch.tensor([[7, 2, 4, 0]])
    with pytest.raises(AssertionError, match=match):
        assert_topk_equal(torch.tensor(vals), torch.tensor(idx), ref_v, ref_i)


def test_topk_equal_follows_items_through_runs_of_near_ties():
    """A run of near-ties longer than the tolerance (each step within it, the ends not): the items may be ordered
    differently inside the run, and each item is compared with its own reference score."""
    ref_v = torch.tensor([[4.0, 3.0, 3.0 - 6e-7, 3.0 - 12e-7, 3.0 - 18e-7, 1.0]], dtype=torch.float64)
    ref_i = torch.tensor([[0, 1, 2, 3, 4, 5]])
    got_i = torch.tensor([[0, 2, 1, 4, 3, 5]])
    got_v = torch.tensor([[4.0, 3.0 - 1e-7, 3.0 - 5e-7, 3.0 - 13e-7, 3.0 - 17e-7, 1.0]], dtype=torch.float64)
    assert_topk_equal(got_v, got_i, ref_v, ref_i, rtol=0, atol=1e-6)
    with pytest.raises(AssertionError, match="index 4 scores"):
        assert_topk_equal(ref_v, torch.tensor([[0, 4, 2, 3, 1, 5]]), ref_v, ref_i, rtol=0, atol=1e-6)


def test_close_lowp_scales_with_baseline():
    exact = torch.linspace(1, 2, 100, dtype=torch.float64)
    baseline = exact.to(torch.bfloat16)
    assert_close_lowp(baseline.float(), exact, baseline)
    with pytest.raises(AssertionError, match="relative error"):
        assert_close_lowp((exact * 1.05).float(), exact, baseline)
