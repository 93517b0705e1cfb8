"""COCO mask construction as ``pycocotools.mask``: polygons, xywh boxes and uncompressed RLE to compressed RLE
(``frPyObjects``), and the union / intersection of RLEs (``merge``), byte for byte pycocotools 2.0.11.

Rasterization is C++ (``csrc/boxes/rle_poly.cpp``); conventions and deliberate differences are in
``vlkernels/boxes/README.md``."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from vlkernels import _ext
from vlkernels._validate import as_integer
from vlkernels.boxes.rle_dicts import _MAX_PIXELS, _counts_bytes, _parse, _run_lengths, _size_of, strings_buffer

RLE = dict  # {"size": [h, w], "counts": bytes}


def _dim(v: object, name: str) -> int:
    """An image height or width: an integer (an integral float from JSON is accepted), non-negative."""
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an integer, got bool")
    out = as_integer(v)
    if out is None:
        raise TypeError(f"{name} must be an integer, got {v!r}")
    if out < 0:
        raise ValueError(f"{name} must be non-negative, got {out}")
    return out


def _image_size(h: object, w: object) -> tuple[int, int]:
    h, w = _dim(h, "h"), _dim(w, "w")
    if h * w > _MAX_PIXELS:
        raise ValueError(f"image size {h}x{w} has more than 2**32 - 1 pixels (COCO RLE's limit)")
    return h, w


def _checked(out: object) -> object:
    """The mask-API bindings return "TypeError: ..." / "ValueError: ..." instead of raising in C++."""
    if isinstance(out, str):
        kind, _, message = out.partition(": ")
        raise (TypeError if kind == "TypeError" else ValueError)(message)
    return out


def _dicts(strings: list[bytes], h: int, w: int) -> list[RLE]:
    return [{"size": [h, w], "counts": s} for s in _checked(strings)]


def rle_from_polygons(polygons: Sequence[Sequence[float]] | np.ndarray, h: int, w: int) -> list[RLE]:
    """Rasterize polygons to compressed COCO RLEs, as ``pycocotools.mask.frPoly``.

    Args:
        polygons: ``P`` polygons, each a flat ``[x1, y1, x2, y2, ...]`` list, tuple or 1-D array in pixels (a 2-D
            array is taken row by row). Any number of vertices: fewer than 3 give a degenerate (usually empty) mask.
        h, w: image height and width (``h*w < 2**32``).

    Returns:
        ``P`` dicts ``{"size": [h, w], "counts": bytes}``, each equal to pycocotools' (one polygon per RLE; merge
        the parts of one object with :func:`rle_merge`).

    Raises:
        TypeError: a polygon that is not a flat sequence of numbers.
        ValueError: an odd number of coordinates (pycocotools drops the last one silently), a non-finite
            coordinate or one beyond ``±1e8`` pixels (where pycocotools' int32 arithmetic overflows), a bad size.

    Note:
        pycocotools upsamples by 5, walks each edge with its own ``(int)(v + .5)`` rounding and records a
        boundary where the walk crosses a column's centre; those rules are reproduced exactly (in C++, in
        O(vertices + columns crossed) per edge rather than one step per 1/5 pixel). Deterministic.

    Example:
        >>> rle_from_polygons([[1, 1, 6, 1, 6, 6, 1, 6]], 10, 10)
        [{'size': [10, 10], 'counts': b';550000000W1'}]
    """
    h, w = _image_size(h, w)
    if isinstance(polygons, torch.Tensor):
        polygons = polygons.detach().cpu().numpy()
    if isinstance(polygons, np.ndarray) and polygons.ndim == 2:
        polygons = list(polygons)
    if isinstance(polygons, (str, bytes, Mapping)) or not isinstance(polygons, (Sequence, np.ndarray)):
        raise TypeError(f"polygons must be a list of flat coordinate lists, got {type(polygons).__name__}")
    xy, offsets = _flat_polygons(polygons)
    return _dicts(_ext.load().rle_from_polygons(xy, offsets, h, w), h, w)


def _flat_polygons(polygons: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Polygons -> their coordinates back to back (float64) and the CSR offsets of their vertices (int64)."""
    parts = []
    for p, poly in enumerate(polygons):
        where = f"polygon {p}"
        if isinstance(poly, np.ndarray):
            if poly.ndim != 1:
                raise ValueError(f"{where} must be a flat [x1, y1, x2, y2, ...] array, got {poly.ndim} dimensions")
            try:
                a = poly.astype(np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"{where} is an array that does not convert to float64") from None
        elif isinstance(poly, (list, tuple)):
            for j, v in enumerate(poly):
                if not isinstance(v, (numbers.Real, np.number)) or isinstance(v, np.bool_):
                    raise TypeError(
                        f"{where}: coordinate {j} is a {type(v).__name__}; a polygon is a flat list of numbers "
                        "[x1, y1, x2, y2, ...]"
                    )
            a = np.array(poly, dtype=np.float64)
        else:
            raise TypeError(f"{where} must be a flat list [x1, y1, x2, y2, ...] of numbers, got {type(poly).__name__}")
        if a.size % 2:
            raise ValueError(f"{where} has {a.size} coordinates; a polygon is a flat list of x, y pairs")
        parts.append(a)
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([a.size // 2 for a in parts], out=offsets[1:])
    xy = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
    return xy, offsets


def rle_from_bboxes(boxes: Sequence[Sequence[float]] | np.ndarray | torch.Tensor, h: int, w: int) -> list[RLE]:
    """Rasterize xywh boxes to compressed COCO RLEs, as ``pycocotools.mask.frBbox``.

    Args:
        boxes: ``(N, 4)`` ``[x, y, width, height]`` in pixels (any real dtype; list, array or tensor).
        h, w: image height and width (``h*w < 2**32``).

    Returns:
        ``N`` dicts ``{"size": [h, w], "counts": bytes}``: the polygon ``(x, y), (x, y+h), (x+w, y+h), (x+w, y)``
        rasterized as :func:`rle_from_polygons`, so a box covers the pixels whose centres it contains (a pixel
        centre on the left/top edge is in, on the right/bottom edge out), as pycocotools.

    Raises:
        ValueError: not ``(N, 4)``, a non-finite coordinate or one beyond ``±1e8``, a bad size.

    Example:
        >>> rle_from_bboxes([[1, 1, 3, 3]], 10, 10)
        [{'size': [10, 10], 'counts': b';37000k1'}]
    """
    h, w = _image_size(h, w)
    if isinstance(boxes, torch.Tensor):
        boxes = boxes.detach().cpu().numpy()
    try:
        arr = np.asarray(boxes, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("boxes must be an (N, 4) array of [x, y, width, height] numbers") from None
    if arr.size == 0:
        arr = arr.reshape(0, 4)
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise ValueError(f"boxes must be an (N, 4) array of [x, y, width, height], got shape {arr.shape}")
    if arr.shape[0] == 0:
        return []  # (vlk::TensorArg reads an empty array's zero strides as non-contiguous)
    return _dicts(_ext.load().rle_from_bboxes(np.ascontiguousarray(arr), h, w), h, w)


def rle_from_uncompressed(rles: Sequence[Mapping]) -> list[RLE]:
    """Uncompressed COCO RLEs (``counts`` a list of run lengths) to compressed ones, as
    ``pycocotools.mask.frUncompressedRLE``: each keeps its own ``size``.

    Args:
        rles: dicts ``{"size": [h, w], "counts": [int, ...]}`` (a dict whose counts are already a compressed
            string is re-encoded from its parsed runs).

    Returns:
        dicts ``{"size": [h, w], "counts": bytes}``.

    Raises:
        ValueError: not RLE dicts, a bad size, counts that are not non-negative integers below ``2**32``, or a
            malformed compressed string.

    Note:
        The runs are transcoded as given, like pycocotools: runs that do not sum to ``h*w`` are kept (and refused
        later by :func:`~vlkernels.ops.rle_decode` and the other readers).

    Example:
        >>> rle_from_uncompressed([{"size": [2, 2], "counts": [1, 3]}])
        [{'size': [2, 2], 'counts': b'13'}]
    """
    if isinstance(rles, (Mapping, str, bytes)) or not isinstance(rles, Sequence):
        raise ValueError(f"rles must be a list of RLE dicts, got {type(rles).__name__}")
    sizes, parts = [], []
    C = _ext.load()
    for k, r in enumerate(rles):
        h, w = _size_of(r, "rles", k)
        sizes.append([h, w])
        c = r["counts"]
        if isinstance(c, (bytes, str)):
            parts.append(_parse([r], "rles").counts.numpy())
        else:
            parts.append(_run_lengths(c, "rles", k))
    if not parts:
        return []
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in parts])
    counts = np.ascontiguousarray(np.concatenate(parts).astype(np.int64))
    strings = C.rle_to_strings(counts, offsets)
    return [{"size": s, "counts": c} for s, c in zip(sizes, strings)]


def _is_number(x: object) -> bool:
    return isinstance(x, (numbers.Real, np.number))


def fr_py_objects(obj: object, h: int, w: int) -> RLE | list[RLE]:
    """Polygons, boxes or uncompressed RLEs to compressed COCO RLE: ``pycocotools.mask.frPyObjects``.

    The form of ``obj`` decides, in pycocotools' order:

    - an array (numpy or torch) ``(N, 4)``: xywh boxes -> list (:func:`rle_from_bboxes`);
    - a list whose first item has 4 entries: boxes -> list;
    - a list whose first item has more than 4 entries: polygons -> list (:func:`rle_from_polygons`);
    - a list of dicts with ``size`` and ``counts``: uncompressed RLEs -> list (:func:`rle_from_uncompressed`);
    - one flat list of numbers: one box (4 numbers) or one polygon (more) -> one dict;
    - one dict with ``size`` and ``counts``: one uncompressed RLE -> one dict.

    Args:
        obj: as above.
        h, w: image height and width; RLE dicts keep their own ``size``, as in pycocotools.

    Returns:
        A list of dicts ``{"size": [h, w], "counts": bytes}``, or one dict for a single object, byte for byte
        pycocotools'.

    Raises:
        TypeError: an unsupported form (message lists the accepted ones).
        ValueError: as the functions above (odd polygon length, non-finite or huge coordinates, bad counts).

    Note:
        Where pycocotools 2.0.11 raises, this returns the evident result: boxes as a list of lists or any numeric
        array (pycocotools wants a float64 ndarray), a single flat box or polygon (pycocotools fails on
        ``len()`` of a number), tuples, an empty list (``[]``), a list whose first polygon has fewer than 4
        coordinates. Deliberate differences: an odd-length polygon raises (pycocotools drops the last value).

    Example:
        >>> fr_py_objects([[1, 1, 6, 1, 6, 6, 1, 6]], 10, 10)
        [{'size': [10, 10], 'counts': b';550000000W1'}]
        >>> fr_py_objects({"size": [2, 2], "counts": [1, 3]}, 2, 2)
        {'size': [2, 2], 'counts': b'13'}
    """
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return rle_from_bboxes(obj, h, w)
    if isinstance(obj, Mapping):
        if "counts" not in obj or "size" not in obj:
            raise TypeError("a dict given to fr_py_objects must be an RLE with 'size' and 'counts'")
        return rle_from_uncompressed([obj])[0]
    if not isinstance(obj, (list, tuple)):
        raise TypeError(
            f"fr_py_objects takes polygons (list of flat coordinate lists), boxes ((N, 4) array or list), an RLE "
            f"dict or a list of them; got {type(obj).__name__}"
        )
    if len(obj) == 0:
        return []
    first = obj[0]
    if isinstance(first, Mapping):
        return rle_from_uncompressed(obj)
    if _is_number(first):
        if len(obj) == 4:
            return rle_from_bboxes([obj], h, w)[0]
        return rle_from_polygons([obj], h, w)[0]
    try:
        n0 = len(first)
    except TypeError:
        raise TypeError(
            f"fr_py_objects: list items must be coordinate lists or RLE dicts, got {type(first).__name__}"
        ) from None
    if n0 == 4:
        return rle_from_bboxes(obj, h, w)
    return rle_from_polygons(obj, h, w)


def rle_merge(rles: Sequence[Mapping], intersect: bool = False) -> RLE:
    """Union (or intersection) of COCO RLEs of one size, as ``pycocotools.mask.merge``.

    Args:
        rles: RLE dicts (compressed ``bytes``/``str`` or uncompressed run lists) sharing one ``size``.
        intersect: ``False`` (pycocotools' default 0): union; ``True``: intersection.

    Returns:
        ``{"size": [h, w], "counts": bytes}``, byte for byte pycocotools' (its run-for-run output, including the
        re-encoded input for one RLE); ``{"size": [0, 0], "counts": b""}`` for an empty list, as pycocotools.

    Raises:
        ValueError: not a list of RLE dicts, malformed counts, or RLEs of different sizes (pycocotools returns an
            empty ``[0, 0]`` RLE there).

    Note:
        One pass over the runs of each RLE (C++), folded left to right. Deterministic.

    Example:
        >>> a, b = {"size": [2, 2], "counts": b"13"}, {"size": [2, 2], "counts": b"031"}
        >>> rle_merge([a, b]), rle_merge([a, b], intersect=True)
        ({'size': [2, 2], 'counts': b'04'}, {'size': [2, 2], 'counts': b'121'})
    """
    if isinstance(rles, Sequence) and not isinstance(rles, (str, bytes)) and len(rles) > 0:
        sizes = [_size_of(r, "rles", k) for k, r in enumerate(rles)]
        raw = [r["counts"] for r in rles]
        # Compressed strings of one size (what frPyObjects returns): parsed, merged and encoded in one C++ call.
        if all(s == sizes[0] for s in sizes) and all(isinstance(c, (bytes, str)) for c in raw):
            strings = [_counts_bytes(c, "rles", k) for k, c in enumerate(raw)]
            buf, str_off = strings_buffer(strings)
            counts = _checked(_ext.load().rle_merge_strings(buf, str_off, *sizes[0], bool(intersect)))
            return {"size": list(sizes[0]), "counts": counts}
    s = _parse(rles, "rles")
    if len(s) == 0:
        return {"size": [0, 0], "counts": b""}
    h, w = int(s.h[0]), int(s.w[0])
    bad = ((s.h != h) | (s.w != w)).nonzero()
    if bad.numel():
        k = int(bad[0])
        size = [int(s.h[k]), int(s.w[k])]
        raise ValueError(f"rles[{k}] has size {size} but rles[0] has {[h, w]}; merge needs one size")
    counts = _checked(_ext.load().rle_merge(s.counts, s.offsets, bool(intersect)))
    return {"size": [h, w], "counts": counts}
