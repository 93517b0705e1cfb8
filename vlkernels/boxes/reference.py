"""Plain references for the boxes family, written from the anchors' documented formulas.

- ``box_iou_ref``: torchvision's ``box_iou`` / ``generalized_box_iou`` / ``distance_box_iou`` /
  ``complete_box_iou`` formulas (xyxy, no clamping of the ratio, NaN on 0/0), batched by broadcasting, computed
  in the input dtype (tests pass float64). CIoU's alpha is detached, as torchvision computes it under no_grad.
  Also the backward of ``vlkernels.ops.box_iou``.
- ``segment_iou_ref``: Moment-DETR's ``compute_temporal_iou_batch_cross`` (union = l1 + l2 - I) and
  ``compute_temporal_iou_batch_paired`` (union = hull, 0 where the hull is 0), in numpy float64.
- ``mask_iou_ref``: dense masks with torch boolean algebra; two empty masks -> 0 (pycocotools).
- ``moment_ap_ref``: the ActivityNet/Moment-DETR per-query AP (greedy matching in descending IoU, VOC
  interpolation), in plain numpy.
"""

from __future__ import annotations

import numpy as np
import torch

_FMTS = ("xyxy", "xywh", "cxcywh")
_KINDS = ("iou", "giou", "diou", "ciou")


def to_xyxy_ref(boxes: torch.Tensor, fmt: str) -> torch.Tensor:
    """torchvision.ops.box_convert(boxes, fmt, "xyxy")."""
    if fmt == "xyxy":
        return boxes
    a, b, c, d = boxes.unbind(-1)
    if fmt == "xywh":
        return torch.stack([a, b, a + c, b + d], dim=-1)
    return torch.stack([a - 0.5 * c, b - 0.5 * d, a + 0.5 * c, b + 0.5 * d], dim=-1)


def box_iou_ref(boxes1: torch.Tensor, boxes2: torch.Tensor, fmt="xyxy", kind="iou", aligned=False, eps=0.0):
    """torchvision's IoU-family formulas on ``[..., N, 4] x [..., M, 4] -> [..., N, M]`` (or aligned ``[..., N]``).

    eps: added to the union and the enclosing area for iou/giou (torchvision has none: eps=0 is torchvision), and to
    the squared enclosing diagonal and CIoU's alpha denominator for diou/ciou (torchvision's placement).
    """
    a, b = to_xyxy_ref(boxes1, fmt), to_xyxy_ref(boxes2, fmt)
    if not aligned:
        a, b = a.unsqueeze(-2), b.unsqueeze(-3)
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a + area_b - inter
    if kind == "iou":
        return inter / (union + eps)
    lti = torch.minimum(a[..., :2], b[..., :2])
    rbi = torch.maximum(a[..., 2:], b[..., 2:])
    whi = (rbi - lti).clamp(min=0)
    if kind == "giou":
        enclosing = whi[..., 0] * whi[..., 1]
        return inter / (union + eps) - (enclosing - union) / (enclosing + eps)
    iou = inter / union
    diag = whi[..., 0] ** 2 + whi[..., 1] ** 2 + eps
    cxa, cya = (a[..., 0] + a[..., 2]) / 2, (a[..., 1] + a[..., 3]) / 2
    cxb, cyb = (b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2
    diou = iou - ((cxa - cxb) ** 2 + (cya - cyb) ** 2) / diag
    if kind == "diou":
        return diou
    wa, ha = a[..., 2] - a[..., 0], a[..., 3] - a[..., 1]
    wb, hb = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
    v = (4 / (torch.pi**2)) * (torch.atan(wa / ha) - torch.atan(wb / hb)) ** 2
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return diou - alpha * v


def segment_iou_ref(seg1: np.ndarray, seg2: np.ndarray, aligned: bool = False, union: str = "sum") -> np.ndarray:
    """Moment-DETR's temporal IoU in numpy float64 on ``(N, 2)`` x ``(M, 2)`` (or aligned ``(N, 2)`` pairs)."""
    s1, s2 = np.asarray(seg1, dtype=np.float64), np.asarray(seg2, dtype=np.float64)
    if not aligned:
        s1, s2 = s1[:, None, :], s2[None, :, :]
    inter = np.clip(np.minimum(s1[..., 1], s2[..., 1]) - np.maximum(s1[..., 0], s2[..., 0]), 0, None)
    if union == "sum":
        with np.errstate(divide="ignore", invalid="ignore"):
            return inter / ((s1[..., 1] - s1[..., 0]) + (s2[..., 1] - s2[..., 0]) - inter)
    hull = np.maximum(s1[..., 1], s2[..., 1]) - np.minimum(s1[..., 0], s2[..., 0])
    return np.divide(inter, hull, out=np.zeros_like(inter), where=hull != 0)


def mask_iou_ref(masks1: torch.Tensor, masks2: torch.Tensor, aligned: bool = False) -> torch.Tensor:
    """Dense mask IoU in float64: ``[..., N, H, W] x [..., M, H, W] -> [..., N, M]``; empty union -> 0."""
    a = masks1.flatten(-2).bool()
    b = masks2.flatten(-2).bool()
    if aligned:
        inter = (a & b).sum(-1)
        union = (a | b).sum(-1)
    else:
        af, bf = a.double(), b.double()
        inter = af @ bf.transpose(-1, -2)
        union = af.sum(-1)[..., :, None] + bf.sum(-1)[..., None, :] - inter
    inter, union = inter.double(), union.double()
    return torch.where(union > 0, inter / union.clamp_min(1), torch.zeros_like(inter))


def _interpolated_ap(precision: np.ndarray, recall: np.ndarray) -> float:
    mp = np.concatenate([[0.0], precision, [0.0]])
    mr = np.concatenate([[0.0], recall, [1.0]])
    for i in range(len(mp) - 2, -1, -1):
        mp[i] = max(mp[i], mp[i + 1])
    idx = np.where(mr[1:] != mr[:-1])[0] + 1
    return float(np.sum((mr[idx] - mr[idx - 1]) * mp[idx]))


def moment_ap_ref(pred: np.ndarray, scores: np.ndarray, gt: np.ndarray, thresholds: list[float]) -> np.ndarray:
    """Per-query AP at each threshold (ActivityNet detection AP as used by Moment-DETR's standalone_eval)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    pred = np.asarray(pred, dtype=np.float64)[order]
    gt = np.asarray(gt, dtype=np.float64)
    ap = np.zeros(len(thresholds))
    if len(pred) == 0:
        return ap
    tp = np.zeros((len(thresholds), len(pred)))
    fp = np.zeros_like(tp)
    locked = -np.ones((len(thresholds), len(gt)))
    for p in range(len(pred)):
        ious = segment_iou_ref(pred[p : p + 1], gt)[0]
        ranked = np.argsort(ious, kind="stable")[::-1]
        for t, thr in enumerate(thresholds):
            for j in ranked:
                if ious[j] < thr:
                    fp[t, p] = 1
                    break
                if locked[t, j] >= 0:
                    continue
                tp[t, p] = 1
                locked[t, j] = p
                break
            if tp[t, p] == 0 and fp[t, p] == 0:
                fp[t, p] = 1
    tpc, fpc = np.cumsum(tp, axis=1), np.cumsum(fp, axis=1)
    recall = tpc / float(len(gt))
    precision = tpc / (tpc + fpc)
    return np.array([_interpolated_ap(precision[t], recall[t]) for t in range(len(thresholds))])
