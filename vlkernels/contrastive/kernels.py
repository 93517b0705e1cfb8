import triton
import triton.language as tl


# One [BLOCK_M, BLOCK_N] tile of A·Bᵀ, unscaled (the scale gradient needs the raw dot products): a K-loop over D in
# BLOCK_K chunks, fp32 accumulation whatever the input dtype. PRECISION is "ieee" for fp32 inputs (no silent TF32) and
# ignored by the hardware for fp16/bf16. UPCAST is set only under TRITON_INTERPRET for bf16: the interpreter multiplies
# bf16 bit patterns as integers (Triton 3.9); exact fp32 products of the bf16 values are what the tensor cores compute.
@triton.jit
def _dot_tile(
    a_ptr,
    b_ptr,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    n_dims,
    stride_am,
    stride_ad,
    stride_bn,
    stride_bd,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, n_dims, BLOCK_K):
        offs_k = (k + tl.arange(0, BLOCK_K)).to(tl.int64)
        mask_k = offs_k < n_dims
        b_a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ad,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )
        # B is read transposed ([BLOCK_K, BLOCK_N]) straight from memory, so no register transpose is needed.
        b_bt = tl.load(
            b_ptr + offs_k[:, None] * stride_bd + offs_n[None, :] * stride_bn,
            mask=mask_k[:, None] & mask_n[None, :],
            other=0.0,
        )
        if UPCAST:
            b_a, b_bt = b_a.to(tl.float32), b_bt.to(tl.float32)
        acc = tl.dot(b_a, b_bt, acc, input_precision=PRECISION)
    return acc


# Stable softplus(t) = max(t, 0) + log1p(e) and sigmoid(t) from one e = exp(-|t|). log1p uses Goldberg's
# correction log(w)·e/(w-1), w = 1+e: plain log(1+e) loses the tiny negatives' terms that dominate a SigLIP loss.
@triton.jit
def _softplus_sigmoid(t):
    e = tl.exp(-tl.abs(t))
    w = 1.0 + e
    log1p_e = tl.where(w == 1.0, e, tl.log(w) * e / (w - 1.0))
    softplus = tl.maximum(t, 0.0) + log1p_e
    sigmoid = tl.where(t >= 0, 1.0 / w, e / w)
    return softplus, sigmoid


# Grid: (P,), P <= number of row blocks. Program p walks row blocks p, p+P, ...; for each it streams every column
# tile of s·A·Bᵀ once, keeping the row log-sum-exp online in registers and merging the tile's per-column
# (max, sum exp) into its own scratch row p, so both directions' normalizers cost one pass and O(P·M) memory.
@triton.jit
def _lse_pair_fwd_kernel(
    a_ptr,
    b_ptr,
    scale_ptr,
    row_lse_ptr,
    col_max_ptr,
    col_sum_ptr,
    n_rows,
    n_cols,
    n_dims,
    stride_am,
    stride_ad,
    stride_bn,
    stride_bd,
    num_programs,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    scale = tl.load(scale_ptr).to(tl.float32)
    scratch = pid.to(tl.int64) * n_cols
    num_row_blocks = tl.cdiv(n_rows, BLOCK_M)
    for rb in range(pid, num_row_blocks, num_programs):
        offs_m = rb * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
        mask_m = offs_m < n_rows
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        for cb in range(0, n_cols, BLOCK_N):
            offs_n = cb + tl.arange(0, BLOCK_N).to(tl.int64)
            mask_n = offs_n < n_cols
            s = _dot_tile(
                a_ptr, b_ptr, offs_m, offs_n, mask_m, mask_n, n_dims, stride_am, stride_ad, stride_bn, stride_bd,
                BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST,
            ) * scale  # fmt: skip
            s = tl.where(mask_m[:, None] & mask_n[None, :], s, float("-inf"))
            # Padded rows/columns have max -inf; a finite stand-in keeps exp(-inf - (-inf)) from becoming NaN.
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), axis=1)
            m_i = m_new
            c_max = tl.load(col_max_ptr + scratch + offs_n, mask=mask_n, other=float("-inf"))
            c_sum = tl.load(col_sum_ptr + scratch + offs_n, mask=mask_n, other=0.0)
            c_new = tl.maximum(c_max, tl.max(s, axis=0))
            c_safe = tl.where(c_new == float("-inf"), 0.0, c_new)
            c_sum = c_sum * tl.exp(c_max - c_safe) + tl.sum(tl.exp(s - c_safe[None, :]), axis=0)
            tl.store(col_max_ptr + scratch + offs_n, c_new, mask=mask_n)
            tl.store(col_sum_ptr + scratch + offs_n, c_sum, mask=mask_n)
            # The next row block re-reads these columns, possibly in other threads of this program.
            tl.debug_barrier()
        tl.store(row_lse_ptr + offs_m, m_i + tl.log(l_i), mask=mask_m)


# Grid: (cdiv(n_rows, BLOCK_M),). One program owns a block of A rows: it recomputes every tile of s·A·Bᵀ once, turns
# it into the loss gradient G (InfoNCE from the saved log-sum-exps, SigLIP from the sigmoid) and, with ACC_A,
# accumulates G·B into its own fp32 rows of acc_ptr (no other program touches them: deterministic). With ACC_B it also
# adds Gᵀ·A into the fp32 rows of accb_ptr with atomics (every row block contributes to every B row: the one-sweep
# backward, 3 GEMM units per sweep, summation order not fixed). Without ACC_B it is called a second time with A and B
# swapped for B's gradient (G has the same form transposed): 2 + 2 units, deterministic. WRITE_DS stores the per-row
# partials Σ_j G_ij⟨a_i, b_j⟩ of the scale gradient (fp32 G, not the rounded one), reduced afterwards in a fixed order.
@triton.jit
def _contrastive_grad_kernel(
    a_ptr,
    b_ptr,
    scale_ptr,
    acc_ptr,
    accb_ptr,
    lse_a_ptr,
    lse_b_ptr,
    d_a_ptr,
    d_b_ptr,
    bias_ptr,
    grp_a_ptr,
    grp_b_ptr,
    loss_ptr,
    gsum_ptr,
    dsum_ptr,
    n_rows,
    n_cols,
    n_dims,
    stride_am,
    stride_ad,
    stride_bn,
    stride_bd,
    stride_acc,
    stride_accb,
    offset_a,
    offset_b,
    inv_norm,
    SIGLIP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_GROUPS: tl.constexpr,
    WRITE_LOSS: tl.constexpr,
    WRITE_DS: tl.constexpr,
    ACC_A: tl.constexpr,
    ACC_B: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    scale = tl.load(scale_ptr).to(tl.float32)
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n_rows
    if SIGLIP:
        bias = 0.0
        if HAS_BIAS:
            bias = tl.load(bias_ptr).to(tl.float32)
        if HAS_GROUPS:
            b_ga = tl.load(grp_a_ptr + offs_m, mask=mask_m, other=-1)
        loss_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
        g_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    else:
        b_lse_a = tl.load(lse_a_ptr + offs_m, mask=mask_m, other=0.0)
        b_da = tl.load(d_a_ptr + offs_m, mask=mask_m, other=0.0)
    ds_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    num_col_tiles = tl.cdiv(n_cols, BLOCK_N)
    # With atomics, program p starts at column tile p (mod the count) so concurrent programs add into different B rows.
    start = pid_m % num_col_tiles if ACC_B else 0
    for tile in range(0, num_col_tiles):
        cb = ((start + tile) % num_col_tiles) * BLOCK_N
        offs_n = cb + tl.arange(0, BLOCK_N).to(tl.int64)
        mask_n = offs_n < n_cols
        mask = mask_m[:, None] & mask_n[None, :]
        raw = _dot_tile(
            a_ptr, b_ptr, offs_m, offs_n, mask_m, mask_n, n_dims, stride_am, stride_ad, stride_bn, stride_bd,
            BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST,
        )  # fmt: skip
        s = raw * scale
        if SIGLIP:
            if HAS_GROUPS:
                b_gb = tl.load(grp_b_ptr + offs_n, mask=mask_n, other=-2)
                pos = b_ga[:, None] == b_gb[None, :]
            else:
                pos = (offs_m[:, None] + offset_a) == (offs_n[None, :] + offset_b)
            # t = -z·(s·xy + b): positives z = +1, negatives z = -1; dloss/dlogit = -z·sigmoid(t) / n.
            logit = s + bias
            t = tl.where(pos, -logit, logit)
            softplus, sigmoid = _softplus_sigmoid(t)
            g = tl.where(mask, tl.where(pos, -sigmoid, sigmoid) * inv_norm, 0.0)
            if WRITE_LOSS:
                loss_rows += tl.sum(tl.where(mask, softplus, 0.0), axis=1)
                g_rows += tl.sum(g, axis=1)
        else:
            b_lse_b = tl.load(lse_b_ptr + offs_n, mask=mask_n, other=0.0)
            b_db = tl.load(d_b_ptr + offs_n, mask=mask_n, other=0.0)
            g = b_da[:, None] * tl.exp(s - b_lse_a[:, None]) + b_db[None, :] * tl.exp(s - b_lse_b[None, :])
            g = tl.where(mask, g, 0.0)
        if WRITE_DS:
            # ∂L/∂s = Σ G_ij ⟨a_i, b_j⟩ from the fp32 G and dot products, before G is rounded for the GEMMs.
            ds_rows += tl.sum(g * raw, axis=1)
        if ACC_A or ACC_B:
            g = g.to(b_ptr.dtype.element_ty)
            if UPCAST:
                g = g.to(tl.float32)
            for k in range(0, n_dims, BLOCK_K):
                offs_k = (k + tl.arange(0, BLOCK_K)).to(tl.int64)
                mask_k = offs_k < n_dims
                if ACC_A:
                    b_b = tl.load(
                        b_ptr + offs_n[:, None] * stride_bn + offs_k[None, :] * stride_bd,
                        mask=mask_n[:, None] & mask_k[None, :],
                        other=0.0,
                    )
                    if UPCAST:
                        b_b = b_b.to(tl.float32)
                    acc_ptrs = acc_ptr + offs_m[:, None] * stride_acc + offs_k[None, :]
                    mask_acc = mask_m[:, None] & mask_k[None, :]
                    b_acc = tl.load(acc_ptrs, mask=mask_acc, other=0.0)
                    b_acc = tl.dot(g, b_b, b_acc, input_precision=PRECISION)
                    tl.store(acc_ptrs, b_acc, mask=mask_acc)
                if ACC_B:
                    b_a = tl.load(
                        a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ad,
                        mask=mask_m[:, None] & mask_k[None, :],
                        other=0.0,
                    )
                    if UPCAST:
                        b_a = b_a.to(tl.float32)
                    # [BLOCK_N, BLOCK_K] partial of B's gradient; padded rows of G are 0, so masked A rows add nothing.
                    part = tl.dot(tl.trans(g), b_a, input_precision=PRECISION)
                    accb_ptrs = accb_ptr + offs_n[:, None] * stride_accb + offs_k[None, :]
                    tl.atomic_add(accb_ptrs, part, mask=mask_n[:, None] & mask_k[None, :], sem="relaxed")
            # The next column tile re-reads these accumulator rows, possibly in other threads of this program.
            tl.debug_barrier()
    if WRITE_DS:
        tl.store(dsum_ptr + offs_m, ds_rows, mask=mask_m)
    if SIGLIP:
        if WRITE_LOSS:
            tl.store(loss_ptr + offs_m, loss_rows, mask=mask_m)
            tl.store(gsum_ptr + offs_m, g_rows, mask=mask_m)
