"""Counting and top-k of the torch twin (any torch device): the device's fp32 matmul as a screen, certified like the
CPU engine's ("fp32" in screen.py), the undecided pairs re-checked with the exact scores of the definition.

For a (query x, gallery y) pair the fp32 product s_hat of any summation order, with or without FMA, products and
sums flushed to zero when denormal, has ``|s_hat - s| <= B = coef |x||y| + daz (|x| + |y|) + abs`` (screen.Screen's
"fp32" constants). Operands the matmul does not take as IEEE fp32 widen the bound: fp64 inputs narrowed to fp32, and
fp32 matmuls that torch allows to round their inputs (TF32 or bf16: ``torch.backends.cuda.matmul.allow_tf32``,
``torch.set_float32_matmul_precision`` below "highest", oneDNN's fp32 precision) take ``|x_hat - x| <= u |x| + sqrt(D)
tiny`` with u = 2^-7 (a truncating bf16 conversion; rounding TF32 or bf16 is within it). Where norms leave the fp32
range the tile is multiplied in float64 with the "fp64" constants. Exact scores (thresholds and re-checks) are the
C++ ``exact_pairs`` of the rows concerned, copied to the host: the same bits as every other path.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from vlkernels.retrieval import screen as scr
from vlkernels.retrieval.keys import (
    EMPTY,
    WORK_ELEMS,
    chunk_exclusions,
    decode_keys,
    encode_keys,
    keep_best,
    place_best,
)
from vlkernels.retrieval.triton_screen import round32

# Relative input rounding of a reduced-precision fp32 matmul (TF32 keeps 10 mantissa bits, bf16 7 plus rounding).
U_REDUCED = 2.0**-7


@dataclasses.dataclass
class Operand:
    """Rows on the device: as given (``raw``, the exact scores read these) and their norms' upper bounds."""

    raw: torch.Tensor
    norm: torch.Tensor


def _reduced_fp32_matmul(device: torch.device) -> bool:
    """Whether torch may round fp32 matmul inputs on this device (TF32, bf16)."""
    if torch.get_float32_matmul_precision() != "highest":
        return True
    if device.type == "cuda":
        return bool(torch.backends.cuda.matmul.allow_tf32)
    return device.type == "cpu" and not scr.fp32_matmul_is_ieee()


def exact_on_host(q: torch.Tensor, g: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Exact scores s(q[rows], g[cols]) (float64, on q's device) by the C++ exact_pairs of just those rows."""
    from vlkernels.retrieval.cpu import exact_pairs

    n = rows.numel()
    if n == 0:
        return torch.empty(0, dtype=torch.float64, device=q.device)
    # fp16/bf16 values are exact in fp32, so their float64 products are the same.
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    qa, ga = q[rows].cpu().to(wide).contiguous(), g[cols].cpu().to(wide).contiguous()
    at = np.arange(n, dtype=np.int64)
    return torch.from_numpy(exact_pairs(qa, ga, at, at)).to(q.device)


class TorchScreenCount:
    """Counting kernels of ``ops.count_stream`` on the torch path (see the module docstring)."""

    thr_dtype = torch.float64
    slot_width = None
    screen = "fp32"

    def __init__(self, device: torch.device, exact_dtype: torch.dtype, sub_tile):
        self.device, self.exact_dtype, self.sub_tile = device, exact_dtype, sub_tile
        self.rechecked = 0

    def load_raw(self, src, a: int, b: int, device=None) -> torch.Tensor:
        return src.chunk(a, b, self.exact_dtype).to(self.device).contiguous()

    def load(self, src, a: int, b: int, device=None) -> Operand:
        raw = self.load_raw(src, a, b)
        return Operand(raw, scr.norms(raw).to(self.device))

    def gt_scores(self, q: torch.Tensor, g: torch.Tensor, pair_q: np.ndarray, pair_g: np.ndarray) -> torch.Tensor:
        dv = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(self.device)
        return exact_on_host(q, g, dv(pair_q), dv(pair_g))

    def _scores(self, q: Operand, g: Operand, r0: int, r1: int, c0: int, c1: int):
        """s_hat of a sub-tile (float64) and its bound B per pair."""
        d = q.raw.shape[1]
        nq, ng = q.norm[r0:r1, None], g.norm[None, c0:c1]
        if not scr.fits_fp32(float(q.norm[r0:r1].max()), float(g.norm[c0:c1].max())):
            c = scr.Screen("fp64", d)
            s = q.raw[r0:r1].double() @ g.raw[c0:c1].double().T
            return s, c.coef * nq * ng + c.daz * (nq + ng) + c.abs
        c = scr.Screen("fp32", d)
        # Relative rounding of the operands: fp64 narrowed to fp32, then fp32 rounded by a reduced-precision matmul.
        narrow = scr.U32 if q.raw.dtype == torch.float64 else 0.0
        u = (1 + narrow) * (1 + (U_REDUCED if _reduced_fp32_matmul(self.device) else 0.0)) - 1
        coef = c.coef * (1 + u) ** 2 + (2 * u + u * u) * scr.INFLATE
        daz = 3 * c.daz if u else c.daz  # each side's rounding, and its flush in the product of the other
        s = (q.raw[r0:r1].float() @ g.raw[c0:c1].float().T).double()
        bound = coef * nq * ng + daz * (nq + ng) + c.abs
        # An fp64 entry past fp32's range narrows to inf (the norms' product may still be in range): such a pair's
        # s_hat is inf or NaN, and its interval becomes (-inf, inf), undecided, as in the Triton screen.
        finite = torch.isfinite(s)
        return torch.where(finite, s, 0.0), torch.where(finite, bound, torch.inf)

    def tiles(self, q: Operand, g: Operand, k: int = 0):
        """(r0, r1, c0, c1, s_hat, B) over sub-tiles of a chunk pair; ``k``: room left beside each row for the
        running top-k (at most WORK_ELEMS entries at a time)."""
        n_q, n_g = q.raw.shape[0], g.raw.shape[0]
        rows, cols = self.sub_tile(n_q, n_g)
        if k:
            rows = max(1, WORK_ELEMS // (k + cols))
        for r0 in range(0, n_q, rows):
            r1 = min(n_q, r0 + rows)
            for c0 in range(0, n_g, cols):
                c1 = min(n_g, c0 + cols)
                yield (r0, r1, c0, c1, *self._scores(q, g, r0, r1, c0, c1))

    def count(self, q: Operand, g: Operand, thr_t: torch.Tensor, pos_c: torch.Tensor, out: torch.Tensor) -> None:
        """Adds to ``out`` (the (rows, width) plane of counts) the candidates of ``g`` ranked above each slot's
        positive: thresholds ``thr_t`` (exact, +inf in padding slots), positives ``pos_c`` as columns of ``g``."""
        width = thr_t.shape[1]
        for r0, r1, c0, _c1, s, b in self.tiles(q, g):
            lo, hi = s - b, s + b
            # Certainly above a slot's threshold: counted here; within a bound of it for any slot: scored exactly
            # once, below, whatever the number of slots that need it.
            undecided = torch.zeros_like(s, dtype=torch.bool)
            for k in range(width):
                t = thr_t[r0:r1, k : k + 1]
                above = lo > t
                out[r0:r1, k] += above.sum(1)
                undecided |= ~above & (hi >= t) & torch.isfinite(t)
            rl, cl = undecided.nonzero(as_tuple=True)
            if rl.numel() == 0:
                continue
            e = exact_on_host(q.raw, g.raw, rl + r0, cl + c0)
            self.rechecked += rl.numel()
            lo_p, hi_p = lo[rl, cl], hi[rl, cl]
            for k in range(width):
                t, p = thr_t[r0 + rl, k], pos_c[r0 + rl, k]
                # Undecided for this slot, and above its positive: a higher exact score, or an equal one at a lower
                # gallery index.
                hit = ~(lo_p > t) & (hi_p >= t) & ((e > t) | ((e == t) & (cl + c0 < p)))
                out[r0:r1, k].index_add_(0, rl, hit.to(out.dtype))


def topk_stream(queries, gallery, k, exclude, offset, exact_dtype, device, chunk, sub_tile, bar=None):
    """Exact top-k on the torch path, as the Triton path's (``triton_screen.topk_stream``): per query chunk, pass A
    finds each query's limit L, the k-th best lower bound s_hat - B among non-excluded items; pass B scores every
    item with s_hat + B >= L exactly (each true top-k item has s >= L) and keeps the best k by (exact score desc,
    index asc). Values are float64; the TorchScreenCount returned last holds the re-checked count."""
    n_q, n_g = len(queries), len(gallery)
    vals = torch.full((n_q, k), float("-inf"), dtype=torch.float64, device=device)
    idx = torch.full((n_q, k), -1, dtype=torch.int64, device=device)
    ker = TorchScreenCount(device, exact_dtype, sub_tile)
    for q0 in range(0, n_q, chunk):
        q1 = min(n_q, q0 + chunk)
        q = ker.load(queries, q0, q1)
        ex = chunk_exclusions(exclude, q0, q1, device)
        best = torch.full((q1 - q0, k), EMPTY, dtype=torch.int64, device=device)
        for g0 in range(0, n_g, chunk):
            g = ker.load(gallery, g0, min(n_g, g0 + chunk))
            for r0, r1, c0, c1, s, b in ker.tiles(q, g, k):
                keys = encode_keys(round32(s - b)[1], torch.arange(c0, c1, device=device) + g0)
                _mask(keys, ex, r0, r1, g0 + c0, g0 + c1, EMPTY)
                best[r0:r1] = torch.topk(torch.cat([best[r0:r1], keys], 1), k, dim=1).values
            if bar is not None:
                bar.update(1)
        lim = decode_keys(best)[0][:, k - 1].double()
        rows = [torch.zeros(0, dtype=torch.int64, device=device)]
        sc, cols = [torch.zeros(0, dtype=torch.float64, device=device)], [rows[0]]
        for g0 in range(0, n_g, chunk):
            g = ker.load(gallery, g0, min(n_g, g0 + chunk))
            for r0, r1, c0, c1, s, b in ker.tiles(q, g):
                cand = s + b >= lim[r0:r1, None]
                _mask(cand, ex, r0, r1, g0 + c0, g0 + c1, False)
                rl, cl = cand.nonzero(as_tuple=True)
                sc.append(exact_on_host(q.raw, g.raw, rl + r0, cl + c0))
                rows.append(rl + r0)
                cols.append(cl + c0 + g0)
                ker.rechecked += rl.numel()
            # The best k so far, once per gallery chunk: the kept set stays at most k per row plus one chunk's.
            rows, sc, cols = ([x] for x in keep_best(torch.cat(rows), torch.cat(sc), torch.cat(cols), k))
            if bar is not None:
                bar.update(1)
        place_best(rows[0], sc[0], cols[0], vals, idx, q0, offset)
    return vals, idx, ker


def _mask(x: torch.Tensor, ex, r0: int, r1: int, c0: int, c1: int, fill) -> None:
    """Excluded pairs ``ex = (query in chunk, gallery index)`` inside rows r0..r1 and gallery columns c0..c1 of a
    sub-tile set to ``fill``."""
    if ex is None:
        return
    m = (ex[0] >= r0) & (ex[0] < r1) & (ex[1] >= c0) & (ex[1] < c1)
    x[ex[0][m] - r0, ex[1][m] - c0] = fill
