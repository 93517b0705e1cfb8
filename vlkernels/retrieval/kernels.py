import triton
import triton.language as tl

from vlkernels.core.tiles import dot_tile, load_tile, tile_flags

# The Triton path of retrieval is a certified screen (README.md, "GPU screen"): tensor-core dots on bf16 halves (or
# fp16/bf16 inputs as they are) give s_hat, a per-pair bound B >= |s_hat - s| decides most comparisons, and every
# undecided pair is re-scored with the exact float64 definition (_exact_score_kernel). Tiles are loaded and multiplied
# by vlkernels/core/tiles.py; the flags come from the first operand (bf16 or fp16 on tensor cores, where PRECISION has
# no effect; UPCAST widens bf16 exactly under the interpreter).
_SCREEN_FLAGS = tile_flags("qh_ptr")
_EXACT_FLAGS = tile_flags("q_ptr", dot=False)


# Helper (no grid): the interval [lo, hi] that holds the exact score of every pair of the tile. The bound is
# sum_i a_i(q) b_i(g) + abs_err from 5 per-vector statistics per side (rounded up on the host; README "GPU screen"),
# widened for its own fp32 evaluation and for the rounding of s_hat -/+ B. NaN (overflowed screens) widens to the
# whole line, so such pairs are always re-checked.
@triton.jit
def _screen_interval(s, qst_ptr, gst_ptr, offs_m, offs_n, mask_m, mask_n, abs_err):
    bnd = tl.zeros_like(s) + abs_err
    for i in tl.static_range(5):
        a = tl.load(qst_ptr + offs_m * 8 + i, mask=mask_m, other=0.0)
        b = tl.load(gst_ptr + offs_n * 8 + i, mask=mask_n, other=0.0)
        bnd += a[:, None] * b[None, :]
    bnd = bnd * 1.0000077 + tl.abs(s) * 4.7683716e-07  # (1 + 2^-17), 2^-21
    lo = s - bnd
    hi = s + bnd
    lo = tl.where(lo == lo, lo, float("-inf"))
    hi = tl.where(hi == hi, hi, float("inf"))
    return lo, hi


# Helper (no grid): the BLOCK_M queries of this program (first row, rows, mask) and its split of the gallery columns,
# [n_start, n_end) (grid axis 1; cols_per_split = n_g without splits).
@triton.jit
def _program_block(n_q, n_g, cols_per_split, BLOCK_M: tl.constexpr):
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    n_start = tl.program_id(1).to(tl.int64) * cols_per_split
    return row0, offs_m, offs_m < n_q, n_start, tl.minimum(n_start + cols_per_split, n_g)


# Helper (no grid): the column tile at n0 (columns before n_end count): its columns, their mask, and the interval
# [lo, hi] of every pair's exact score from the screened tile s_hat (three dots per K step when SPLIT).
@triton.jit
def _screen_block(
    qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, row0, offs_m, mask_m, n0, n_end, n_q, n_g, dim, stride_q,
    stride_g, abs_err, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask_n = offs_n < n_end
    s = dot_tile(qh_ptr, gh_ptr, qm_ptr, gm_ptr, row0, n0, n_q, n_g, dim, stride_q, stride_g, BLOCK_M, BLOCK_N,
                 BLOCK_K, PRECISION, UPCAST, SPLIT)  # fmt: skip
    lo, hi = _screen_interval(s, qst_ptr, gst_ptr, offs_m, offs_n, mask_m, mask_n, abs_err)
    return offs_n, mask_n, lo, hi


# Helper (no grid): append a (BLOCK_M x BLOCK_N) int8 mask tile holding any non-zero entry to a tile buffer:
# ``where`` (first row * n_g + first column of the tile) to ``meta_ptr[i]`` and the mask to ``mask_ptr[i]``, with
# i from one scalar atomic per tile (a contiguous store: no per-element atomics or pointers). The counter runs past
# ``capacity`` (tiles beyond it are not stored), so the launcher sees an overflow and reruns with room for all.
@triton.jit
def _append_tile(bits, where, meta_ptr, mask_ptr, count_ptr, capacity, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    n_set = tl.sum(tl.sum((bits != 0).to(tl.int32), axis=1), axis=0)
    if n_set > 0:
        at = tl.atomic_add(count_ptr, 1).to(tl.int64)
        if at < capacity:
            tl.store(meta_ptr + at, where)
            tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(mask_ptr + at * (BLOCK_M * BLOCK_N) + tile, bits.to(tl.int8))


# Grid: (cdiv(n_pairs, BLOCK_P),). The exact score of each listed (query row, gallery row) pair: float64 products
# summed in 8 lanes (lane l: d = l, l+8, ... in increasing d), then ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)). Launched
# with enable_fp_fusion=False: for fp64 inputs a contracted multiply-add would round differently; for fp16/bf16/fp32
# inputs every product is exact in float64 and contraction could not change a bit anyway.
@triton.heuristics(_EXACT_FLAGS)
@triton.jit
def _exact_score_kernel(
    q_ptr, g_ptr, rows_ptr, cols_ptr, out_ptr, n_pairs, dim, stride_q, stride_g,
    BLOCK_P: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    offs_p = pid.to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    mask_p = offs_p < n_pairs
    r = tl.load(rows_ptr + offs_p, mask=mask_p, other=0)
    c = tl.load(cols_ptr + offs_p, mask=mask_p, other=0)
    lanes = tl.arange(0, 8)
    acc = tl.zeros([BLOCK_P, 8], dtype=tl.float64)
    for d0 in range(0, dim, 8):
        offs_d = d0 + lanes
        m = mask_p[:, None] & (offs_d < dim)[None, :]
        a = load_tile(q_ptr + r[:, None] * stride_q + offs_d[None, :], m, UPCAST).to(tl.float64)
        b = load_tile(g_ptr + c[:, None] * stride_g + offs_d[None, :], m, UPCAST).to(tl.float64)
        acc = acc + a * b
    # Lane l alone (x + 0 == x exactly), then the fixed pairwise tree.
    a0 = tl.sum(tl.where(lanes[None, :] == 0, acc, 0.0), axis=1)
    a1 = tl.sum(tl.where(lanes[None, :] == 1, acc, 0.0), axis=1)
    a2 = tl.sum(tl.where(lanes[None, :] == 2, acc, 0.0), axis=1)
    a3 = tl.sum(tl.where(lanes[None, :] == 3, acc, 0.0), axis=1)
    a4 = tl.sum(tl.where(lanes[None, :] == 4, acc, 0.0), axis=1)
    a5 = tl.sum(tl.where(lanes[None, :] == 5, acc, 0.0), axis=1)
    a6 = tl.sum(tl.where(lanes[None, :] == 6, acc, 0.0), axis=1)
    a7 = tl.sum(tl.where(lanes[None, :] == 7, acc, 0.0), axis=1)
    s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
    tl.store(out_ptr + offs_p, s, mask=mask_p)


# Grid: (cdiv(n_q, BLOCK_M), splits). One program screens its split of the gallery against BLOCK_M queries and, for
# each of SLOTS <= 8 positive slots (thresholds t = exact scores, as fp32 rounded up and down), counts the candidates
# certainly above (lo > t_up) and marks the undecided ones (neither lo > t_up nor hi < t_dn; the positive itself
# excluded) in a per-score bit mask of slots; tiles holding any are appended (_append_tile). Padding slots carry
# t = +inf and never count. Integer atomics: order-independent.
@triton.heuristics(_SCREEN_FLAGS)
@triton.jit
def _rank_screen_kernel(
    qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, tup_ptr, tdn_ptr, pos_ptr, cnt_ptr,
    und_ptr, und_mask_ptr, und_n_ptr,
    n_q, n_g, dim, stride_q, stride_g, cols_per_split, n_slots_total, slot0, abs_err, capacity,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SLOTS: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    row0, offs_m, mask_m, n_start, n_end = _program_block(n_q, n_g, cols_per_split, BLOCK_M)
    offs_p = tl.arange(0, SLOTS)
    slot_off = offs_m[:, None] * n_slots_total + slot0 + offs_p[None, :]
    b_up = tl.load(tup_ptr + slot_off, mask=mask_m[:, None], other=float("inf"))
    b_dn = tl.load(tdn_ptr + slot_off, mask=mask_m[:, None], other=float("inf"))
    b_pos = tl.load(pos_ptr + slot_off, mask=mask_m[:, None], other=-(1 << 62))
    cnt = tl.zeros([BLOCK_M, SLOTS], dtype=tl.int32)
    for n0 in range(n_start, n_end, BLOCK_N):
        offs_n, mask_n, lo, hi = _screen_block(
            qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, row0, offs_m, mask_m, n0, n_end, n_q, n_g, dim, stride_q,
            stride_g, abs_err, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, PRECISION, UPCAST)  # fmt: skip
        valid = mask_m[:, None] & mask_n[None, :]
        rel_n = (offs_n - n0).to(tl.int32)
        bits = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
        for p in tl.static_range(SLOTS):
            sel = offs_p[None, :] == p
            tu = tl.sum(tl.where(sel, b_up, 0.0), axis=1)
            td = tl.sum(tl.where(sel, b_dn, 0.0), axis=1)
            # The positive as a column of this tile (int32; out-of-tile and padding positives fall outside it).
            g = tl.sum(tl.where(sel, tl.minimum(tl.maximum(b_pos - n0, -1), BLOCK_N), 0), axis=1).to(tl.int32)
            above = valid & (lo > tu[:, None])
            cnt += tl.where(sel, tl.sum(above.to(tl.int32), axis=1)[:, None], 0)
            und = ~above & ~(hi < td[:, None]) & (rel_n[None, :] != g[:, None])
            bits = bits | tl.where(und & (td < float("inf"))[:, None], 1 << p, 0)
        bits = tl.where(valid, bits, 0)
        _append_tile(bits, row0 * n_g + n0, und_ptr, und_mask_ptr, und_n_ptr, capacity, BLOCK_M, BLOCK_N)
    tl.atomic_add(cnt_ptr + slot_off, cnt.to(tl.int64), mask=mask_m[:, None])


# Grid: (cdiv(n_q, BLOCK_M), splits). Fused top-K on lower bounds: one program keeps the best BLOCK_N lower bounds
# lo = s_hat - B of BLOCK_M queries over its split of the gallery as int64 keys (order-preserving fp32 bits << 32 |
# ~index), so sorting keys orders by bound descending then index ascending. Merge: max(running desc, tile asc)
# holds the top BLOCK_N of both (bitonic split), resorted. The k-th best lower bound L then limits the candidates.
@triton.heuristics(_SCREEN_FLAGS)
@triton.jit
def _topk_bound_kernel(
    qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, out_ptr,
    n_q, n_g, dim, stride_q, stride_g, cols_per_split, index_offset, abs_err,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    row0, offs_m, mask_m, n_start, n_end = _program_block(n_q, n_g, cols_per_split, BLOCK_M)
    empty = -9223372036854775807 - 1
    best = tl.full([BLOCK_M, BLOCK_N], empty, dtype=tl.int64)
    for n0 in range(n_start, n_end, BLOCK_N):
        offs_n, mask_n, lo, _ = _screen_block(
            qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, row0, offs_m, mask_m, n0, n_end, n_q, n_g, dim, stride_q,
            stride_g, abs_err, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, PRECISION, UPCAST)  # fmt: skip
        bits = lo.to(tl.int32, bitcast=True)
        order = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
        gidx = offs_n.to(tl.int64) + index_offset
        key = (order << 32) | (4294967295 - gidx)[None, :]
        key = tl.where(mask_n[None, :], key, empty)
        best = tl.sort(tl.maximum(best, tl.sort(key, dim=1)), dim=1, descending=True)
    offs_k = tl.arange(0, BLOCK_N)
    tl.store(
        out_ptr + (tl.program_id(1) * n_q + offs_m)[:, None] * BLOCK_N + offs_k[None, :], best, mask=mask_m[:, None]
    )


# Grid: (cdiv(n_q, BLOCK_M), cdiv(n_g, BLOCK_N)). Lower bounds lo = s_hat - B of one (rows x cols) block into a dense
# fp32 matrix: the top-K path for k past the fused kernel's register budget selects from it with torch.topk.
@triton.heuristics(_SCREEN_FLAGS)
@triton.jit
def _bound_tile_kernel(
    qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, out_ptr,
    n_q, n_g, dim, stride_q, stride_g, abs_err,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # One column tile per program: a "split" of BLOCK_N columns.
    row0, offs_m, mask_m, n0, n_end = _program_block(n_q, n_g, BLOCK_N, BLOCK_M)
    offs_n, mask_n, lo, _ = _screen_block(
        qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, row0, offs_m, mask_m, n0, n_end, n_q, n_g, dim, stride_q,
        stride_g, abs_err, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, PRECISION, UPCAST)  # fmt: skip
    tl.store(out_ptr + offs_m[:, None] * n_g + offs_n[None, :], lo, mask=mask_m[:, None] & mask_n[None, :])


# Grid: (cdiv(n_q, BLOCK_M), splits). Top-K candidates: every (query, column) whose upper bound s_hat + B reaches the
# query's limit L (the k-th best lower bound) is marked, tiles holding any appended (_append_tile). Every item of the
# exact top-k has s >= L, so none is left out.
@triton.heuristics(_SCREEN_FLAGS)
@triton.jit
def _topk_collect_kernel(
    qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, lim_ptr, out_ptr, out_mask_ptr, out_n_ptr,
    n_q, n_g, dim, stride_q, stride_g, cols_per_split, abs_err, capacity,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    row0, offs_m, mask_m, n_start, n_end = _program_block(n_q, n_g, cols_per_split, BLOCK_M)
    lim = tl.load(lim_ptr + offs_m, mask=mask_m, other=float("inf"))
    for n0 in range(n_start, n_end, BLOCK_N):
        _, mask_n, _, hi = _screen_block(
            qh_ptr, qm_ptr, gh_ptr, gm_ptr, qst_ptr, gst_ptr, row0, offs_m, mask_m, n0, n_end, n_q, n_g, dim, stride_q,
            stride_g, abs_err, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, PRECISION, UPCAST)  # fmt: skip
        cand = mask_m[:, None] & mask_n[None, :] & ~(hi < lim[:, None])
        _append_tile(cand.to(tl.int32), row0 * n_g + n0, out_ptr, out_mask_ptr, out_n_ptr, capacity, BLOCK_M, BLOCK_N)
