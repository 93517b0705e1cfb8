"""torchmetrics-style mAP: ``mean_average_precision`` on per-image tensors and the stateful ``MeanAveragePrecision``
(update / compute / reset, gathered across ``torch.distributed`` ranks), computed by the COCOeval engine.

The numbers equal torchmetrics 1.9 ``MeanAveragePrecision`` with its pycocotools backend: images are numbered in
update order, boxes are converted to xywh in their own dtype (torchvision ``box_convert``), a ground truth's
``area`` is used when given and positive, else the box (or mask) area; categories are the labels seen."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence

import numpy as np
import torch

from vlkernels.boxes import rle_counts as _rc
from vlkernels.core.distributed import all_gather_rows
from vlkernels.detection import inputs
from vlkernels.detection.cocoeval import COCOeval, summarize_dets, summary_value

_KEYS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large")


def _xywh(boxes: torch.Tensor, fmt: str) -> torch.Tensor:
    """torchvision ``box_convert(boxes, fmt, "xywh")`` expression for expression (in the boxes' dtype)."""
    if fmt == "xywh":
        return boxes
    if fmt == "xyxy":
        x1, y1, x2, y2 = boxes.unbind(-1)
        return torch.stack((x1, y1, x2 - x1, y2 - y1), dim=-1)
    cx, cy, w, h = boxes.unbind(-1)
    x1, y1 = cx - 0.5 * w, cy - 0.5 * h
    x2, y2 = cx + 0.5 * w, cy + 0.5 * h
    return torch.stack((x1, y1, x2 - x1, y2 - y1), dim=-1)


def _masks_of(masks: list[torch.Tensor]) -> inputs.Masks:
    """RLE runs of every mask (images may differ in size), with areas and rleToBbox boxes (the boxes family's
    kernels, one call per image)."""
    counts, offsets, areas, boxes = [], [0], [], []
    for m in masks:
        if m.shape[0] == 0:
            continue
        rc = _rc.encode_counts(m.to(torch.uint8) if m.dtype != torch.uint8 else m)
        counts.append(rc.counts.cpu().numpy())
        offsets.extend((rc.offsets[1:].cpu().numpy() + offsets[-1]).tolist())
        areas.append(_rc.area_counts(rc).cpu().numpy())
        boxes.append(_rc.bbox_counts(rc).cpu().numpy())
    runs = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    area = np.concatenate(areas) if areas else np.zeros(0, dtype=np.int64)
    bbox = np.concatenate(boxes) if boxes else np.zeros((0, 4))
    return inputs.Masks(np.cumsum(runs), np.asarray(offsets, dtype=np.int64), area, bbox)


def _check_lists(preds: object, target: object) -> None:
    for name, v in (("preds", preds), ("target", target)):
        if not isinstance(v, Sequence) or isinstance(v, (str, bytes)):
            raise ValueError(f"{name} must be a sequence of per-image dicts, got {type(v).__name__}")
    if len(preds) != len(target):
        raise ValueError(f"preds and target must hold one dict per image: {len(preds)} != {len(target)}")


def _check_item(item: dict, k: int, name: str, iou_type: tuple, pred: bool) -> int:
    if not isinstance(item, dict):
        raise ValueError(f"{name}[{k}] must be a dict of tensors, got {type(item).__name__}")
    need = ["labels"] + (["boxes"] if "bbox" in iou_type else []) + (["masks"] if "segm" in iou_type else [])
    need += ["scores"] if pred else []
    for key in need:
        if not isinstance(item.get(key), torch.Tensor):
            raise ValueError(f"{name}[{k}]['{key}'] must be a tensor")
    _check_dtypes(item, k, name)
    labels = item["labels"]
    if labels.dim() != 1 or (labels.numel() and (labels.dtype.is_floating_point or labels.dtype == torch.bool)):
        raise ValueError(f"{name}[{k}]['labels'] must be a 1-D integer tensor")
    n = labels.numel()
    if n and labels.dtype not in _INT32_SAFE:
        lo, hi = int(labels.min()), int(labels.max())
        if lo < -(2**31) or hi >= 2**31:
            bad = lo if lo < -(2**31) else hi
            raise ValueError(
                f"{name}[{k}]['labels'] holds {bad}: labels must lie in [-2**31, 2**31) (the 'classes' output is "
                "int32, as torchmetrics')"
            )
    if "bbox" in iou_type:
        b = item["boxes"]
        if (n or b.numel()) and (b.dim() != 2 or b.shape != (n, 4)):
            raise ValueError(f"{name}[{k}]['boxes'] must be ({n}, 4), got {tuple(b.shape)}")
        if b.numel() and not torch.isfinite(b).all():
            raise ValueError(f"{name}[{k}]['boxes'] must be finite")
    if "segm" in iou_type:
        m = item["masks"]
        # torchmetrics' own tests pass an image without masks as Tensor([]) / BoolTensor([]) (shape (0,), any dtype).
        if n == 0 and m.numel() == 0:
            pass
        elif m.dim() != 3 or m.shape[0] != n or m.dtype not in (torch.bool, torch.uint8):
            raise ValueError(f"{name}[{k}]['masks'] must be ({n}, H, W) bool or uint8, got {tuple(m.shape)} {m.dtype}")
    if pred:
        s = item["scores"]
        if s.shape != (n,) or not s.dtype.is_floating_point or not torch.isfinite(s).all():
            raise ValueError(f"{name}[{k}]['scores'] must be ({n},) finite floats")
    for key in ("iscrowd", "area"):
        if key in item and (not isinstance(item[key], torch.Tensor) or item[key].shape != (n,)):
            raise ValueError(f"{name}[{k}]['{key}'] must be a ({n},) tensor")
    return n


_INT32_SAFE = (torch.int8, torch.int16, torch.int32, torch.uint8)


def _n_masks(item: dict) -> int:
    m = item["masks"]
    return int(m.shape[0]) if m.dim() == 3 else 0


def _no_images(items: Sequence[dict], types: tuple) -> bool:
    """torchmetrics' rule: each side becomes a COCO set whose images are the items, except that in a segm-only
    evaluation an item without masks is left out; a side without images answers -1 everywhere."""
    if "bbox" in types:
        return len(items) == 0
    return all(_n_masks(it) == 0 for it in items)


def _anns(items: list[dict], i_type: str, box_format: str, pred: bool, micro: bool, keep: np.ndarray, types: tuple):
    """Columns of the items of the kept images (image id = position in update order)."""
    rows = [(k, it) for k, it in enumerate(items) if keep[k]]
    n = [it["labels"].numel() for _, it in rows]
    img = np.repeat(np.asarray([k for k, _ in rows], dtype=np.int64), n)
    lab = [it["labels"].detach().cpu().to(torch.int64) for _, it in rows]
    cat = torch.cat(lab).numpy() if lab else np.zeros(0, dtype=np.int64)
    if micro:
        cat = np.zeros_like(cat)
    total = int(img.size)
    bbox, masks = None, None
    if i_type == "bbox":
        bs = [_xywh(it["boxes"].detach().cpu().reshape(-1, 4), box_format).double() for _, it in rows]
        bbox = torch.cat(bs).numpy() if bs else np.zeros((0, 4))
        bad = np.flatnonzero((bbox[:, 2] < 0) | (bbox[:, 3] < 0))
        if bad.size:
            k = int(img[bad[0]])
            j = int(bad[0] - np.searchsorted(img, k))
            raise ValueError(f"{'preds' if pred else 'target'}[{k}]['boxes'][{j}] has a negative size ({box_format})")
        area = bbox[:, 2] * bbox[:, 3]
    else:
        masks = _masks_of([it["masks"].detach() for _, it in rows])
        area = masks.area.astype(np.float64)
    crowd = np.zeros(total, dtype=np.uint8)
    score = None
    if pred:
        score = torch.cat([it["scores"].detach().cpu().double() for _, it in rows]).numpy() if rows else np.zeros(0)
    else:
        cr = [it.get("iscrowd", torch.zeros(it["labels"].numel())).detach().cpu() for _, it in rows]
        crowd = (torch.cat(cr).numpy() != 0).astype(np.uint8) if cr else crowd
        given = [it.get("area", torch.zeros(it["labels"].numel())).detach().cpu().double() for _, it in rows]
        given = torch.cat(given).numpy() if given else np.zeros(0)
        if i_type == "bbox" and "segm" in types:
            # torchmetrics gives a ground truth its mask area whenever "segm" is among the types, for both
            # evaluations (only the detections' areas are switched per type).
            area = _masks_of([it["masks"].detach() for _, it in rows]).area.astype(np.float64)
        area = np.where(given > 0, given, area)
    ids = np.arange(1, total + 1, dtype=np.int64)
    return inputs.Anns(img, cat, ids, area, crowd, np.zeros(total, np.uint8), score, bbox, [], masks)


def _evaluate(preds, target, i_type, box_format, iou_thrs, rec_thrs, max_dets, micro, class_ids, types):
    n_img = len(target)
    keep = np.ones(n_img, dtype=bool)
    if i_type == "segm" and "bbox" not in types:
        # With segm alone torchmetrics leaves out of the ground truth every image with no target mask (and so its
        # detections); with ("bbox", "segm") it keeps them (it skips an image only when it has no boxes either).
        keep = np.array([_n_masks(t) > 0 for t in target], dtype=bool)
    gt_anns = _anns(target, i_type, box_format, False, micro, keep, types)
    dt_anns = _anns(preds, i_type, box_format, True, micro, np.ones(len(preds), dtype=bool), types)
    cats = np.asarray([0] if micro else class_ids, dtype=np.int64)
    img_ids = np.flatnonzero(keep).astype(np.int64)
    gt = inputs.GroundTruth(img_ids, np.zeros_like(img_ids), np.zeros_like(img_ids), cats, [], [], gt_anns)
    E = COCOeval._prebuilt(gt, dt_anns, i_type)
    E.params.iouThrs = np.array(iou_thrs, dtype=np.float64)
    E.params.recThrs = np.array(rec_thrs, dtype=np.float64)
    E.params.maxDets = list(max_dets)
    E.evaluate()
    E.accumulate()
    return E


def mean_average_precision(
    preds: Sequence[dict],
    target: Sequence[dict],
    iou_type: str | tuple[str, ...] = "bbox",
    box_format: str = "xyxy",
    iou_thresholds: list[float] | None = None,
    rec_thresholds: list[float] | None = None,
    max_detection_thresholds: list[int] | None = None,
    class_metrics: bool = False,
    extended_summary: bool = False,
    average: str = "macro",
) -> dict[str, torch.Tensor]:
    """COCO mAP / mAR of per-image predictions, as torchmetrics' ``MeanAveragePrecision`` (pycocotools backend).

    Args:
        preds: one dict per image: ``boxes`` ``(N, 4)`` in ``box_format``, ``scores`` ``(N,)``, ``labels`` ``(N,)``
            int, and for ``"segm"`` ``masks`` ``(N, H, W)`` bool/uint8.
        target: one dict per image: ``boxes``, ``labels``, ``masks`` as above; optional ``iscrowd`` ``(M,)`` and
            ``area`` ``(M,)`` (used where positive).
        iou_type: ``"bbox"``, ``"segm"`` or both as a tuple (keys then get a ``bbox_`` / ``segm_`` prefix).
        box_format: ``"xyxy"``, ``"xywh"`` or ``"cxcywh"``.
        iou_thresholds, rec_thresholds, max_detection_thresholds: COCO's defaults when None (3 maxDets).
        class_metrics: also ``map_per_class`` and ``mar_{maxDet}_per_class`` (else -1).
        extended_summary: also the ``precision`` [T, R, K, A, M], ``recall`` and ``scores`` arrays (no ``ious``).
        average: ``"macro"`` (per category, then the mean) or ``"micro"`` (all labels as one category).

    Returns:
        dict of float32 tensors: map, map_50, map_75, map_small, map_medium, map_large, mar_{m0}, mar_{m1},
        mar_{m2}, mar_small, mar_medium, mar_large, map_per_class, mar_{m2}_per_class, classes (int32). As in
        torchmetrics, when a side has no image (no item, or in a segm-only evaluation no item with masks) every
        value is -1 and the per-class entries are left out.

    Raises:
        ValueError: mismatched lengths, malformed tensors (shapes, non-finite values, negative box sizes), a
            label outside int32 (``classes`` is int32, as torchmetrics').

    Note:
        CPU; exact (the COCOeval engine). Not differentiable.

    Example:
        >>> box, label = torch.tensor([[10.0, 10, 50, 50]]), torch.tensor([1])
        >>> p = [{"boxes": box, "scores": torch.tensor([0.9]), "labels": label}]
        >>> t = [{"boxes": box + torch.tensor([0.0, 0, 0, 2]), "labels": label}]
        >>> mean_average_precision(p, t)["map_50"]
        tensor(1.)
    """
    types = (iou_type,) if isinstance(iou_type, str) else tuple(iou_type)
    if not types or any(t not in ("bbox", "segm") for t in types):
        raise ValueError(f"iou_type must be 'bbox', 'segm' or a tuple of them, got {iou_type!r}")
    if box_format not in ("xyxy", "xywh", "cxcywh"):
        raise ValueError(f"box_format must be 'xyxy', 'xywh' or 'cxcywh', got {box_format!r}")
    if average not in ("macro", "micro"):
        raise ValueError(f"average must be 'macro' or 'micro', got {average!r}")
    _check_lists(preds, target)
    for k, (p, t) in enumerate(zip(preds, target)):
        _check_item(p, k, "preds", types, True)
        _check_item(t, k, "target", types, False)
    iou_thrs = iou_thresholds or torch.linspace(0.5, 0.95, round((0.95 - 0.5) / 0.05) + 1).tolist()
    rec_thrs = rec_thresholds or torch.linspace(0.0, 1.00, round(1.00 / 0.01) + 1).tolist()
    max_dets = sorted(max_detection_thresholds or [1, 10, 100])
    if len(max_dets) != 3:
        raise ValueError("max_detection_thresholds must hold 3 values")
    labels = [d["labels"].detach().cpu().to(torch.int64) for d in list(preds) + list(target)]
    classes = torch.cat(labels).unique().tolist() if labels else []
    out: dict[str, torch.Tensor] = {}
    for i_type in types:
        prefix = "" if len(types) == 1 else f"{i_type}_"
        if _no_images(preds, types) or _no_images(target, types):
            stats = [-1.0] * 12
            E = None
        else:
            micro = average == "micro"
            E = _evaluate(preds, target, i_type, box_format, iou_thrs, rec_thrs, max_dets, micro, classes, types)
            stats = summarize_dets(E.eval, E.params, show=False)
        names = [*_KEYS, *(f"mar_{m}" for m in max_dets), "mar_small", "mar_medium", "mar_large"]
        out.update({f"{prefix}{k}": torch.tensor(float(v), dtype=torch.float32) for k, v in zip(names, stats)})
        if extended_summary and E is not None:
            for key in ("precision", "recall", "scores"):
                out[f"{prefix}{key}"] = torch.tensor(E.eval[key])
        if E is None:
            # torchmetrics' -1 branch has no per-class entries.
            continue
        per_map, per_mar = torch.tensor([-1.0]), torch.tensor([-1.0])
        if class_metrics:
            Em = (
                E
                if average == "macro"
                else _evaluate(preds, target, i_type, box_format, iou_thrs, rec_thrs, max_dets, False, classes, types)
            )
            per_map, per_mar = _per_class(Em, len(classes))
        out[f"{prefix}map_per_class"] = per_map.to(torch.float32).squeeze() if per_map.numel() == 1 else per_map
        key = f"{prefix}mar_{max_dets[-1]}_per_class"
        out[key] = per_mar.to(torch.float32).squeeze() if per_mar.numel() == 1 else per_mar
    cls = torch.tensor(classes, dtype=torch.int32)
    out["classes"] = cls.squeeze() if cls.numel() == 1 else cls
    return out


def _per_class(E: COCOeval, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """stats[0] and stats[8] of a one-category evaluation per class: its slice of the full evaluation (categories
    are evaluated independently)."""
    maps, mars = [], []
    p = E.params
    with contextlib.redirect_stdout(io.StringIO()):
        for k in range(n):
            ev = {"precision": E.eval["precision"][:, :, k : k + 1], "recall": E.eval["recall"][:, k : k + 1]}
            maps.append(float(summary_value(ev, p, True, None, "all", 100, show=False)))
            mars.append(float(summary_value(ev, p, False, None, "all", p.maxDets[2], show=False)))
    return torch.tensor(maps, dtype=torch.float32), torch.tensor(mars, dtype=torch.float32)


class MeanAveragePrecision:
    """Stateful :func:`mean_average_precision`: ``update(preds, target)`` per batch, ``compute()``, ``reset()``.

    Under ``torch.distributed`` (initialized), ``compute`` gathers every rank's images first, in torchmetrics'
    order (image j of each rank's list, rank by rank), so every rank returns the same numbers as a single process
    that saw the interleaved stream. Keyword arguments are :func:`mean_average_precision`'s.
    """

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        mean_average_precision([], [], **{k: v for k, v in kwargs.items() if k != "class_metrics"})
        self.reset()

    def reset(self) -> None:
        self._preds: list[dict] = []
        self._target: list[dict] = []

    def update(self, preds: Sequence[dict], target: Sequence[dict]) -> None:
        """Append one batch (tensors are copied to the CPU: a caller's buffer reused later does not change the
        state). The whole batch is checked first, so a refused batch adds nothing; so is every box's size, which
        would otherwise fail every later ``compute()``."""
        _check_lists(preds, target)
        types = self.kwargs.get("iou_type", "bbox")
        types = (types,) if isinstance(types, str) else tuple(types)
        fmt = self.kwargs.get("box_format", "xyxy")
        base = len(self._preds)
        for k, (p, t) in enumerate(zip(preds, target)):
            for item, name, pred in ((p, "preds", True), (t, "target", False)):
                _check_item(item, base + k, name, types, pred)
                if "bbox" in types:
                    _check_box_sizes(item, base + k, name, fmt)
        for p, t in zip(preds, target):
            self._preds.append(_copy(p))
            self._target.append(_copy(t))

    def _gathered(self) -> tuple[list, list]:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return self._preds, self._target
        world = dist.get_world_size()
        preds, target = _gather_items(self._preds), _gather_items(self._target)
        longest = max(len(p) for p in preds)
        # torchmetrics' order: image j of every rank, then image j + 1.
        p = [preds[r][j] for j in range(longest) for r in range(world) if j < len(preds[r])]
        t = [target[r][j] for j in range(longest) for r in range(world) if j < len(target[r])]
        return p, t

    def compute(self) -> dict[str, torch.Tensor]:
        preds, target = self._gathered()
        return mean_average_precision(preds, target, **self.kwargs)


_FIELDS = ("boxes", "scores", "labels", "masks", "iscrowd", "area")
# The dtypes a state tensor may have (each item's own is sent beside its values and restored after a gather).
_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def _copy(item: dict) -> dict:
    return {key: v.detach().to("cpu", copy=True) for key, v in item.items() if isinstance(v, torch.Tensor)}


def _check_dtypes(item: dict, k: int, name: str) -> None:
    for key in _FIELDS:
        v = item.get(key)
        if isinstance(v, torch.Tensor) and v.dtype not in _DTYPES:
            raise ValueError(f"{name}[{k}]['{key}'] has dtype {v.dtype}; expected a real float, integer or bool tensor")


def _check_box_sizes(item: dict, k: int, name: str, fmt: str) -> None:
    b = item["boxes"]
    if b.numel():
        wh = _xywh(b.detach().cpu().reshape(-1, 4), fmt)[:, 2:].double()
        bad = torch.nonzero((wh < 0).any(dim=1)).flatten()
        if bad.numel():
            raise ValueError(f"{name}[{k}]['boxes'][{int(bad[0])}] has a negative size ({fmt})")


def _gather_items(items: list[dict]) -> list[list[dict]]:
    """Each rank's list of per-image tensor dicts, exchanged as flat tensors: a table row per image (its shape and
    dtype), then the values of every image in one wire dtype that holds all of them exactly (uint8 when every image
    of every rank is bool/uint8, int64 when all are integers, else float64), each cast back to its own dtype."""
    per_rank: list[list[dict]] | None = None
    for key in _FIELDS:
        # Table: [ndim, d0, d1, d2, dtype] per image (ndim -1: the image has no such field).
        rows, flat = [], []
        for it in items:
            v = it.get(key)
            if v is None:
                rows.append([-1, 0, 0, 0, -1])
                continue
            dims = list(v.shape) + [0] * (3 - v.dim())
            rows.append([v.dim(), *dims[:3], _DTYPES.index(v.dtype)])
            flat.append(v.reshape(-1))
        table = torch.tensor(rows, dtype=torch.int64).reshape(-1, 5)
        tables = all_gather_rows(table)
        kinds = {_DTYPES[c] for t in tables for c in t[:, 4].tolist() if c >= 0}
        if kinds <= {torch.bool, torch.uint8}:
            wire = torch.uint8
        elif not any(d.is_floating_point for d in kinds):
            wire = torch.int64
        else:
            wire = torch.float64
        data = torch.cat([v.to(wire) for v in flat]) if flat else torch.zeros(0, dtype=wire)
        datas = all_gather_rows(data)
        if per_rank is None:
            per_rank = [[{} for _ in range(t.shape[0])] for t in tables]
        for r, (tab, dat) in enumerate(zip(tables, datas)):
            pos = 0
            for j, row in enumerate(tab.tolist()):
                if row[0] < 0:
                    continue
                shape = row[1 : 1 + row[0]]
                n = int(np.prod(shape)) if shape else 1
                per_rank[r][j][key] = dat[pos : pos + n].reshape(shape).to(_DTYPES[row[4]])
                pos += n
    return per_rank or []
