"""COCO / LVIS annotations and results to columns (numpy arrays), validated item by item.

Ground truth: a pycocotools ``COCO`` or lvis-api ``LVIS`` object (its ``dataset``), a COCO-format dict, or a JSON
path. Results: a ``COCO`` object made by ``loadRes`` (its annotations as they are), a list of result dicts, or a
JSON path; a list gets ``COCO.loadRes``'s fields (``id = index + 1``; bbox results: ``area = w * h``; segmentation
results: the mask area and, without a ``bbox``, the mask's box). pycocotools is never imported here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from vlkernels import _ext
from vlkernels.boxes.rle_dicts import _size_of


@dataclass
class Masks:
    """RLE masks as the per-cell IoU reads them: inclusive run sums over the whole set (``rle_counts.h`` layout),
    per-mask offsets, areas and rleToBbox boxes."""

    csum: np.ndarray
    offsets: np.ndarray
    area: np.ndarray
    bbox: np.ndarray

    def take(self, rows: np.ndarray) -> Masks:
        """The masks of ``rows``, in that order (run sums rebuilt over the new set)."""
        lo, hi = self.offsets[rows], self.offsets[rows + 1]
        lengths = hi - lo
        off = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=off[1:])
        # Index of every run of the selected masks: lo[j] + 0 .. lengths[j] - 1, concatenated.
        idx = np.repeat(lo - off[:-1], lengths) + np.arange(off[-1])
        runs = np.diff(np.r_[0, self.csum])[idx]
        return Masks(np.cumsum(runs), off, self.area[rows], self.bbox[rows])


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
    masks: Masks | None = None  # prebuilt RLE masks of every row (tensor inputs)
    box_polygons: bool = False  # loadRes of box results: a missing segmentation is the box's polygon

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
    """A path (str / PathLike) is read as JSON (UTF-8, -16 or -32, a byte-order mark allowed: ``json.loads`` of the
    file's bytes; a repeated key keeps its last value, as ``json.load``); anything else is returned as is. Every
    failure is a ValueError naming the file."""
    if not isinstance(obj, (str, os.PathLike)):
        return obj
    name = repr(os.fspath(obj))
    try:
        with open(obj, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {what} {name}: {e}") from e
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} {name} is not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {name} is not UTF-8, -16 or -32 text: {e}") from None
    except RecursionError:
        raise ValueError(f"{what} {name} nests arrays / objects too deeply for a COCO file") from None
    except ValueError as e:
        # A number of more than 4300 digits (int from str limit), or text json cannot represent.
        raise ValueError(f"{what} {name} holds a value Python cannot read: {e}") from None


_MISSING = float("nan")


def _table(items: list, fields: list[tuple], where: str) -> dict[str, np.ndarray]:
    """Fields of dicts, read in C++: ``(key, width, default[, is_int])`` -> float64 ``(n,)`` / ``(n, width)``, or for
    an int field (ids, sizes, flags) exact int64 ``(n,)``; a NaN default makes the key required. Errors name the first
    bad item."""
    if not isinstance(items, list):
        items = list(items)
    spec = [(f[0], f[1], f[2], bool(f[3]) if len(f) > 3 else False) for f in fields]
    n = len(items)
    real = np.empty((n, sum(w for _, w, _, i in spec if not i)), dtype=np.float64)
    ints = np.empty((n, sum(1 for *_, i in spec if i)), dtype=np.int64)
    bad, msg = _ext.load().det_columns(items, spec, real, ints)
    if msg:
        sep = "" if msg.startswith("[") else " "
        raise ValueError(f"{where}[{bad}]{sep}{msg}")
    out, col, icol = {}, 0, 0
    for key, width, _, is_int in spec:
        if is_int:
            out[key] = ints[:, icol]
            icol += 1
        else:
            out[key] = real[:, col] if width == 1 else real[:, col : col + width]
            col += width
    return out


def _id(key: str, default: float = _MISSING) -> tuple:
    """An int field of :func:`_table`."""
    return (key, 1, default, True)


def param_ids(values: object, name: str) -> np.ndarray:
    """``params.imgIds`` / ``catIds`` as exact int64 (an integral float within 2**53 counts as its integer; anything
    else is refused: pycocotools would select nothing for 1.5, which only ever hides a mistake)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        if values.dtype.kind == "u" and values.size and values.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name} holds an id beyond 2**63 - 1")
        return values.astype(np.int64).reshape(-1)
    try:
        items = list(values.reshape(-1) if isinstance(values, np.ndarray) else values)
    except TypeError:
        raise ValueError(f"{name} must be a list of integer ids, got {type(values).__name__}") from None
    rows = [{"id": v} for v in items]
    ints = np.empty((len(rows), 1), dtype=np.int64)
    bad, msg = _ext.load().det_columns(rows, [("id", 1, _MISSING, True)], np.empty((len(rows), 0)), ints)
    if msg:
        why = msg.removeprefix("['id'] ")
        raise ValueError(f"{name}[{bad}] {why} (ids are integers)")
    return ints[:, 0]


def _boxes(items: list, where: str, b: np.ndarray | None = None) -> np.ndarray:
    if b is None:
        b = _table(items, [("bbox", 4, _MISSING)], where)["bbox"]
    b = np.ascontiguousarray(b, dtype=np.float64).reshape(-1, 4)
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
        raise ValueError(f"{where}[{bad[0]}]['{key}'] must be 0 or 1, got {x[bad[0]]}")
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
    # Image sizes are optional (-1 when absent), as in pycocotools and lvis-api: only masks are made from them.
    t = _table(images, [_id("id"), _id("height", -1), _id("width", -1)], "images")
    img_ids, heights, widths = t["id"].copy(), t["height"].copy(), t["width"].copy()
    _unique_ids(img_ids, "images")
    cat_ids = _table(cats, [_id("id")], "categories")["id"].copy()
    _unique_ids(cat_ids, "categories")
    where = "annotations"
    fields = [_id("image_id"), _id("category_id"), _id("id"), ("area", 1, _MISSING)]
    fields += [_id("iscrowd", 0), _id("ignore", 0)]
    t = _table(anns, fields, where)
    a = Anns(
        image_id=t["image_id"].copy(),
        category_id=t["category_id"].copy(),
        id=t["id"].copy(),
        area=np.ascontiguousarray(t["area"]),
        iscrowd=_flags(t["iscrowd"], "iscrowd", where),
        ignore=_flags(t["ignore"], "ignore", where),
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
    first = items[0] if n and isinstance(items[0], Mapping) else {}
    if from_coco:
        # loadRes / LVISResults objects: every field as stored (bbox and area may be numpy values: loadRes of
        # segmentation-only results stores toBbox arrays). A bbox evaluation reads the boxes when all carry one.
        has_box = bool(n) and all(isinstance(d, Mapping) and "bbox" in d for d in items)
    else:
        # loadRes picks the branch from the first result: boxes when it has a non-empty 'bbox'.
        has_box = "bbox" in first and not _empty(first["bbox"])
    fields = [_id("image_id"), _id("category_id"), ("score", 1, _MISSING)]
    if from_coco:
        fields += [_id("id"), ("area", 1, _MISSING)]
    if has_box:
        fields.append(("bbox", 4, _MISSING))
    t = _table(items, fields, where)
    img = t["image_id"].copy()
    _check_in(img, np.sort(gt.img_ids), where, "image_id", "ground-truth images")
    cat = t["category_id"].copy()
    _check_in(cat, np.sort(gt.cat_ids), where, "category_id", "ground-truth categories")
    score = np.ascontiguousarray(t["score"])
    _finite(score, items, "score", where)
    bbox = _boxes(items, where, t["bbox"]) if has_box else None
    if from_coco:
        ids = t["id"].copy()
        _unique_ids(ids, where)
        area = np.ascontiguousarray(t["area"])
        _finite(area, items, "area", where)
        if not n:
            bbox = np.zeros((0, 4))
    else:
        ids = np.arange(1, n + 1, dtype=np.int64)
        if has_box:
            with np.errstate(over="ignore"):  # w * h of finite boxes may overflow to inf, as in loadRes
                area = bbox[:, 2] * bbox[:, 3]
        elif "segmentation" in first:
            area = None  # the mask areas, filled by the segmentation pass
        elif n:
            raise ValueError("results[0] has neither a non-empty 'bbox' nor a 'segmentation'")
        else:
            area, bbox = np.zeros(0), np.zeros((0, 4))
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
        box_polygons=not from_coco and has_box,
    )
    if area is None:
        masks = segmentations(res, np.arange(n), gt, "results")
        res.area = masks.area.astype(np.float64)
        if all("bbox" in d and not _empty(d["bbox"]) for d in items):
            res.bbox = _boxes(items, where)
        else:
            # loadRes: toBbox of the mask for results without a box (one of them lacking one is enough: the rest
            # keep theirs).
            has = np.array(["bbox" in d and not _empty(d["bbox"]) for d in items], dtype=bool)
            bb = masks.bbox.copy()
            if has.any():
                bb[has] = _boxes([items[k] for k in np.flatnonzero(has)], where)
            res.bbox = bb
    return res


def _empty(v: object) -> bool:
    """loadRes' ``bbox == []`` for any sequence or array (numpy boxes compare element-wise)."""
    try:
        return len(v) == 0
    except TypeError:
        return False


def segmentations(anns: Anns, rows: np.ndarray, gt: GroundTruth, where: str, need: np.ndarray | None = None) -> Masks:
    """RLE masks of ``anns.raw[rows]``, as ``COCO.annToRLE`` makes them (polygons and uncompressed RLE included),
    each checked against its image's size. ``need`` (bool per row): where False the mask is validated but returned
    empty (area 0, no runs), for detections that meet no ground truth."""
    if anns.masks is not None:
        return anns.masks.take(rows)
    order = np.argsort(gt.img_ids, kind="stable")
    pos = order[np.searchsorted(gt.img_ids[order], anns.image_id[rows])]
    hs = np.ascontiguousarray(gt.heights[pos], dtype=np.int64)
    ws = np.ascontiguousarray(gt.widths[pos], dtype=np.int64)
    raw = anns.raw
    # An image without its size: an RLE carries its own (as pycocotools' annToRLE reads it); polygons and boxes
    # cannot be rasterised without one.
    for i in np.flatnonzero((hs < 0) | (ws < 0)).tolist():
        seg = raw[rows[i]].get("segmentation") if isinstance(raw[rows[i]], Mapping) else None
        if isinstance(seg, Mapping) and "size" in seg and "counts" in seg:
            hs[i], ws[i] = _size_of(seg, f"{where}[{rows[i]}]['segmentation']", 0)
            continue
        k = int(pos[i])
        raise ValueError(
            f"images[{k}] (id {gt.img_ids[k]}) needs a non-negative 'height' and 'width' to make a mask of "
            f"{where}[{rows[i]}] (a polygon or a box), got {gt.images[k].get('height')!r} x "
            f"{gt.images[k].get('width')!r}"
        )

    def convert(k: int, h: int, w: int) -> dict:
        if not isinstance(raw[k], Mapping) or "segmentation" not in raw[k]:
            if not anns.box_polygons:
                raise ValueError(f"{where}[{k}] has no 'segmentation'")
            # COCO.loadRes / LVISResults: the polygon of the box's corners.
            x, y, bw, bh = (float(v) for v in anns.bbox[k])
            x2, y2 = x + bw, y + bh
            return _from_py_objects([[x, y, x, y2, x2, y2, x2, y]], h, w, f"{where}[{k}]['bbox']")
        return _from_py_objects(raw[k]["segmentation"], h, w, f"{where}[{k}]['segmentation']")

    if not isinstance(raw, list):
        raw = list(raw)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if need is not None:
        need = np.ascontiguousarray(need, dtype=np.uint8)
    # Two phases, as the runs' number is known only once the strings are read: the run offsets, then the runs,
    # areas and boxes into arrays allocated here.
    C = _ext.load()
    n = rows.shape[0]
    offsets = np.empty(n + 1, np.int64)
    counts = C.det_mask_runs(raw, rows, hs, ws, need, convert, where, offsets)
    csum, area, bbox = np.empty(int(offsets[-1]), np.int64), np.empty(n, np.int64), np.empty((n, 4), np.float64)
    C.det_mask_decode(counts, rows, hs, ws, need, offsets, csum, area, bbox, where)
    return Masks(csum, offsets, area, bbox)


def _from_py_objects(seg: object, h: int, w: int, where: str) -> dict:
    """``COCO.annToRLE`` for polygons (merged) and uncompressed RLE: vlkernels.boxes.fr_py_objects. Every malformed
    segmentation is a ValueError naming ``where`` (pycocotools raises TypeError / IndexError / KeyError on them)."""
    from vlkernels import boxes

    if isinstance(seg, Mapping):
        if "counts" not in seg or "size" not in seg:
            raise ValueError(f"{where} is an RLE dict without 'size' and 'counts' (keys: {sorted(map(str, seg))[:6]})")
    elif isinstance(seg, list):
        if not seg:
            raise ValueError(f"{where} is an empty list; expected polygons [[x1, y1, x2, y2, ...], ...] or an RLE dict")
    else:
        raise ValueError(f"{where} must be an RLE dict or a list of polygons, got {type(seg).__name__}")
    try:
        out = boxes.fr_py_objects(seg, h, w)
        if isinstance(out, list):
            out = boxes.rle_merge(out)
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(f"{where}: {e}") from None
    return out
