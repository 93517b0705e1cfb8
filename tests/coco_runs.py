"""Shared by the detection tests: a pycocotools COCO object from a dataset dict, and a full vlkernels COCOeval run."""

import contextlib
import copy
import io

from pycocotools.coco import COCO

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
