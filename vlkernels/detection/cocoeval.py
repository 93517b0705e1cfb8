"""``COCOeval``: a drop-in for ``pycocotools.cocoeval.COCOeval`` (bbox and segm) on the C++ engine.

Same ``params``, ``evaluate()`` / ``accumulate()`` / ``summarize()``, ``stats``, ``eval`` and ``evalImgs``, with
values bit-identical to pycocotools 2.0.11 (conventions: ``vlkernels/detection/README.md``).
"""

from __future__ import annotations

import copy
import datetime

import numpy as np

from vlkernels.detection import engine, inputs

# The arrays of an evalImgs entry, in engine.eval_img's order.
_EVAL_IMG_KEYS = ("dtIds", "gtIds", "dtMatches", "gtMatches", "dtScores", "gtIgnore", "dtIgnore")


class Params:
    """pycocotools ``Params`` for bbox / segm: imgIds, catIds, iouThrs, recThrs, maxDets, areaRng, areaRngLbl,
    useCats, iouType."""

    def __init__(self, iouType: str = "segm"):
        if iouType not in ("bbox", "segm"):
            raise ValueError(f"iouType must be 'bbox' or 'segm', got {iouType!r} (keypoints are not supported)")
        self.imgIds: list = []
        self.catIds: list = []
        # linspace, not arange: the thresholds must be the exact doubles pycocotools uses.
        self.iouThrs = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
        self.recThrs = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
        self.maxDets = [1, 10, 100]
        self.areaRng = [[0**2, 1e5**2], [0**2, 32**2], [32**2, 96**2], [96**2, 1e5**2]]
        self.areaRngLbl = ["all", "small", "medium", "large"]
        self.useCats = 1
        self.iouType = iouType
        self.useSegm = None


class COCOeval:
    """Detection / instance-segmentation evaluation, bit-identical to ``pycocotools.cocoeval.COCOeval``.

    Args:
        cocoGt: ground truth: a pycocotools ``COCO`` object, a COCO-format dict or a JSON path.
        cocoDt: detections: a ``COCO`` object (``cocoGt.loadRes(...)``), a list of result dicts (``image_id``,
            ``category_id``, ``score`` and ``bbox`` or ``segmentation``: RLE or polygons) or a JSON path.
        iouType: ``"bbox"`` or ``"segm"``.

    Raises:
        ValueError: malformed JSON; a result whose image or category is not in the ground truth; boxes with a
            negative size or non-finite values; non-finite scores or areas; a segmentation whose size is not its
            image's; duplicate ids; ``useCats=0`` with repeated ``catIds``. Each message names the item.

    Note:
        ``evaluate`` + ``accumulate`` run in C++ (multithreaded over image x category cells, then over
        categories); ``evalImgs`` is computed again, with the matches, on first access. pycocotools is not needed.
        ``ious`` (the per-cell IoU matrices) is not kept. Keypoints are not supported.

    Example:
        >>> E = COCOeval("instances_val2017.json", "detections.json", "bbox")  # doctest: +SKIP
        >>> E.evaluate(); E.accumulate(); E.summarize()  # doctest: +SKIP
    """

    def __init__(self, cocoGt=None, cocoDt=None, iouType: str = "segm"):
        self.cocoGt = cocoGt
        self.cocoDt = cocoDt
        self.params = Params(iouType=iouType or "segm")
        self.eval: dict = {}
        self.stats: np.ndarray | list = []
        self._paramsEval = None
        self._evaluated: engine.Evaluated | None = None
        self._evalImgs: engine.EvalImgs | list = []
        self._gt: inputs.GroundTruth | None = None
        self._dt: inputs.Anns | None = None
        self._gt_read_here = None  # the cocoGt the constructor read, which serves the first evaluate()
        if cocoGt is not None:
            self._gt = inputs.load_ground_truth(cocoGt)
            self._gt_read_here = cocoGt
            self.params.imgIds = sorted(self._gt.img_ids.tolist())
            self.params.catIds = sorted(self._gt.cat_ids.tolist())

    @classmethod
    def _prebuilt(cls, gt: inputs.GroundTruth, dt: inputs.Anns, iouType: str) -> COCOeval:
        """An evaluator on already parsed columns (the tensor metrics)."""
        E = cls(None, None, iouType)
        E._gt, E._dt = gt, dt
        E.params.imgIds = sorted(gt.img_ids.tolist())
        E.params.catIds = sorted(gt.cat_ids.tolist())
        return E

    @property
    def evalImgs(self):
        return self._evalImgs

    @evalImgs.setter
    def evalImgs(self, value) -> None:
        # pycocotools accumulates from whatever list is assigned (torchvision's distributed reference merges the
        # processes' lists so); here accumulate() reads the evaluation itself, so an assigned list would be ignored.
        raise AttributeError(
            "evalImgs is read-only here: accumulate() reads the evaluation, not these entries. To merge results "
            "from several processes, gather the detections and evaluate them in one COCOeval"
        )

    def _eval_cat_ids(self) -> list:
        p = self._paramsEval
        return list(p.catIds) if p.useCats else [-1]

    def _load(self) -> None:
        # As pycocotools, cocoGt and cocoDt are read on every evaluate(), so objects assigned since and annotations
        # edited in place count; the constructor's read of cocoGt serves the first one. (Evaluators built on parsed
        # columns, _prebuilt, have neither and keep their columns.)
        if self.cocoGt is not None:
            if self.cocoGt is not self._gt_read_here:
                self._gt = inputs.load_ground_truth(self.cocoGt)
            self._gt_read_here = None
        if self._gt is None:
            raise ValueError("COCOeval needs cocoGt")
        if self.cocoDt is not None:
            self._dt = inputs.load_results(self.cocoDt, self._gt)
        if self._dt is None:
            raise ValueError("COCOeval needs cocoDt")

    def _run(self, full: bool) -> engine.Evaluated:
        """The C++ evaluation for self._paramsEval (``full``: with the matches, for evalImgs)."""
        p = self._paramsEval
        gt, dt = self._gt.anns, self._dt
        img_ids = np.asarray(p.imgIds, dtype=np.int64)
        cat_ids = np.asarray(p.catIds, dtype=np.int64)
        cells = engine.build_cells(gt, dt, img_ids, cat_ids, bool(p.useCats), int(p.maxDets[-1]))
        gm = dm = None
        if p.iouType == "segm":
            gm, dm = engine.cell_masks(cells, gt, dt, self._gt)
        else:
            inputs.gt_boxes(self._gt)
            if dt.bbox is None:
                raise ValueError("results carry no 'bbox' for a bbox evaluation")
        area_rng = np.asarray(p.areaRng, dtype=np.float64).reshape(-1, 2)
        return engine.evaluate(
            cells, gt, dt, p.iouType, gm, dm, area_rng, np.asarray(p.iouThrs, dtype=np.float64), True, full=full
        )

    def evaluate(self) -> None:
        """Match detections to ground truths per image, category, area range and IoU threshold."""
        p = self.params
        if p.useSegm is not None:
            p.iouType = "segm" if p.useSegm == 1 else "bbox"
        if p.iouType not in ("bbox", "segm"):
            raise ValueError(f"iouType must be 'bbox' or 'segm', got {p.iouType!r}")
        self._load()
        _check_params(p)
        p.imgIds = list(np.unique(inputs.param_ids(p.imgIds, "params.imgIds")))
        cat_ids = inputs.param_ids(p.catIds, "params.catIds")
        if p.useCats:
            p.catIds = list(np.unique(cat_ids))
        elif np.unique(cat_ids).size != cat_ids.size:
            raise ValueError("params.catIds holds repeated ids; with useCats=0 pycocotools would count them twice")
        p.maxDets = sorted(p.maxDets)
        self.params = p
        self._paramsEval = copy.deepcopy(p)
        self._evaluated = self._run(full=False)
        self._evalImgs = engine.EvalImgs(self, "evalImgs", _EVAL_IMG_KEYS)
        self.eval = {}

    def _eval_imgs_shape(self) -> tuple[int, int, int]:
        p = self._paramsEval
        return len(self._eval_cat_ids()), len(p.areaRng), len(p.imgIds)

    def _eval_img_head(self, k: int, a: int, i: int) -> tuple[int, dict]:
        p = self._paramsEval
        head = {"image_id": p.imgIds[i], "category_id": self._eval_cat_ids()[k], "aRng": p.areaRng[a]}
        return k * len(p.imgIds) + i, {**head, "maxDet": p.maxDets[-1]}

    def accumulate(self, p: Params | None = None) -> None:
        """Precision at each recall threshold and maximal recall, per IoU threshold, category, area range and
        maxDet (``eval["precision"]`` [T, R, K, A, M], ``eval["recall"]`` [T, K, A, M], ``eval["scores"]``)."""
        if self._evaluated is None:
            print("Please run evaluate() first")
            return
        if p is None:
            p = self.params
        # pycocotools rewrites catIds on the params it is given.
        p.catIds = p.catIds if p.useCats == 1 else [-1]
        pe = self._paramsEval
        eval_cats = self._eval_cat_ids()
        set_k, set_a = set(eval_cats), {tuple(a) for a in pe.areaRng}
        set_m, set_i = set(pe.maxDets), set(pe.imgIds)
        k_list = [n for n, k in enumerate(p.catIds) if k in set_k]
        m_list = [m for m in p.maxDets if m in set_m]
        a_list = [n for n, a in enumerate(map(tuple, p.areaRng)) if a in set_a]
        i_list = [n for n, i in enumerate(p.imgIds) if i in set_i]
        K = len(p.catIds) if p.useCats else 1
        # pycocotools indexes evalImgs with the positions in p (k0 * A0 * I0 + a0 * I0 + i): the same cells here.
        n_cat_eval, n_img_eval, n_area_eval = len(eval_cats), len(pe.imgIds), len(pe.areaRng)
        if any(k >= n_cat_eval for k in k_list) or any(i >= n_img_eval for i in i_list):
            raise ValueError("accumulate(p): p selects more categories or images than were evaluated")
        if any(a >= n_area_eval for a in a_list):
            raise ValueError("accumulate(p): p selects more area ranges than were evaluated")
        cat_slot = -np.ones(max(n_cat_eval, 1), dtype=np.int64)
        cat_slot[k_list] = np.arange(len(k_list))
        img_sel = np.zeros(max(n_img_eval, 1), dtype=bool)
        img_sel[i_list] = True
        precision, recall, scores = engine.accumulate(
            self._evaluated,
            cat_slot,
            img_sel,
            len(k_list),
            a_list,
            np.asarray(p.recThrs, dtype=np.float64),
            m_list,
            (K, len(p.areaRng), len(p.maxDets)),
        )
        T, R = len(p.iouThrs), len(p.recThrs)
        if T != self._evaluated.status.shape[1]:
            raise ValueError("accumulate(p): p.iouThrs differs from the evaluated thresholds")
        self.eval = {
            "params": p,
            "counts": [T, R, K, len(p.areaRng), len(p.maxDets)],
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
            "precision": precision,
            "recall": recall,
            "scores": scores,
        }

    def summarize(self) -> None:
        """Print pycocotools' 12 summary lines and set ``stats``."""
        if not self.eval:
            raise Exception("Please run accumulate() first")
        self.stats = summarize_dets(self.eval, self.params)

    def __str__(self) -> str:
        self.summarize()
        return ""


def _check_params(p: Params) -> None:
    thr = np.asarray(p.iouThrs, dtype=np.float64)
    rec = np.asarray(p.recThrs, dtype=np.float64)
    if thr.ndim != 1 or not thr.size or not np.isfinite(thr).all():
        # Empty: pycocotools evaluates, then fails in summarize (IndexError).
        raise ValueError("params.iouThrs must be a non-empty 1-D list of finite thresholds")
    if rec.ndim != 1 or not np.isfinite(rec).all():
        raise ValueError("params.recThrs must be a 1-D list of finite thresholds")
    rng = np.asarray(p.areaRng, dtype=np.float64)
    rng = rng.reshape(0, 2) if rng.size == 0 else rng
    if rng.ndim != 2 or rng.shape[1] != 2 or np.isnan(rng).any():
        raise ValueError("params.areaRng must be a list of [low, high] pairs")
    if np.asarray(p.maxDets).size == 0 or any(int(m) != m or m < 0 for m in p.maxDets):
        raise ValueError("params.maxDets must be non-negative integers")


_LINE = " {:<18} {} @[ IoU={:<9} | area={:>6s} | maxDets={:>3d} ] = {:0.3f}"


def summary_value(ev: dict, p, ap: bool, iou_thr=None, area="all", max_dets=100, *, show: bool = True) -> float:
    """pycocotools' ``_summarize``: the mean of the entries above -1 (or -1), printed as one summary line."""
    a_idx = [i for i, lbl in enumerate(p.areaRngLbl) if lbl == area]
    m_idx = [i for i, m in enumerate(p.maxDets) if m == max_dets]
    s = ev["precision"] if ap else ev["recall"]
    if iou_thr is not None:
        s = s[np.where(iou_thr == p.iouThrs)[0]]
    s = s[:, :, :, a_idx, m_idx] if ap else s[:, :, a_idx, m_idx]
    mean = -1 if len(s[s > -1]) == 0 else np.mean(s[s > -1])
    if show:
        iou = f"{p.iouThrs[0]:0.2f}:{p.iouThrs[-1]:0.2f}" if iou_thr is None else f"{iou_thr:0.2f}"
        title, kind = ("Average Precision", "(AP)") if ap else ("Average Recall", "(AR)")
        print(_LINE.format(title, kind, iou, area, max_dets, mean))
    return mean


def summarize_dets(ev: dict, p, show: bool = True) -> np.ndarray:
    """The 12 COCO numbers: AP, AP50, AP75, AP small/medium/large, AR@maxDets[0..2], AR small/medium/large."""
    m = p.maxDets
    if len(m) < 3:
        raise ValueError(f"summarize needs 3 params.maxDets (its lines read maxDets[0..2]), got {list(m)}")
    rows = [
        (True, None, "all", 100),
        (True, 0.5, "all", m[2]),
        (True, 0.75, "all", m[2]),
        (True, None, "small", m[2]),
        (True, None, "medium", m[2]),
        (True, None, "large", m[2]),
        (False, None, "all", m[0]),
        (False, None, "all", m[1]),
        (False, None, "all", m[2]),
        (False, None, "small", m[2]),
        (False, None, "medium", m[2]),
        (False, None, "large", m[2]),
    ]
    stats = np.zeros((12,))
    for j, (ap, thr, area, md) in enumerate(rows):
        stats[j] = summary_value(ev, p, ap, thr, area, md, show=show)
    return stats
