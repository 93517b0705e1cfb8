"""COCO / LVIS annotations and results to columns (numpy arrays), validated item by item.

Ground truth: a pycocotools ``COCO`` or lvis-api ``LVIS`` object (its ``dataset``), a COCO-format dict, or a JSON
path. Results: a ``COCO`` object made by ``loadRes`` (its annotations as they are), a list of result dicts, or a
JSON path; a list gets ``COCO.loadRes``'s fields (``id = index + 1``; bbox results: ``area = w * h``; segmentation
results: the mask area and, without a ``bbox``, the mask's box). pycocotools is never imported here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vlkernels import _ext


@dataclass
class Anns:
    """One row per annotation (dataset order): ``raw`` keeps the dicts for the segmentation pass."""

    image_id: np.ndarray  # int64
    category_id: np.ndarray  # int64
    id: np.ndarray  # int64
    area: np.ndarray  # float64
    iscrowd: np.ndarray  # uint8
    ignore: np.ndarray  # uint8 (the "ignore" field, LVIS)
    score: np.ndarray | None  # float64 (results only)
    bbox: np.ndarray | None  # float64 [n, 4] xywh, None when the annotations carry none
    raw: list = field(repr=False, default_factory=list)

    def __len__(self) -> int:
        return int(self.image_id.size)


@dataclass
class GroundTruth:
    img_ids: np.ndarray  # int64, images list order
    heights: np.ndarray
    widths: np.ndarray
    cat_ids: np.ndarray
    categories: list
    images: list
    anns: Anns


def load_json(obj: object, what: str) -> object:
    """A path (str / PathLike) is read as JSON; anything else is returned as is."""
    if isinstance(obj, (str, os.PathLike)):
        try:
            with open(obj, encoding="utf-8") as f:
                return json.load(f)
        except OSError as e:
            raise ValueError(f"cannot read {what} {os.fspath(obj)!r}: {e}") from e
        except json.JSONDecodeError as e:
            raise ValueError(f"{what} {os.fspath(obj)!r} is not valid JSON: {e}") from e
    return obj


def _column(items: list, key: str, where: str, dtype, default=None) -> np.ndarray:
    """``np.array([item[key] ...], dtype)``, naming the first item that lacks the key or holds a bad value."""
    try:
        if default is None:
            vals = [a[key] for a in items]
        else:
            vals = [a.get(key, default) for a in items]
    except (KeyError, TypeError, AttributeError):
        for k, a in enumerate(items):
            if not isinstance(a, Mapping):
                raise ValueError(f"{where}[{k}] must be a dict, got {type(a).__name__}") from None
            if key not in a:
                raise ValueError(f"{where}[{k}] has no '{key}'") from None
        raise
    try:
        out = np.array(vals, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        out = None
    if out is None or out.ndim != 1:
        for k, v in enumerate(vals):
            try:
                np.array(v, dtype=dtype).item()
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}[{k}]['{key}'] must be a number, got {v!r}") from None
        raise ValueError(f"{where}: '{key}' values must be numbers")
    if dtype is np.int64:
        raw = np.array(vals, dtype=object) if out.size else out
        bad = np.flatnonzero([isinstance(v, float) and not float(v).is_integer() for v in vals]) if out.size else []
        if len(bad):
            raise ValueError(f"{where}[{bad[0]}]['{key}'] must be an integer, got {raw[bad[0]]!r}")
    return out


def _boxes(items: list, where: str) -> np.ndarray:
    try:
        b = np.array([a["bbox"] for a in items], dtype=np.float64)
        ok = b.ndim == 2 and b.shape[1] == 4 or b.size == 0
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        for k, a in enumerate(items):
            v = a.get("bbox") if isinstance(a, Mapping) else None
            try:
                if np.array(v, dtype=np.float64).shape != (4,):
                    raise ValueError
            except (TypeError, ValueError):
                raise ValueError(f"{where}[{k}]['bbox'] must be [x, y, width, height], got {v!r}") from None
        raise ValueError(f"{where}: malformed 'bbox' values")
    b = b.reshape(-1, 4)
    bad = np.flatnonzero(~np.isfinite(b).all(1))
    if bad.size:
        raise ValueError(f"{where}[{bad[0]}]['bbox'] must be finite, got {items[bad[0]]['bbox']!r}")
    bad = np.flatnonzero((b[:, 2] < 0) | (b[:, 3] < 0))
    if bad.size:
        raise ValueError(f"{where}[{bad[0]}]['bbox'] has a negative width or height: {items[bad[0]]['bbox']!r}")
    return b


def _finite(x: np.ndarray, items: list, key: str, where: str) -> None:
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ValueError(f"{where}[{bad[0]}]['{key}'] must be finite, got {items[bad[0]][key]!r}")


def _flags(x: np.ndarray, key: str, where: str) -> np.ndarray:
    bad = np.flatnonzero((x != 0) & (x != 1))
    if bad.size:
        raise ValueError(f"{where}[{bad[0]}]['{key}'] must be 0 or 1, got {x[bad[0]]!r}")
    return x.astype(np.uint8)


def _dataset_of(obj: object, what: str) -> Mapping:
    obj = load_json(obj, what)
    # pycocotools COCO and lvis-api LVIS keep the parsed JSON in .dataset.
    ds = getattr(obj, "dataset", obj)
    if not isinstance(ds, Mapping):
        raise ValueError(f"{what} must be a COCO-format dict (or a path / COCO object), got {type(obj).__name__}")
    return ds


def _check_in(ids: np.ndarray, known: np.ndarray, where: str, key: str, against: str) -> None:
    pos = np.searchsorted(known, ids)
    pos = np.minimum(pos, max(known.size - 1, 0))
    bad = np.flatnonzero(known[pos] != ids) if known.size else np.arange(ids.size)
    if bad.size:
        raise ValueError(f"{where}[{bad[0]}]['{key}'] = {ids[bad[0]]} is not an id of the {against}")


def _unique_ids(ids: np.ndarray, where: str) -> None:
    s = np.sort(ids)
    dup = s[1:][s[1:] == s[:-1]]
    if dup.size:
        raise ValueError(f"{where}: id {dup[0]} appears more than once")


def load_ground_truth(obj: object, lvis: bool = False) -> GroundTruth:
    """Parse and validate a COCO / LVIS ground-truth dataset."""
    ds = _dataset_of(obj, "ground truth")
    for key in ("images", "annotations", "categories"):
        if not isinstance(ds.get(key), list):
            raise ValueError(f"ground truth needs a list '{key}'")
    images, cats, anns = ds["images"], ds["categories"], ds["annotations"]
    img_ids = _column(images, "id", "images", np.int64)
    heights = _column(images, "height", "images", np.int64)
    widths = _column(images, "width", "images", np.int64)
    _unique_ids(img_ids, "images")
    cat_ids = _column(cats, "id", "categories", np.int64)
    _unique_ids(cat_ids, "categories")
    where = "annotations"
    a = Anns(
        image_id=_column(anns, "image_id", where, np.int64),
        category_id=_column(anns, "category_id", where, np.int64),
        id=_column(anns, "id", where, np.int64),
        area=_column(anns, "area", where, np.float64),
        iscrowd=_flags(_column(anns, "iscrowd", where, np.int64, default=0), "iscrowd", where),
        ignore=_flags(_column(anns, "ignore", where, np.int64, default=0), "ignore", where),
        score=None,
        bbox=None,
        raw=anns,
    )
    _finite(a.area, anns, "area", where)
    _unique_ids(a.id, where)
    _check_in(a.image_id, np.sort(img_ids), where, "image_id", "ground-truth images")
    _check_in(a.category_id, np.sort(cat_ids), where, "category_id", "ground-truth categories")
    return GroundTruth(img_ids, heights, widths, cat_ids, cats, images, a)


def gt_boxes(gt: GroundTruth) -> np.ndarray:
    if gt.anns.bbox is None:
        gt.anns.bbox = _boxes(gt.anns.raw, "annotations")
    return gt.anns.bbox


def load_results(obj: object, gt: GroundTruth) -> Anns:
    """Parse and validate detections (``loadRes`` fields for a list; a COCO object's annotations as they are)."""
    obj = load_json(obj, "results")
    from_coco = not isinstance(obj, (list, tuple))
    if from_coco:
        ds = getattr(obj, "dataset", obj)
        if not isinstance(ds, Mapping) or not isinstance(ds.get("annotations"), list):
            raise ValueError(
                f"results must be a list of detection dicts, a JSON path or a COCO object, got {type(obj).__name__}"
            )
        items = ds["annotations"]
    else:
        items = list(obj)
    where = "results"
    n = len(items)
    img = _column(items, "image_id", where, np.int64)
    _check_in(img, np.sort(gt.img_ids), where, "image_id", "ground-truth images")
    cat = _column(items, "category_id", where, np.int64)
    _check_in(cat, np.sort(gt.cat_ids), where, "category_id", "ground-truth categories")
    score = _column(items, "score", where, np.float64)
    _finite(score, items, "score", where)
    bbox, area = None, None
    if from_coco:
        ids = _column(items, "id", where, np.int64)
        _unique_ids(ids, where)
        area = _column(items, "area", where, np.float64)
        _finite(area, items, "area", where)
        if n and all("bbox" in d for d in items):
            bbox = _boxes(items, where)
    else:
        ids = np.arange(1, n + 1, dtype=np.int64)
        # loadRes picks the branch from the first result: boxes when it has a non-empty 'bbox'.
        if n and isinstance(items[0], Mapping) and "bbox" in items[0] and items[0]["bbox"] != []:
            bbox = _boxes(items, where)
            area = bbox[:, 2] * bbox[:, 3]
        elif n and isinstance(items[0], Mapping) and "segmentation" in items[0]:
            area = None  # the mask areas, filled by the segmentation pass
        elif n:
            raise ValueError("results[0] has neither 'bbox' nor 'segmentation'")
        else:
            area = np.zeros(0)
    res = Anns(
        image_id=img,
        category_id=cat,
        id=ids,
        area=area,
        iscrowd=np.zeros(n, dtype=np.uint8),
        ignore=np.zeros(n, dtype=np.uint8),
        score=score,
        bbox=bbox,
        raw=items,
    )
    if area is None:
        masks = segmentations(res, np.arange(n), gt, "results")
        res.area = masks.area.astype(np.float64)
        if all("bbox" in d for d in items):
            res.bbox = _boxes(items, where)
        else:
            # loadRes: toBbox of the mask for results without a box (one of them lacking one is enough: the rest
            # keep theirs).
            has = np.array(["bbox" in d for d in items], dtype=bool)
            bb = masks.bbox.copy()
            if has.any():
                bb[has] = _boxes([items[k] for k in np.flatnonzero(has)], where)
            res.bbox = bb
    return res


@dataclass
class Masks:
    """RLE masks in CSR (rle_counts.h layout) with areas and rleToBbox boxes."""

    counts: torch.Tensor
    offsets: torch.Tensor
    csum: torch.Tensor
    area: np.ndarray
    bbox: np.ndarray


def segmentations(anns: Anns, rows: np.ndarray, gt: GroundTruth, where: str) -> Masks:
    """RLE masks of ``anns.raw[rows]``, as ``COCO.annToRLE`` makes them (polygons and uncompressed RLE included),
    each checked against its image's size."""
    from vlkernels.boxes import rle as _rle

    order = np.argsort(gt.img_ids, kind="stable")
    pos = order[np.searchsorted(gt.img_ids[order], anns.image_id[rows])]
    hs, ws = gt.heights[pos], gt.widths[pos]
    rles = []
    for j, k in enumerate(rows.tolist()):
        a = anns.raw[k]
        seg = a.get("segmentation") if isinstance(a, Mapping) else None
        h, w = int(hs[j]), int(ws[j])
        if seg is None:
            raise ValueError(f"{where}[{k}] has no 'segmentation'")
        if isinstance(seg, list) or (isinstance(seg, Mapping) and isinstance(seg.get("counts"), list)):
            seg = _from_py_objects(seg, h, w, f"{where}[{k}]['segmentation']")
        elif not isinstance(seg, Mapping):
            raise ValueError(f"{where}[{k}]['segmentation'] must be polygons or an RLE dict, got {type(seg).__name__}")
        size = seg.get("size")
        if not isinstance(size, Sequence) or len(size) != 2 or [int(size[0]), int(size[1])] != [h, w]:
            raise ValueError(
                f"{where}[{k}]['segmentation'] has size {size!r} but image {int(anns.image_id[k])} is {[h, w]}"
            )
        rles.append(seg)
    s = _rle._parse(rles, where)
    n = len(rles)
    area = torch.zeros(n, dtype=torch.int64)
    bbox = torch.zeros(n, 4, dtype=torch.float64)
    if n:
        C = _ext.load()
        C.rle_area(s.counts.data_ptr(), s.offsets.data_ptr(), n, area.data_ptr(), 1)
        C.rle_to_bbox(s.counts.data_ptr(), s.offsets.data_ptr(), n, s.h.data_ptr(), s.w.data_ptr(), bbox.data_ptr())
    return Masks(s.counts, s.offsets, torch.cumsum(s.counts, 0), area.numpy(), bbox.numpy())


def _from_py_objects(seg: object, h: int, w: int, where: str) -> dict:
    """``COCO.annToRLE`` for polygons (merged) and uncompressed RLE: vlkernels.boxes.fr_py_objects."""
    from vlkernels import boxes

    fr = getattr(boxes, "fr_py_objects", None)
    if fr is None:
        if isinstance(seg, Mapping):
            # Uncompressed RLE: the runs as they are (the string codec's round trip is the identity on them).
            return {"size": seg.get("size"), "counts": seg["counts"]}
        raise ValueError(f"{where}: polygon segmentations need vlkernels.boxes.fr_py_objects (not in this build)")
    try:
        out = fr(seg, h, w)
        if isinstance(out, list):
            out = boxes.rle_merge(out)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return out
