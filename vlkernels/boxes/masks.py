"""Dense binary-mask IoU by bit packing and popcount (C++ on CPU, CUDA on GPU)."""

from __future__ import annotations

import math

import torch

from vlkernels import _ext
from vlkernels._validate import check_same_device, check_tensor
from vlkernels.boxes.iou import check_pair
from vlkernels.boxes.launch import as_tensor_view, stream
from vlkernels.boxes.reference import mask_iou_ref


def mask_pack(masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[K, P] uint8 contiguous -> (words [K, ceil(P / 64)] int64 holding the bits, areas [K] int64)."""
    k, pixels = masks.shape
    nw = (pixels + 63) // 64
    words = torch.empty(k, nw, dtype=torch.int64, device=masks.device)
    area = torch.zeros(k, dtype=torch.int64, device=masks.device)
    if k == 0 or pixels == 0:
        # Nothing to pack (and vlk::TensorArg sees a (K, 0) tensor's strides as non-contiguous).
        return words, area
    _ext.load().mask_pack(masks, words, area, stream(masks))
    return words, area


def mask_iou_fwd(masks1: torch.Tensor, masks2: torch.Tensor, aligned: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """masks [B, N, P] / [B, M, P] uint8 contiguous -> (IoU float64, intersection int64), [B, N, M] or [B, N]."""
    batch, n, pixels = masks1.shape
    m = masks2.shape[1]
    shape = (batch, n) if aligned else (batch, n, m)
    out = torch.zeros(shape, dtype=torch.float64, device=masks1.device)
    inter = torch.zeros(shape, dtype=torch.int64, device=masks1.device)
    if out.numel() == 0 or pixels == 0:
        return out, inter  # empty masks: IoU 0 (as pycocotools), no intersection
    C = _ext.load()
    if masks1.is_cuda and not C.has_cuda:
        # A CUDA tensor but a CPU-only build: the torch reference on the device.
        fa, fb = masks1.bool().double(), masks2.bool().double()
        inter = (fa * fb).sum(-1) if aligned else fa @ fb.transpose(-1, -2)
        return mask_iou_ref(masks1, masks2, aligned), inter.round().to(torch.int64)
    w1, a1 = mask_pack(masks1.reshape(batch * n, pixels))
    w2, a2 = mask_pack(masks2.reshape(batch * m, pixels))
    nw = w1.shape[1]
    w1, a1 = w1.view(batch, n, nw), a1.view(batch, n)
    w2, a2 = w2.view(batch, m, nw), a2.view(batch, m)
    C.mask_iou(w1, a1, w2, a2, aligned, out, inter, stream(masks1))
    return out, inter


@torch.library.custom_op("vlkernels::mask_iou", mutates_args=())
def _mask_iou_op(masks1: torch.Tensor, masks2: torch.Tensor, aligned: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return mask_iou_fwd(masks1, masks2, aligned)


@_mask_iou_op.register_fake
def _(masks1, masks2, aligned):
    b, n, m = masks1.shape[0], masks1.shape[1], masks2.shape[1]
    shape = (b, n) if aligned else (b, n, m)
    return masks1.new_empty(shape, dtype=torch.float64), masks1.new_empty(shape, dtype=torch.int64)


def _prepare(masks1: torch.Tensor, masks2: torch.Tensor, aligned: bool):
    masks1, masks2 = as_tensor_view(masks1), as_tensor_view(masks2)
    check_tensor(masks1, "masks1", dtypes=(torch.bool, torch.uint8), min_ndim=3)
    check_tensor(masks2, "masks2", dtypes=(torch.bool, torch.uint8), min_ndim=3)
    check_same_device(masks1=masks1, masks2=masks2)
    if masks1.shape[-2:] != masks2.shape[-2:]:
        raise ValueError(
            f"masks1 and masks2 must have the same mask size (H, W), got {tuple(masks1.shape[-2:])} and "
            f"{tuple(masks2.shape[-2:])}"
        )
    batch_shape, n, m = check_pair(masks1, masks2, ("masks1", "masks2"), "masks", -3, aligned)
    pixels = masks1.shape[-1] * masks1.shape[-2]
    # bool and uint8 share a byte layout; the kernels treat any nonzero byte as foreground.
    nb = math.prod(batch_shape)
    a = masks1.detach().reshape(nb, n, pixels).contiguous().view(torch.uint8)
    b = masks2.detach().reshape(nb, m, pixels).contiguous().view(torch.uint8)
    return a, b, batch_shape, n, m


def mask_iou(masks1: torch.Tensor, masks2: torch.Tensor, aligned: bool = False) -> torch.Tensor:
    """Batched pairwise IoU of dense binary masks.

    .. math:: o_{ij} = \\frac{|a_i \\wedge b_j|}{|a_i| + |b_j| - |a_i \\wedge b_j|}, \\quad 0 \\text{ if both are empty}

    Args:
        masks1: ``(..., N, H, W)`` bool or uint8 (nonzero = foreground), CPU or CUDA (a numpy array is taken as a
            CPU tensor over its buffer).
        masks2: ``(..., M, H, W)`` (aligned: ``(..., N, H, W)``), same batch shape, mask size and device.
        aligned: pair ``masks1[..., i]`` with ``masks2[..., i]``: output ``(..., N)``.

    Returns:
        float64 ``(..., N, M)`` (or ``(..., N)``): equal bit for bit to ``pycocotools.mask.iou`` of the
        RLE-encoded masks (two empty masks -> 0, as pycocotools).

    Raises:
        ValueError: wrong type, dtype or rank, different mask sizes, batch shapes or devices.

    Note:
        Each mask is packed to 64-bit words once (``H*W/8`` bytes), intersections are popcounts of ANDed words
        (a 4x1 register tile on CPU, multithreaded, hardware popcnt when the CPU has it; 16x16 shared-memory
        tiles on CUDA). Exact integer counts, one float64 division. Deterministic; not differentiable.

    Example:
        >>> a = torch.tensor([[[1, 1], [0, 0]]], dtype=torch.bool)
        >>> b = torch.tensor([[[1, 0], [1, 0]]], dtype=torch.bool)
        >>> mask_iou(a, b)
        tensor([[0.3333]], dtype=torch.float64)
    """
    a, b, batch_shape, n, m = _prepare(masks1, masks2, aligned)
    out, _ = _mask_iou_op(a, b, bool(aligned))
    return out.reshape(*batch_shape, n) if aligned else out.reshape(*batch_shape, n, m)


def mask_inter_union(masks1: torch.Tensor, masks2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Aligned intersection and union pixel counts (int64 ``(..., N)``) of paired masks ``(..., N, H, W)``."""
    a, b, batch_shape, n, _ = _prepare(masks1, masks2, True)
    _, inter = _mask_iou_op(a, b, True)
    area_a = a.bool().sum(-1, dtype=torch.int64)
    area_b = b.bool().sum(-1, dtype=torch.int64)
    union = area_a + area_b - inter
    return inter.reshape(*batch_shape, n), union.reshape(*batch_shape, n)
