"""Shared by the detection tests: a pycocotools COCO object from a dataset dict, and full COCOeval runs of pycocotools
(the anchor) and of vlkernels."""

import contextlib
import copy
import io

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval as CocoEvalAnchor

from vlkernels.detection import COCOeval


def coco(dataset: dict) -> COCO:
    """pycocotools' COCO over a deep copy of ``dataset`` (its index printout silenced)."""
    c = COCO()
    c.dataset = copy.deepcopy(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        c.createIndex()
    return c


def ours(gt, res, iou="bbox", setup=None) -> COCOeval:
    """vlkernels' COCOeval evaluated, accumulated and summarized; ``setup(params)`` runs first when given."""
    E = COCOeval(gt, res, iou)
    if setup:
        setup(E.params)
    E.evaluate()
    E.accumulate()
    with contextlib.redirect_stdout(io.StringIO()):
        E.summarize()
    return E


def anchor(gt: dict, res: list, iou: str = "bbox", setup=None) -> CocoEvalAnchor:
    """pycocotools' COCOeval evaluated, accumulated and summarized (printouts silenced); an empty ``res`` is an
    empty result set built by hand (``loadRes`` cannot take one)."""
    cg = coco(gt)
    with contextlib.redirect_stdout(io.StringIO()):
        if res:
            cd = cg.loadRes(copy.deepcopy(res))
        else:
            cd = coco({"images": gt["images"], "categories": gt["categories"], "annotations": []})
        E = CocoEvalAnchor(cg, cd, iou)
        if setup:
            setup(E.params)
        E.evaluate()
        E.accumulate()
        E.summarize()
    return E
