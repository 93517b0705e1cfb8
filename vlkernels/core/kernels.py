import triton
import triton.language as tl


# Grid: (rows,). One program normalizes one row: fp32 sum of squares over BLOCK_D-wide tiles, then a scaled store
# in the input dtype, so fp16/bf16 embeddings are normalized without an fp32 copy of the matrix.
@triton.jit
def _l2_normalize_fwd_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK_D: tl.constexpr):
    pid_m = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + pid_m * stride_x
    y_row = y_ptr + pid_m * stride_y
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_D):
        offs_d = start + tl.arange(0, BLOCK_D)
        mask_d = offs_d < n_cols
        b_x = tl.load(x_row + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        acc += b_x * b_x
    norm = tl.sqrt(tl.sum(acc, axis=0))
    # tl.maximum returns eps for a NaN norm: keep the NaN, so a row holding NaN comes back NaN (as F.normalize).
    inv = 1.0 / tl.where(norm == norm, tl.maximum(norm, eps), norm)
    for start in range(0, n_cols, BLOCK_D):
        offs_d = start + tl.arange(0, BLOCK_D)
        mask_d = offs_d < n_cols
        b_x = tl.load(x_row + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        tl.store(y_row + offs_d, (b_x * inv).to(y_ptr.dtype.element_ty), mask=mask_d)
