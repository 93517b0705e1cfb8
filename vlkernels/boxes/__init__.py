"""Boxes family: batched IoU (box, segment, dense mask, COCO RLE) and the grounding metrics built on it.

The ops live in ``vlkernels.ops`` (``box_iou``, ``segment_iou``, ``mask_iou``, ``rle_*``); the metrics here.
Conventions: ``vlkernels/boxes/README.md``.
"""

from vlkernels.boxes.grounding import moment_retrieval_metrics, rec_accuracy, ris_metrics
from vlkernels.boxes.highlights import highlight_gt_matrix, highlight_metrics, qvhighlights_eval, temporal_nms
from vlkernels.boxes.iou import box_iou, segment_iou
from vlkernels.boxes.mask_api import (
    fr_py_objects,
    rle_from_bboxes,
    rle_from_polygons,
    rle_from_uncompressed,
    rle_merge,
)
from vlkernels.boxes.masks import mask_iou
from vlkernels.boxes.rle import RleCounts, rle_area, rle_decode, rle_encode, rle_iou, rle_to_bbox

__all__ = [
    "RleCounts",
    "box_iou",
    "fr_py_objects",
    "highlight_gt_matrix",
    "highlight_metrics",
    "mask_iou",
    "moment_retrieval_metrics",
    "qvhighlights_eval",
    "rec_accuracy",
    "ris_metrics",
    "rle_area",
    "rle_decode",
    "rle_encode",
    "rle_from_bboxes",
    "rle_from_polygons",
    "rle_from_uncompressed",
    "rle_iou",
    "rle_merge",
    "rle_to_bbox",
    "segment_iou",
    "temporal_nms",
]
