"""SigLIP score and CLIP score from embeddings: one fused, chunked pass over (frame, caption) pairs."""

from __future__ import annotations

import functools
import math
import operator
from typing import NamedTuple

import torch

from vlkernels._triton import run_triton, use_triton
from vlkernels._validate import FLOAT_DTYPES, check_same_device, check_tensor

# Rows per chunk of the torch path: the fp32 (rows, 2, D) pair buffer holds at most this many elements (64 MiB; with
# the fp16/bf16 gather buffer of a caption index, at most 80 MiB in all, whatever N).
_CHUNK_ELEMENTS = 1 << 24
# Every torch op is one OpenMP parallel region, and under contention each region waits for its slowest thread; the
# per-row vector ops of a chunk stay on the calling thread while they have fewer elements than torch's parallel
# grain (at::internal::GRAIN_SIZE = 32768), so only the copies, the Gram product and one sqrt open regions.
_SERIAL_ROWS = 32767


def pair_cosine_fwd(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Triton launcher: ``out[p] = cos(x[p], y[idx[p]])`` (``y[p]`` without idx), fp32, one read of the inputs."""
    import triton

    from vlkernels.metrics.configs import pair_cosine_tile
    from vlkernels.metrics.kernels import _pair_cosine_fwd_kernel

    n, d = x.shape
    out = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:
        return out
    if x.dtype != y.dtype:
        # One operand dtype per compile (the CUDA table lists one per dtype); promoting to the wider type is exact.
        common = torch.promote_types(x.dtype, y.dtype)
        x, y = x.to(common), y.to(common)
    t = pair_cosine_tile(x)
    grid = (triton.cdiv(n, t.block_p),)
    _pair_cosine_fwd_kernel[grid](
        x,
        y,
        idx if idx is not None else out,
        out,
        n,
        d,
        x.stride(0),
        y.stride(0),
        eps,
        HAS_IDX=idx is not None,
        BLOCK_P=t.block_p,
        BLOCK_D=t.block_d,
        num_warps=t.num_warps,
        num_stages=t.num_stages,
    )
    return out


def pair_cosine_chunked(
    x: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor | None,
    eps: float,
    chunk_rows: int | None = None,
    group: int | None = None,
) -> torch.Tensor:
    """Torch path (CPU, or CUDA without Triton): the same cosine, chunked so temporaries stay O(chunk * D).

    ``idx`` pairs x row ``p`` with y row ``idx[p]``; ``group=k`` with y row ``p // k`` (k frames per caption);
    neither pairs row ``p`` with row ``p``.
    """
    n, d = x.shape
    dev = x.device
    out = torch.empty(n, dtype=torch.float32, device=dev)
    if n == 0:
        return out
    rows = min(n, chunk_rows or max(1, min(_CHUNK_ELEMENTS // max(2 * d, 1), _SERIAL_ROWS)))
    # Row p of the chunk buffer holds (x_p, y_p) in fp32: one batched 2x2 Gram product per chunk gives ⟨x, y⟩, |x|²
    # and |y|² together, and the rest is serial vector work on the chunk's rows.
    pair = torch.empty(rows, 2, d, dtype=torch.float32, device=dev)
    gathered = idx is not None or group is not None
    ysrc = torch.empty(rows, d, dtype=y.dtype, device=dev) if gathered and y.dtype != torch.float32 else None
    for a in range(0, n, rows):
        b = min(n, a + rows)
        c = b - a
        buf = pair[:c]
        buf[:, 0].copy_(x[a:b])
        if gathered:
            rows_y = idx[a:b] if idx is not None else torch.arange(a, b, device=dev) // group
            if ysrc is None:
                torch.index_select(y, 0, rows_y, out=buf[:, 1])
            else:
                buf[:, 1].copy_(torch.index_select(y, 0, rows_y, out=ysrc[:c]))
        else:
            buf[:, 1].copy_(y[a:b])
        gram = torch.bmm(buf, buf.transpose(1, 2))
        # sqrt opens a region at any size, so both norms take one; the rest runs on the calling thread.
        norms = gram.diagonal(dim1=1, dim2=2).sqrt()
        norm_x, norm_y = norms[:, 0].clamp_min_(eps), norms[:, 1].clamp_min_(eps)
        torch.div(gram[:, 0, 1], norm_x, out=out[a:b]).div_(norm_y)
        # A squared norm past fp32's range would make a finite dot's cosine 0: NaN instead, which the caller reports
        # (as the kernel does).
        out[a:b].masked_fill_(torch.isinf(norm_x) | torch.isinf(norm_y), float("nan"))
    return out


@torch.library.custom_op("vlkernels::pair_cosine", mutates_args=())
def _pair_cosine_op(
    x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None, eps: float, group: int | None
) -> torch.Tensor:
    """``(N,)`` fp32 cosine of x row p with y row idx[p] (p // group with group, p without either); not
    differentiable (the scores built on it are evaluation metrics). An opaque op for torch.compile."""
    if use_triton(x):
        # The kernel takes row pointers with a unit column stride.
        x = x if x.shape[1] <= 1 or x.stride(1) == 1 else x.contiguous()
        y = y if y.shape[1] <= 1 or y.stride(1) == 1 else y.contiguous()
        if group is not None:
            idx = torch.arange(x.shape[0], device=x.device) // group
        torch_path = functools.partial(pair_cosine_chunked, group=group)
        return run_triton("pair_cosine", pair_cosine_fwd, torch_path, x, y, idx, eps)
    return pair_cosine_chunked(x, y, idx, eps, group=group)


@_pair_cosine_op.register_fake
def _(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None, eps: float, group: int | None) -> torch.Tensor:
    return x.new_empty(x.shape[0], dtype=torch.float32)


def _pair_cosine(
    x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None, eps: float, group: int | None = None
) -> torch.Tensor:
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    cos = _pair_cosine_op(x, y, idx, eps, group)
    # |cos| <= 1 wherever it is finite, so the sum is finite exactly when every cosine is: one pass, where
    # isfinite().all() takes five.
    if cos.numel() and not math.isfinite(float(cos.sum())):
        bad = int((~torch.isfinite(cos)).sum())
        if bool(torch.isfinite(x).all()) and bool(torch.isfinite(y).all()):
            # Finite inputs: a squared norm passed fp32's range (|x| > 1.8e19), where the cosines are computed.
            raise ValueError(
                f"image_emb/text_emb have norms too large for fp32 arithmetic ({bad} pair(s) affected; squared "
                "norms must stay below 3.4e38): scale the embeddings down, the cosine does not depend on their scale"
            )
        raise ValueError(f"image_emb/text_emb contain NaN/Inf values ({bad} pair(s) affected); inputs must be finite")
    return cos


def _check_embeddings(image_emb: torch.Tensor, text_emb: torch.Tensor) -> None:
    check_tensor(image_emb, "image_emb", dtypes=FLOAT_DTYPES, ndim=2)
    check_tensor(text_emb, "text_emb", dtypes=FLOAT_DTYPES, ndim=2)
    check_same_device(image_emb=image_emb, text_emb=text_emb)
    if image_emb.shape[1] != text_emb.shape[1]:
        raise ValueError(
            f"image_emb and text_emb must have the same embedding size, got {tuple(image_emb.shape)} and "
            f"{tuple(text_emb.shape)}"
        )


def _scalar(value: float | torch.Tensor, name: str) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar (one element), got shape {tuple(value.shape)}")
        value = value.detach().item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a float or a one-element tensor, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if abs(value) > torch.finfo(torch.float32).max:
        raise ValueError(f"{name} must lie within fp32's range (|{name}| <= 3.4e38; scores are fp32), got {value}")
    return float(value)


def _frame_index(
    frames: int | torch.Tensor, n_frames: int, n_captions: int, device: torch.device
) -> tuple[torch.Tensor | None, int | None, torch.Tensor | None]:
    """Validate ``frames``. Returns ``(None, k, None)`` for k frames per caption, else ``(index, None, counts)``:
    the per-frame caption index (int64, on ``device``) and the number of frames of each caption."""
    if not isinstance(frames, torch.Tensor):
        try:  # an int or a numpy integer; a bool or any float (2.0 included) is refused
            if isinstance(frames, bool):
                raise TypeError
            frames = operator.index(frames)
        except TypeError:
            raise ValueError(f"frames must be None, an int or a 1-D integer tensor, got {frames!r}") from None
    if isinstance(frames, int):
        if frames < 1:
            raise ValueError(f"frames (frames per caption) must be >= 1, got {frames}")
        if n_frames != n_captions * frames:
            raise ValueError(
                f"image_emb has {n_frames} rows but text_emb has {n_captions} captions x frames={frames} = "
                f"{n_captions * frames}"
            )
        return None, frames, None
    if frames.dtype not in (torch.int32, torch.int64) or frames.dim() != 1:
        raise ValueError(
            f"frames must be a 1-D int32/int64 tensor, got {frames.dtype} with shape {tuple(frames.shape)}"
        )
    if frames.shape[0] != n_frames:
        raise ValueError(f"frames has {frames.shape[0]} entries but image_emb has {n_frames} rows (one per frame)")
    idx = frames.to(device=device, dtype=torch.int64)
    lo, hi = torch.aminmax(idx) if n_frames else (0, 0)
    if n_frames and (int(lo) < 0 or int(hi) >= n_captions):
        raise ValueError(f"frames holds caption indices outside [0, {n_captions}) (text_emb has {n_captions} rows)")
    counts = torch.bincount(idx, minlength=n_captions)
    if n_captions and not bool((counts > 0).all()):
        missing = int((counts == 0).sum())
        raise ValueError(f"{missing} caption(s) have no frame in frames; every caption needs at least one")
    return idx, None, counts


@torch.no_grad()
def siglip_score(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: float | torch.Tensor,
    logit_bias: float | torch.Tensor,
    frames: int | torch.Tensor | None = None,
    *,
    eps: float = 1e-12,
) -> torch.Tensor:
    """SigLIP score: the sigmoid of the scaled, biased cosine of each (image, caption) pair, averaged over a
    video's frames.

    .. math::
        \\mathrm{score}(c) = \\frac{1}{|F_c|} \\sum_{f \\in F_c} \\sigma\\big(s \\cos(v_f, t_c) + b\\big)

    (Zhai et al. 2023, "Sigmoid Loss for Language Image Pre-Training"; the video form is the SigLIP-score seed:
    sigmoid per frame, then the mean over frames). Each pair is scored on its own, so the score does not depend on
    the batch size or on the other pairs.

    Args:
        image_emb: ``(N, D)`` image or frame embeddings (need not be unit-norm), fp16/bf16/fp32/fp64.
        text_emb: ``(M, D)`` caption embeddings, same device.
        logit_scale: ``s``, already exponentiated (open_clip / HF ``logit_scale.exp()``), finite and > 0.
        logit_bias: ``b`` (SigLIP's learned bias, about -10 for released models), finite.
        frames: how frames map to captions.
            ``None``: one image per caption, ``N == M``, row ``i`` pairs with caption ``i``.
            ``int k``: ``k`` consecutive frames per caption, ``N == M * k`` (rows ``j*k .. j*k+k-1`` are caption
            ``j``'s frames).
            ``(N,)`` int32/int64 tensor: ``frames[f]`` is the caption index of frame ``f`` (any order; every caption
            needs >= 1 frame; moved to the embeddings' device). From CSR offsets ``o``:
            ``torch.repeat_interleave(torch.arange(M), o.diff())``.
        eps: lower bound on each embedding norm (a zero embedding has cosine 0).

    Returns:
        ``(M,)`` float32 scores in (0, 1), one per caption (per pair when ``frames`` is None).

    Raises:
        ValueError: wrong types, dtypes, ranks or devices; mismatched embedding sizes or pair counts; a bad
            ``frames`` (wrong length, out-of-range index, a caption without frames); non-finite or non-positive
            ``logit_scale``, non-finite ``logit_bias``; NaN/Inf in the embeddings, or norms whose squares pass fp32's
            range (|x| > 1.8e19); an ``eps`` that is not positive and finite.

    Note:
        Computed in fp32 whatever the input dtype. On CUDA (and on CPU under ``TRITON_INTERPRET=1``) a Triton
        kernel reads each input row once and writes one fp32 cosine per frame; elsewhere a chunked torch path whose
        temporaries are O(chunk * D), never O(N * D). Extra memory is O(N) either way. Per-caption means of an
        explicit ``frames`` index accumulate in fp64 (``index_add_``; on CUDA the summation order, hence the last
        bits, may vary between runs). Not differentiable. Validation syncs with the device.

    Example:
        >>> img, txt = torch.randn(8, 16), torch.randn(2, 16)
        >>> siglip_score(img, txt, logit_scale=10.0, logit_bias=-10.0, frames=4).shape
        torch.Size([2])
    """
    _check_embeddings(image_emb, text_emb)
    s = _scalar(logit_scale, "logit_scale")
    b = _scalar(logit_bias, "logit_bias")
    if s <= 0:
        raise ValueError(f"logit_scale must be > 0 (pass the exponentiated scale), got {s}")
    n, m = image_emb.shape[0], text_emb.shape[0]
    if frames is None:
        if n != m:
            raise ValueError(
                f"image_emb has {n} rows and text_emb has {m}; without frames they pair row by row, so they must "
                "match (pass frames= for several frames per caption)"
            )
        return _affine(_pair_cosine(image_emb, text_emb, None, eps), s, b).sigmoid_()
    idx, per_caption, counts = _frame_index(frames, n, m, image_emb.device)
    logit = _affine(_pair_cosine(image_emb, text_emb, idx, eps, group=per_caption), s, b)
    if per_caption is not None:
        return logit.sigmoid_().view(m, per_caption).mean(dim=1)
    prob = logit.sigmoid_().double()
    sums = torch.zeros(m, dtype=torch.float64, device=prob.device).index_add_(0, idx, prob)
    return (sums / counts).float()


def _affine(cos: torch.Tensor, s: float, b: float) -> torch.Tensor:
    """s·cos + b in one pass (one parallel region), fp32."""
    return torch.add(torch.tensor(b, dtype=cos.dtype, device=cos.device), cos, alpha=s)


class ClipScore(NamedTuple):
    """Output of :func:`clip_score`."""

    scores: torch.Tensor
    """``(N,)`` per-pair ``w * max(cos, 0)``."""
    mean: torch.Tensor
    """0-d ``max(w * mean(cos), 0)``: torchmetrics' ``CLIPScore``/``clip_score`` aggregate (clamps the mean)."""


@torch.no_grad()
def clip_score(
    image_emb: torch.Tensor, text_emb: torch.Tensor, *, weight: float = 100.0, eps: float = 1e-12
) -> ClipScore:
    """CLIPScore from paired embeddings, with torchmetrics' definition.

    .. math::
        \\mathrm{CLIPScore}(I, C) = \\max(100 \\cos(E_I, E_C), 0)

    (Hessel et al. 2021 use ``w = 2.5``; torchmetrics and this function default to ``w = 100``.)

    Args:
        image_emb: ``(N, D)`` image embeddings (need not be unit-norm), fp16/bf16/fp32/fp64.
        text_emb: ``(N, D)`` caption embeddings; row ``i`` pairs with image ``i``.
        weight: ``w``, the factor in front of the cosine (> 0).
        eps: lower bound on each embedding norm (a zero embedding has cosine 0, where torchmetrics gives NaN).

    Returns:
        :class:`ClipScore` ``(scores, mean)``: per-pair ``(N,)`` float32 values, and the 0-d float32 corpus score
        exactly as torchmetrics aggregates it, ``max(w * mean_i cos_i, 0)``. The two agree
        (``mean == scores.mean()``) whenever no cosine is negative; torchmetrics clamps the mean, not each pair.
        ``mean`` is NaN for ``N = 0``.

    Raises:
        ValueError: wrong types, dtypes, ranks or devices; different row counts or embedding sizes; a
            non-positive weight; NaN/Inf in the embeddings, or norms whose squares pass fp32's range
            (|x| > 1.8e19); an ``eps`` that is not positive and finite.

    Note:
        Same engine as :func:`siglip_score`: fp32 arithmetic, one pass, O(N) extra memory, Triton on CUDA.
        Not differentiable. The mean accumulates in fp64.

    Example:
        >>> clip_score(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]])).scores
        tensor([70.7107])
    """
    _check_embeddings(image_emb, text_emb)
    w = _scalar(weight, "weight")
    if w <= 0:
        raise ValueError(f"weight must be > 0, got {w}")
    if image_emb.shape[0] != text_emb.shape[0]:
        raise ValueError(
            f"image_emb has {image_emb.shape[0]} rows and text_emb has {text_emb.shape[0]}; they pair row by row"
        )
    cos = _pair_cosine(image_emb, text_emb, None, eps)
    mean = (cos.double().mean() * w).clamp_min(0.0).float()
    return ClipScore(scores=(cos * w).clamp_min(0.0), mean=mean)
