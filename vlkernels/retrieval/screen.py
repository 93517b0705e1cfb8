"""The CPU screens: a fast GEMM giving s_hat, and per-vector terms of a rigorous bound B >= |s_hat - s|.

s is the exact score (float64 products summed in 8 lanes, csrc/retrieval/exact.h). For a (row x, column y) pair the
C++ tile kernels evaluate

    B = r0(x) c0(y) + r1(x) c1(y) + r2(x) c2(y) + ra(x) + ca(y) + rel * |s_hat|

with the terms below (derivation: README "Exact scores"). Norms are upper bounds (``norms``), and every bound is
inflated by INFLATE to cover the rounding of B itself and of the comparisons s_hat -/+ B.

Screens:
  * "fp32": the GEMM in the compute dtype (fp32; fp64 for fp64 inputs: screen "fp64"). |s_hat - s| <=
    (gamma_D(u) + gamma_D(u64) + 4 u64) |x||y| + tiny (sqrt(D)(|x| + |y|) + 2D + 2): any summation order, denormal
    inputs treated as zero, products and partial sums flushed to zero (tiny = smallest normal).
  * "bf16" (fp32 inputs): x_h = bf16(x) with bf16 subnormals flushed to zero, x_l = x - x_h (exact in fp32); the
    GEMM of x_h, y_h through torch's bf16 matmul (oneDNN: AMX / AVX512-BF16 where present), output rounded to bf16.
    x^T y - x_h^T y_h = x_h^T y_l + x_l^T y, so |s_hat - s| <= |x_h||y_l| + |x_l||y| + (gamma_{D+2}(u32) +
    gamma_D(u64) + 4 u64) max(|x|, |x_h|) max(|y|, |y_h|) + u_b / (1 - u_b) |s_hat| + (2D + 3) tiny: products,
    sums and the output flushed to zero when denormal (as AMX does) are covered by the last term.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time

import torch

from vlkernels._environment import cpu_info
from vlkernels.retrieval import gemm

SCREENS = ("auto", "fp32", "bf16")
ENV = "VLKERNELS_RETRIEVAL_SCREEN"
INFLATE = 1.0 + 2.0**-20
U64 = 2.0**-53
U32 = 2.0**-24
UBF16 = 2.0**-8
TINY = {torch.float32: 2.0**-126, torch.float64: 2.0**-1022}
# fp32 screens are used only while every partial sum stays far from fp32's overflow (|x||y| < 2^120) and the
# scores far above its denormal range (|x||y| > 2^-60; below, the flush terms would leave every pair undecided).
FP32_RANGE = (2.0**-60, 2.0**120)


def gamma(n: int, u: float) -> float:
    return n * u / (1.0 - n * u)


def norms(x: torch.Tensor) -> torch.Tensor:
    """Upper bounds of the rows' Euclidean norms in float64 (inflated by INFLATE).

    fp32 (and bf16) rows: the fp32 norm n' of any summation order has ``S <= S'/(1 - gamma_{2D+4}(u32)) +
    D tiny`` for the sum of squares S (rounding of the squares and the sums, squares below the normal range
    flushed) and ``sqrt(S') <= n'/(1 - u32)``, so the bound below holds; a square that overflows gives inf (the
    tile then takes the fp64 screen). fp64 rows are scaled by a power of two first so that no square underflows."""
    if x.shape[0] == 0 or x.shape[1] == 0:
        return torch.zeros(x.shape[0], dtype=torch.float64)
    if x.dtype != torch.float64:
        n = torch.linalg.vector_norm(x.float(), dim=1).double() / (1 - U32)
        d = x.shape[1]
        return torch.sqrt(n * n / (1 - gamma(2 * d + 4, U32)) + d * TINY[torch.float32]) * INFLATE
    _, e = torch.frexp(x.abs().amax(dim=1))
    n = torch.linalg.vector_norm(torch.ldexp(x, -e[:, None].double()), dim=1)
    return torch.ldexp(n, e.double()) * INFLATE


def bf16_split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_h, x_l): x_h = bf16(x) with bf16 subnormals set to zero (the hardware would flush them), x_l = x - x_h."""
    h = x.to(torch.bfloat16)
    h = h.masked_fill(h.abs() < TINY[torch.float32], 0)
    return h, x - h.to(x.dtype)


def cpu_bf16_hardware() -> bool:
    """True when the CPU multiplies bf16 in hardware (AMX-BF16 or AVX512-BF16, as /proc/cpuinfo reports)."""
    return bool({"amx_bf16", "avx512_bf16"} & set(cpu_info()["isa"]))


@functools.cache
def bf16_measures_faster() -> bool:
    """One timing per process: torch's bf16 matmul against the fp32 one at a tile-sized product."""
    a, b = torch.randn(1024, 512), torch.randn(1024, 512)
    ah, bh = a.bfloat16(), b.bfloat16()

    def best(x, y) -> float:
        t = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            torch.matmul(x, y.T)
            t = min(t, time.perf_counter() - t0)
        return t

    return best(ah, bh) < 0.8 * best(a, b)


def fp32_matmul_is_ieee() -> bool:
    """False when torch has been told to compute fp32 CPU matmuls in lower precision (the fp32 bound needs IEEE)."""
    prec = getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "ieee")
    return prec in ("ieee", "none") and torch.get_float32_matmul_precision() == "highest"


def requested(screen: str | None) -> str:
    """The screen asked for: the argument, else VLKERNELS_RETRIEVAL_SCREEN, else "auto"."""
    s = screen if screen is not None else os.environ.get(ENV, "auto") or "auto"
    if s not in SCREENS:
        where = "screen" if screen is not None else ENV
        raise ValueError(f"{where} must be one of {', '.join(map(repr, SCREENS))}, got {s!r}")
    return s


def choose(screen: str | None, dtype: torch.dtype) -> str:
    """The screen a CPU call runs: "fp64" for fp64 inputs; "bf16" when forced, or with "auto" where the CPU has bf16
    hardware and torch's bf16 matmul measures faster; else "fp32" (also when torch's fp32 matmul is not IEEE)."""
    s = requested(screen)
    if dtype == torch.float64 or (s != "bf16" and not fp32_matmul_is_ieee()):
        return "fp64"
    if s == "auto":
        return "bf16" if cpu_bf16_hardware() and bf16_measures_faster() else "fp32"
    return s


# Top-k with k at least 1/DENSE_SHARE of the gallery scores every pair exactly in dense blocked tiles (no screen):
# the members alone would need exact scores for that many pairs, one scattered column at a time, on top of the
# screen's GEMM (the measured crossover on a 2-core AVX2 machine: README "Dense exact top-k").
DENSE_SHARE = 4


def dense_topk(screen: str | None, k: int, n_gallery: int) -> bool:
    """Whether a CPU top-k runs the dense exact tiles: with the automatic screen, k >= n_gallery / DENSE_SHARE."""
    return requested(screen) == "auto" and k * DENSE_SHARE >= n_gallery


def describe() -> str:
    """The screen this machine's CPU engine takes for fp32 inputs, and why (``vlkernels info``)."""
    name = choose(None, torch.float32)
    forced = requested(None) != "auto"
    if forced:
        why = f"forced by {ENV}"
    elif name == "bf16":
        why = "bf16 hardware, torch's bf16 matmul measured faster"
    elif cpu_bf16_hardware():
        why = "bf16 hardware, but torch's bf16 matmul measured no faster"
    else:
        why = "no bf16 hardware (amx_bf16 / avx512_bf16)"
    dense = f"; top-k with k >= gallery / {DENSE_SHARE} scores every pair exactly" if not forced else ""
    blas = f"; GEMM: {gemm.describe()}" if name != "bf16" else ""
    return f"{name} ({why}{blas}; exact ranks either way{dense})"


@dataclasses.dataclass
class Side:
    """One side's screen operand (what the GEMM multiplies), exact data (what re-checks read) and bound terms."""

    data: torch.Tensor
    operand: torch.Tensor
    terms: torch.Tensor  # (4, n) float64
    max_norm: float


class Screen:
    """A screen over data of one compute dtype: prepares rows and columns, multiplies tiles, gives ``rel``."""

    def __init__(self, name: str, dim: int):
        self.name, self.dim = name, dim
        self.dtype = torch.float64 if name == "fp64" else torch.float32
        tiny = TINY[self.dtype]
        if name == "bf16":
            self.coef = (gamma(dim + 2, U32) + gamma(dim, U64) + 4 * U64) * INFLATE
            self.rel = UBF16 / (1 - UBF16) * INFLATE
            self.abs = (2 * dim + 3) * tiny * INFLATE
        else:
            u = U64 if name == "fp64" else U32
            self.coef = (gamma(dim, u) + gamma(dim, U64) + 4 * U64) * INFLATE
            self.rel = 0.0
            self.abs = (2 * dim + 2) * tiny * INFLATE
        self.daz = math.sqrt(dim) * tiny * INFLATE

    def side(self, x: torch.Tensor, is_row: bool) -> Side:
        """``x`` in the compute dtype: its operand and (4, n) terms as the GEMM's rows (is_row) or columns."""
        x = x.to(self.dtype).contiguous()
        n = norms(x)
        t = torch.zeros(4, x.shape[0], dtype=torch.float64)
        if self.name == "bf16":
            h, lo = bf16_split(x)
            nh, nl = norms(h), norms(lo)
            big = torch.maximum(n, nh)
            if is_row:
                t[0], t[1], t[2] = nh, nl, self.coef * big
            else:
                t[0], t[1], t[2], t[3] = nl, n, big, self.abs
            op = h
            mx = float(big.max()) if len(big) else 0.0
        else:
            if is_row:
                t[0], t[3] = self.coef * n, self.daz * n
            else:
                t[0], t[3] = n, self.daz * n + self.abs
            op = x
            mx = float(n.max()) if len(n) else 0.0
        return Side(x, op, t, mx)

    def matmul(self, a: Side, b: Side, out: torch.Tensor | None = None) -> torch.Tensor:
        """s_hat of a's rows against b's rows, in the tile dtype (fp32, or fp64 for the fp64 screen)."""
        if self.name != "bf16":
            return gemm.matmul(a.operand, b.operand, out=out)
        s = torch.matmul(a.operand, b.operand.T)
        return s.float() if out is None else out.copy_(s)


def fits_fp32(max_row_norm: float, max_col_norm: float) -> bool:
    """Whether a fp32/bf16 GEMM of these sides cannot overflow and decides more than its flush terms (else the
    fp64 screen runs)."""
    return FP32_RANGE[0] < max_row_norm * max_col_norm < FP32_RANGE[1]
