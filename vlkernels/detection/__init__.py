"""Detection family: COCO / LVIS detection and instance-segmentation mAP on the IoU engine.

``COCOeval`` (pycocotools drop-in), ``LVISEval`` (lvis-api drop-in), ``mean_average_precision`` and
``MeanAveragePrecision`` (torchmetrics-style tensors). Conventions: ``vlkernels/detection/README.md``.
"""

from vlkernels.detection.cocoeval import COCOeval, Params

__all__ = ["COCOeval", "Params"]
