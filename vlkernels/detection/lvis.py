"""``LVISEval``: a drop-in for lvis-api 0.5.3 ``lvis.LVISEval`` (federated evaluation) on the same C++ engine."""

from __future__ import annotations

import copy
import datetime
from collections import OrderedDict

import numpy as np

from vlkernels.detection import engine, inputs

# The arrays of an eval_imgs entry, in engine.eval_img's order.
_EVAL_IMG_KEYS = ("dt_ids", "gt_ids", "dt_matches", "gt_matches", "dt_scores", "gt_ignore", "dt_ignore")


class LVISParams:
    """lvis-api ``Params``: img_ids, cat_ids, iou_thrs, rec_thrs, max_dets (300), area_rng, area_rng_lbl, use_cats,
    img_count_lbl, iou_type."""

    def __init__(self, iou_type: str):
        self.img_ids: list = []
        self.cat_ids: list = []
        self.iou_thrs = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
        self.rec_thrs = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
        self.max_dets = 300
        self.area_rng = [[0**2, 1e5**2], [0**2, 32**2], [32**2, 96**2], [96**2, 1e5**2]]
        self.area_rng_lbl = ["all", "small", "medium", "large"]
        self.use_cats = 1
        self.img_count_lbl = ["r", "c", "f"]
        self.iou_type = iou_type


def limit_dets_per_image(items: list, max_dets: int) -> list:
    """``LVISResults.limit_dets_per_image``: results grouped by image (first appearance), an image with more than
    ``max_dets`` keeps its ``max_dets`` best (stable descending score)."""
    t = inputs._table(items, [inputs._id("image_id"), ("score", 1, inputs._MISSING)], "results")
    img, score = t["image_id"], t["score"]
    inputs._finite(score, items, "score", "results")
    n = img.size
    if n == 0:
        return []
    _, first, inv = np.unique(img, return_index=True, return_inverse=True)
    group_rank = np.argsort(np.argsort(first))[inv]
    counts = np.bincount(inv)
    over = counts[inv] > max_dets
    key = np.where(over, -score, 0.0)
    order = np.lexsort((np.arange(n), key, group_rank))
    g = group_rank[order]
    start = np.r_[True, g[1:] != g[:-1]]
    first_pos = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    order = order[np.arange(n) - first_pos < max_dets]
    return [items[k] for k in order.tolist()]


class LVISEval:
    """LVIS federated detection / segmentation evaluation, bit-identical to lvis-api 0.5.3 ``LVISEval``.

    Args:
        lvis_gt: an lvis-api ``LVIS`` object, an LVIS-format dict or a JSON path (images carry
            ``neg_category_ids`` and ``not_exhaustive_category_ids``, categories ``frequency``).
        lvis_dt: an ``LVISResults`` object, a list of result dicts or a JSON path (a list is cut to 300
            detections per image as ``LVISResults`` does).
        iou_type: ``"segm"`` or ``"bbox"``.

    Raises:
        ValueError: as :class:`~vlkernels.detection.COCOeval`, plus missing LVIS fields, a category frequency
            outside r/c/f, and ``use_cats = 0`` (lvis-api evaluates nothing then).

    Note:
        A detection is evaluated only where the image's ground truth has its category or lists it in
        ``neg_category_ids``; unmatched detections of ``not_exhaustive_category_ids`` are ignored. Only ground
        truths and detections with ``0 < area < inf`` are selected (lvis-api's ``get_ann_ids``).
    """

    def __init__(self, lvis_gt, lvis_dt, iou_type: str = "segm"):
        if iou_type not in ("bbox", "segm"):
            raise ValueError(f"iou_type: {iou_type} is not supported.")
        self.lvis_gt, self.lvis_dt = lvis_gt, lvis_dt
        ds = inputs._dataset_of(lvis_gt, "ground truth")
        self._gt = inputs.load_ground_truth(ds, lvis=True)
        # Federated lists per image id (exact int64 ids, as validated by load_ground_truth).
        self._neg, self._nel = {}, {}
        for k, (i, img) in enumerate(zip(self._gt.img_ids.tolist(), ds["images"])):
            for key, out in (("neg_category_ids", self._neg), ("not_exhaustive_category_ids", self._nel)):
                if not isinstance(img.get(key), list):
                    raise ValueError(f"images[{k}] (id {i}) has no list '{key}' (an LVIS dataset needs one)")
                out[i] = set(inputs.param_ids(img[key], f"images[{k}]['{key}']").tolist())
        self._cats = dict(zip(self._gt.cat_ids.tolist(), ds["categories"]))
        dt = inputs.load_json(lvis_dt, "results")
        if isinstance(dt, (list, tuple)):
            dt = limit_dets_per_image(list(dt), 300)
        self._dt = inputs.load_results(dt, self._gt)
        self.params = LVISParams(iou_type=iou_type)
        self.params.img_ids = sorted(self._gt.img_ids.tolist())
        self.params.cat_ids = sorted(self._gt.cat_ids.tolist())
        self.eval: dict = {}
        self.results: OrderedDict = OrderedDict()
        self._evaluated: engine.Evaluated | None = None
        self.eval_imgs: list = []

    def _federated(self, gt_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(keep, extra_ignore) per detection: its category is in the image's ground truth or negative list; it is
        not exhaustively annotated there."""
        gt, dt = self._gt.anns, self._dt
        pos = {(int(i), int(c)) for i, c in zip(gt.image_id[gt_rows], gt.category_id[gt_rows])}
        keep = np.zeros(len(dt), dtype=bool)
        extra = np.zeros(len(dt), dtype=np.uint8)
        neg, nel = self._neg, self._nel
        for k, (i, c) in enumerate(zip(dt.image_id.tolist(), dt.category_id.tolist())):
            keep[k] = c in neg[i] or (i, c) in pos
            extra[k] = c in nel[i]
        return keep, extra

    def _run(self, full: bool) -> engine.Evaluated:
        p = self._params_eval
        gt, dt = self._gt.anns, self._dt
        img_ids = np.asarray(p.img_ids, dtype=np.int64)
        cat_ids = np.asarray(p.cat_ids, dtype=np.int64)
        sorted_cats = np.unique(cat_ids)
        # get_ann_ids with category ids also keeps only 0 < area < inf (ground truths and detections alike).
        gsel = np.ones(len(gt), dtype=bool)
        dsel = np.ones(len(dt), dtype=bool)
        if len(p.cat_ids):
            gsel = (gt.area > 0) & (gt.area < np.inf)
            dsel = (dt.area > 0) & (dt.area < np.inf)
        in_img = np.isin(gt.image_id, img_ids) & gsel
        if len(p.cat_ids):
            in_img &= np.isin(gt.category_id, cat_ids)
        keep, extra = self._federated(np.flatnonzero(in_img))
        cells = engine.build_cells(gt, dt, img_ids, sorted_cats, True, None, dt_keep=keep & dsel, gt_keep=gsel)
        gm = dm = None
        if p.iou_type == "segm":
            gm, dm = engine.cell_masks(cells, gt, dt, self._gt)
        else:
            inputs.gt_boxes(self._gt)
        area_rng = np.asarray(p.area_rng, dtype=np.float64).reshape(-1, 2)
        thr = np.asarray(p.iou_thrs, dtype=np.float64)
        return engine.evaluate(cells, gt, dt, p.iou_type, gm, dm, area_rng, thr, False, extra, full=full)

    def evaluate(self) -> None:
        """Per image, category and area range matching at every IoU threshold (federated rules)."""
        p = self.params
        if not p.use_cats:
            raise ValueError("use_cats = 0 is not supported (lvis-api 0.5.3 evaluates no detection then)")
        p.img_ids = list(np.unique(inputs.param_ids(p.img_ids, "params.img_ids")))
        cat_ids = inputs.param_ids(p.cat_ids, "params.cat_ids")
        if np.unique(cat_ids).size != cat_ids.size:
            raise ValueError("params.cat_ids holds repeated ids")
        p.cat_ids = cat_ids.tolist()  # Python ints, as lvis-api keeps them
        for c in cat_ids.tolist():
            if c not in self._cats:
                raise ValueError(f"params.cat_ids holds {c}, which is not a ground-truth category")
            if self._cats[c].get("frequency") not in p.img_count_lbl:
                raise ValueError(f"category {c} has frequency {self._cats[int(c)].get('frequency')!r}, not r/c/f")
        # The evaluation's own copy: eval_imgs (built on first access) and accumulate() follow what was evaluated,
        # whatever is changed in self.params afterwards.
        self._params_eval = copy.deepcopy(p)
        self._evaluated = self._run(full=False)
        self._cat_order = np.asarray(p.cat_ids, dtype=np.int64)
        # The engine's cells are keyed by a category's slot among the sorted ids.
        self._cat_slot = np.searchsorted(np.sort(self._cat_order), self._cat_order)
        self.eval_imgs = engine.EvalImgs(self, "eval_imgs", _EVAL_IMG_KEYS)

    def _eval_imgs_shape(self) -> tuple[int, int, int]:
        p = self._params_eval
        return len(self._cat_order), len(p.area_rng), len(p.img_ids)

    def _eval_img_head(self, k: int, a: int, i: int) -> tuple[int, dict]:
        p = self._params_eval
        head = {"image_id": p.img_ids[i], "category_id": p.cat_ids[k], "area_rng": p.area_rng[a]}
        return int(self._cat_slot[k]) * len(p.img_ids) + i, head

    def accumulate(self) -> None:
        """precision [T, R, K, A] and recall [T, K, A] (-1 where a category has no ground truth)."""
        if self._evaluated is None:
            raise RuntimeError("Please run evaluate first.")
        p, pe = self.params, self._params_eval
        # lvis-api reads its per-image results by the positions of the current params (an IndexError, or another
        # threshold's row, when they changed): what indexes the evaluation must be what was evaluated.
        for name in ("iou_thrs", "area_rng", "img_ids", "cat_ids"):
            if not np.array_equal(np.asarray(getattr(p, name)), np.asarray(getattr(pe, name))):
                raise ValueError(f"accumulate(): params.{name} changed since evaluate(); run evaluate() again")
        cats = self._cat_order
        # Evaluated cells are keyed by sorted category; output slot = the category's position in params.cat_ids.
        cat_slot = np.argsort(cats, kind="stable")
        img_sel = np.ones(max(len(p.img_ids), 1), dtype=bool)
        K, A = len(cats), len(p.area_rng)
        precision, recall, _ = engine.accumulate(
            self._evaluated,
            np.ascontiguousarray(cat_slot, dtype=np.int64),
            img_sel,
            K,
            list(range(A)),
            np.asarray(p.rec_thrs, dtype=np.float64),
            [np.iinfo(np.int64).max],
            (K, A, 1),
            with_scores=False,
        )
        self.eval = {
            "params": p,
            "counts": [len(p.iou_thrs), len(p.rec_thrs), K, A],
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
            "precision": precision[..., 0],
            "recall": recall[..., 0],
        }

    def _freq_groups(self) -> list[list[int]]:
        groups = [[] for _ in self.params.img_count_lbl]
        for idx, c in enumerate(self.params.cat_ids):
            groups[self.params.img_count_lbl.index(self._cats[int(c)]["frequency"])].append(idx)
        return groups

    def _summarize(self, summary_type: str, iou_thr=None, area_rng="all", freq_group_idx=None) -> float:
        p = self.params
        aidx = [i for i, lbl in enumerate(p.area_rng_lbl) if lbl == area_rng]
        s = self.eval["precision"] if summary_type == "ap" else self.eval["recall"]
        if iou_thr is not None:
            s = s[np.where(iou_thr == p.iou_thrs)[0]]
        if summary_type == "ap":
            s = s[:, :, self._freq_groups()[freq_group_idx], aidx] if freq_group_idx is not None else s[:, :, :, aidx]
        else:
            s = s[:, :, aidx]
        return -1 if len(s[s > -1]) == 0 else np.mean(s[s > -1])

    def summarize(self) -> None:
        """AP, AP50, AP75, APs/m/l, APr/c/f, AR@300 and ARs/m/l@300 into ``results``."""
        if not self.eval:
            raise RuntimeError("Please run accumulate() first.")
        md = self.params.max_dets
        r = self.results
        r["AP"] = self._summarize("ap")
        r["AP50"] = self._summarize("ap", iou_thr=0.50)
        r["AP75"] = self._summarize("ap", iou_thr=0.75)
        r["APs"] = self._summarize("ap", area_rng="small")
        r["APm"] = self._summarize("ap", area_rng="medium")
        r["APl"] = self._summarize("ap", area_rng="large")
        r["APr"] = self._summarize("ap", freq_group_idx=0)
        r["APc"] = self._summarize("ap", freq_group_idx=1)
        r["APf"] = self._summarize("ap", freq_group_idx=2)
        r[f"AR@{md}"] = self._summarize("ar")
        for area in ("small", "medium", "large"):
            r[f"AR{area[0]}@{md}"] = self._summarize("ar", area_rng=area)

    def run(self) -> None:
        self.evaluate()
        self.accumulate()
        self.summarize()

    def print_results(self) -> None:
        """lvis-api's summary lines."""
        template = " {:<18} {} @[ IoU={:<9} | area={:>6s} | maxDets={:>3d} catIds={:>3s}] = {:0.3f}"
        for key, value in self.results.items():
            title, kind = ("Average Precision", "(AP)") if "AP" in key else ("Average Recall", "(AR)")
            if len(key) > 2 and key[2].isdigit():
                iou = f"{float(key[2:]) / 100:0.2f}"
            else:
                iou = f"{self.params.iou_thrs[0]:0.2f}:{self.params.iou_thrs[-1]:0.2f}"
            group = key[2] if len(key) > 2 and key[2] in ("r", "c", "f") else "all"
            area = key[2] if len(key) > 2 and key[2] in ("s", "m", "l") else "all"
            print(template.format(title, kind, iou, area, self.params.max_dets, group, value))

    def get_results(self) -> OrderedDict:
        return self.results
