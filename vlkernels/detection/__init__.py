"""Detection family: COCO / LVIS detection and instance-segmentation mAP on the IoU engine.

``COCOeval`` (pycocotools drop-in), ``LVISEval`` (lvis-api drop-in), ``mean_average_precision`` and
``MeanAveragePrecision`` (torchmetrics-style tensors). Conventions: ``vlkernels/detection/README.md``.
"""

from vlkernels.detection.cocoeval import COCOeval, Params
from vlkernels.detection.lvis import LVISEval
from vlkernels.detection.metric import MeanAveragePrecision, mean_average_precision

__all__ = ["COCOeval", "LVISEval", "MeanAveragePrecision", "Params", "mean_average_precision"]
