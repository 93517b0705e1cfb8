"""Comparison helpers for tests and benchmark checks (one copy, used by every family)."""

from __future__ import annotations

import torch

# fp32 kernels against an fp64 reference: tolerances for reductions of length <= ~1e4.
FP32_TOL = {"rtol": 1e-5, "atol": 1e-6}


def max_rel_error(actual: torch.Tensor, expected: torch.Tensor, floor: float = 1e-6) -> float:
    """max |a - e| / max(|e|, floor), computed in fp64."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    return float(((a - e).abs() / e.abs().clamp_min(floor)).max())


def assert_close_lowp(
    actual: torch.Tensor,
    expected_fp64: torch.Tensor,
    baseline_lowp: torch.Tensor,
    factor: float = 2.0,
    floor: float = 1e-6,
    name: str = "output",
) -> None:
    """Low-precision rule: the kernel's error against an fp64 reference is at most `factor` times the error of the
    plain PyTorch reference computed in the same low precision (plus a small absolute slack for exact baselines)."""
    if actual.shape != expected_fp64.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected_fp64.shape)}")
    err = max_rel_error(actual, expected_fp64, floor)
    base = max_rel_error(baseline_lowp, expected_fp64, floor)
    slack = 1e-3 if actual.dtype in (torch.float16, torch.bfloat16) else 1e-6
    if err > factor * base + slack:
        raise AssertionError(f"{name}: relative error {err:.3e} > {factor} x low-precision baseline error {base:.3e}")


def assert_topk_equal(
    values: torch.Tensor,
    indices: torch.Tensor,
    ref_values: torch.Tensor,
    ref_indices: torch.Tensor,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Tie-aware top-K comparison, row by row.

    Values must match (sorted descending) within tolerance. Indices must agree as sets within each group of tied
    values; at the boundary (the last tied group, cut by K) the kernel may pick any of the tied candidates, so
    there we only require its picks to be scored within tolerance of the boundary value by the reference.
    """
    if values.shape != ref_values.shape or indices.shape != ref_indices.shape:
        raise AssertionError(f"shape mismatch: {tuple(values.shape)} vs {tuple(ref_values.shape)}")
    v, i = values.detach().double().cpu(), indices.detach().cpu()
    rv, ri = ref_values.detach().double().cpu(), ref_indices.detach().cpu()
    torch.testing.assert_close(v, rv, rtol=rtol, atol=atol)
    if i.dim() == 1:
        v, i, rv, ri = v[None], i[None], rv[None], ri[None]
    for row in range(v.shape[0]):
        k = v.shape[1]
        if k == 0:
            continue
        if len(set(i[row].tolist())) != k:
            raise AssertionError(f"row {row}: duplicate indices {i[row].tolist()}")
        tol = atol + rtol * rv[row].abs()
        start = 0
        while start < k:
            end = start + 1
            while end < k and abs(float(rv[row, end] - rv[row, start])) <= float(tol[start]):
                end += 1
            got, want = set(i[row, start:end].tolist()), set(ri[row, start:end].tolist())
            if end < k and got != want:
                raise AssertionError(f"row {row}, ranks {start}..{end - 1}: indices {sorted(got)} != {sorted(want)}")
            start = end
