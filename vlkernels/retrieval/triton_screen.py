"""The Triton path of retrieval: a certified low-precision screen on tensor cores and an exact float64 re-check.

Every score that decides a rank or a top-k slot is the exact score of the retrieval definition (float64 products of
the inputs as given, 8 lanes, fixed tree: ``reference.exact_scores_ref``), computed by ``_exact_score_kernel`` for
ground-truth pairs and for every pair the screen cannot decide. The screen computes s_hat on tensor cores (fp32
inputs split into two bf16 halves, three dots; fp16/bf16 inputs as they are) with a per-pair bound
``B >= |s_hat - s|`` built from per-vector norms (README.md, "GPU screen", derives it). Hence the ranks and the
top-k are those of the definition, whatever the tiling, chunking, sharding or the tensor cores' rounding.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from vlkernels.retrieval.configs import exact_tile, max_fused_k, screen_tile, topk_block_n, topk_tile
from vlkernels.retrieval.keys import (
    EMPTY,
    WORK_ELEMS,
    chunk_exclusions,
    decode_keys,
    encode_keys,
    keep_best,
    place_best,
)

# Tiles of an undecided / candidate buffer (one int8 mask tile each) kept at once: a launch needing more is split
# over halves of its gallery columns instead of growing the buffer further.
MAX_TILES = 1 << 14
# Initial buffer: this many tiles, grown to the exact need after an overflow (the counter runs past capacity).
FIRST_TILES = 256
# Unit roundoff assumed per product accumulated by the tensor cores: 2^-22 = 4u of fp32. Tensor cores align a
# block's products to the largest exponent and truncate (Fasi et al. 2021): each addend of a block of b products
# plus the accumulator loses < 2^-23 of the block's largest term, (b + 2) / b <= 2 such losses per product.
U_ACC = 2.0**-22


@dataclasses.dataclass
class Operand:
    """One chunk of rows on the device: the exact operand and the screen's halves with their statistics.

    ``raw``: the rows as given (fp16, bf16, fp32 or fp64).
    ``h``, ``m``: screen operands (bf16 halves of fp32 inputs; ``m`` None for fp16/bf16 inputs screened directly).
    ``qst``, ``gst``: ``(n, 8)`` fp32 statistics, rounded up, whose products bound the screen's error (query side,
    gallery side; README "GPU screen").
    """

    raw: torch.Tensor
    h: torch.Tensor
    m: torch.Tensor | None
    qst: torch.Tensor
    gst: torch.Tensor

    @property
    def split(self) -> bool:
        return self.m is not None

    def rows(self, a: int, b: int) -> Operand:
        return Operand(self.raw[a:b], self.h[a:b], None if self.m is None else self.m[a:b], self.qst[a:b],
                       self.gst[a:b])  # fmt: skip


def _flush(x: torch.Tensor) -> torch.Tensor:
    """Subnormals of x's dtype set to 0: tensor cores may flush them; the residual then holds them exactly."""
    return x.masked_fill(x.abs() < torch.finfo(x.dtype).tiny, 0)


def up32(x: torch.Tensor) -> torch.Tensor:
    """float64 values (non-negative statistics computed to ~1e-13) as fp32 rounded up, with a 2^-20 margin."""
    y = x * (1 + 2.0**-20)
    f = y.float()
    return torch.where(f.double() < y, torch.nextafter(f, torch.tensor(float("inf"))), f)


def round32(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 thresholds as fp32 (rounded up, rounded down): t_dn <= t <= t_up."""
    f = t.float()
    inf = torch.tensor(float("inf"), device=t.device)
    up = torch.where(f.double() < t, torch.nextafter(f, inf), f)
    dn = torch.where(f.double() > t, torch.nextafter(f, -inf), f)
    return up, dn


def bound_constants(dim: int, split: bool) -> tuple[float, float, float]:
    """(gamma, c64, abs_err) of the bound for embedding dimension ``dim``.

    gamma: accumulation of the screen's products (3 dots of D for split fp32, 1 for fp16/bf16; D padded to whole
    BLOCK_K <= 128 steps); c64: distance of the float64 8-lane definition from the real dot product, relative to
    ||q||·||g|| (ceil(D/8) - 1 additions per lane, 3 in the tree, the fp64 product's rounding); abs_err: products and
    partial sums below fp32's normal range flushed (2^-126 each) and the bound's own underflow."""
    n = (3 if split else 1) * (dim + 128)
    nu = n * U_ACC
    gamma = nu / (1 - nu) if nu < 0.5 else math.inf
    m = -(-dim // 8) + 4
    c64 = m * 2.0**-53 / (1 - m * 2.0**-53) * 2
    abs_err = (n + 64) * 2.0**-124
    return gamma, c64, abs_err


def make_operand(raw: torch.Tensor) -> Operand:
    """Screen halves and bound statistics of ``raw`` (contiguous rows on the compute device)."""
    dim = raw.shape[1]
    split = raw.dtype in (torch.float32, torch.float64)
    if split:
        x32 = raw.float()
        h = _flush(x32.to(torch.bfloat16))
        m = _flush((x32 - h.float()).to(torch.bfloat16))
    else:
        h, m = _flush(raw), None
    x64 = raw.double()
    low = x64 - h.double()  # exact: x and h agree in their leading bits
    res = low - m.double() if split else low
    norm = lambda v: torch.linalg.vector_norm(v, dim=1)
    nh, nl, nr, n = norm(h.double()), norm(low), norm(res), norm(x64)
    nm = norm(m.double()) if split else torch.zeros_like(nh)
    gamma, c64, _ = bound_constants(dim, split)
    # B(q, g) = sum_i qst_i * gst_i + abs_err
    #         = |h_q| |r_g| + |m_q| |l_g| + (|r_q| + c64 |q|) |g| + gamma |h_q| (|h_g| + |m_g|) + gamma |m_q| |h_g|.
    zero = torch.zeros_like(nh)
    qst = torch.stack([nh, nm, nr + c64 * n, gamma * nh, gamma * nm, zero, zero, zero], 1)
    gst = torch.stack([nr, nl, n, nh + nm, nh, zero, zero, zero], 1)
    return Operand(raw.contiguous(), h.contiguous(), None if m is None else m.contiguous(), up32(qst).contiguous(),
                   up32(gst).contiguous())  # fmt: skip


def exact_scores(q: torch.Tensor, g: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The exact scores s(q[rows], g[cols]) (float64, the definition's bits) on the device of ``q``."""
    from vlkernels.retrieval.kernels import _exact_score_kernel

    n = rows.numel()
    out = torch.empty(n, dtype=torch.float64, device=q.device)
    if n == 0:
        return out
    t = exact_tile(q.device)
    _exact_score_kernel[(-(-n // t.block_m),)](
        q, g, rows.contiguous(), cols.contiguous(), out, n, q.shape[1], q.stride(0), g.stride(0),
        BLOCK_P=t.block_m, num_warps=t.num_warps, num_stages=t.num_stages, enable_fp_fusion=False,
    )  # fmt: skip
    return out


def _args(q: Operand, g: Operand):
    """Pointer arguments of the screen kernels (an unused m pointer is h: never read when SPLIT is off)."""
    return (q.h, q.h if q.m is None else q.m, g.h, g.h if g.m is None else g.m, q.qst, g.gst)


def _collect(launch, dev: torch.device, may_split: bool, tile: tuple[int, int], n_g: int):
    """(row, column, mask value) of every set entry of a tile-appending launch (``_append_tile``):
    ``launch(meta, masks, counter, capacity)`` is rerun with room for every tile after an overflow (its counter
    counts past capacity); None when more than MAX_TILES are needed and the caller can split the launch (one
    gallery column cannot be split: its at most rows / BLOCK_M tiles are taken)."""
    cap = FIRST_TILES
    while True:
        meta = torch.empty(cap, dtype=torch.int64, device=dev)
        masks = torch.empty((cap, *tile), dtype=torch.int8, device=dev)
        counter = torch.zeros(1, dtype=torch.int64, device=dev)
        launch(meta, masks, counter, cap)
        need = int(counter.item())
        if need <= cap:
            break
        if need > MAX_TILES and may_split:
            return None
        cap = need
    t, i, j = masks[:need].nonzero(as_tuple=True)
    where = meta[t]
    return where // n_g + i, where % n_g + j, masks[t, i, j].to(torch.int64) & 255


def _splits(n_g: int, n_q: int, block_m: int, block_n: int, device: torch.device) -> tuple[int, int]:
    """Gallery splits so the grid fills the device; cols_per_split stays a multiple of block_n (tile alignment)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    m_blocks = max(1, -(-n_q // block_m))
    splits = max(1, min(-(-n_g // block_n), -(-2 * sms // m_blocks)))
    per = -(-n_g // splits)
    per = -(-per // block_n) * block_n
    return -(-n_g // per), per


class ScreenCount:
    """Counting kernels of ``ops.count_stream`` on the Triton path: exact thresholds (float64), the screen counts
    what it can certify and the undecided pairs are re-checked exactly."""

    thr_dtype = torch.float64
    slot_width = None  # planes as wide as the most positives of a query: count() pads each launch itself

    def __init__(self, device: torch.device, exact_dtype: torch.dtype):
        self.device = device
        self.exact_dtype = exact_dtype
        kind = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(exact_dtype, "fp32")
        self.t = screen_tile(device, kind)
        # The screen's name in a call's meta: fp32 (and fp64) inputs as two bf16 halves, three dots.
        self.screen = "bf16x3" if kind == "fp32" else kind
        self.rechecked = 0

    def load(self, src, a: int, b: int, device=None) -> Operand:
        return make_operand(src.chunk(a, b, self.exact_dtype).to(self.device).contiguous())

    def load_raw(self, src, a: int, b: int, device=None) -> torch.Tensor:
        """Rows for the ground-truth pass: only the exact operand is needed."""
        return src.chunk(a, b, self.exact_dtype).to(self.device).contiguous()

    def gt_scores(self, q, g, pair_q, pair_g) -> torch.Tensor:
        dv = lambda a: torch.from_numpy(a).to(self.device, torch.int64)
        return exact_scores(q, g, dv(pair_q), dv(pair_g))

    def count(self, q: Operand, g: Operand, thr_t: torch.Tensor, pos_c: torch.Tensor, out: torch.Tensor) -> None:
        """Adds to ``out`` (the (rows, width) plane of counts) the candidates of ``g`` ranked above each slot's
        positive: thresholds ``thr_t`` (exact, +inf in padding slots), positives ``pos_c`` as columns of ``g``."""
        t, width = self.t, thr_t.shape[1]
        for s0 in range(0, width, t.max_slots):
            w = min(t.max_slots, width - s0)
            slots = 1 << (w - 1).bit_length()
            # One launch per group of at most max_slots slots, padded to a power of two (SLOTS is a constexpr).
            sub = [_columns(x, s0, w, slots, fill) for x, fill in ((thr_t, float("inf")), (pos_c, -(1 << 62)))]
            cnt = torch.zeros((out.shape[0], slots), dtype=out.dtype, device=out.device)
            self._count(q, g, 0, g.raw.shape[0], sub[0], sub[1], cnt)
            out[:, s0 : s0 + w] += cnt[:, :w]

    def _count(self, q, g, c0, c1, thr_t, pos_c, out) -> None:
        """One launch over columns c0..c1 of ``g`` (all slots of the planes), then the exact re-check; past
        MAX_TILES tiles of undecided pairs, each half of the columns on its own."""
        from vlkernels.retrieval.kernels import _rank_screen_kernel

        t, slots = self.t, thr_t.shape[1]
        gs = g.rows(c0, c1)
        n_q, n_g = q.raw.shape[0], c1 - c0
        pos_s = (pos_c - c0).contiguous()
        up, dn = round32(thr_t)
        _, _, abs_err = bound_constants(q.raw.shape[1], q.split)
        n_split, per = _splits(n_g, n_q, t.block_m, t.block_n, self.device)
        tmp = torch.zeros_like(out)

        def launch(meta, masks, counter, cap):
            tmp.zero_()
            _rank_screen_kernel[(-(-n_q // t.block_m), n_split)](
                *_args(q, gs), up, dn, pos_s, tmp, meta, masks, counter,
                n_q, n_g, q.raw.shape[1], q.h.stride(0), gs.h.stride(0), per, slots, 0, abs_err, cap,
                BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, SLOTS=slots, SPLIT=q.split,
                num_warps=t.num_warps, num_stages=t.num_stages,
            )  # fmt: skip

        found = _collect(launch, self.device, n_g > 1, (t.block_m, t.block_n), n_g)
        if found is None:
            mid = c0 + max(1, (c1 - c0) // 2)
            self._count(q, g, c0, mid, thr_t, pos_c, out)
            self._count(q, g, mid, c1, thr_t, pos_c, out)
            return
        out += tmp
        if found[0].numel():
            self._recheck(q, gs, *found, thr_t, pos_s, out)

    def _recheck(self, q, g, row, j, bits, thr_t, pos_s, out) -> None:
        """Undecided scores (row, column, slot bits): one exact score per (row, column), compared with the exact
        threshold of each flagged slot, ties to the lower index."""
        s = exact_scores(q.raw, g.raw, row, j)
        self.rechecked += row.numel()
        width = thr_t.shape[1]
        for p in range(width):
            f = ((bits >> p) & 1).bool()
            if not bool(f.any()):
                continue
            e = row[f] * width + p
            t, pos = thr_t.reshape(-1)[e], pos_s.reshape(-1)[e]
            above = (s[f] > t) | ((s[f] == t) & (j[f] < pos))
            out.view(-1).index_add_(0, e, above.to(out.dtype))


def _columns(x: torch.Tensor, s0: int, w: int, width: int, fill) -> torch.Tensor:
    """Columns s0..s0+w of a plane, padded with ``fill`` to ``width`` columns (contiguous)."""
    out = torch.full((x.shape[0], width), fill, dtype=x.dtype, device=x.device)
    out[:, :w] = x[:, s0 : s0 + w]
    return out


def topk_stream(queries, gallery, k, exclude, offset, exact_dtype, device, chunk, bar=None):
    """Exact top-k on the Triton path (see ``ops.topk_stream``): per query chunk, pass A finds each query's limit L,
    the k-th best lower bound s_hat - B among non-excluded items (fused top-K kernel on lower bounds, or dense bound
    tiles and torch.topk for large k); pass B collects every item with s_hat + B >= L (each true top-k item has
    s >= L), scores them exactly and keeps the best k by (exact score desc, index asc). Values are float64; the
    ScreenCount returned last holds the re-checked count."""
    n_q, n_g = len(queries), len(gallery)
    vals = torch.full((n_q, k), float("-inf"), dtype=torch.float64, device=device)
    idx = torch.full((n_q, k), -1, dtype=torch.int64, device=device)
    ker = ScreenCount(device, exact_dtype)
    has_ex = exclude is not None and len(exclude.indices) > 0
    kk = k + (int(exclude.counts.max()) if has_ex else 0)
    fused = kk <= max_fused_k(device)
    block_n = topk_block_n(device, exact_dtype, kk) if fused else 1
    g_chunk = -(-chunk // block_n) * block_n
    for q0 in range(0, n_q, chunk):
        q1 = min(n_q, q0 + chunk)
        q = ker.load(queries, q0, q1)
        ex = chunk_exclusions(exclude, q0, q1, device)
        ex_keys = None if ex is None else ex[0] * n_g + ex[1]
        best = torch.full((q1 - q0, kk if fused else k), EMPTY, dtype=torch.int64, device=device)
        for g0 in range(0, n_g, g_chunk):
            g = ker.load(gallery, g0, min(n_g, g0 + g_chunk))
            if fused:
                keys = torch.cat([best, _bound_keys(q, g, block_n, g0, ker)], 1)
                best = torch.topk(keys, kk, dim=1).values
            else:
                _merge_bounds(best, q, g, g0, ex, ker)
            if bar is not None:
                bar.update(1)
        lb, li = decode_keys(best)
        if fused and has_ex:
            hit = torch.isin((torch.arange(q1 - q0, device=device)[:, None] * n_g + li), ex_keys) & (li >= 0)
            lb = lb.masked_fill(hit, float("-inf"))
            lb = torch.sort(lb, dim=1, descending=True).values
        lim = lb[:, k - 1].contiguous()
        rows = torch.zeros(0, dtype=torch.int64, device=device)
        sc, cols = torch.zeros(0, dtype=torch.float64, device=device), rows.clone()
        for g0 in range(0, n_g, g_chunk):
            g = ker.load(gallery, g0, min(n_g, g0 + g_chunk))
            r, c = _candidates(q, g, lim, ker)
            c = c + g0
            if ex_keys is not None:
                keep = ~torch.isin(r * n_g + c, ex_keys)
                r, c = r[keep], c[keep]
            s = exact_scores(q.raw, g.raw, r, c - g0)
            ker.rechecked += r.numel()
            rows, sc, cols = keep_best(torch.cat([rows, r]), torch.cat([sc, s]), torch.cat([cols, c]), k)
            if bar is not None:
                bar.update(1)
        place_best(rows, sc, cols, vals, idx, q0, offset)
    return vals, idx, ker


def _bound_keys(q: Operand, g: Operand, block_n: int, g0: int, ker: ScreenCount) -> torch.Tensor:
    """The fused kernel on one (query chunk, gallery chunk): each split's best block_n lower-bound keys."""
    from vlkernels.retrieval.kernels import _topk_bound_kernel

    n_q, n_g = q.raw.shape[0], g.raw.shape[0]
    t = topk_tile(q.raw.device, ker.exact_dtype, block_n)
    _, _, abs_err = bound_constants(q.raw.shape[1], q.split)
    n_split, per = _splits(n_g, n_q, t.block_m, block_n, q.raw.device)
    keys = torch.empty((n_split, n_q, block_n), dtype=torch.int64, device=q.raw.device)
    _topk_bound_kernel[(-(-n_q // t.block_m), n_split)](
        *_args(q, g), keys, n_q, n_g, q.raw.shape[1], q.h.stride(0), g.h.stride(0), per, g0, abs_err,
        BLOCK_M=t.block_m, BLOCK_N=block_n, BLOCK_K=t.block_k, SPLIT=q.split,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return keys.permute(1, 0, 2).reshape(n_q, -1)


def _merge_bounds(best: torch.Tensor, q: Operand, g: Operand, g0: int, ex, ker: ScreenCount) -> None:
    """k past the fused kernel's budget: dense lower-bound blocks of at most WORK_ELEMS entries merged into ``best``
    in place with torch.topk; exclusions ``(query in chunk, gallery index)`` masked before selection."""
    from vlkernels.retrieval.kernels import _bound_tile_kernel

    k, dev = best.shape[1], q.raw.device
    t = ker.t
    _, _, abs_err = bound_constants(q.raw.shape[1], q.split)
    cols = min(g.raw.shape[0], 8192)
    rows = max(1, WORK_ELEMS // (k + cols))
    for r0 in range(0, q.raw.shape[0], rows):
        r1 = min(q.raw.shape[0], r0 + rows)
        qs = q.rows(r0, r1)
        for c0 in range(0, g.raw.shape[0], cols):
            c1 = min(g.raw.shape[0], c0 + cols)
            gs = g.rows(c0, c1)
            lb = torch.empty((r1 - r0, c1 - c0), dtype=torch.float32, device=dev)
            _bound_tile_kernel[(-(-(r1 - r0) // t.block_m), -(-(c1 - c0) // t.block_n))](
                *_args(qs, gs), lb, r1 - r0, c1 - c0, q.raw.shape[1], q.h.stride(0), g.h.stride(0), abs_err,
                BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, SPLIT=q.split,
                num_warps=t.num_warps, num_stages=t.num_stages,
            )  # fmt: skip
            keys = encode_keys(lb, torch.arange(c0, c1, device=dev) + g0)
            if ex is not None:
                m = (ex[0] >= r0) & (ex[0] < r1) & (ex[1] >= g0 + c0) & (ex[1] < g0 + c1)
                keys[ex[0][m] - r0, ex[1][m] - g0 - c0] = EMPTY
            best[r0:r1] = torch.topk(torch.cat([best[r0:r1], keys], 1), k, dim=1).values


def _candidates(q: Operand, g: Operand, lim: torch.Tensor, ker: ScreenCount) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every pair with s_hat + B >= lim[row]; columns are split in halves past MAX_TILES."""
    from vlkernels.retrieval.kernels import _topk_collect_kernel

    t = ker.t
    n_q, n_g = q.raw.shape[0], g.raw.shape[0]
    _, _, abs_err = bound_constants(q.raw.shape[1], q.split)
    n_split, per = _splits(n_g, n_q, t.block_m, t.block_n, q.raw.device)

    def launch(meta, masks, counter, cap):
        _topk_collect_kernel[(-(-n_q // t.block_m), n_split)](
            *_args(q, g), lim, meta, masks, counter,
            n_q, n_g, q.raw.shape[1], q.h.stride(0), g.h.stride(0), per, abs_err, cap,
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, SPLIT=q.split,
            num_warps=t.num_warps, num_stages=t.num_stages,
        )  # fmt: skip

    found = _collect(launch, q.raw.device, n_g > 1, (t.block_m, t.block_n), n_g)
    if found is None:
        mid = max(1, n_g // 2)
        r1, c1 = _candidates(q, g.rows(0, mid), lim, ker)
        r2, c2 = _candidates(q, g.rows(mid, n_g), lim, ker)
        return torch.cat([r1, r2]), torch.cat([c1, c2 + mid])
    return found[0], found[1]
