"""Box IoU family (IoU, GIoU, DIoU, CIoU) and temporal segment IoU: C++ on CPU, CUDA on GPU."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from vlkernels import _ext
from vlkernels._validate import FLOAT_DTYPES, check_finite, check_same_device, check_tensor
from vlkernels.boxes.launch import stream
from vlkernels.boxes.reference import box_iou_ref, segment_iou_ref

_FMTS = {"xyxy": 0, "xywh": 1, "cxcywh": 2}
_KINDS = {"iou": 0, "giou": 1, "diou": 2, "ciou": 3}
_SEG_UNIONS = {"sum": 0, "hull": 1}


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # torchvision's _upcast rule: halves are computed (and returned) in fp32, fp64 stays fp64.
    return torch.float64 if dtype == torch.float64 else torch.float32


@torch.library.custom_op("vlkernels::box_iou", mutates_args=())
def _box_iou_op(
    boxes1: torch.Tensor,
    boxes2: torch.Tensor,
    fmt: int,
    kind: int,
    aligned: bool,
    eps: float,
    valid1: torch.Tensor | None,
    valid2: torch.Tensor | None,
) -> torch.Tensor:
    """boxes1 [B, N, 4], boxes2 [B, M, 4] contiguous fp32/fp64; valid [B] int64 or None -> [B, N, M] / [B, N]."""
    _check_op_args(boxes1, boxes2, fmt, kind, aligned, valid1, valid2)
    batch, n = boxes1.shape[0], boxes1.shape[1]
    m = boxes2.shape[1]
    out = boxes1.new_empty((batch, n) if aligned else (batch, n, m))
    if out.numel() == 0:
        return out
    C = _ext.load()
    if boxes1.is_cuda and not C.has_cuda:
        return _box_iou_torch(boxes1, boxes2, fmt, kind, aligned, eps, valid1, valid2)
    # C++ checks every argument again (dtype, device, shapes, strides): the registered op is callable directly.
    C.box_iou(boxes1.detach(), boxes2.detach(), out, fmt, kind, aligned, eps, valid1, valid2, stream(boxes1))
    return out


def _check_op_args(boxes1, boxes2, fmt, kind, aligned, valid1, valid2) -> None:
    """The registered op is callable directly (``torch.ops.vlkernels.box_iou``): check what the kernel reads."""
    for name, b in (("boxes1", boxes1), ("boxes2", boxes2)):
        if b.dim() != 3 or b.shape[-1] != 4 or b.dtype not in (torch.float32, torch.float64) or not b.is_contiguous():
            raise ValueError(f"{name} must be a contiguous (B, N, 4) fp32/fp64 tensor, got {tuple(b.shape)} {b.dtype}")
    if boxes1.dtype != boxes2.dtype or boxes1.device != boxes2.device or boxes1.shape[0] != boxes2.shape[0]:
        raise ValueError("boxes1 and boxes2 must share dtype, device and batch size")
    if aligned and boxes1.shape[1] != boxes2.shape[1]:
        raise ValueError("aligned=True needs as many boxes in boxes1 as in boxes2")
    if fmt not in _FMTS.values() or kind not in _KINDS.values():
        raise ValueError(f"fmt must be in {sorted(_FMTS.values())} and kind in {sorted(_KINDS.values())}")
    for name, v, limit in (("valid1", valid1, boxes1.shape[1]), ("valid2", valid2, boxes2.shape[1])):
        if v is None:
            continue
        ok = v.dtype == torch.int64 and v.shape == (boxes1.shape[0],) and v.is_contiguous()
        if not ok or v.device != boxes1.device:
            raise ValueError(f"{name} must be a contiguous int64 ({boxes1.shape[0]},) tensor on the boxes' device")
        if v.numel() and (bool((v < 0).any()) or bool((v > limit).any())):
            raise ValueError(f"{name} counts must lie in [0, {limit}]")


def _valid_pairs(shape_b: int, n: int, m: int, aligned: bool, valid1, valid2, device) -> torch.Tensor | None:
    if valid1 is None and valid2 is None:
        return None
    rows = torch.arange(n, device=device)
    ok_i = rows[None, :] < (valid1[:, None] if valid1 is not None else n)
    if aligned:
        return ok_i & (rows[None, :] < (valid2[:, None] if valid2 is not None else n))
    cols = torch.arange(m, device=device)
    ok_j = cols[None, :] < (valid2[:, None] if valid2 is not None else m)
    return ok_i[:, :, None] & ok_j[:, None, :]


def _box_iou_torch(b1, b2, fmt, kind, aligned, eps, valid1, valid2, *, safe: bool = False) -> torch.Tensor:
    """The reference formula with the kernel's conventions (invalid pairs -> 0); the backward differentiates it."""
    fmts, kinds = list(_FMTS), list(_KINDS)
    ok = _valid_pairs(b1.shape[0], b1.shape[1], b2.shape[1], aligned, valid1, valid2, b1.device)
    if safe and ok is not None:
        # Padding boxes may be degenerate: differentiate a unit box there instead, so a 0/0 in a pair that is
        # masked out cannot turn its zero upstream gradient into NaN.
        unit = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=b1.dtype, device=b1.device)
        if fmt == 2:
            unit = torch.tensor([0.5, 0.5, 1.0, 1.0], dtype=b1.dtype, device=b1.device)
        n_ok = ok if aligned else ok.any(-1)
        m_ok = ok if aligned else ok.any(-2)
        b1 = torch.where(n_ok[..., None], b1, unit)
        b2 = torch.where(m_ok[..., None], b2, unit)
    out = box_iou_ref(b1, b2, fmts[fmt], kinds[kind], aligned, eps)
    return out if ok is None else torch.where(ok, out, torch.zeros((), dtype=out.dtype, device=out.device))


@_box_iou_op.register_fake
def _(boxes1, boxes2, fmt, kind, aligned, eps, valid1, valid2):
    b, n, m = boxes1.shape[0], boxes1.shape[1], boxes2.shape[1]
    return boxes1.new_empty((b, n) if aligned else (b, n, m))


def _box_iou_setup(ctx, inputs, output) -> None:
    boxes1, boxes2, fmt, kind, aligned, eps, valid1, valid2 = inputs
    ctx.save_for_backward(boxes1, boxes2, valid1, valid2)
    ctx.args = (fmt, kind, aligned, eps)


def _box_iou_backward(ctx, grad: torch.Tensor):
    # Reference backward: autograd through the torch formula (torchvision's), recomputed here. It builds the
    # pairwise temporaries the forward avoids, so its memory is O(B*N*M), like torchvision's. Plain torch ops, so
    # torch.compile traces it.
    boxes1, boxes2, valid1, valid2 = ctx.saved_tensors
    fmt, kind, aligned, eps = ctx.args
    need1, need2 = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    with torch.enable_grad():
        b1 = boxes1.detach().requires_grad_(need1)
        b2 = boxes2.detach().requires_grad_(need2)
        out = _box_iou_torch(b1, b2, fmt, kind, aligned, eps, valid1, valid2, safe=True)
        wrt = [t for t in (b1, b2) if t.requires_grad]
        grads = iter(torch.autograd.grad(out, wrt, grad, allow_unused=True) if wrt else ())
    g1 = next(grads) if need1 else None
    g2 = next(grads) if need2 else None
    return g1, g2, None, None, None, None, None, None


_box_iou_op.register_autograd(_box_iou_backward, setup_context=_box_iou_setup)


def _check_valid(valid, name: str, batch_shape: torch.Size, limit: int, device: torch.device) -> torch.Tensor | None:
    if valid is None:
        return None
    if isinstance(valid, int) or (isinstance(valid, Sequence) and not isinstance(valid, torch.Tensor)):
        # No dtype forced: a boolean mask ([True, False]) or fractional counts are refused below, not read as counts.
        valid = torch.as_tensor(valid)
    check_tensor(valid, name, dtypes=(torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8))
    if tuple(valid.shape) != tuple(batch_shape):
        raise ValueError(f"{name} must have the batch shape {tuple(batch_shape)}, got {tuple(valid.shape)}")
    valid = valid.to(device=device, dtype=torch.int64).reshape(-1).contiguous()
    if valid.numel() and (bool((valid < 0).any()) or bool((valid > limit).any())):
        raise ValueError(f"{name} counts must lie in [0, {limit}], got min {int(valid.min())} max {int(valid.max())}")
    return valid


def check_pair(x1: torch.Tensor, x2: torch.Tensor, names: tuple[str, str], item: str, count_dim: int, aligned: bool):
    """Shared shape rules of the pairwise ops: equal batch dims (those before `count_dim`) and, when aligned, as many
    items in both. Returns (batch_shape, n, m)."""
    batch_shape = x1.shape[:count_dim]
    if x2.shape[:count_dim] != batch_shape:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same batch dims, got {tuple(x1.shape)} and {tuple(x2.shape)}"
        )
    n, m = x1.shape[count_dim], x2.shape[count_dim]
    if aligned and n != m:
        raise ValueError(f"aligned=True needs as many {item} in {names[0]} as in {names[1]}, got {n} and {m}")
    return batch_shape, n, m


_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _check_coords(
    x1: torch.Tensor, x2: torch.Tensor, names: tuple[str, str], last_dim: int, dtypes=FLOAT_DTYPES
) -> None:
    """Coordinates of an allowed dtype with the expected last dim, on one device, of one dtype."""
    for x, name in zip((x1, x2), names):
        check_tensor(x, name, dtypes=dtypes, min_ndim=2, last_dim=last_dim)
    check_same_device(**dict(zip(names, (x1, x2))))
    if x1.dtype != x2.dtype:
        raise ValueError(f"{names[0]} and {names[1]} must share a dtype, got {x1.dtype} and {x2.dtype}")


def box_iou(
    boxes1: torch.Tensor,
    boxes2: torch.Tensor,
    fmt: str = "xyxy",
    kind: str = "iou",
    aligned: bool = False,
    eps: float = 0.0,
    valid1: torch.Tensor | Sequence[int] | int | None = None,
    valid2: torch.Tensor | Sequence[int] | int | None = None,
) -> torch.Tensor:
    """Batched IoU, GIoU, DIoU or CIoU between two sets of boxes (torchvision's formulas).

    .. math::
        \\mathrm{IoU} = \\frac{I}{U + \\epsilon},\\quad
        \\mathrm{GIoU} = \\frac{I}{U + \\epsilon} - \\frac{C - U}{C + \\epsilon},\\quad
        \\mathrm{DIoU} = \\frac{I}{U} - \\frac{\\rho^2}{c^2 + \\epsilon},\\quad
        \\mathrm{CIoU} = \\mathrm{DIoU} - \\alpha v

    with ``I``/``U`` the intersection/union areas, ``C`` the enclosing box's area, ``rho`` the centre distance,
    ``c`` the enclosing diagonal, ``v = 4/pi^2 (atan(w1/h1) - atan(w2/h2))^2`` and
    ``alpha = v / (1 - I/U + v + eps)`` (Rezatofighi et al. 2019; Zheng et al. 2020).

    Args:
        boxes1: ``(..., N, 4)`` fp16/bf16/fp32/fp64 or integer (uint8, int8/16/32/64), CPU or CUDA.
        boxes2: ``(..., M, 4)`` (aligned: ``(..., N, 4)``), same leading batch shape, dtype and device.
        fmt: ``"xyxy"``, ``"xywh"`` or ``"cxcywh"`` (converted as torchvision's ``box_convert``).
        kind: ``"iou"``, ``"giou"``, ``"diou"`` or ``"ciou"``.
        aligned: pair ``boxes1[..., i]`` with ``boxes2[..., i]`` only: output ``(..., N)``.
        eps: ``0`` reproduces torchvision's ``box_iou``/``generalized_box_iou`` exactly (NaN on 0/0); pass
            ``1e-7`` to reproduce ``distance_box_iou``/``complete_box_iou`` at their default.
        valid1, valid2: optional per-batch-row counts (shape ``boxes1.shape[:-2]``) of valid boxes in a ragged batch.
            Pairs with ``i >= valid1[b]`` or ``j >= valid2[b]`` are **exactly 0** (with zero gradient), whatever the
            padding holds.

    Returns:
        ``(..., N, M)`` (``(..., N)`` if aligned): fp32 for fp16/bf16/fp32 and integer inputs, fp64 for fp64.

    Raises:
        ValueError: wrong type, dtype, last dim, rank, mismatched batch shapes/devices/dtypes, NaN or Inf
            coordinates, unknown ``fmt``/``kind``, negative ``eps``, bad valid counts.

    Note:
        Degenerate boxes follow the formulas as torchvision does (zero/negative area, inverted corners; 0/0 ->
        NaN when eps=0). Halves are upcast before any arithmetic. Integer boxes follow torchvision's formula: areas
        and intersections in integers, the divisions in fp32 (8/16-bit boxes are upcast to int32 first, so uint8
        corners do not wrap around in the differences as they do in torchvision); they take the torch
        formula, not the C++ kernel (O(N·M) temporaries) and are not differentiable.
        Multithreaded C++ on CPU (the inner loop over ``boxes2`` vectorizes; no ``N x M x 2`` temporaries), one
        thread per pair on CUDA. Deterministic.
        Differentiable: the backward is autograd through the reference torch formula (``box_iou_ref``; CIoU's
        alpha treated as a constant, as in torchvision), which materializes ``N x M`` temporaries.

    Example:
        >>> a = torch.tensor([[0.0, 0.0, 2.0, 2.0]]); b = torch.tensor([[1.0, 1.0, 3.0, 3.0]])
        >>> box_iou(a, b)
        tensor([[0.1429]])
    """
    _check_coords(boxes1, boxes2, ("boxes1", "boxes2"), 4, dtypes=FLOAT_DTYPES + _INT_DTYPES)
    if fmt not in _FMTS:
        raise ValueError(f"fmt must be one of {sorted(_FMTS)}, got {fmt!r}")
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    batch_shape, n, m = check_pair(boxes1, boxes2, ("boxes1", "boxes2"), "boxes", -2, aligned)
    check_finite(boxes1, "boxes1")
    check_finite(boxes2, "boxes2")
    v1 = _check_valid(valid1, "valid1", batch_shape, n, boxes1.device)
    v2 = _check_valid(valid2, "valid2", batch_shape, m, boxes1.device)
    nb = math.prod(batch_shape)
    if not boxes1.is_floating_point():
        # torchvision's _upcast for integers; its arithmetic (integer areas, fp32 divisions) is the torch formula.
        it = boxes1.dtype if boxes1.dtype in (torch.int32, torch.int64) else torch.int32
        b1, b2 = boxes1.to(it).reshape(nb, n, 4), boxes2.to(it).reshape(nb, m, 4)
        out = _box_iou_torch(b1, b2, _FMTS[fmt], _KINDS[kind], bool(aligned), float(eps), v1, v2)
        out = out.to(torch.float32)
        return out.reshape(*batch_shape, n) if aligned else out.reshape(*batch_shape, n, m)
    dtype = _compute_dtype(boxes1.dtype)
    b1 = boxes1.to(dtype).reshape(nb, n, 4).contiguous()
    b2 = boxes2.to(dtype).reshape(nb, m, 4).contiguous()
    out = _box_iou_op(b1, b2, _FMTS[fmt], _KINDS[kind], bool(aligned), float(eps), v1, v2)
    return out.reshape(*batch_shape, n) if aligned else out.reshape(*batch_shape, n, m)


@torch.library.custom_op("vlkernels::segment_iou", mutates_args=())
def _segment_iou_op(seg1: torch.Tensor, seg2: torch.Tensor, mode: int, aligned: bool) -> torch.Tensor:
    if seg1.dim() != 3 or seg2.dim() != 3:
        # The C++ binding checks the rest (dtype, device, extents, strides): the op is callable directly.
        raise ValueError(
            f"seg1 and seg2 must be (B, N, 2) / (B, M, 2), got {tuple(seg1.shape)} and {tuple(seg2.shape)}"
        )
    batch, n, m = seg1.shape[0], seg1.shape[1], seg2.shape[1]
    out = seg1.new_empty((batch, n) if aligned else (batch, n, m))
    if out.numel() == 0:
        return out
    C = _ext.load()
    if seg1.is_cuda and not C.has_cuda:
        union = "hull" if mode == 1 else "sum"
        ref = [
            segment_iou_ref(a.cpu().double().numpy(), b.cpu().double().numpy(), aligned, union)
            for a, b in zip(seg1, seg2)
        ]
        return torch.as_tensor(ref, dtype=seg1.dtype).reshape(out.shape).to(seg1.device)
    C.segment_iou(seg1.detach(), seg2.detach(), out, mode, aligned, stream(seg1))
    return out


@_segment_iou_op.register_fake
def _(seg1, seg2, mode, aligned):
    b, n, m = seg1.shape[0], seg1.shape[1], seg2.shape[1]
    return seg1.new_empty((b, n) if aligned else (b, n, m))


def segment_iou(seg1: torch.Tensor, seg2: torch.Tensor, aligned: bool = False, union: str = "sum") -> torch.Tensor:
    """Temporal IoU of ``(start, end)`` spans, as Moment-DETR's standalone_eval computes it.

    .. math::
        I = \\max(0, \\min(e_1, e_2) - \\max(s_1, s_2)),\\qquad
        \\mathrm{IoU} = I / \\big((e_1 - s_1) + (e_2 - s_2) - I\\big) \\ \\text{(sum)}
        \\ \\text{or}\\ I / (\\max(e_1, e_2) - \\min(s_1, s_2)) \\ \\text{(hull)}

    Args:
        seg1: ``(..., N, 2)`` fp16/bf16/fp32/fp64 spans, CPU or CUDA.
        seg2: ``(..., M, 2)`` (aligned: ``(..., N, 2)``), same batch shape, dtype and device.
        aligned: pair ``seg1[..., i]`` with ``seg2[..., i]``: output ``(..., N)``.
        union: ``"sum"`` — ``compute_temporal_iou_batch_cross`` (true union; 0/0 -> NaN, used for mAP matching);
            ``"hull"`` — ``compute_temporal_iou_batch_paired`` (the hull, 0 where the hull is 0; used for R1).
            Both agree for overlapping spans up to rounding, and give 0 for disjoint ones.

    Returns:
        ``(..., N, M)`` or ``(..., N)``; fp64 for fp64 input (bit-identical to Moment-DETR's numpy), else fp32.

    Raises:
        ValueError: wrong type, dtype, last dim, batch shape, device, NaN/Inf spans, unknown ``union``.

    Note:
        Same operation order as the numpy formulas, so fp64 results are bit-identical. Multithreaded C++ on CPU,
        CUDA twin on GPU. Deterministic. Not differentiable (evaluation metric).

    Example:
        >>> segment_iou(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 3.0]]))
        tensor([[0.3333]])
    """
    _check_coords(seg1, seg2, ("seg1", "seg2"), 2)
    if union not in _SEG_UNIONS:
        raise ValueError(f"union must be one of {sorted(_SEG_UNIONS)}, got {union!r}")
    batch_shape, n, m = check_pair(seg1, seg2, ("seg1", "seg2"), "spans", -2, aligned)
    check_finite(seg1, "seg1")
    check_finite(seg2, "seg2")
    dtype = _compute_dtype(seg1.dtype)
    nb = math.prod(batch_shape)
    s1 = seg1.detach().to(dtype).reshape(nb, n, 2).contiguous()
    s2 = seg2.detach().to(dtype).reshape(nb, m, 2).contiguous()
    out = _segment_iou_op(s1, s2, _SEG_UNIONS[union], bool(aligned))
    return out.reshape(*batch_shape, n) if aligned else out.reshape(*batch_shape, n, m)
