"""``pycocotools.mask`` with its names, argument layouts and return types: ``from vlkernels.boxes import coco_mask as
maskUtils`` in place of ``from pycocotools import mask as maskUtils``.

Masks come in pycocotools' layout (numpy ``(H, W, N)`` or ``(H, W)``, uint8 or bool, Fortran order) and are read in
place: the array reaches the C++ encoder as a view over its own buffer, strides and all, so no transposed or
contiguous copy is made (any other strides are read in place too). Outputs are what pycocotools returns, byte for
byte: RLE dicts with ``bytes`` counts, ``(H, W, N)`` Fortran uint8 masks, uint32 areas, float64 boxes, a Fortran
float64 IoU matrix, and ``[]`` for an IoU with an empty side. Bad input raises ``ValueError`` / ``TypeError`` that say
what is wrong, where pycocotools raises assorted exceptions (or returns ``None`` or garbage). The differences are
listed in ``vlkernels/boxes/README.md`` ("pycocotools.mask drop-in").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vlkernels.boxes.mask_api import RLE, fr_py_objects, rle_merge
from vlkernels.boxes.rle import decode_columns, rle_area, rle_encode, rle_iou, rle_to_bbox

__all__ = ["area", "decode", "encode", "frPyObjects", "iou", "merge", "toBbox"]


def encode(bimask: np.ndarray) -> RLE | list[RLE]:
    """Binary masks to compressed COCO RLEs, as ``pycocotools.mask.encode``.

    Args:
        bimask: numpy ``(H, W, N)`` (-> list of ``N`` dicts) or ``(H, W)`` (-> one dict), uint8 or bool. Fortran order
            is pycocotools' layout and the fastest; any strides are read in place (pycocotools refuses them).

    Returns:
        ``{"size": [H, W], "counts": bytes}`` per mask, equal to pycocotools'.

    Raises:
        TypeError: not a numpy array.
        ValueError: another dtype or rank (pycocotools returns ``None`` for ranks other than 2 and 3), or more than
            ``2**32 - 1`` pixels per mask.

    Note:
        Any nonzero byte is foreground. pycocotools compares raw bytes, so both agree on every mask with one
        foreground value (0/1, 0/255, bool); a mask holding two different nonzero values gets runs from pycocotools
        that do not sum to ``H*W``.
    """
    if not isinstance(bimask, np.ndarray):
        raise TypeError(f"bimask must be a numpy array (H, W, N) or (H, W) of uint8, got {type(bimask).__name__}")
    if bimask.dtype not in (np.uint8, np.bool_):
        raise ValueError(
            f"bimask has dtype {bimask.dtype}; expected uint8 or bool (pycocotools' np.asfortranarray(m, np.uint8))"
        )
    if bimask.ndim == 3:
        return rle_encode(bimask.transpose(2, 0, 1))  # (N, H, W): a view, the strides go to C++
    if bimask.ndim == 2:
        return rle_encode(bimask)
    raise ValueError(f"bimask must be (H, W, N) or (H, W), got shape {bimask.shape}")


def decode(rleObjs: RLE | list[RLE]) -> np.ndarray:
    """Compressed (or uncompressed) COCO RLEs to masks, as ``pycocotools.mask.decode``.

    Args:
        rleObjs: one RLE dict, or a list of RLE dicts of one size.

    Returns:
        uint8 Fortran-order ``(H, W)`` for a dict, ``(H, W, N)`` for a list (``(0, 0, 0)`` for an empty list, where
        pycocotools returns an array of undefined shape).

    Raises:
        ValueError: malformed counts (pycocotools decodes a string whose runs fall short of ``H*W`` into a partial
            mask), RLEs of different sizes, not RLE dicts.
    """
    single = isinstance(rleObjs, Mapping)
    cols = decode_columns([rleObjs] if single else rleObjs).numpy()  # (N, W, H) C order = (H, W, N) Fortran order
    out = cols.transpose(2, 1, 0)
    return out[:, :, 0] if single else out


def area(rleObjs: RLE | list[RLE]) -> np.ndarray | np.uint32:
    """Foreground pixel counts, as ``pycocotools.mask.area``: uint32 ``(N,)`` for a list, ``np.uint32`` for a dict.

    Raises:
        ValueError: malformed RLEs (pycocotools raises KeyError / TypeError for some, sums bad runs for others).
    """
    single = isinstance(rleObjs, Mapping)
    out = rle_area([rleObjs] if single else rleObjs).numpy().astype(np.uint32)  # h*w < 2**32: exact
    return out[0] if single else out


def toBbox(rleObjs: RLE | list[RLE]) -> np.ndarray:
    """Tight ``[x, y, w, h]`` boxes, as ``pycocotools.mask.toBbox``: float64 ``(N, 4)``, ``(4,)`` for a dict.

    Raises:
        ValueError: malformed RLEs.
    """
    single = isinstance(rleObjs, Mapping)
    out = rle_to_bbox([rleObjs] if single else rleObjs).numpy()
    return out[0] if single else out


def _iou_side(objs: object, name: str) -> object:
    """pycocotools' reading of one side of iou: an (N, 4) array or list of 4-lists is boxes, a list of dicts RLEs."""
    if isinstance(objs, np.ndarray):
        if objs.size and (objs.ndim != 2 or objs.shape[1] != 4):
            raise ValueError(f"{name}: a numpy array holds bounding boxes and must be (N, 4), got shape {objs.shape}")
        return objs
    if isinstance(objs, Mapping) or isinstance(objs, (str, bytes)) or not isinstance(objs, Sequence):
        raise TypeError(
            f"{name} must be a list of RLE dicts, a list of [x, y, w, h] boxes or an (N, 4) array, got "
            f"{type(objs).__name__}"
        )
    if len(objs) and not (all(isinstance(o, Mapping) for o in objs) or not any(isinstance(o, Mapping) for o in objs)):
        raise ValueError(f"{name} mixes RLE dicts and boxes; pass one kind")
    return objs


def iou(dt: list[RLE] | list | np.ndarray, gt: list[RLE] | list | np.ndarray, pyiscrowd: Sequence) -> np.ndarray | list:
    """IoU of detections and ground truths (masks as RLEs, or xywh boxes), as ``pycocotools.mask.iou``.

    Args:
        dt: ``D`` RLE dicts, or ``D`` boxes (list of ``[x, y, w, h]`` or an ``(D, 4)`` array).
        gt: ``G`` of the same kind.
        pyiscrowd: ``G`` flags, read as pycocotools does (``np.array(pyiscrowd, dtype=np.uint8)``; a crowd ground
            truth scores intersection over the detection's area).

    Returns:
        float64 ``(D, G)`` in Fortran order, bit-identical to pycocotools; ``[]`` when either side is empty.

    Raises:
        TypeError: ``pyiscrowd`` that numpy cannot read as uint8 flags, an unsupported input type.
        ValueError: ``pyiscrowd`` not of length ``G`` (pycocotools: AssertionError), mixed kinds (pycocotools:
            Exception), malformed RLEs, masks of different sizes (pycocotools writes -1 for such pairs whose boxes
            overlap), boxes not ``(N, 4)`` or not finite (pycocotools returns NaN).
    """
    try:
        crowd = np.array(pyiscrowd, dtype=np.uint8)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"pyiscrowd must be a list of 0/1 flags, one per ground truth ({e})") from None
    dt, gt = _iou_side(dt, "dt"), _iou_side(gt, "gt")
    if crowd.ndim != 1 or crowd.shape[0] != len(gt):
        raise ValueError(f"pyiscrowd must hold one flag per ground truth ({len(gt)}), got shape {crowd.shape}")
    if len(dt) == 0 or len(gt) == 0:
        return []
    return np.asfortranarray(rle_iou(dt, gt, crowd).numpy())


def merge(rleObjs: list[RLE], intersect: int = 0) -> RLE:
    """Union (``intersect=0``) or intersection of RLEs of one size, as ``pycocotools.mask.merge``; ``[]`` gives
    ``{"size": [0, 0], "counts": b""}`` as there.

    Raises:
        ValueError: not a list of RLE dicts, malformed counts, different sizes (pycocotools returns an empty RLE).
    """
    return rle_merge(rleObjs, bool(intersect))


def frPyObjects(pyobj: object, h: int, w: int) -> RLE | list[RLE]:
    """Polygons, boxes or uncompressed RLEs to compressed RLEs, as ``pycocotools.mask.frPyObjects`` (a list in,
    a list out; one flat polygon / box or one dict in, one dict out). See
    :func:`vlkernels.boxes.fr_py_objects` for the forms and the cases where pycocotools raises and this does not.
    """
    return fr_py_objects(pyobj, h, w)
