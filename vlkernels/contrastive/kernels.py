import triton
import triton.language as tl

from vlkernels.core.tiles import as_operand, dot_tile, load_tile, mma, row_ptrs, tile_flags

# The tile flags of every kernel below, from its first operand: PRECISION "ieee" for fp32 features (no silent TF32),
# UPCAST for bf16 under the interpreter (vlkernels/core/tiles.py).
_FLAGS = tile_flags("a_ptr")


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
# (max, sum exp) into its own scratch row p, so both directions' normalizers cost one pass and O(P·M) memory. It also
# stores each row's entry at column row + diag_offset (the diagonal positives' logits) from the same products, so a
# cross-entropy lse - logit computed from them is never negative.
@triton.heuristics(_FLAGS)
@triton.jit
def _lse_pair_fwd_kernel(
    a_ptr, b_ptr, scale_ptr, row_lse_ptr, diag_ptr, col_max_ptr, col_sum_ptr, n_rows, n_cols, n_dims, stride_am,
    stride_bn, diag_offset, num_programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    scale = tl.load(scale_ptr).to(tl.float32)
    scratch = pid.to(tl.int64) * n_cols
    num_row_blocks = tl.cdiv(n_rows, BLOCK_M)
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    for rb in range(pid, num_row_blocks, num_programs):
        row0 = rb * BLOCK_M
        # Block-local int32 indices; int64 only in the scalar bases (see vlkernels/core/tiles.py).
        mask_m = rm < n_rows - row0
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        diag_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        for cb in range(0, n_cols, BLOCK_N):
            mask_n = rn < n_cols - cb
            s = dot_tile(
                a_ptr, b_ptr, a_ptr, b_ptr, row0, cb, n_rows, n_cols, n_dims, stride_am, stride_bn,
                BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, False,
            ) * scale  # fmt: skip
            valid = mask_m[:, None] & mask_n[None, :]
            # The diagonal (column = row + diag_offset) crosses this tile where column - row == delta, locally.
            delta = row0 + diag_offset - cb
            if (delta > -BLOCK_N) & (delta < BLOCK_M):
                on_diag = (rn[None, :] - rm[:, None]) == delta
                diag_i += tl.sum(tl.where(on_diag & valid, s, 0.0), axis=1)
            s = tl.where(valid, s, float("-inf"))
            # Padded rows/columns have max -inf; a finite stand-in keeps exp(-inf - (-inf)) from becoming NaN.
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), axis=1)
            m_i = m_new
            c_max_ptrs = col_max_ptr + (scratch + cb) + rn
            c_sum_ptrs = col_sum_ptr + (scratch + cb) + rn
            c_max = tl.load(c_max_ptrs, mask=mask_n, other=float("-inf"))
            c_sum = tl.load(c_sum_ptrs, mask=mask_n, other=0.0)
            c_new = tl.maximum(c_max, tl.max(s, axis=0))
            c_safe = tl.where(c_new == float("-inf"), 0.0, c_new)
            c_sum = c_sum * tl.exp(c_max - c_safe) + tl.sum(tl.exp(s - c_safe[None, :]), axis=0)
            tl.store(c_max_ptrs, c_new, mask=mask_n)
            tl.store(c_sum_ptrs, c_sum, mask=mask_n)
            # The next row block re-reads these columns, possibly in other threads of this program.
            tl.debug_barrier()
        tl.store(row_lse_ptr + row0 + rm, m_i + tl.log(l_i), mask=mask_m)
        tl.store(diag_ptr + row0 + rm, diag_i, mask=mask_m)


# The per-loss gradient tiles. Each takes the scaled logit tile s·⟨a_i, b_j⟩ (fp32, [BLOCK_M, BLOCK_N]), the row and
# column indices, two per-row and two per-column vectors, an optional bias pointer, the global index offsets and the
# loss's normalizer, and returns (G, per-element loss) with G = ∂L/∂logit (0 outside the masks). A new loss is one
# more function of this signature (and its launcher); the sweep kernel below is shared.


# InfoNCE from the saved log-sum-exps: G = d_a·exp(ℓ - lse_a) + d_b·exp(ℓ - lse_b) (row and column softmax), plus
# the positive logits' own gradient d_pos (bias_ptr, one per row of A) where offset_a + i == offset_b + j. Added here,
# in fp32, a confident positive's G = d·(p - 1) keeps its small value when the tile is rounded to fp16/bf16 for the
# tensor-core product (added after the rounding, the positive's p ≈ 1 would lose it). The loss itself comes from the
# forward (lse_pair), so the element loss is 0.
@triton.jit
def _info_nce_grad_tile(
    s, offs_m, offs_n, mask_m, mask_n, lse_a_ptr, d_a_ptr, lse_b_ptr, d_b_ptr, bias_ptr, offset_a, offset_b, inv_norm
):
    b_lse_a = tl.load(lse_a_ptr + offs_m, mask=mask_m, other=0.0)
    b_da = tl.load(d_a_ptr + offs_m, mask=mask_m, other=0.0)
    b_lse_b = tl.load(lse_b_ptr + offs_n, mask=mask_n, other=0.0)
    b_db = tl.load(d_b_ptr + offs_n, mask=mask_n, other=0.0)
    b_dpos = tl.load(bias_ptr + offs_m, mask=mask_m, other=0.0)
    g = b_da[:, None] * tl.exp(s - b_lse_a[:, None]) + b_db[None, :] * tl.exp(s - b_lse_b[None, :])
    # int32 positions (sizes are int32 here): a 2-D int64 comparison spills registers at 128x64 tiles on sm_90.
    pos = (offs_m + offset_a).to(tl.int32)[:, None] == (offs_n + offset_b).to(tl.int32)[None, :]
    g = tl.where(pos, g + b_dpos[:, None], g)
    g = tl.where(mask_m[:, None] & mask_n[None, :], g, 0.0)
    return g, tl.zeros_like(g)


# SigLIP: positives are equal group ids (row/column vectors given) or equal global indices (offset_a + i ==
# offset_b + j). t = -z·(ℓ + b), z = +1 on positives; element loss softplus(t)·inv_norm, G = -z·sigmoid(t)·inv_norm.
@triton.jit
def _siglip_grad_tile(
    s, offs_m, offs_n, mask_m, mask_n, grp_a_ptr, unused_a_ptr, grp_b_ptr, unused_b_ptr, bias_ptr, offset_a,
    offset_b, inv_norm,
):  # fmt: skip
    if grp_a_ptr is None:
        pos = (offs_m[:, None] + offset_a) == (offs_n[None, :] + offset_b)
    else:
        b_ga = tl.load(grp_a_ptr + offs_m, mask=mask_m, other=-1)
        b_gb = tl.load(grp_b_ptr + offs_n, mask=mask_n, other=-2)
        pos = b_ga[:, None] == b_gb[None, :]
    logit = s
    if bias_ptr is not None:
        logit = s + tl.load(bias_ptr).to(tl.float32)
    t = tl.where(pos, -logit, logit)
    softplus, sigmoid = _softplus_sigmoid(t)
    mask = mask_m[:, None] & mask_n[None, :]
    g = tl.where(mask, tl.where(pos, -sigmoid, sigmoid) * inv_norm, 0.0)
    return g, tl.where(mask, softplus * inv_norm, 0.0)


# The row (or column) accumulation of a sweep, D in BLOCK_K slices: dst[offs_dst, k] += g·src[offs_src, k] in fp32
# (PAIR: + g2·src[offs_src2, k], a second column tile added before the one read-modify-write; src02 = n_src when it
# has no columns). ATOMIC adds with relaxed fp32 atomics (rows other programs also write); otherwise a plain
# read-modify-write of rows only this program owns.
@triton.jit
def _accumulate(
    g, g2, src_ptr, dst_ptr, src0, src02, dst0, n_src, n_dst, n_dims, stride_src,
    BLOCK_SRC: tl.constexpr, BLOCK_DST: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr, ATOMIC: tl.constexpr, PAIR: tl.constexpr,
):  # fmt: skip
    # dst is a contiguous fp32 (rows, n_dims) buffer.
    rs = tl.arange(0, BLOCK_SRC)
    rd = tl.arange(0, BLOCK_DST)
    rk = tl.arange(0, BLOCK_K)
    mask_s = rs < n_src - src0
    mask_s2 = rs < n_src - src02
    mask_d = rd < n_dst - dst0
    src_ptrs = row_ptrs(src_ptr, src0, stride_src, BLOCK_SRC, BLOCK_K)
    src2_ptrs = row_ptrs(src_ptr, src02, stride_src, BLOCK_SRC, BLOCK_K)
    dst_ptrs = row_ptrs(dst_ptr, dst0, n_dims, BLOCK_DST, BLOCK_K)
    for k in range(0, n_dims, BLOCK_K):
        mask_k = rk < n_dims - k
        b_src = load_tile(src_ptrs, mask_s[:, None] & mask_k[None, :], UPCAST)
        mask_dk = mask_d[:, None] & mask_k[None, :]
        if ATOMIC:
            b_add = mma(g, b_src, tl.zeros([BLOCK_DST, BLOCK_K], dtype=tl.float32), PRECISION)
            tl.atomic_add(dst_ptrs, b_add, mask=mask_dk, sem="relaxed")
        else:
            b_acc = tl.load(dst_ptrs, mask=mask_dk, other=0.0)
            b_acc = mma(g, b_src, b_acc, PRECISION)
            if PAIR:
                b_src2 = load_tile(src2_ptrs, mask_s2[:, None] & mask_k[None, :], UPCAST)
                b_acc = mma(g2, b_src2, b_acc, PRECISION)
            tl.store(dst_ptrs, b_acc, mask=mask_dk)
        src_ptrs += BLOCK_K
        src2_ptrs += BLOCK_K
        dst_ptrs += BLOCK_K


# One column tile of a sweep: the recomputed logits, G from GRAD_TILE, the per-row partials, and (ACC_B) Gᵀ·A added
# into B's rows by atomics. Returns G rounded for the accumulation GEMM and the updated per-row partials.
@triton.jit
def _sweep_tile(
    a_ptr, b_ptr, accb_ptr, scale, row0, col0, offs_m, mask_m, n_rows, n_cols, n_dims, stride_am, stride_bn, row0_ptr,
    row1_ptr, col0_ptr, col1_ptr, bias_ptr, offset_a, offset_b, inv_norm, loss_rows, g_rows, ds_rows,
    GRAD_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ACC_A: tl.constexpr, ACC_B: tl.constexpr, WRITE_LOSS: tl.constexpr, WRITE_GSUM: tl.constexpr,
    WRITE_DS: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    offs_n = col0 + tl.arange(0, BLOCK_N).to(tl.int64)
    mask_n = offs_n < n_cols
    raw = dot_tile(
        a_ptr, b_ptr, a_ptr, b_ptr, row0, col0, n_rows, n_cols, n_dims, stride_am, stride_bn,
        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, False,
    )  # fmt: skip
    g, elem_loss = GRAD_TILE(
        raw * scale, offs_m, offs_n, mask_m, mask_n, row0_ptr, row1_ptr, col0_ptr, col1_ptr, bias_ptr, offset_a,
        offset_b, inv_norm,
    )  # fmt: skip
    if WRITE_LOSS:
        loss_rows += tl.sum(elem_loss, axis=1)
    if WRITE_GSUM:
        g_rows += tl.sum(g, axis=1)
    if WRITE_DS:
        # ∂L/∂s = Σ G_ij ⟨a_i, b_j⟩ from the fp32 G and dot products, before G is rounded for the GEMMs.
        ds_rows += tl.sum(g * raw, axis=1)
    g = as_operand(g, b_ptr.dtype.element_ty, UPCAST)
    if ACC_B:
        # [BLOCK_N, BLOCK_K] partials of B's gradient; padded rows of G are 0, so masked A rows add nothing.
        _accumulate(
            tl.trans(g), tl.trans(g), a_ptr, accb_ptr, row0, row0, col0, n_rows, n_cols, n_dims, stride_am, BLOCK_M,
            BLOCK_N, BLOCK_K, PRECISION, UPCAST, True, False,
        )  # fmt: skip
    return g, loss_rows, g_rows, ds_rows


# Grid: (cdiv(n_rows, BLOCK_M),). One program owns a block of A rows: it recomputes every tile of s·A·Bᵀ once and
# turns it into the loss gradient G with GRAD_TILE (one of the *_grad_tile functions above). What it writes follows
# from the pointers given (None = not wanted): acc_ptr gets G·B in the program's own fp32 rows (deterministic; the
# rows are read and written once per GROUP_N = 1 or 2 column tiles); accb_ptr gets Gᵀ·A by atomics (every row block
# adds into every B row: the one-sweep backward, summation order not fixed; without it the launcher sweeps again with
# A and B swapped); dsum_ptr the per-row partials Σ_j G_ij⟨a_i, b_j⟩ of the scale gradient (fp32 G, before
# rounding); loss_ptr / gsum_ptr the per-row element-loss and G sums.
@triton.heuristics(
    {
        "ACC_A": lambda args: args["acc_ptr"] is not None,
        "ACC_B": lambda args: args["accb_ptr"] is not None,
        "WRITE_LOSS": lambda args: args["loss_ptr"] is not None,
        "WRITE_GSUM": lambda args: args["gsum_ptr"] is not None,
        "WRITE_DS": lambda args: args["dsum_ptr"] is not None,
        **_FLAGS,
    }
)
@triton.jit
def _grad_sweep_kernel(
    a_ptr, b_ptr, scale_ptr, row0_ptr, row1_ptr, col0_ptr, col1_ptr, bias_ptr, acc_ptr, accb_ptr, dsum_ptr, loss_ptr,
    gsum_ptr, n_rows, n_cols, n_dims, stride_am, stride_bn, offset_a, offset_b, inv_norm,
    GRAD_TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ACC_A: tl.constexpr,
    ACC_B: tl.constexpr, WRITE_LOSS: tl.constexpr, WRITE_GSUM: tl.constexpr, WRITE_DS: tl.constexpr,
    GROUP_N: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    scale = tl.load(scale_ptr).to(tl.float32)
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n_rows
    loss_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    g_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    ds_rows = tl.zeros([BLOCK_M], dtype=tl.float32)
    num_col_tiles = tl.cdiv(n_cols, BLOCK_N)
    # With atomics, program p starts at column tile p (mod the count) so concurrent programs add into different B rows.
    start = pid_m % num_col_tiles if ACC_B else 0
    row0 = pid_m * BLOCK_M
    for tile in range(0, num_col_tiles, GROUP_N):
        col0 = ((start + tile) % num_col_tiles) * BLOCK_N
        g, loss_rows, g_rows, ds_rows = _sweep_tile(
            a_ptr, b_ptr, accb_ptr, scale, row0, col0, offs_m, mask_m, n_rows, n_cols, n_dims, stride_am, stride_bn,
            row0_ptr, row1_ptr, col0_ptr, col1_ptr, bias_ptr, offset_a, offset_b, inv_norm, loss_rows, g_rows,
            ds_rows, GRAD_TILE, BLOCK_M, BLOCK_N, BLOCK_K, ACC_A, ACC_B, WRITE_LOSS, WRITE_GSUM, WRITE_DS, PRECISION,
            UPCAST,
        )  # fmt: skip
        # GROUP_N == 2: the next column tile's G·B joins this one's before the accumulator rows are read and written
        # back, halving that fp32 round trip (col2 = n_cols: no second tile at the end of an odd count).
        g2 = tl.zeros_like(g)
        col2 = n_cols
        if GROUP_N == 2:
            if tile + 1 < num_col_tiles:
                col2 = ((start + tile + 1) % num_col_tiles) * BLOCK_N
                g2, loss_rows, g_rows, ds_rows = _sweep_tile(
                    a_ptr, b_ptr, accb_ptr, scale, row0, col2, offs_m, mask_m, n_rows, n_cols, n_dims, stride_am,
                    stride_bn, row0_ptr, row1_ptr, col0_ptr, col1_ptr, bias_ptr, offset_a, offset_b, inv_norm,
                    loss_rows, g_rows, ds_rows, GRAD_TILE, BLOCK_M, BLOCK_N, BLOCK_K, ACC_A, ACC_B, WRITE_LOSS,
                    WRITE_GSUM, WRITE_DS, PRECISION, UPCAST,
                )  # fmt: skip
        if ACC_A:
            _accumulate(
                g, g2, b_ptr, acc_ptr, col0, col2, row0, n_cols, n_rows, n_dims, stride_bn, BLOCK_N, BLOCK_M, BLOCK_K,
                PRECISION, UPCAST, False, GROUP_N == 2,
            )  # fmt: skip
        if ACC_A or ACC_B:
            # The next column tile re-reads these accumulator rows, possibly in other threads of this program.
            tl.debug_barrier()
    if WRITE_DS:
        tl.store(dsum_ptr + offs_m, ds_rows, mask=mask_m)
    if WRITE_LOSS:
        tl.store(loss_ptr + offs_m, loss_rows, mask=mask_m)
    if WRITE_GSUM:
        tl.store(gsum_ptr + offs_m, g_rows, mask=mask_m)
