"""Counting of the torch twin (any torch device): the device's fp32 matmul as a screen, certified like the CPU
engine's ("fp32" in screen.py), the undecided pairs re-checked with the exact scores of the definition.

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
    return device.type == "cpu" and not scr._fp32_matmul_is_ieee()


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
        u = U_REDUCED if _reduced_fp32_matmul(self.device) else scr.U32 if q.raw.dtype == torch.float64 else 0.0
        coef = c.coef * (1 + u) ** 2 + (2 * u + u * u) * scr.INFLATE
        daz = 3 * c.daz if u else c.daz  # each side's rounding, and its flush in the product of the other
        s = (q.raw[r0:r1].float() @ g.raw[c0:c1].float().T).double()
        return s, coef * nq * ng + daz * (nq + ng) + c.abs

    def count(self, q: Operand, g: Operand, thr_t: torch.Tensor, pos_c: torch.Tensor, out: torch.Tensor) -> None:
        """Adds to ``out`` (the (rows, width) plane of counts) the candidates of ``g`` ranked above each slot's
        positive: thresholds ``thr_t`` (exact, +inf in padding slots), positives ``pos_c`` as columns of ``g``."""
        rows, cols = self.sub_tile(q.raw.shape[0], g.raw.shape[0])
        for r0 in range(0, q.raw.shape[0], rows):
            r1 = min(q.raw.shape[0], r0 + rows)
            for c0 in range(0, g.raw.shape[0], cols):
                c1 = min(g.raw.shape[0], c0 + cols)
                s, b = self._scores(q, g, r0, r1, c0, c1)
                for k in range(thr_t.shape[1]):
                    t, p = thr_t[r0:r1, k : k + 1], pos_c[r0:r1, k : k + 1]
                    above = s - b > t
                    undecided = ~above & (s + b >= t) & torch.isfinite(t)
                    out[r0:r1, k] += above.sum(1)
                    rl, cl = undecided.nonzero(as_tuple=True)
                    if rl.numel() == 0:
                        continue
                    e = exact_on_host(q.raw, g.raw, rl + r0, cl + c0)
                    self.rechecked += rl.numel()
                    # Above the positive: a higher exact score, or an equal one at a lower gallery index.
                    hit = (e > t[rl, 0]) | ((e == t[rl, 0]) & (cl + c0 < p[rl, 0]))
                    out[r0:r1, k].index_add_(0, rl, hit.to(out.dtype))
