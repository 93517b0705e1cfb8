"""Launchers and public functions for the core helpers."""

from __future__ import annotations

import torch

from vlkernels import _ext
from vlkernels._triton import run_triton, use_triton
from vlkernels._validate import check_contiguous, check_same_device, check_tensor
from vlkernels.core.reference import count_above_ref, l2_normalize_ref


def count_above_fwd(
    scores: torch.Tensor, thresholds: torch.Tensor, inclusive: bool, num_threads: int = 0
) -> torch.Tensor:
    out = torch.zeros(scores.shape[0] if scores.dim() else 0, dtype=torch.int64, device=scores.device)
    if scores.is_cuda and not _ext.load().has_cuda:
        return count_above_ref(scores, thresholds, inclusive)
    stream = torch.cuda.current_stream(scores.device).cuda_stream if scores.is_cuda else 0
    # C++ checks every argument again (dtype, device, shapes, strides): the registered op is callable directly.
    _ext.load().count_above(scores.detach(), thresholds.detach(), out, inclusive, num_threads, stream)
    return out


@torch.library.custom_op("vlkernels::count_above", mutates_args=())
def _count_above_op(
    scores: torch.Tensor, thresholds: torch.Tensor, inclusive: bool, num_threads: int = 0
) -> torch.Tensor:
    return count_above_fwd(scores, thresholds, inclusive, num_threads)


@_count_above_op.register_fake
def _(scores: torch.Tensor, thresholds: torch.Tensor, inclusive: bool, num_threads: int = 0) -> torch.Tensor:
    return scores.new_empty(scores.shape[0], dtype=torch.int64)


def count_above(
    scores: torch.Tensor, thresholds: torch.Tensor, inclusive: bool = False, *, num_threads: int | None = None
) -> torch.Tensor:
    """Count, per row, the scores that beat the row's threshold.

    .. math:: c_i = |\\{ j : s_{ij} > t_i \\}|  \\quad (\\ge \\text{ when inclusive})

    The primitive behind streaming rank metrics: the 1-indexed rank of a ground truth scored ``t_i`` is
    ``1 + c_i``, and counts over column chunks add.

    Args:
        scores: ``(N, M)`` float32 or float64, rows contiguous (``stride(1) == 1``), on CPU or CUDA.
        thresholds: ``(N,)`` same dtype and device as ``scores``, contiguous.
        inclusive: count ties (``>=``) instead of strict wins (``>``).
        num_threads: C++ threads for this call (default: ``vlkernels.get_num_threads()``); other calls, in this
            thread or others, are unaffected.

    Returns:
        ``(N,)`` int64 counts.

    Raises:
        ValueError: wrong type, dtype, rank, device, a non-unit column stride or a length mismatch.

    Note:
        NaN scores never count (every comparison with NaN is false); NaN thresholds are the caller's to avoid.
        Multithreaded C++ on CPU (``num_threads`` or ``vlkernels.set_num_threads``), one block per row on CUDA.
        Deterministic. Not differentiable (integer output). Ctrl-C stops a long call within ~0.1 s.

    Example:
        >>> count_above(torch.tensor([[0.1, 0.5, 0.9]]), torch.tensor([0.5]))
        tensor([1])
    """
    check_tensor(scores, "scores", dtypes=(torch.float32, torch.float64), ndim=2)
    check_tensor(thresholds, "thresholds", dtypes=(scores.dtype,), ndim=1)
    check_same_device(scores=scores, thresholds=thresholds)
    if thresholds.shape[0] != scores.shape[0]:
        raise ValueError(f"thresholds has {thresholds.shape[0]} entries but scores has {scores.shape[0]} rows")
    if scores.shape[1] > 1 and scores.stride(1) != 1:
        strides = tuple(scores.stride())
        raise ValueError(f"scores must have unit column stride (got strides {strides}); call .contiguous()")
    check_contiguous(thresholds, "thresholds")
    bad_threads = isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1
    if num_threads is not None and bad_threads:
        raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
    return _count_above_op(scores, thresholds, bool(inclusive), num_threads or 0)


def l2_normalize_fwd(x: torch.Tensor, eps: float) -> torch.Tensor:
    from vlkernels.core.configs import l2_normalize_tile
    from vlkernels.core.kernels import _l2_normalize_fwd_kernel

    n, d = x.shape
    y = torch.empty(n, d, dtype=x.dtype, device=x.device)
    if n == 0 or d == 0:
        return y
    t = l2_normalize_tile(x)
    _l2_normalize_fwd_kernel[(n,)](
        x, y, d, x.stride(0), y.stride(0), eps, BLOCK_D=t.block_d, num_warps=t.num_warps, num_stages=t.num_stages
    )
    return y


def l2_normalize_bwd(x: torch.Tensor, dy: torch.Tensor, eps: float) -> torch.Tensor:
    # d/dx [x / max(|x|, eps)] = (dy - y <y, dy>) / |x| where |x| > eps, else dy / eps.
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, dyf = x.to(acc), dy.to(acc)
    norm = xf.norm(dim=-1, keepdim=True)
    denom = norm.clamp_min(eps)
    y = xf / denom
    proj = torch.where(norm > eps, (y * dyf).sum(-1, keepdim=True), torch.zeros_like(norm))
    return ((dyf - y * proj) / denom).to(x.dtype)


@torch.library.custom_op("vlkernels::l2_normalize", mutates_args=())
def _l2_normalize_op(x: torch.Tensor, eps: float) -> torch.Tensor:
    # The kernel accumulates in fp32: float64 rows, and an eps whose inverse would overflow fp32, take the reference.
    if x.dtype != torch.float64 and eps >= torch.finfo(torch.float32).tiny and use_triton(x):
        return run_triton("l2_normalize", l2_normalize_fwd, l2_normalize_ref, x, eps)
    return l2_normalize_ref(x, eps).contiguous()


@_l2_normalize_op.register_fake
def _(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x.new_empty(x.shape)


def _l2_normalize_setup(ctx, inputs, output) -> None:
    x, eps = inputs
    ctx.save_for_backward(x)
    ctx.eps = eps


def _l2_normalize_backward(ctx, dy: torch.Tensor):
    (x,) = ctx.saved_tensors
    return l2_normalize_bwd(x, dy, ctx.eps), None


_l2_normalize_op.register_autograd(_l2_normalize_backward, setup_context=_l2_normalize_setup)


def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Normalize rows to unit L2 norm, as ``torch.nn.functional.normalize(x, dim=-1)``.

    .. math:: y_i = x_i / \\max(\\lVert x_i \\rVert_2, \\epsilon)

    Args:
        x: ``(N, D)`` fp16/bf16/fp32/fp64, CPU or CUDA, rows contiguous.
        eps: lower bound on the norm (a zero row stays zero).

    Returns:
        ``(N, D)`` in ``x``'s dtype.

    Raises:
        ValueError: wrong type, dtype, rank, or a non-unit column stride.

    Note:
        Triton on CUDA (and on CPU under ``TRITON_INTERPRET=1``) for fp16/bf16/fp32 rows and eps at least fp32's
        smallest normal (1.2e-38): the norm accumulates in fp32, one read pass and one write pass, no fp32 copy.
        Elsewhere the reference (float64 rows in float64). Differentiable; a ``torch.library`` custom op
        (``vlkernels::l2_normalize``), so ``torch.compile(fullgraph=True)`` traces through it. Returns a
        contiguous tensor.

    Example:
        >>> l2_normalize(torch.tensor([[3.0, 4.0]]))
        tensor([[0.6000, 0.8000]])
    """
    check_tensor(x, "x", dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64), ndim=2)
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have unit column stride (got strides {tuple(x.stride())}); call .contiguous()")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    return _l2_normalize_op(x, float(eps))
