"""The GEMM tile of every Triton kernel family: operand pointers, loads and the multiply-accumulate, in one place.

Layout (the one stride assumption): an operand is a matrix whose rows lie ``stride`` elements apart and whose
features are contiguous (unit stride; the launchers pass row-contiguous tensors). A tile's first row enters its
address in int64 (``row0 * stride`` passes 2^31 in large tables); the offsets inside a tile stay int32 (one register
per element instead of two), which needs ``BLOCK * stride < 2^31``: rows under 2^23 elements apart.

Precision (the one choice): ``PRECISION`` is ``tl.dot``'s input precision, from :func:`precision` of the first
operand: "ieee" for fp32 operands (exact IEEE products; TF32 would cost ~1e-3 relative error), "tf32" otherwise,
where tensor cores multiply fp16/bf16 exactly and the setting has no effect. Accumulation is fp32, in the order of
the K-loop below.

The interpreter's bf16 (the one workaround): Triton 3.9's interpreter holds bf16 values as their uint16 bit
patterns; ``tl.dot`` multiplies those integers and a cast to anything but fp32 converts the integer. ``UPCAST``
(:func:`upcast`: bf16 tensors off CUDA) widens every bf16 operand to fp32 in :func:`_widen`, exactly, so the
interpreter multiplies the values the tensor cores multiply. Compiled kernels never set it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def precision(t: torch.Tensor) -> str:
    """``PRECISION`` of a kernel whose first ``tl.dot`` operand is ``t``."""
    return "ieee" if t.dtype == torch.float32 else "tf32"


def upcast(t: torch.Tensor) -> bool:
    """``UPCAST`` of a kernel reading ``t``: bf16 under the interpreter (any device but CUDA)."""
    return t.dtype == torch.bfloat16 and t.device.type != "cuda"


def tile_flags(operand: str, dot: bool = True) -> dict:
    """``triton.heuristics`` entries deriving ``PRECISION`` (when ``dot``) and ``UPCAST`` from the kernel argument
    named ``operand``."""
    flags = {"UPCAST": lambda args: upcast(args[operand])}
    if dot:
        flags["PRECISION"] = lambda args: precision(args[operand])
    return flags


@triton.jit
def _widen(x, UPCAST: tl.constexpr):
    if UPCAST:
        x = x.to(tl.float32)
    return x


@triton.jit
def load_tile(ptrs, mask, UPCAST: tl.constexpr):
    """Operand elements at ``ptrs``, zero where ``mask`` is off (padding must add nothing to a dot)."""
    return _widen(tl.load(ptrs, mask=mask, other=0.0), UPCAST)


@triton.jit
def as_operand(x, dtype, UPCAST: tl.constexpr):
    """A computed tile rounded to the operand dtype ``dtype`` of the next ``mma``."""
    return _widen(x.to(dtype), UPCAST)


@triton.jit
def row_ptrs(ptr, row0, stride, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """[BLOCK_R, BLOCK_K] pointers: rows row0.., features 0..BLOCK_K (advance by BLOCK_K along the features)."""
    rr = tl.arange(0, BLOCK_R)
    rk = tl.arange(0, BLOCK_K)
    return ptr + tl.cast(row0, tl.int64) * stride + rr[:, None] * stride + rk[None, :]


@triton.jit
def col_ptrs(ptr, col0, stride, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    """[BLOCK_K, BLOCK_C] pointers: rows col0.. read transposed straight from memory (no register transpose)."""
    rk = tl.arange(0, BLOCK_K)
    rc = tl.arange(0, BLOCK_C)
    return ptr + tl.cast(col0, tl.int64) * stride + rk[:, None] + rc[None, :] * stride


@triton.jit
def mma(a, b, acc, PRECISION: tl.constexpr):
    """acc + a·b (fp32 accumulator)."""
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def dot_tile(
    a_ptr, b_ptr, a_lo_ptr, b_lo_ptr, row0, col0, n_rows, n_cols, n_dims, stride_a, stride_b,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """The [BLOCK_M, BLOCK_N] tile A[row0:]·B[col0:]ᵀ over n_dims features, BLOCK_K per step, fp32 accumulation;
    rows past n_rows / n_cols and features past n_dims read as 0. SPLIT adds A·B_loᵀ + A_lo·Bᵀ (a_lo_ptr, b_lo_ptr:
    the low halves of operands split in two; unread otherwise) after A·Bᵀ in every step."""
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mask_m = rm < n_rows - row0
    mask_n = rn < n_cols - col0
    if SPLIT:
        # Four operand tiles per step: their pointers are rebuilt each step from scalar bases and one int32 offset
        # tile per side (shared by both halves), not carried through the loop as four 64-bit pointer tiles, which
        # spill beside the retrieval screen's epilogue on sm_80.
        a_off = rm[:, None] * stride_a + rk[None, :]
        b_off = rk[:, None] + rn[None, :] * stride_b
        a_row = tl.cast(row0, tl.int64) * stride_a
        b_row = tl.cast(col0, tl.int64) * stride_b
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, n_dims, BLOCK_K):
            mask_k = rk < n_dims - k
            mask_a = mask_m[:, None] & mask_k[None, :]
            mask_b = mask_k[:, None] & mask_n[None, :]
            b_a = load_tile(a_ptr + a_row + k + a_off, mask_a, UPCAST)
            b_b = load_tile(b_ptr + b_row + k + b_off, mask_b, UPCAST)
            acc = mma(b_a, b_b, acc, PRECISION)
            b_a_lo = load_tile(a_lo_ptr + a_row + k + a_off, mask_a, UPCAST)
            b_b_lo = load_tile(b_lo_ptr + b_row + k + b_off, mask_b, UPCAST)
            acc = mma(b_a, b_b_lo, acc, PRECISION)
            acc = mma(b_a_lo, b_b, acc, PRECISION)
    else:
        a_ptrs = row_ptrs(a_ptr, row0, stride_a, BLOCK_M, BLOCK_K)
        b_ptrs = col_ptrs(b_ptr, col0, stride_b, BLOCK_K, BLOCK_N)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(0, n_dims, BLOCK_K):
            mask_k = rk < n_dims - k
            mask_a = mask_m[:, None] & mask_k[None, :]
            mask_b = mask_k[:, None] & mask_n[None, :]
            b_a = load_tile(a_ptrs, mask_a, UPCAST)
            b_b = load_tile(b_ptrs, mask_b, UPCAST)
            acc = mma(b_a, b_b, acc, PRECISION)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K
    return acc
