"""The GEMM tile every Triton family shares (vlkernels/core/tiles.py) against a float64 matmul: a tile origin past the
first rows and columns, partial tiles in every dimension, rows further apart than D with data in the gaps and past
the last row (which the masks must not read), the split sum, fp32/fp16/bf16 (bf16 through the interpreter's
widening)."""

from __future__ import annotations

import pytest
import torch

from vlkernels._triton import interpreting

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from vlkernels.core.tiles import dot_tile, precision, tile_flags, upcast  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (interpreting() or torch.cuda.is_available()), reason="runs a Triton kernel: needs TRITON_INTERPRET=1 or CUDA"
)

BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 8
# Rows row0.. and columns col0.. of a (45, 20) · (37, 20)ᵀ product: 13 of 16 rows, 21 of 32 columns, D = 20 in
# three K steps (the last one partial).
N, M, D, ROW0, COL0 = 45, 37, 20, 32, 16


@triton.heuristics(tile_flags("a_ptr"))
@triton.jit
def _tile_kernel(
    a_ptr, b_ptr, a_lo_ptr, b_lo_ptr, out_ptr, row0, col0, n_rows, n_cols, n_dims, stride_a, stride_b,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    acc = dot_tile(
        a_ptr, b_ptr, a_lo_ptr, b_lo_ptr, row0, col0, n_rows, n_cols, n_dims, stride_a, stride_b, BLOCK_M, BLOCK_N,
        BLOCK_K, PRECISION, UPCAST, SPLIT,
    )  # fmt: skip
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    tl.store(out_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)


def _operand(rows: int, gen: torch.Generator, dtype: torch.dtype, device) -> torch.Tensor:
    # Rows 29 elements apart (D = 20 used), and 7 more rows past the end: nonzero data wherever a mask fails.
    parent = torch.randn(rows + 7, 29, generator=gen).to(dtype).to(device)
    return parent[:rows, :D]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dot_tile_is_the_product_of_its_rows(dtype, split):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(7)
    a, b = _operand(N, gen, dtype, device), _operand(M, gen, dtype, device)
    a_lo, b_lo = _operand(N, gen, dtype, device), _operand(M, gen, dtype, device)
    assert a.stride() == (29, 1) and a_lo.stride() == b.stride() == b_lo.stride()
    out = torch.full((BLOCK_M, BLOCK_N), float("nan"), device=device)
    _tile_kernel[(1,)](
        a, b, a_lo, b_lo, out, ROW0, COL0, N, M, D, a.stride(0), b.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K, SPLIT=split,
    )  # fmt: skip
    x, y = a[ROW0:].double().cpu(), b[COL0 : COL0 + BLOCK_N].double().cpu()
    x_lo, y_lo = a_lo[ROW0:].double().cpu(), b_lo[COL0 : COL0 + BLOCK_N].double().cpu()
    want = x @ y.T
    terms = x.abs() @ y.abs().T
    if split:
        want = want + x @ y_lo.T + x_lo @ y.T
        terms = terms + x.abs() @ y_lo.abs().T + x_lo.abs() @ y.abs().T
    got = out.double().cpu()
    rows, cols = want.shape
    assert (rows, cols) == (N - ROW0, M - COL0)
    # Padding rows and columns are exact zeros: nothing past n_rows, n_cols or n_dims was read.
    assert bool((got[rows:] == 0).all()) and bool((got[:, cols:] == 0).all())
    # Every product is exact in fp32 (fp16/bf16 operands; fp32 ones with PRECISION "ieee" round once), then at most
    # (3)·D fp32 additions: |error| <= gamma_n(2^-24) · sum |terms|, with n = 3·D + 1.
    n = (3 if split else 1) * D + 1
    gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
    assert bool(((got[:rows, :cols] - want).abs() <= gamma * terms).all())


def test_tile_flags_follow_the_operand():
    f32, bf16 = torch.zeros(1), torch.zeros(1, dtype=torch.bfloat16)
    assert precision(f32) == "ieee" and precision(bf16) == precision(f32.half()) == "tf32"
    assert upcast(bf16) and not upcast(f32) and not upcast(f32.half())
    flags = tile_flags("q_ptr")
    assert flags["PRECISION"]({"q_ptr": f32}) == "ieee" and flags["UPCAST"]({"q_ptr": bf16})
    assert set(tile_flags("q_ptr", dot=False)) == {"UPCAST"}
