"""Triton kernels for the metrics family."""

import triton
import triton.language as tl


# Grid: (cdiv(n_pairs, BLOCK_P),). One program computes the cosine of BLOCK_P (x row p, y row idx[p]) pairs, looping
# over D in BLOCK_D slices with fp32 accumulators; inputs are read once in their own dtype, nothing is materialized.
@triton.jit
def _pair_cosine_fwd_kernel(
    x_ptr,
    y_ptr,
    idx_ptr,
    out_ptr,
    n_pairs,
    d,
    stride_x,
    stride_y,
    eps,
    HAS_IDX: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pid_p = tl.program_id(0)
    offs_p = (pid_p * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    mask_p = offs_p < n_pairs
    if HAS_IDX:
        rows_y = tl.load(idx_ptr + offs_p, mask=mask_p, other=0).to(tl.int64)
    else:
        rows_y = offs_p
    dot = tl.zeros([BLOCK_P], dtype=tl.float32)
    xx = tl.zeros([BLOCK_P], dtype=tl.float32)
    yy = tl.zeros([BLOCK_P], dtype=tl.float32)
    for d0 in range(0, d, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask = mask_p[:, None] & (offs_d < d)[None, :]
        b_x = tl.load(x_ptr + offs_p[:, None] * stride_x + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
        b_y = tl.load(y_ptr + rows_y[:, None] * stride_y + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
        dot += tl.sum(b_x * b_y, axis=1)
        xx += tl.sum(b_x * b_x, axis=1)
        yy += tl.sum(b_y * b_y, axis=1)
    # Same eps rule as F.normalize: a zero row has cosine 0 with everything.
    norm = tl.maximum(tl.sqrt(xx), eps) * tl.maximum(tl.sqrt(yy), eps)
    # A squared norm past fp32's range would make a finite dot's cosine 0: NaN instead, which the caller reports.
    overflow = (xx > 3.4028234663852886e38) | (yy > 3.4028234663852886e38)
    tl.store(out_ptr + offs_p, tl.where(overflow, float("nan"), dot / norm), mask=mask_p)
