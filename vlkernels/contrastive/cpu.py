"""The CPU path: the kernels' streaming math in chunked torch.

Rows of A are processed ``chunk`` at a time, so the largest temporary is a ``chunk × M`` fp32 tile (about
``CHUNK_ELEMS`` elements) and the extra memory is O((N + M)·D), never N×M. On CPU one row chunk can update dx and dy
together (``addmm`` in a fixed order: deterministic), so InfoNCE costs 4 GEMM units (forward, then one backward
pass) and SigLIP 3.
"""

from __future__ import annotations

import torch

# ~16 MiB fp32 logit tile (256 rows at M=16384): far below N×M, yet enough rows per chunk that dy += Gᵀ·x_chunk is
# not dominated by re-reading dy (64-row chunks made the loss 3x slower). Every torch op on a tile is one parallel
# region that waits for all of its threads, so the number of chunks sets how often a thread descheduled by another
# program stalls the loss: 16 MiB tiles halve that count against 8 MiB ones
# (benchmarks/results/contrastive_load_cpu.jsonl has the loss beside busy processes).
CHUNK_ELEMS = 1 << 22
# Above this, softplus(t) = t to within half an ulp in float64.
SOFTPLUS_LINEAR = 40.0
# Column block for the backward's outer-product factor, so it costs a few MiB instead of another tile.
FACTOR_COLS = 2048


def _chunk(n_cols: int) -> int:
    return max(1, CHUNK_ELEMS // max(1, n_cols))


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 features are computed in float64 (a reference dtype); every other dtype accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _acc(t: torch.Tensor) -> torch.Tensor:
    return t.to(acc_dtype(t.dtype))


def _scaled(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """s·y in the accumulation dtype, formed once: every chunk's tile is then one GEMM, with no per-chunk scaling
    pass (each pass is one more parallel region, and under contention every region waits for its slowest thread)."""
    y = _acc(y)
    return y * scale.to(y.dtype)


def _diag_cells(tile: torch.Tensor, first_row: int, diag_offset: int) -> tuple[torch.Tensor, torch.Tensor, slice]:
    """The tile's cells (i, diag_offset + first_row + i) that exist (the positives of a row chunk starting at global
    row first_row): their row and column indices, and the slice of a per-row vector they pair with."""
    rows, cols = tile.shape
    start = diag_offset + first_row
    lo = max(0, -start)
    hi = max(lo, min(rows, cols - start))
    idx = torch.arange(lo, hi, device=tile.device)
    return idx, start + idx, slice(first_row + lo, first_row + hi)


def _diag_part(tile: torch.Tensor, first_row: int, diag_offset: int, out: torch.Tensor) -> None:
    """Copy the tile's positives' logits into out (per row)."""
    r, c, at = _diag_cells(tile, first_row, diag_offset)
    out[at] = tile[r, c]


def _add_diag(tile: torch.Tensor, first_row: int, diag_offset: int, values: torch.Tensor) -> None:
    """Add a per-row vector to the tile's positives (_diag_part's inverse)."""
    r, c, at = _diag_cells(tile, first_row, diag_offset)
    tile[r, c] += values[at]


def lse_pair_fwd_cpu(
    x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, diag_offset: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row log-sum-exp over all of y and column log-sum-exp over all of x of s·x·yᵀ, streamed over row chunks, and
    the tile entries s·⟨x_i, y_{diag_offset+i}⟩ (0 where that column does not exist) from the same products."""
    xf, ys = _acc(x), _scaled(y, scale)
    n, m = xf.shape[0], ys.shape[0]
    row = torch.empty(n, dtype=xf.dtype, device=x.device)
    col = torch.full((m,), float("-inf"), dtype=xf.dtype, device=x.device)
    diag = torch.zeros(n, dtype=xf.dtype, device=x.device)
    step = _chunk(m)
    for i in range(0, n, step):
        xc = xf[i : i + step]
        tile = torch.mm(xc, ys.t())
        _diag_part(tile, i, diag_offset, diag)
        top = tile.amax(dim=1)
        # p = exp(t - max_i) in place; its row sums give the row lse, and weighting the rows by exp(max_i - T)
        # turns the column sums into one GEMV instead of a second exp pass.
        p = tile.sub_(top[:, None]).exp_()
        row[i : i + step] = top + torch.log(p.sum(dim=1))
        peak = top.max()
        col_sum = torch.mv(p.t(), torch.exp(top - peak))
        part = peak + torch.log(col_sum)
        # A column whose weighted sum fell below 1e-20 may have lost terms to underflow: recompute it exactly, from
        # the same GEMM as the tile (a product of other shapes rounds otherwise, and the backward, which recomputes
        # this tile, would see its largest entry off its log-sum-exp by an ulp: e^(1 ulp) in a saturated gradient).
        small = col_sum < 1e-20
        if bool(small.any()):
            part[small] = torch.logsumexp(torch.mm(xc, ys.t())[:, small], dim=0)
        col = torch.logaddexp(col, part)
    return row, col, diag


def lse_pair_bwd_cpu(x, y, scale, row_lse, col_lse, d_row, d_col, d_diag, diag_offset):
    """G = d_row·softmax_rows + d_col·softmax_cols, plus d_diag at (i, i + diag_offset), recomputed per chunk;
    dx = s·G·y, dy = s·Gᵀ·x, ds = Σ G⟨x, y⟩: the twin of ops.lse_pair_bwd, with the arguments and returns of the
    ``vlkernels::lse_pair_backward`` op."""
    xf, yf, ys = _acc(x), _acc(y), _scaled(y, scale)
    n, m = xf.shape[0], yf.shape[0]
    s = scale.to(xf.dtype)
    gx = torch.empty(n, xf.shape[1], dtype=xf.dtype, device=x.device)
    gy = torch.zeros(m, yf.shape[1], dtype=xf.dtype, device=x.device)
    row_lse, col_lse, d_col, d_row = (t.to(xf.dtype) for t in (row_lse, col_lse, d_col, d_row))
    col_min = col_lse.min()
    step = _chunk(m)
    for i in range(0, n, step):
        xc = xf[i : i + step]
        tile = torch.mm(xc, ys.t())
        r, dr = row_lse[i : i + step], d_row[i : i + step]
        r_max = r.max()
        # exp(t - c_j) = exp(t - r_i)·exp(r_i - r_max)·exp(r_max - c_j): one exp pass instead of two when both
        # factors stay within e^±40 (no product loses a significant term to fp32 underflow); else the exact form.
        if float(r_max - r.min()) <= 40.0 and float(r_max - col_min) <= 40.0:
            u, v = torch.exp(r - r_max), torch.exp(r_max - col_lse) * d_col
            g = tile.sub_(r[:, None]).exp_()
            for j in range(0, m, FACTOR_COLS):
                g[:, j : j + FACTOR_COLS].mul_(torch.addr(dr[:, None], u, v[j : j + FACTOR_COLS]))
        else:
            by_col = torch.exp(tile - col_lse[None, :]).mul_(d_col[None, :])
            g = tile.sub_(r[:, None]).exp_().mul_(dr[:, None]).add_(by_col)
            del by_col
        _add_diag(g, i, diag_offset, d_diag.to(g.dtype))
        torch.mm(g, yf, out=gx[i : i + step])
        gy.addmm_(g.t(), xc)
    # ds = Σ_ij G_ij ⟨x_i, y_j⟩ = Σ_i ⟨x_i, (G·y)_i⟩, taken from the accumulator before any rounding; per row first,
    # so no rounding chain is longer than D + N (the tests' error bound).
    ds = _row_dots(gx, xf).sum()
    return (gx.mul_(s)).to(x.dtype), (gy.mul_(s)).to(y.dtype), ds


def siglip_fwd_cpu(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad):
    """Loss (1/n)·Σ softplus(-z·(s·xy + b)) and, when asked, its gradients, from one pass over row chunks: the twin
    of ops.siglip_fwd, with the arguments and returns of the ``vlkernels::siglip_fused`` op."""
    xf = _acc(x)
    n, m, d = xf.shape[0], y.shape[0], xf.shape[1]
    s = scale.to(xf.dtype)
    b = bias.to(xf.dtype) if bias is not None else None
    ys = _scaled(y, scale)
    # [y | 1], formed once when gradients are wanted: G·[y | 1] gives the gradient's rows and, in its last column,
    # the row sums of G (the bias gradient) from the same GEMM, without another pass over G per chunk.
    y1 = torch.empty(m, d + 1, dtype=xf.dtype, device=x.device) if need_grad else None
    if need_grad:
        y1[:, :d] = y
        y1[:, d] = 1
    # Per-row sums, reduced once at the end: every rounding chain stays within M + N (not chunk·M).
    loss_rows = torch.empty(n, dtype=xf.dtype, device=x.device)
    gx1 = torch.empty(n, d + 1, dtype=xf.dtype, device=x.device) if need_grad else None
    gy = torch.zeros(m, d, dtype=xf.dtype, device=x.device) if need_grad else None
    step = _chunk(m)
    for i in range(0, n, step):
        xc = xf[i : i + step]
        t = torch.mm(xc, ys.t())
        if b is not None:
            t.add_(b)
        # t = -z·logit: flip the sign of the positives (the global diagonal, or equal group ids).
        if x_groups is not None:
            pos = x_groups[i : i + step, None] == y_groups[None, :]
            t = torch.where(pos, -t, t)
        else:
            pos = None
            t.diagonal(offset=row_offset + i - col_offset).neg_()
        # F.softplus returns t itself above its threshold: at 40 the error, log1p(e^-40) ≈ 4e-18, is below half an ulp
        # of 40 even in float64 (its default 20 leaves e^-20 ≈ 2e-9, which float64 would see), and e^40 does not
        # overflow fp32. One pass over the tile, where -logsigmoid(-t) takes two.
        loss_rows[i : i + step] = torch.nn.functional.softplus(t, threshold=SOFTPLUS_LINEAR).sum(dim=1)
        if not need_grad:
            continue
        g = t.sigmoid_()
        if pos is not None:
            g = torch.where(pos, -g, g)
        else:
            g.diagonal(offset=row_offset + i - col_offset).neg_()
        torch.mm(g, y1, out=gx1[i : i + step])
        gy.addmm_(g.t(), xc)
    loss = loss_rows.sum() * inv_norm
    if not need_grad:
        return (loss,)
    gx, g_rows = gx1[:, :d], gx1[:, d]
    ds = _row_dots(gx, xf).sum() * inv_norm
    gy.mul_(s * inv_norm)
    # The product is a new contiguous tensor: no (N, D + 1) view escapes.
    return loss, (gx * (s * inv_norm)).to(x.dtype), gy.to(y.dtype), ds, g_rows.sum() * inv_norm


def _row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """⟨a_i, b_i⟩ per row, a chunk of rows at a time (no (N, D) temporary); a batched (1×D)·(D×1) product, one
    parallel region per chunk where vecdot's multiply-then-sum takes two."""
    out = torch.empty(a.shape[0], dtype=a.dtype, device=a.device)
    step = max(1, CHUNK_ELEMS // max(1, a.shape[1]))
    for i in range(0, a.shape[0], step):
        torch.bmm(a[i : i + step, None, :], b[i : i + step, :, None], out=out[i : i + step, None, None])
    return out
