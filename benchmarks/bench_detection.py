"""Detection family: COCOeval / LVISEval evaluate + accumulate, side by side with pycocotools, faster_coco_eval and
torchmetrics, on reproducible COCO-val2017-shaped data (vlkernels.detection.synthetic: 5,000 images, ~36,800
objects over 80 categories, 100 detections per image, RLE masks) and LVIS-shaped data (1,203 categories, 300
detections per image).

Each provider gets its own library's prepared inputs outside the timed region (pycocotools / faster_coco_eval:
their ``COCO`` objects after ``loadRes``; vlkernels: the same ground-truth dict and results list, parsed inside the
timed region). torchmetrics' ``MeanAveragePrecision`` cannot be built here (it requires torchvision, which does not
install beside this torch), so its compute path ``_calculate_map_with_coco`` runs on the tensors it would hold,
beside ``vlkernels.detection.mean_average_precision`` on the same tensors.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import logging

import numpy as np
import torch

from vlkernels.detection import COCOeval, LVISEval, mean_average_precision
from vlkernels.detection.synthetic import detection_data

from .harness import Bench, register


@functools.cache
def _data(n_images: int, masks: bool, lvis: bool = False, n_cats: int = 80, dets: int = 100):
    return detection_data(n_images=n_images, n_cats=n_cats, dets_per_image=dets, masks=masks, lvis=lvis, seed=0)


def _quiet(fn):
    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return fn()

    return run


def _check_exact(ref: str):
    def check(out):
        want = out[ref]
        for name in ("vlkernels",):
            assert np.array_equal(out[name], want), f"{name} precision differs from {ref}"

    return check


def _coco_case(n_images: int, iou: str) -> Bench:
    from faster_coco_eval import COCO as FCOCO
    from faster_coco_eval import COCOeval_faster
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval as PyCOCOeval

    gt, res = _data(n_images, iou == "segm")
    with contextlib.redirect_stdout(io.StringIO()):
        cg = COCO()
        cg.dataset = copy.deepcopy(gt)
        cg.createIndex()
        cd = cg.loadRes(copy.deepcopy(res))
        fg = FCOCO(copy.deepcopy(gt))
        fd = fg.loadRes(copy.deepcopy(res))
    logging.getLogger("faster_coco_eval").setLevel(logging.ERROR)

    def ours():
        E = COCOeval(gt, res, iou)
        E.evaluate()
        E.accumulate()
        return E.eval["precision"]

    def pycoco():
        E = PyCOCOeval(cg, cd, iou)
        E.evaluate()
        E.accumulate()
        return E.eval["precision"]

    def faster():
        E = COCOeval_faster(fg, fd, iou, print_function=lambda *a: None)
        E.evaluate()
        E.accumulate()
        return E.eval["precision"]

    n_gt, n_dt = len(gt["annotations"]), len(res)
    return Bench(
        providers={"vlkernels": ours, "pycocotools": _quiet(pycoco), "faster_coco_eval": _quiet(faster)},
        baseline="pycocotools",
        check=_check_exact("pycocotools"),
        repeats=1 if n_images > 1000 else 3,
        notes=f"{iou} evaluate+accumulate, {n_images} images, {n_gt} GT, {n_dt} detections; vlkernels parses the "
        "dicts inside the timing; precision checked bit-identical to pycocotools",
    )


@register("detection", "cocoeval_bbox", quick={"n_images": 200}, full={"n_images": 5000}, devices=("cpu",))
def _cocoeval_bbox(n_images: int, device: str) -> Bench:
    return _coco_case(n_images, "bbox")


@register("detection", "cocoeval_segm", quick={"n_images": 50}, full={"n_images": 5000}, devices=("cpu",))
def _cocoeval_segm(n_images: int, device: str) -> Bench:
    return _coco_case(n_images, "segm")


@register(
    "detection",
    "lvis_bbox",
    quick={"n_images": 40, "with_lvis_api": True},
    full={"n_images": 5000, "with_lvis_api": False},
    devices=("cpu",),
)
def _lvis_bbox(n_images: int, with_lvis_api: bool, device: str) -> Bench:
    from faster_coco_eval import COCO as FCOCO
    from faster_coco_eval import COCOeval_faster

    gt, res = _data(n_images, False, lvis=True, n_cats=1203, dets=300)
    with contextlib.redirect_stdout(io.StringIO()):
        fg = FCOCO(copy.deepcopy(gt))
        fd = fg.loadRes(copy.deepcopy(res))

    def ours():
        E = LVISEval(gt, res, "bbox")
        E.evaluate()
        E.accumulate()
        return E.eval["precision"]

    def faster():
        E = COCOeval_faster(fg, fd, "bbox", lvis_style=True, print_function=lambda *a: None)
        E.params.maxDets = [300]
        E.evaluate()
        E.accumulate()
        return E.eval["precision"]

    providers = {"vlkernels": ours, "faster_coco_eval": _quiet(faster)}
    baseline, check = "faster_coco_eval", None
    if with_lvis_api:
        # lvis-api evaluates every (category, area, image) cell in Python: hours at full size, so quick only.
        import lvis

        np.float = float  # noqa: NPY001 (lvis-api 0.5.3 uses the alias removed in numpy 1.24)
        logging.getLogger("lvis").setLevel(logging.ERROR)
        lg = lvis.LVIS.__new__(lvis.LVIS)
        lg.logger = logging.getLogger("lvis")
        lg.dataset = copy.deepcopy(gt)
        lg._create_index()
        ld = lvis.LVISResults(lg, copy.deepcopy(res))

        def lvis_api():
            E = lvis.LVISEval(lg, ld, "bbox")
            E.evaluate()
            E.accumulate()
            return E.eval["precision"]

        providers["lvis-api"] = lvis_api
        baseline, check = "lvis-api", _check_exact("lvis-api")
    return Bench(
        providers=providers,
        baseline=baseline,
        check=check,
        repeats=1 if n_images > 1000 else 3,
        notes=f"LVIS-shaped: {n_images} images, 1203 categories, {len(res)} detections (300 per image); "
        "faster_coco_eval with lvis_style=True (its own LVIS rules; not checked for equality)",
    )


def _tensors(n_images: int):
    gt, res = _data(n_images, False)
    by_img: dict[int, tuple[list, list]] = {img["id"]: ([], []) for img in gt["images"]}
    for d in res:
        by_img[d["image_id"]][0].append(d)
    for a in gt["annotations"]:
        by_img[a["image_id"]][1].append(a)
    preds, target = [], []
    for dets, anns in by_img.values():
        b = torch.tensor([d["bbox"] for d in dets], dtype=torch.float32).reshape(-1, 4)
        preds.append(
            {
                "boxes": torch.cat([b[:, :2], b[:, :2] + b[:, 2:]], 1),
                "scores": torch.tensor([d["score"] for d in dets], dtype=torch.float32),
                "labels": torch.tensor([d["category_id"] for d in dets], dtype=torch.int64),
            }
        )
        g = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        target.append(
            {
                "boxes": torch.cat([g[:, :2], g[:, :2] + g[:, 2:]], 1),
                "labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64),
                "iscrowd": torch.tensor([a["iscrowd"] for a in anns], dtype=torch.int64),
            }
        )
    return preds, target


@register("detection", "map_tensors_bbox", quick={"n_images": 200}, full={"n_images": 5000}, devices=("cpu",))
def _map_tensors(n_images: int, device: str) -> Bench:
    from torchmetrics.detection import helpers

    preds, target = _tensors(n_images)

    def xywh(b):
        return torch.stack((b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]), -1)

    def torchmetrics_(backend):
        def run():
            out = helpers._calculate_map_with_coco(
                helpers.CocoBackend(backend),
                [t["labels"] for t in target],
                [xywh(t["boxes"]) for t in target],
                [],
                [t["iscrowd"] for t in target],
                [torch.zeros_like(t["labels"]) for t in target],
                [p["labels"] for p in preds],
                [xywh(p["boxes"]) for p in preds],
                [],
                [p["scores"] for p in preds],
                ("bbox",),
                "macro",
                torch.linspace(0.5, 0.95, 10).tolist(),
                torch.linspace(0.0, 1.00, 101).tolist(),
                [1, 10, 100],
                False,
                False,
            )
            return float(out["map"])

        return run

    def check(out):
        assert out["vlkernels"] == out["torchmetrics-pycocotools"], "map differs from torchmetrics"

    return Bench(
        providers={
            "vlkernels": lambda: float(mean_average_precision(preds, target)["map"]),
            "torchmetrics-pycocotools": _quiet(torchmetrics_("pycocotools")),
            "torchmetrics-faster_coco_eval": _quiet(torchmetrics_("faster_coco_eval")),
        },
        baseline="torchmetrics-pycocotools",
        check=check,
        repeats=1 if n_images > 1000 else 3,
        notes="MeanAveragePrecision compute from per-image tensors (xyxy boxes, scores, labels), bbox",
    )
