"""torchvision-style namespace of the low-level ops: ``vlkernels.ops.<op>``."""

from vlkernels.boxes.iou import box_iou, segment_iou
from vlkernels.boxes.masks import mask_iou
from vlkernels.boxes.rle import RleCounts, rle_area, rle_decode, rle_encode, rle_iou, rle_to_bbox
from vlkernels.core.ops import count_above, l2_normalize

__all__ = [
    "RleCounts",
    "box_iou",
    "count_above",
    "l2_normalize",
    "mask_iou",
    "rle_area",
    "rle_decode",
    "rle_encode",
    "rle_iou",
    "rle_to_bbox",
    "segment_iou",
]
