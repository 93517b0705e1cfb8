"""COCO RLE as uncompressed run counts in CSR form, on CPU or CUDA: the device-side path of ``vlkernels.ops.rle_*``.

The compressed COCO string is a host format (variable-length characters); a model's masks on the GPU become
:class:`RleCounts` (runs + per-mask offsets + one ``(h, w)``), on which encode, decode, area, bbox and IoU run as
CUDA kernels, or as their C++ CPU twins (the same per-element code, ``csrc/boxes/rle_counts.h``) on CPU tensors.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from vlkernels import _ext
from vlkernels._validate import check_same_device, check_tensor
from vlkernels.boxes.launch import as_tensor_view, stream
from vlkernels.boxes.rle_dicts import _MAX_PIXELS, _parse

# Tests set this: CPU then runs the exact twins of the CUDA kernels' split of the work (the two-pass encoder, one
# call per thread range with a running exclusive scan; area and IoU in 32 lane slices) instead of the fast CPU
# layout (one-pass encoder, one slice per pair).
_REPLAY_GPU_SPLIT = False
_WARP = 32


class RleCounts:
    """A batch of COCO run-length encodings of one mask size, as tensors (CPU or CUDA).

    Mask ``k``'s runs are ``counts[offsets[k]:offsets[k + 1]]``: lengths of alternating background / foreground runs
    over the column-major (Fortran-order) pixels, starting with background — the uncompressed form of
    pycocotools' RLE ``counts``. Build it with :func:`vlkernels.ops.rle_encode` (``compress=False``),
    :meth:`from_coco`, or from your own tensors (validated here).

    Args:
        counts: ``(T,)`` int64 (int32 is converted) run lengths, each in ``[0, h*w]`` (a tensor or numpy array).
        offsets: ``(N + 1,)`` int64 (tensor or numpy), ``offsets[0] = 0``, non-decreasing, ``offsets[N] = T``.
        size: ``(h, w)``, non-negative with ``h*w < 2**32``.

    Raises:
        ValueError: wrong dtype, rank or device; bad offsets; a negative or too long run; a mask whose runs do
            not sum to ``h*w`` (the message names the mask).

    Note:
        Validation reads the tensors once (one host synchronization on CUDA); the object is immutable afterwards,
        and the kernels trust it (do not modify ``counts`` / ``offsets`` in place).

    Example:
        >>> rc = RleCounts(torch.tensor([1, 3]), torch.tensor([0, 2]), (2, 2))
        >>> rc.to_coco()
        [{'size': [2, 2], 'counts': b'13'}]
    """

    __slots__ = ("_counts", "_offsets", "_size")

    def __init__(self, counts: torch.Tensor, offsets: torch.Tensor, size: Sequence[int]) -> None:
        counts, offsets, size = _validate(counts, offsets, size)
        self._set(counts, offsets, size)

    def _set(self, counts: torch.Tensor, offsets: torch.Tensor, size: tuple[int, int]) -> None:
        object.__setattr__(self, "_counts", counts)
        object.__setattr__(self, "_offsets", offsets)
        object.__setattr__(self, "_size", size)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("RleCounts is immutable")

    @classmethod
    def _trusted(cls, counts: torch.Tensor, offsets: torch.Tensor, size: tuple[int, int]) -> RleCounts:
        """For tensors our own kernels produced (already valid): skips the validation and its host sync."""
        obj = cls.__new__(cls)
        obj._set(counts, offsets, size)
        return obj

    @property
    def counts(self) -> torch.Tensor:
        return self._counts

    @property
    def offsets(self) -> torch.Tensor:
        return self._offsets

    @property
    def size(self) -> tuple[int, int]:
        return self._size

    @property
    def device(self) -> torch.device:
        return self._counts.device

    def __len__(self) -> int:
        return self._offsets.numel() - 1

    def __repr__(self) -> str:
        return f"RleCounts(n={len(self)}, size={self._size}, runs={self._counts.numel()}, device={self.device})"

    def to(self, device: torch.device | str) -> RleCounts:
        """The same RLEs on another device."""
        return RleCounts._trusted(self._counts.to(device), self._offsets.to(device), self._size)

    @classmethod
    def from_coco(cls, rles: Sequence[dict], device: torch.device | str | None = None) -> RleCounts:
        """COCO RLE dicts (compressed ``bytes``/``str`` counts as pycocotools' rleFrString, or run lists) sharing one
        size -> :class:`RleCounts` on ``device`` (default CPU). Strings are decoded by the bounds-checked C++ parser;
        ValueError as :func:`vlkernels.ops.rle_decode` (malformed strings, runs not summing to ``h*w``, mixed sizes).
        """
        s = _parse(rles, "rles")
        if len(s) == 0:
            raise ValueError("rles is empty: an RleCounts needs a mask size; build it from tensors instead")
        if bool((s.h != s.h[0]).any()) or bool((s.w != s.w[0]).any()):
            raise ValueError("rles must share one size to form one RleCounts; group them by size")
        return cls._trusted(s.counts, s.offsets, (int(s.h[0]), int(s.w[0]))).to(device or "cpu")

    def to_coco(self) -> list[dict]:
        """Compressed COCO RLE dicts ``{"size": [h, w], "counts": bytes}``, byte for byte pycocotools' rleToString
        (runs are copied to the host; the string codec is C++ on CPU)."""
        counts, offsets = self._counts.cpu(), self._offsets.cpu()
        strings = _ext.load().rle_to_strings(counts, offsets)
        return [{"size": list(self._size), "counts": s} for s in strings]


def _validate_csr(counts: object, offsets: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Dtypes, ranks, device and the CSR structure (offsets 0 .. counts.numel(), non-decreasing)."""
    counts, offsets = as_tensor_view(counts), as_tensor_view(offsets)
    check_tensor(counts, "counts", dtypes=(torch.int64, torch.int32), ndim=1)
    check_tensor(offsets, "offsets", dtypes=(torch.int64,), ndim=1)
    check_same_device(counts=counts, offsets=offsets)
    if offsets.numel() == 0:
        raise ValueError("offsets must hold N + 1 entries (at least [0])")
    counts = counts.to(torch.int64).contiguous()
    offsets = offsets.contiguous()
    if int(offsets[0]) != 0 or int(offsets[-1]) != counts.numel():
        raise ValueError(
            f"offsets must start at 0 and end at counts.numel() = {counts.numel()}, got {int(offsets[0])} .. "
            f"{int(offsets[-1])}"
        )
    if bool((offsets.diff() < 0).any()):
        raise ValueError("offsets must be non-decreasing")
    return counts, offsets


def _validate(counts: object, offsets: object, size: object) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    try:
        # operator.index: Python, numpy and 0-d torch integers pass; floats and bools do not.
        if not isinstance(size, Sequence) or len(size) != 2 or any(isinstance(v, bool) for v in size):
            raise TypeError
        h, w = operator.index(size[0]), operator.index(size[1])
    except TypeError:
        raise ValueError(f"size must be (height, width) integers, got {size!r}") from None
    if h < 0 or w < 0 or h * w > _MAX_PIXELS:
        raise ValueError(f"size {size!r} must be non-negative with h*w < 2**32")
    counts, offsets = _validate_csr(counts, offsets)
    hw = h * w
    bad = ((counts < 0) | (counts > hw)).nonzero()
    if bad.numel():
        j = int(bad[0])
        raise ValueError(f"counts[{j}] = {int(counts[j])}: run lengths must lie in [0, h*w = {hw}]")
    # Runs are bounded by hw < 2**32 and there are fewer than 2**31 of them: the int64 prefix sum cannot overflow.
    cs = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    sums = cs[offsets[1:]] - cs[offsets[:-1]]
    bad = (sums != hw).nonzero()
    if bad.numel():
        k = int(bad[0])
        raise ValueError(f"malformed RLE at mask {k}: runs sum to {int(sums[k])} but the size h*w is {hw}")
    return counts, offsets, (h, w)


def _parts() -> int:
    return _WARP if _REPLAY_GPU_SPLIT else 1


def _on_kernel_device(rc: RleCounts) -> RleCounts:
    # CUDA tensors with a CPU-only build: the CPU twin runs on host copies (results go back to the device).
    return rc.to("cpu") if rc.device.type == "cuda" and not _ext.load().has_cuda else rc


def mask_bytes(masks: torch.Tensor) -> torch.Tensor:
    """[N, H, W] bool/uint8 -> the uint8 [N, H, W] view the encoders read (C++ takes its strides). CPU reads any
    strides in place; CUDA reads a column-major copy (consecutive threads then read consecutive bytes)."""
    if masks.is_cuda:
        return masks.detach().transpose(1, 2).contiguous().transpose(1, 2).view(torch.uint8)
    # bool and uint8 share a byte layout (nonzero = foreground); torch strides are non-negative.
    return masks.detach().view(torch.uint8)


def encode_counts(masks: torch.Tensor) -> RleCounts:
    """[N, H, W] bool/uint8 (validated) -> RleCounts on the masks' device. CUDA (and the CPU twin under test): two
    passes, one host sync for the size; CPU: one pass in C++."""
    n, h, w = masks.shape
    hw = h * w
    device = masks.device
    on = torch.device("cpu") if device.type == "cuda" and not _ext.load().has_cuda else device
    C = _ext.load()
    t = mask_bytes(masks.to(on))
    if on.type == "cpu" and not _REPLAY_GPU_SPLIT:
        offsets = torch.empty(n + 1, dtype=torch.int64)
        C.rle_encode_run_offsets(t, offsets)
        counts = torch.empty(int(offsets[-1]), dtype=torch.int64)
        C.rle_encode_runs(t, offsets, counts)
        return RleCounts._trusted(counts, offsets, (h, w)).to(device)
    chunk = int(C.rle_chunk)
    nchunks = (hw + chunk - 1) // chunk
    chunk_cnt = torch.zeros(n, nchunks, dtype=torch.int64, device=on)
    if chunk_cnt.numel():
        C.rle_count_chunks(t, chunk_cnt, stream(t))
    offsets = torch.zeros(n + 1, dtype=torch.int64, device=on)
    # m_k = boundaries + 1 runs (the last run closes at h*w).
    offsets[1:] = torch.cumsum(chunk_cnt.sum(1) + 1, 0)
    chunk_base = (torch.cumsum(chunk_cnt, 1) - chunk_cnt).contiguous()
    total = int(offsets[-1])
    ends = torch.empty(total, dtype=torch.int64, device=on)
    counts = torch.empty(total, dtype=torch.int64, device=on)
    if n:
        if chunk_cnt.numel():
            C.rle_write_ends(t, chunk_base, offsets, ends, stream(t))
        C.rle_runs_from_ends(ends, offsets, hw, counts, stream(t))
    return RleCounts._trusted(counts, offsets, (h, w)).to(device)


def decode_columns(rc: RleCounts) -> torch.Tensor:
    """-> uint8 [N, W, H] contiguous on rc's device: each mask in column-major order, the kernels' output (as numpy
    ``.transpose(2, 1, 0)`` it is pycocotools' Fortran ``(H, W, N)`` array, without a copy)."""
    device, rc = rc.device, _on_kernel_device(rc)
    h, w = rc.size
    out = torch.empty(len(rc), w, h, dtype=torch.uint8, device=rc.device)
    if out.numel():
        csum = rc.counts.cumsum(0)
        _ext.load().rle_decode_csum(csum, rc.offsets, out, stream(out))
    return out.to(device)


def decode_counts(rc: RleCounts) -> torch.Tensor:
    """-> uint8 [N, H, W] contiguous on rc's device."""
    return decode_columns(rc).transpose(1, 2).contiguous()


def area_counts(rc: RleCounts) -> torch.Tensor:
    """-> int64 [N] on rc's device."""
    device, rc = rc.device, _on_kernel_device(rc)
    out = torch.zeros(len(rc), dtype=torch.int64, device=rc.device)
    if len(rc):
        _ext.load().rle_area(rc.counts, rc.offsets, out, _parts(), stream(out))
    return out.to(device)


def bbox_counts(rc: RleCounts) -> torch.Tensor:
    """-> float64 [N, 4] xywh on rc's device."""
    device, rc = rc.device, _on_kernel_device(rc)
    n = len(rc)
    out = torch.zeros(n, 4, dtype=torch.float64, device=rc.device)
    if n:
        h = torch.full((n,), rc.size[0], dtype=torch.int64, device=rc.device)
        w = torch.full((n,), rc.size[1], dtype=torch.int64, device=rc.device)
        _ext.load().rle_to_bbox(rc.counts, rc.offsets, h, w, out, stream(out))
    return out.to(device)


def iou_counts(dt: RleCounts, gt: RleCounts, crowd: torch.Tensor) -> torch.Tensor:
    """dt, gt on one device with one size (validated), crowd uint8 [G] -> float64 [D, G] on their device."""
    device = dt.device
    dt, gt = _on_kernel_device(dt), _on_kernel_device(gt)
    out = torch.empty(len(dt), len(gt), dtype=torch.float64, device=dt.device)
    if out.numel() == 0:
        return out.to(device)
    crowd = crowd.to(device=dt.device, dtype=torch.uint8).contiguous()
    d_csum, g_csum = dt.counts.cumsum(0), gt.counts.cumsum(0)
    d_area, g_area = area_counts(dt), area_counts(gt)
    d_box, g_box = bbox_counts(dt), bbox_counts(gt)
    C = _ext.load()
    C.rle_iou_csum(
        d_csum,
        dt.offsets,
        d_area,
        d_box,
        g_csum,
        gt.offsets,
        g_area,
        g_box,
        *dt.size,
        crowd,
        out,
        _parts(),
        stream(out),
    )
    return out.to(device)


# torch.library registrations (define + impl + fake), so torch.compile traces through the counts-path ops; the
# shapes follow from the offsets' length and the mask size. Encode is not registered: its output size depends on
# the data (it synchronizes once to learn it).
@torch.library.custom_op("vlkernels::rle_counts_decode", mutates_args=())
def decode_op(counts: torch.Tensor, offsets: torch.Tensor, h: int, w: int) -> torch.Tensor:
    # Registered ops are callable directly (torch.ops.vlkernels.*) with any tensors: each validates as RleCounts.
    return decode_counts(RleCounts(counts, offsets, (h, w)))


@decode_op.register_fake
def _(counts, offsets, h, w):
    return counts.new_empty((offsets.shape[0] - 1, h, w), dtype=torch.uint8)


@torch.library.custom_op("vlkernels::rle_counts_area", mutates_args=())
def area_op(counts: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    counts, offsets = _validate_csr(counts, offsets)
    bad = ((counts < 0) | (counts > _MAX_PIXELS)).nonzero()
    if bad.numel():
        j = int(bad[0])
        raise ValueError(f"counts[{j}] = {int(counts[j])}: run lengths must lie in [0, 2**32)")
    return area_counts(RleCounts._trusted(counts, offsets, (0, 0)))


@area_op.register_fake
def _(counts, offsets):
    return counts.new_empty((offsets.shape[0] - 1,), dtype=torch.int64)


@torch.library.custom_op("vlkernels::rle_counts_bbox", mutates_args=())
def bbox_op(counts: torch.Tensor, offsets: torch.Tensor, h: int, w: int) -> torch.Tensor:
    return bbox_counts(RleCounts(counts, offsets, (h, w)))


@bbox_op.register_fake
def _(counts, offsets, h, w):
    return counts.new_empty((offsets.shape[0] - 1, 4), dtype=torch.float64)


@torch.library.custom_op("vlkernels::rle_counts_iou", mutates_args=())
def iou_op(
    dt_counts: torch.Tensor,
    dt_offsets: torch.Tensor,
    gt_counts: torch.Tensor,
    gt_offsets: torch.Tensor,
    h: int,
    w: int,
    crowd: torch.Tensor,
) -> torch.Tensor:
    dt, gt = RleCounts(dt_counts, dt_offsets, (h, w)), RleCounts(gt_counts, gt_offsets, (h, w))
    check_same_device(dt=dt.counts, gt=gt.counts)
    check_tensor(crowd, "crowd", dtypes=(torch.uint8,), ndim=1, device=dt.device)
    if crowd.numel() != len(gt):
        raise ValueError(f"crowd must hold one flag per ground truth ({len(gt)}), got {crowd.numel()}")
    return iou_counts(dt, gt, crowd)


@iou_op.register_fake
def _(dt_counts, dt_offsets, gt_counts, gt_offsets, h, w, crowd):
    return dt_counts.new_empty((dt_offsets.shape[0] - 1, gt_offsets.shape[0] - 1), dtype=torch.float64)
