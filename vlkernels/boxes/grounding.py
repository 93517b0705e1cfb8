"""Grounding metrics on top of the IoU kernels: REC accuracy (boxes), referring segmentation (masks) and moment
retrieval (temporal spans), each with the convention of the evaluator it reproduces stated and pinned by tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from vlkernels._validate import as_integer, check_tensor
from vlkernels.boxes.iou import box_iou, segment_iou
from vlkernels.boxes.masks import mask_inter_union

RIS_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
MR_THRESHOLDS = tuple(float(f"{t:.2f}") for t in np.linspace(0.5, 0.95, 10))


def rec_accuracy(
    pred_boxes: torch.Tensor,
    scores: torch.Tensor,
    gt_boxes: torch.Tensor,
    thresholds: Sequence[float] = (0.5,),
    k: Sequence[int] = (1,),
    criterion: str = "iou",
    fmt: str = "xyxy",
) -> dict[str, float]:
    """Referring-expression comprehension accuracy P@k: a hit when one of the k best-scored boxes reaches the
    threshold against the single ground-truth box.

    .. math::
        \\mathrm{P@}k(t) = \\frac{1}{B} \\sum_b
        \\big[\\max_{r < k} \\mathrm{crit}(\\hat b_{b, \\sigma_b(r)}, g_b) \\ge t\\big]

    Args:
        pred_boxes: ``(B, P, 4)`` candidate boxes per expression (float or integer; the IoU is taken in the dtype
            it promotes to with ``gt_boxes``).
        scores: ``(B, P)`` their scores; candidates are ranked by descending score.
        gt_boxes: ``(B, 4)`` one ground-truth box per expression.
        thresholds: IoU/GIoU thresholds (hit when ``>=``).
        k: ranks at which to report precision (``k > P`` uses all ``P`` boxes).
        criterion: ``"iou"`` (most REC evaluations: ReferItGame, RefCOCO, OFA, ...) or ``"giou"`` (MDETR's and GLIP's
            ``RefExpEvaluator`` thresholds the generalized IoU).
        fmt: box format of both inputs, ``"xyxy"``, ``"xywh"`` or ``"cxcywh"``.

    Returns:
        ``{"P@{k}@{t:g}": fraction in [0, 1]}`` for every k and threshold (e.g. ``"P@1@0.5"``).

    Raises:
        ValueError: wrong shapes, empty batch, k not a positive integer, NaN scores or thresholds, unknown
            criterion; box errors as ``box_iou``.

    Note:
        Score ties rank the lower candidate index first (stable sort). A NaN criterion (degenerate boxes, 0/0)
        never counts as a hit. GIoU <= IoU, so the GIoU protocol is never more lenient.

    Example:
        >>> pred = torch.tensor([[[0.0, 0, 10, 10], [20, 20, 30, 30]]]); s = torch.tensor([[0.9, 0.1]])
        >>> rec_accuracy(pred, s, torch.tensor([[0.0, 0, 10, 12]]))
        {'P@1@0.5': 1.0}
    """
    check_tensor(pred_boxes, "pred_boxes", ndim=3, last_dim=4)
    check_tensor(scores, "scores", ndim=2)
    check_tensor(gt_boxes, "gt_boxes", ndim=2, last_dim=4)
    b, p = pred_boxes.shape[:2]
    if scores.shape != (b, p):
        raise ValueError(f"scores must have shape {(b, p)} to match pred_boxes, got {tuple(scores.shape)}")
    if gt_boxes.shape[0] != b:
        raise ValueError(f"gt_boxes must have {b} rows (one per expression), got {gt_boxes.shape[0]}")
    if b == 0 or p == 0:
        raise ValueError(f"rec_accuracy needs at least one expression and one candidate, got pred_boxes {(b, p)}")
    if criterion not in ("iou", "giou"):
        raise ValueError(f"criterion must be 'iou' or 'giou', got {criterion!r}")
    ks = [as_integer(kk) for kk in k]
    if any(kk is None or kk < 1 for kk in ks):
        raise ValueError(f"k values must be integers >= 1, got {tuple(k)}")
    ts = [float(t) for t in thresholds]
    if any(math.isnan(t) for t in ts):
        raise ValueError(f"thresholds must be numbers, got {tuple(thresholds)}")
    if bool(torch.isnan(scores.detach()).any()):
        raise ValueError("scores hold NaN; every candidate needs a score to be ranked")
    order = torch.sort(scores.detach(), dim=1, descending=True, stable=True).indices
    # Both box sets in their promoted dtype (as torchvision's arithmetic would take them): a float ground truth is
    # neither truncated to integer predictions nor rounded to half-precision ones.
    dtype = torch.promote_types(pred_boxes.dtype, gt_boxes.dtype)
    ranked = torch.gather(pred_boxes.detach(), 1, order[..., None].expand(b, p, 4)).to(dtype)
    gt = gt_boxes.detach().to(dtype)[:, None, :]
    crit = box_iou(ranked, gt, fmt=fmt, kind=criterion)[..., 0].double()  # (B, P)
    crit = torch.nan_to_num(crit, nan=-torch.inf)
    out = {}
    for kk in ks:
        best = crit[:, :kk].max(dim=1).values
        for t in ts:
            out[f"P@{kk}@{t:g}"] = float((best >= t).double().mean())
    return out


def ris_metrics(
    pred_masks: torch.Tensor | Sequence[torch.Tensor],
    gt_masks: torch.Tensor | Sequence[torch.Tensor],
    empty: str = "zero",
    thresholds: Sequence[float] = RIS_THRESHOLDS,
) -> dict[str, float]:
    """Referring-segmentation metrics: mIoU (mean per-sample IoU), cIoU (cumulative I / cumulative U), Pr@t.

    .. math::
        \\mathrm{mIoU} = \\frac{1}{B}\\sum_b \\frac{I_b}{U_b},\\quad
        \\mathrm{cIoU} = \\frac{\\sum_b I_b}{\\sum_b U_b},\\quad
        \\mathrm{Pr@}t = \\frac{1}{B}\\sum_b [\\mathrm{IoU}_b \\ge t]

    Args:
        pred_masks: ``(B, H, W)`` bool/uint8 (nonzero = foreground), or a list of ``(H_b, W_b)`` masks.
        gt_masks: same shapes as ``pred_masks``.
        empty: IoU of a sample whose prediction and ground truth are both empty (``U = 0``): ``"zero"`` (LAVT,
            CRIS, ReLA-style ``I/U`` guarded to 0) or ``"one"`` (LISA / GRES no-target samples count as perfect).
            Also the cIoU when every sample is empty.
        thresholds: precision thresholds (hit when ``IoU >= t``).

    Returns:
        ``{"mIoU", "cIoU", "Pr@0.5", ..., "Pr@0.9"}`` as fractions in [0, 1].

    Raises:
        ValueError: mismatched shapes or counts, empty batch, unknown ``empty`` policy; mask errors as ``mask_iou``.

    Note:
        Exact integer I and U from the bit-packed kernel; LISA adds 1e-10 to U, which changes values only below
        1e-10 relative. Deterministic.

    Example:
        >>> p = torch.tensor([[[1, 1], [0, 0]]], dtype=torch.bool)
        >>> g = torch.tensor([[[1, 0], [0, 0]]], dtype=torch.bool)
        >>> ris_metrics(p, g, thresholds=(0.5,))
        {'mIoU': 0.5, 'cIoU': 0.5, 'Pr@0.5': 1.0}
    """
    if empty not in ("zero", "one"):
        raise ValueError(f"empty must be 'zero' or 'one', got {empty!r}")
    if isinstance(pred_masks, torch.Tensor) and isinstance(gt_masks, torch.Tensor):
        check_tensor(pred_masks, "pred_masks", ndim=3)
        check_tensor(gt_masks, "gt_masks", ndim=3)
        if pred_masks.shape != gt_masks.shape:
            raise ValueError(f"pred_masks {tuple(pred_masks.shape)} and gt_masks {tuple(gt_masks.shape)} differ")
        inter, union = mask_inter_union(pred_masks[None], gt_masks[None])
        inter, union = inter[0].cpu(), union[0].cpu()
    else:
        if len(pred_masks) != len(gt_masks):
            raise ValueError(f"got {len(pred_masks)} predicted and {len(gt_masks)} ground-truth masks")
        pairs = []
        for i, (p, g) in enumerate(zip(pred_masks, gt_masks)):
            check_tensor(p, f"pred_masks[{i}]", ndim=2)
            check_tensor(g, f"gt_masks[{i}]", ndim=2)
            if p.shape != g.shape:
                raise ValueError(f"pred_masks[{i}] {tuple(p.shape)} and gt_masks[{i}] {tuple(g.shape)} differ")
            pairs.append(mask_inter_union(p[None, None], g[None, None]))
        inter = torch.tensor([int(x[0]) for x, _ in pairs], dtype=torch.int64)
        union = torch.tensor([int(u[0]) for _, u in pairs], dtype=torch.int64)
    if inter.numel() == 0:
        raise ValueError("ris_metrics needs at least one sample")
    fill = 0.0 if empty == "zero" else 1.0
    iou = torch.where(
        union > 0, inter.double() / union.clamp_min(1).double(), torch.full_like(inter, fill, dtype=torch.float64)
    )
    total_u = int(union.sum())
    out = {"mIoU": float(iou.mean()), "cIoU": int(inter.sum()) / total_u if total_u > 0 else fill}
    for t in thresholds:
        out[f"Pr@{float(t):g}"] = float((iou >= float(t)).double().mean())
    return out


def _as_f64(x, name: str, last: int | None) -> torch.Tensor:
    t = torch.as_tensor(
        x.detach() if isinstance(x, torch.Tensor) else np.array(x, dtype=np.float64), dtype=torch.float64
    ).cpu()
    if last is not None and (t.dim() != 2 or t.shape[1] != last):
        raise ValueError(f"{name} must have shape (n, {last}), got {tuple(t.shape)}")
    if last is None and t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


def _interpolated_ap(precision: np.ndarray, recall: np.ndarray) -> float:
    # VOC 2011 interpolation: precision made monotone from the right, summed over recall steps.
    mp = np.concatenate([[0.0], precision, [0.0]])
    mr = np.concatenate([[0.0], recall, [1.0]])
    mp = np.maximum.accumulate(mp[::-1])[::-1]
    idx = np.where(mr[1:] != mr[:-1])[0] + 1
    return float(np.sum((mr[idx] - mr[idx - 1]) * mp[idx]))


def _query_ap(ious: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """ious (P, G): predictions already in score order. Greedy matching per threshold -> AP per threshold."""
    n_pred, n_gt = ious.shape
    # Candidates of each prediction in descending IoU; ties: higher gt index first (numpy's reversed argsort).
    ranked = np.argsort(ious, axis=1, kind="stable")[:, ::-1]
    aps = np.zeros(len(thresholds))
    for t, thr in enumerate(thresholds):
        taken = np.zeros(n_gt, dtype=bool)
        tp = np.zeros(n_pred)
        for p in range(n_pred):
            for j in ranked[p]:
                if ious[p, j] < thr:
                    break
                if not taken[j]:
                    taken[j] = True
                    tp[p] = 1
                    break
        tpc = np.cumsum(tp)
        fpc = np.cumsum(1 - tp)
        aps[t] = _interpolated_ap(tpc / (tpc + fpc), tpc / float(n_gt))
    return aps


def moment_retrieval_metrics(
    pred_windows: Sequence,
    pred_scores: Sequence,
    gt_windows: Sequence,
    thresholds: Sequence[float] = MR_THRESHOLDS,
    max_pred_windows: int = 10,
    sort_by_score: bool = True,
    round_digits: int | None = 2,
) -> dict[str, float]:
    """Moment-retrieval R1@t and mAP as Moment-DETR's ``standalone_eval`` (``compute_mr_r1``, ``compute_mr_ap``).

    Per query: predictions ranked by score, the top ``max_pred_windows`` kept. **R1@t**: the top-1 window against
    the ground-truth window of highest IoU (first on ties), hit when the hull IoU (``segment_iou(union="hull")``)
    is ``>= t``. **AP@t**: greedy matching of predictions (descending score) to unmatched ground truths in
    descending IoU (``union="sum"``), VOC-interpolated precision/recall; mAP@t averages queries, ``mAP`` averages
    the thresholds.

    Args:
        pred_windows: per query a ``(P_q, 2)`` array/tensor/list of ``(start, end)``.
        pred_scores: per query ``(P_q,)`` scores.
        gt_windows: per query ``(G_q, 2)`` ground-truth windows.
        thresholds: IoU thresholds, each rounded to 2 decimals first as Moment-DETR does (so ``np.linspace(0.5,
            0.95, 10)``'s ``0.6499999`` is ``0.65``); default ``0.5, 0.55, ..., 0.95``.
        max_pred_windows: windows kept per query (Moment-DETR: 10).
        sort_by_score: rank by descending score (stable) before truncating. ``False`` keeps the list order for the
            truncation and the top-1, exactly as Moment-DETR reads ``pred_relevant_windows`` (it then sorts the kept
            windows by score for AP); both agree when the lists are already sorted by score, as Moment-DETR writes them.
        round_digits: results are percentages rounded like ``float(f"{100 * v:.2f}")``; ``None`` keeps full precision.

    Returns:
        ``{"R1@{t}": ..., "mAP@{t}": ..., "mAP": ...}`` in percent, ``t`` as ``str(float)`` (``"R1@0.5"``,
        ``"R1@0.7"``, ``"mAP@0.75"``; Moment-DETR's brief keys are ``R1@0.5``, ``R1@0.7``, ``mAP``, ``mAP@0.5``,
        ``mAP@0.75``).

    Raises:
        ValueError: different numbers of queries, a query with no prediction or no ground truth (Moment-DETR
            crashes or returns NaN there), wrong shapes, non-finite values, no threshold or a non-finite one,
            ``max_pred_windows`` not an integer >= 1.

    Note:
        IoUs come from ``segment_iou`` in float64, bit-identical to Moment-DETR's numpy formulas. Ties in score keep
        input order; ties in IoU try the higher ground-truth index first (Moment-DETR's ``argsort()[::-1]``).
        A NaN IoU (zero-length identical spans) sorts first and matches, as in numpy. Deterministic.

    Example:
        >>> moment_retrieval_metrics([[[0.0, 10.0]]], [[0.9]], [[[0.0, 10.0]]], thresholds=(0.5,))
        {'R1@0.5': 100.0, 'mAP@0.5': 100.0, 'mAP': 100.0}
    """
    if not (len(pred_windows) == len(pred_scores) == len(gt_windows)):
        raise ValueError(
            f"pred_windows, pred_scores and gt_windows must list the same queries, got {len(pred_windows)}, "
            f"{len(pred_scores)} and {len(gt_windows)}"
        )
    if len(pred_windows) == 0:
        raise ValueError("moment_retrieval_metrics needs at least one query")
    keep = as_integer(max_pred_windows)
    if keep is None or keep < 1:
        raise ValueError(f"max_pred_windows must be an integer >= 1, got {max_pred_windows!r}")
    thds = [float(f"{float(t):.2f}") for t in thresholds]
    if not thds or not all(math.isfinite(t) for t in thds):
        raise ValueError(f"thresholds must be one or more finite IoU thresholds, got {list(thresholds)}")
    r1_iou = np.zeros(len(pred_windows))
    aps = np.zeros((len(pred_windows), len(thds)))
    for q, (pw, ps, gw) in enumerate(zip(pred_windows, pred_scores, gt_windows)):
        pw = _as_f64(pw, f"pred_windows[{q}]", 2)
        ps = _as_f64(ps, f"pred_scores[{q}]", None)
        gw = _as_f64(gw, f"gt_windows[{q}]", 2)
        if ps.shape[0] != pw.shape[0]:
            raise ValueError(f"query {q}: {pw.shape[0]} windows but {ps.shape[0]} scores")
        if pw.shape[0] == 0 or gw.shape[0] == 0:
            raise ValueError(f"query {q} has {pw.shape[0]} predicted and {gw.shape[0]} ground-truth windows; need >= 1")
        if not bool(torch.isfinite(ps).all()):
            raise ValueError(f"pred_scores[{q}] contains NaN/Inf")
        if sort_by_score:
            order = torch.sort(ps, descending=True, stable=True).indices
            pw, ps = pw[order], ps[order]
        pw, ps = pw[:keep], ps[:keep]
        # R1 uses the first window of the (ranked) list, before any re-sorting for AP.
        top1 = pw[:1]
        best_gt = int(np.argmax(segment_iou(top1, gw, union="sum").numpy()[0]))
        r1_iou[q] = float(segment_iou(top1, gw[best_gt : best_gt + 1], aligned=True, union="hull")[0])
        ap_order = torch.sort(ps, descending=True, stable=True).indices
        aps[q] = _query_ap(segment_iou(pw[ap_order], gw, union="sum").numpy(), thds)

    def fmt(v: float) -> float:
        return float(f"{100 * v:.{round_digits}f}") if round_digits is not None else 100 * float(v)

    out = {f"R1@{t}": fmt(np.mean(r1_iou >= t)) for t in thds}
    ap_thds = aps.mean(0)
    out.update({f"mAP@{t}": fmt(v) for t, v in zip(thds, ap_thds)})
    out["mAP"] = fmt(np.mean(ap_thds))
    return out
