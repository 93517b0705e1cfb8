"""COCO run-length encoding, bit-identical to pycocotools.mask: encode, decode, area, bbox and IoU (C++ and CUDA).

Every op takes COCO RLE dicts (compressed strings or run lists; C++ on CPU) or an :class:`RleCounts` (run counts as
tensors on CPU or CUDA; ``rle_counts.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from vlkernels import _ext
from vlkernels._validate import check_finite, check_same_device, check_tensor
from vlkernels.boxes import rle_counts as _rc
from vlkernels.boxes.launch import as_tensor_view
from vlkernels.boxes.rle_counts import RleCounts
from vlkernels.boxes.rle_dicts import _MAX_PIXELS, RLE, _parse


def _as_list(rles: RLE | Sequence[RLE]) -> tuple[list, bool]:
    if isinstance(rles, Mapping):
        return [rles], True
    return rles, False


def rle_encode(masks: torch.Tensor | np.ndarray, compress: bool = True) -> RLE | list[RLE] | RleCounts:
    """Encode binary masks as COCO RLE (``pycocotools.mask.encode``), compressed strings or run counts on device.

    Runs alternate background/foreground over the column-major (Fortran-order) pixels, starting with background
    (a mask whose first pixel is foreground opens with a zero run).

    Args:
        masks: ``(H, W)`` or ``(N, H, W)`` bool or uint8 (nonzero = foreground), any strides: a tensor (CPU or
            CUDA) or a numpy array, read in place (pycocotools' Fortran ``(H, W, N)`` array ``a`` is
            ``a.transpose(2, 0, 1)``, a view; :mod:`vlkernels.boxes.coco_mask` takes it as it is).
        compress: ``True``: pycocotools' compressed-string dicts. ``False``: an :class:`RleCounts` on the masks'
            device (``(H, W)`` input gives N = 1), the input of the device-side ``rle_*`` ops.

    Returns:
        ``{"size": [H, W], "counts": bytes}`` for one mask, or a list of them, equal to pycocotools' output for
        the same mask given as ``np.asfortranarray(mask.numpy().transpose(1, 2, 0))``; or an :class:`RleCounts`
        whose runs equal pycocotools' uncompressed counts.

    Raises:
        ValueError: not a tensor or numpy array, wrong dtype or rank, or more than 2**32 - 1 pixels.

    Note:
        pycocotools compares raw bytes, so a uint8 value other than 0/1 starts new runs there; here every nonzero
        value is foreground. CPU: one multithreaded C++ pass per mask, reading any strides in place. CUDA: count
        run boundaries per 4096-pixel chunk, scan, write them, take differences (one host synchronization for the
        output size); with ``compress=True`` only the runs are copied to the host, not the masks. Deterministic;
        not differentiable.

    Example:
        >>> rle_encode(torch.tensor([[0, 1], [1, 1]], dtype=torch.uint8))
        {'size': [2, 2], 'counts': b'13'}
        >>> rle_encode(torch.tensor([[0, 1], [1, 1]], dtype=torch.uint8), compress=False).counts
        tensor([1, 3])
    """
    masks = as_tensor_view(masks)
    check_tensor(masks, "masks", dtypes=(torch.bool, torch.uint8), ndim=(2, 3))
    single = masks.dim() == 2
    m = masks[None] if single else masks
    _n, h, w = m.shape
    if h * w > _MAX_PIXELS:
        raise ValueError(f"masks have {h}x{w} pixels; COCO RLE holds at most 2**32 - 1")
    if not compress or m.is_cuda:
        rc = _rc.encode_counts(m)
        if not compress:
            return rc
        out = rc.to_coco()
    else:
        strings = _ext.load().rle_encode(_rc.mask_bytes(m))
        out = [{"size": [h, w], "counts": s} for s in strings]
    return out[0] if single else out


def rle_decode(rles: RLE | Sequence[RLE] | RleCounts) -> torch.Tensor:
    """Decode COCO RLEs to masks (``pycocotools.mask.decode``).

    Args:
        rles: one RLE dict, a list of RLE dicts sharing one size (compressed strings or uncompressed run lists),
            or an :class:`RleCounts` (CPU or CUDA).

    Returns:
        uint8 ``(H, W)`` for one dict, ``(N, H, W)`` for a list or an RleCounts (on its device; pycocotools
        returns ``(H, W, N)``).

    Raises:
        ValueError: not RLE dicts, malformed counts (bad character, truncated or overflowing count, negative run,
            runs not summing to ``H*W``), or RLEs of different sizes.

    Note:
        The C++ string decoder bounds-checks every string. Pixels are written 16 at a time (a binary search for
        the run holding the first, then a walk): one CUDA thread, or one step of the multithreaded CPU twin, per
        16 pixels. Deterministic.

    Example:
        >>> rle_decode({"size": [2, 2], "counts": b"13"})
        tensor([[0, 1],
                [1, 1]], dtype=torch.uint8)
    """
    if isinstance(rles, RleCounts):
        return _rc.decode_op(rles.counts, rles.offsets, *rles.size)
    items, single = _as_list(rles)
    out = decode_columns(items).transpose(1, 2).contiguous()
    return out[0] if single else out


def decode_columns(rles: Sequence[RLE]) -> torch.Tensor:
    """RLE dicts of one size -> uint8 ``(N, W, H)`` contiguous (column-major masks, as the decoder writes them);
    ``(0, 0, 0)`` for an empty list. ValueError as :func:`rle_decode`."""
    s = _parse(rles, "rles")
    if len(s) == 0:
        return torch.zeros(0, 0, 0, dtype=torch.uint8)
    if bool((s.h != s.h[0]).any()) or bool((s.w != s.w[0]).any()):
        raise ValueError("rles must share one size to be decoded into one array; decode them separately")
    return _rc.decode_columns(RleCounts._trusted(s.counts, s.offsets, (int(s.h[0]), int(s.w[0]))))


def rle_area(rles: RLE | Sequence[RLE] | RleCounts) -> torch.Tensor:
    """Foreground pixel count of each RLE (``pycocotools.mask.area``).

    Args:
        rles: one RLE dict, a list (sizes may differ), or an :class:`RleCounts` (CPU or CUDA).

    Returns:
        int64 ``()`` for one dict, ``(N,)`` for a list or an RleCounts (on its device).

    Raises:
        ValueError: as :func:`rle_decode` for malformed RLEs.

    Note:
        Sum of the odd-index runs: C++ on CPU, one warp per mask on CUDA (integer sums: exact). Deterministic.

    Example:
        >>> rle_area({"size": [2, 2], "counts": b"13"})
        tensor(3)
    """
    if isinstance(rles, RleCounts):
        return _rc.area_op(rles.counts, rles.offsets)
    items, single = _as_list(rles)
    s = _parse(items, "rles")
    out = torch.zeros(len(s), dtype=torch.int64)
    if len(s):
        _ext.load().rle_area(s.counts, s.offsets, out)
    return out[0] if single else out


def rle_to_bbox(rles: RLE | Sequence[RLE] | RleCounts) -> torch.Tensor:
    """Tight xywh box of each RLE (``pycocotools.mask.toBbox``).

    Args:
        rles: one RLE dict, a list (sizes may differ), or an :class:`RleCounts` (CPU or CUDA).

    Returns:
        float64 ``(4,)`` for one dict, ``(N, 4)`` for a list or an RleCounts (on its device): ``[x, y, w, h]`` in
        pixels; an empty mask gives zeros.

    Raises:
        ValueError: as :func:`rle_decode` for malformed RLEs.

    Note:
        Reproduces rleToBbox exactly (its 32-bit unsigned arithmetic, and its rule that a mask spanning several
        columns gets the full column height when a foreground run wraps a column). One CUDA thread per mask: the
        scan is sequential. Deterministic.

    Example:
        >>> rle_to_bbox({"size": [2, 2], "counts": b"13"})
        tensor([0., 0., 2., 2.], dtype=torch.float64)
    """
    if isinstance(rles, RleCounts):
        return _rc.bbox_op(rles.counts, rles.offsets, *rles.size)
    items, single = _as_list(rles)
    s = _parse(items, "rles")
    out = torch.zeros(len(s), 4, dtype=torch.float64)
    if len(s):
        _ext.load().rle_to_bbox(s.counts, s.offsets, s.h, s.w, out)
    return out[0] if single else out


def _is_boxes(x: object) -> bool:
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return True
    return isinstance(x, Sequence) and len(x) > 0 and all(not isinstance(o, Mapping) for o in x)


def _as_boxes(x: object, name: str) -> torch.Tensor:
    t = torch.as_tensor(
        x.detach() if isinstance(x, torch.Tensor) else np.array(x, dtype=np.float64), dtype=torch.float64
    ).cpu()
    if t.dim() != 2 or t.shape[1] != 4:
        raise ValueError(f"{name} as boxes must be (N, 4) xywh, got shape {tuple(t.shape)}")
    check_finite(t, name)
    return t.contiguous()


def rle_iou(
    dt: Sequence[RLE] | RleCounts | torch.Tensor | np.ndarray,
    gt: Sequence[RLE] | RleCounts | torch.Tensor | np.ndarray,
    iscrowd: Sequence[int] | Sequence[bool] | torch.Tensor | np.ndarray | None = None,
) -> torch.Tensor:
    """COCO IoU between detections and ground truths, as ``pycocotools.mask.iou`` (masks as RLEs, or xywh boxes).

    .. math:: o_{dg} = \\frac{|d \\cap g|}{|d \\cup g|}, \\ \\text{or}\\ \\frac{|d \\cap g|}{|d|}
        \\text{ when } g \\text{ is a crowd region}

    Args:
        dt: ``D`` RLE dicts (compressed or uncompressed counts), an :class:`RleCounts` (CPU or CUDA), or a
            ``(D, 4)`` xywh box array.
        gt: ``G`` RLE dicts, an :class:`RleCounts` (same device and mask size as ``dt``), or ``(G, 4)`` xywh boxes
            (same kind as ``dt``).
        iscrowd: ``G`` flags (default all 0): crowd ground truths score intersection over the detection's area.

    Returns:
        float64 ``(D, G)`` (on the RleCounts' device), bit-identical to pycocotools (which returns ``[]`` when either
        side is empty; here an empty ``(D, G)`` tensor).

    Raises:
        ValueError: mixed RLE/RleCounts/box inputs, RleCounts on different devices, malformed RLEs, masks whose
            sizes differ (pycocotools writes -1 there), ``iscrowd`` of the wrong length, non-finite or non-``(N, 4)``
            boxes.

    Note:
        Two empty masks give 0. RLE IoU uses pycocotools' bbox prefilter, then intersects the foreground
        intervals (column planes on CPU, or a binary search to the overlap and a merge); counts are exact integers
        and the ratio is one float64 division, so every value equals pycocotools bit for bit. Multithreaded over
        detections.
        RleCounts: one CUDA warp per pair (the lanes split dt's foreground intervals inside the common extent, each
        slice binary-searches gt's intervals once, then merges), or the C++ twin of that per-pair code on CPU;
        no host synchronization. Zero-length runs after the first (never produced by pycocotools) give the exact
        IoU, where pycocotools' merge can stop early (``vlkernels/boxes/README.md``). Deterministic; not
        differentiable.

    Example:
        >>> a = rle_encode(torch.tensor([[1, 1], [0, 0]], dtype=torch.uint8))
        >>> b = rle_encode(torch.tensor([[1, 0], [1, 0]], dtype=torch.uint8))
        >>> rle_iou([a], [b])
        tensor([[0.3333]], dtype=torch.float64)
    """
    dt_counts, gt_counts = isinstance(dt, RleCounts), isinstance(gt, RleCounts)
    dt_boxes, gt_boxes = not dt_counts and _is_boxes(dt), not gt_counts and _is_boxes(gt)
    if dt_counts != gt_counts:
        raise ValueError("dt and gt must both be RleCounts (or neither); convert with RleCounts.from_coco")
    n_gt = len(gt)
    if iscrowd is None:
        crowd = torch.zeros(n_gt, dtype=torch.uint8)
    else:
        # A tensor stays on its device (the RleCounts path takes it there without a host round trip).
        crowd = iscrowd.detach() if isinstance(iscrowd, torch.Tensor) else torch.as_tensor(np.asarray(iscrowd))
        if crowd.dim() != 1 or crowd.numel() != n_gt:
            raise ValueError(f"iscrowd must have one flag per ground truth ({n_gt}), got shape {tuple(crowd.shape)}")
        crowd = (crowd != 0).to(torch.uint8).contiguous()
    if dt_counts:
        check_same_device(dt=dt.counts, gt=gt.counts)
        if dt.size != gt.size:
            raise ValueError(f"dt has mask size {list(dt.size)} but gt has {list(gt.size)}; masks must match")
        crowd = crowd.to(device=dt.device, dtype=torch.uint8).contiguous()
        return _rc.iou_op(dt.counts, dt.offsets, gt.counts, gt.offsets, *dt.size, crowd)
    crowd = crowd.cpu()
    C = _ext.load()
    if dt_boxes or gt_boxes:
        if not (dt_boxes or len(dt) == 0) or not (gt_boxes or len(gt) == 0):
            raise ValueError("dt and gt must both be RLE lists or both be (N, 4) xywh box arrays")
        d = _as_boxes(dt, "dt") if len(dt) else torch.zeros(0, 4, dtype=torch.float64)
        g = _as_boxes(gt, "gt") if len(gt) else torch.zeros(0, 4, dtype=torch.float64)
        out = torch.zeros(d.shape[0], g.shape[0], dtype=torch.float64)
        if out.numel():
            C.coco_box_iou(d, g, crowd, out)
        return out
    ds, gs = _parse(dt, "dt"), _parse(gt, "gt")
    if len(ds) == 0 or len(gs) == 0:
        return torch.empty(len(ds), len(gs), dtype=torch.float64)
    h, w = int(gs.h[0]), int(gs.w[0])
    for name, s in (("dt", ds), ("gt", gs)):
        bad = ((s.h != h) | (s.w != w)).nonzero()
        if bad.numel():
            k = int(bad[0])
            raise ValueError(
                f"{name}[{k}] has size {[int(s.h[k]), int(s.w[k])]} but gt[0] has {[h, w]}; masks must match"
            )
    # The one IoU engine, as for RleCounts (the parser checked every mask's runs).
    return _rc.iou_counts(
        RleCounts._trusted(ds.counts, ds.offsets, (h, w)), RleCounts._trusted(gs.counts, gs.offsets, (h, w)), crowd
    )
