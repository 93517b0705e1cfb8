"""The evaluation engine shared by COCOeval and LVISEval: annotations grouped into cells (image x category), the C++
per-cell matching at every IoU threshold and area range, and the C++ accumulation into precision / recall."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vlkernels import _ext
from vlkernels.detection import inputs


@dataclass
class Cells:
    """Selected annotations sorted by cell: gt[gt_off[c]:gt_off[c + 1]] in the anchor's list order, dt likewise
    by descending score (stable) and cut to the largest maxDet. ``key`` = category slot x n_images + image slot."""

    key: np.ndarray
    gt_off: np.ndarray
    dt_off: np.ndarray
    gt_rows: np.ndarray  # rows of the ground-truth Anns
    dt_rows: np.ndarray  # rows of the results Anns
    n_img: int


def _positions(values: np.ndarray, sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slot of each value in sorted_ids and whether it is there."""
    if sorted_ids.size == 0:
        return np.zeros(values.size, dtype=np.int64), np.zeros(values.size, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_ids, values), sorted_ids.size - 1)
    return pos.astype(np.int64), sorted_ids[pos] == values


def build_cells(
    gt: inputs.Anns,
    dt: inputs.Anns,
    img_ids: np.ndarray,
    cat_ids: np.ndarray,
    use_cats: bool,
    max_det: int | None,
    dt_keep: np.ndarray | None = None,
    gt_keep: np.ndarray | None = None,
) -> Cells:
    """Group annotations as pycocotools' ``_prepare`` / ``evaluateImg`` see them.

    ``img_ids`` sorted unique. ``use_cats``: ``cat_ids`` sorted unique, one cell per (category, image). Otherwise
    ``cat_ids`` is the user's list (order kept): one cell per image, annotations ordered by their category's
    position in that list (pycocotools concatenates ``_gts[img, c] for c in catIds``). ``dt_keep``: an extra
    filter on detections (LVIS federated rule); ``gt_keep`` one on ground truths (LVIS area rule)."""
    n_img = int(img_ids.size)

    def keys(a: inputs.Anns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ipos, iok = _positions(a.image_id, img_ids)
        if use_cats:
            cpos, cok = _positions(a.category_id, cat_ids)
            return cpos * n_img + ipos, np.zeros_like(ipos), iok & cok
        order = np.argsort(cat_ids, kind="stable")
        cpos, cok = _positions(a.category_id, cat_ids[order])
        return ipos, order[cpos], iok & cok

    gk, gsub, gsel = keys(gt)
    dk, dsub, dsel = keys(dt)
    if dt_keep is not None:
        dsel &= dt_keep
    if gt_keep is not None:
        gsel &= gt_keep
    g_rows = np.flatnonzero(gsel)
    d_rows = np.flatnonzero(dsel)
    # np.lexsort is stable: list order breaks the remaining ties, as pycocotools' dict-of-lists grouping does.
    if use_cats:
        g_rows = g_rows[np.argsort(gk[g_rows], kind="stable")]
        d_rows = d_rows[np.lexsort((-dt.score[d_rows], dk[d_rows]))]
    else:
        g_rows = g_rows[np.lexsort((gsub[g_rows], gk[g_rows]))]
        d_rows = d_rows[np.lexsort((dsub[d_rows], -dt.score[d_rows], dk[d_rows]))]
    gkeys, dkeys = gk[g_rows], dk[d_rows]
    if max_det is not None and d_rows.size:
        start = np.r_[True, dkeys[1:] != dkeys[:-1]]
        first = np.maximum.accumulate(np.where(start, np.arange(dkeys.size), 0))
        keep = np.arange(dkeys.size) - first < max_det
        d_rows, dkeys = d_rows[keep], dkeys[keep]
    key = np.union1d(gkeys, dkeys).astype(np.int64)
    gt_off = np.searchsorted(gkeys, key, side="left")
    dt_off = np.searchsorted(dkeys, key, side="left")
    gt_off = np.r_[gt_off, gkeys.size].astype(np.int64)
    dt_off = np.r_[dt_off, dkeys.size].astype(np.int64)
    return Cells(key, gt_off, dt_off, g_rows, d_rows, n_img)


def dt_meets_gt(cells: Cells) -> np.ndarray:
    """Per detection (``cells.dt_rows`` order): whether its cell holds a ground truth (else no IoU is computed)."""
    return np.repeat(np.diff(cells.gt_off) > 0, np.diff(cells.dt_off))


@dataclass
class Evaluated:
    """Per-detection status at every (area range, threshold) and the non-ignored ground-truth counts per cell,
    plus, when ``full``, the matches (global gt / dt positions in the cells' order) for evalImgs."""

    cells: Cells
    status: np.ndarray  # uint8 [A, T, n_dt]
    npig: np.ndarray  # int64 [A, n_cells]
    score: np.ndarray  # float64 [n_dt]
    dt_match: np.ndarray | None = None
    gt_match: np.ndarray | None = None
    gt_ignore: np.ndarray | None = None


def evaluate(
    cells: Cells,
    gt: inputs.Anns,
    dt: inputs.Anns,
    iou_type: str,
    gt_masks: inputs.Masks | None,
    dt_masks: inputs.Masks | None,
    area_rng: np.ndarray,
    iou_thrs: np.ndarray,
    crowd: bool,
    dt_extra_ignore: np.ndarray | None = None,
    full: bool = False,
) -> Evaluated:
    """Run the C++ per-cell matching. Masks, when given, are indexed like ``cells.gt_rows`` / ``cells.dt_rows``."""
    g, d = cells.gt_rows, cells.dt_rows
    ng, nd, nc = int(g.size), int(d.size), int(cells.key.size)
    c = np.ascontiguousarray
    gt_crowd = c(gt.iscrowd[g]) if crowd else np.zeros(ng, dtype=np.uint8)
    # COCO: ignore = iscrowd (pycocotools overwrites any "ignore" field); LVIS: the "ignore" field.
    gt_ignore = c(gt.iscrowd[g]) if crowd else c(gt.ignore[g])
    if iou_type == "bbox":
        kind, gb, db, gm_, dm_ = 0, c(gt.bbox[g], dtype=np.float64), c(dt.bbox[d], dtype=np.float64), None, None
    else:
        kind, gb, db = 1, c(gt_masks.bbox, dtype=np.float64), c(dt_masks.bbox, dtype=np.float64)
        gm_ = (gt_masks.csum, gt_masks.offsets, c(gt_masks.area, dtype=np.int64))
        dm_ = (dt_masks.csum, dt_masks.offsets, c(dt_masks.area, dtype=np.int64))
    A, T = int(area_rng.shape[0]), int(iou_thrs.size)
    status = np.empty((A, T, nd), dtype=np.uint8)
    npig = np.empty((A, nc), dtype=np.int64)
    dm = np.empty((A, T, nd), dtype=np.int64) if full else None
    gm = np.empty((A, T, ng), dtype=np.int64) if full else None
    gi = np.empty((A, ng), dtype=np.uint8) if full else None
    _ext.load().det_evaluate(
        kind,
        cells.gt_off,
        cells.dt_off,
        gb,
        db,
        gm_,
        dm_,
        gt_crowd,
        gt_ignore,
        c(gt.area[g], dtype=np.float64),
        c(dt.area[d], dtype=np.float64),
        c(gt.id[g] != 0, dtype=np.uint8),
        c(dt.id[d] > 0, dtype=np.uint8),
        c(dt_extra_ignore[d], dtype=np.uint8) if dt_extra_ignore is not None else None,
        c(area_rng, dtype=np.float64),
        c(np.minimum(iou_thrs, 1 - 1e-10), dtype=np.float64),
        status,
        npig,
        dm,
        gm,
        gi,
    )
    return Evaluated(cells, status, npig, c(dt.score[d], dtype=np.float64), dm, gm, gi)


def accumulate(
    ev: Evaluated,
    cat_slot: np.ndarray,
    img_sel: np.ndarray,
    n_groups: int,
    area_src: list[int],
    rec_thrs: np.ndarray,
    max_dets: list[int],
    out_shape: tuple[int, int, int],
    with_scores: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """precision [T, R, K, A, M], recall [T, K, A, M], scores [T, R, K, A, M] (-1 where nothing is accumulated).

    ``cat_slot[k0]``: output slot of evaluated category k0 (or -1); ``img_sel[i0]``: whether evaluated image i0 is
    accumulated; ``area_src[a]``: evaluated area range of output slot a; ``max_dets[m]``: maxDet of slot m."""
    cells = ev.cells
    T = int(ev.status.shape[1])
    R = int(rec_thrs.size)
    K, A, M = out_shape
    k0 = cells.key // max(cells.n_img, 1)
    i0 = cells.key % max(cells.n_img, 1)
    group = np.where(img_sel[i0], cat_slot[k0], -1).astype(np.int64) if cells.key.size else cells.key.copy()
    precision = -np.ones((T, R, K, A, M))
    recall = -np.ones((T, K, A, M))
    scores = -np.ones((T, R, K, A, M)) if with_scores else None
    _ext.load().det_accumulate(
        cells.dt_off,
        np.ascontiguousarray(group, dtype=np.int64),
        int(n_groups),
        ev.status,
        ev.npig,
        ev.score,
        np.ascontiguousarray(area_src, dtype=np.int64),
        np.ascontiguousarray(rec_thrs, dtype=np.float64),
        np.ascontiguousarray(max_dets, dtype=np.int64),
        precision,
        recall,
        scores,
    )
    return precision, recall, scores


def cell_masks(
    cells: Cells, gt: inputs.Anns, dt: inputs.Anns, data: inputs.GroundTruth
) -> tuple[inputs.Masks, inputs.Masks]:
    """The ground-truth and detection masks of the cells' rows, for a segm evaluation (a detection that meets no
    ground truth is validated but left empty)."""
    gm = inputs.segmentations(gt, cells.gt_rows, data, "annotations")
    dm = inputs.segmentations(dt, cells.dt_rows, data, "results", dt_meets_gt(cells))
    return gm, dm


def eval_img(ev: Evaluated, key: int, a: int, gt: inputs.Anns, dt: inputs.Anns) -> tuple | None:
    """One evalImgs entry's arrays for cell ``key`` and area range ``a`` (None for an empty cell): dt ids, gt ids
    (regular first), dtMatches [T, D] and gtMatches [T, G] as float64 ids (0 = none), dt scores, gtIgnore,
    dtIgnore [T, D] bool."""
    cells = ev.cells
    c = int(np.searchsorted(cells.key, key))
    if c >= cells.key.size or cells.key[c] != key:
        return None
    g0, g1 = int(cells.gt_off[c]), int(cells.gt_off[c + 1])
    d0, d1 = int(cells.dt_off[c]), int(cells.dt_off[c + 1])
    gig = ev.gt_ignore[a, g0:g1]
    perm = np.argsort(gig, kind="mergesort")
    grows, drows = cells.gt_rows[g0:g1], cells.dt_rows[d0:d1]
    gid = gt.id[grows].astype(np.float64)
    did = dt.id[cells.dt_rows].astype(np.float64)
    dm = ev.dt_match[a, :, d0:d1]
    gm = ev.gt_match[a, :, g0:g1][:, perm]
    dt_m = gid[np.clip(dm - g0, 0, None)] if g1 > g0 else np.zeros(dm.shape)
    gt_m = did[np.clip(gm, 0, None)] if d1 > d0 else np.zeros(gm.shape)
    dt_m = np.where(dm >= 0, dt_m, 0.0)
    gt_m = np.where(gm >= 0, gt_m, 0.0)
    gt_ig = np.array(gig[perm].astype(np.int64)) if g1 > g0 else np.array([])
    return (
        [int(x) for x in dt.id[drows]],
        [int(x) for x in gt.id[grows[perm]]],
        dt_m,
        gt_m,
        [float(x) for x in dt.score[drows]],
        gt_ig,
        ev.status[a, :, d0:d1] == 2,
    )


class EvalImgs(Sequence):
    """The anchors' per-image evaluation list (category x area range x image: a dict or None), built on access.

    ``owner`` is the evaluator: ``owner._eval_imgs_shape()`` gives (categories, area ranges, images),
    ``owner._run(full=True)`` the full matching (run once, at the first item), ``owner._eval_img_head(k, a, i)`` the
    cell key of category slot k and image i and the entry's leading fields (ids, area range...); the arrays of
    :func:`eval_img` (on ``owner._gt.anns`` and ``owner._dt``) follow under ``keys``. ``name`` is the attribute's
    name in the anchor's API.
    """

    def __init__(self, owner, name: str, keys: tuple[str, ...]):
        self._owner = owner
        self._name = name
        self._keys = keys
        self._ev: Evaluated | None = None

    def __len__(self) -> int:
        n_cat, n_area, n_img = self._owner._eval_imgs_shape()
        return n_cat * n_area * n_img

    def __getitem__(self, n):
        if isinstance(n, slice):
            return [self[i] for i in range(*n.indices(len(self)))]
        n = int(n)
        if n < 0:
            n += len(self)
        if not 0 <= n < len(self):
            raise IndexError(f"{self._name} index out of range")
        o = self._owner
        if self._ev is None:
            self._ev = o._run(full=True)
        _, n_area, n_img = o._eval_imgs_shape()
        k, rest = divmod(n, n_area * n_img)
        a, i = divmod(rest, n_img)
        key, head = o._eval_img_head(k, a, i)
        parts = eval_img(self._ev, key, a, o._gt.anns, o._dt)
        return None if parts is None else {**head, **dict(zip(self._keys, parts))}
