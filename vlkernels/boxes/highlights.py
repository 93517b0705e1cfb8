"""QVHighlights evaluation as Moment-DETR's ``standalone_eval/eval.py``: highlight detection (HIT@1, mAP at the
Fair / Good / VeryGood saliency thresholds), temporal NMS, and the whole submission report (moment retrieval by
window-length range plus highlights). Conventions and the quirks kept on purpose are in README.md of this folder."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from vlkernels._validate import as_integer
from vlkernels.boxes.grounding import moment_retrieval_metrics

# Moment-DETR's saliency thresholds (annotator scores are 0..4) and their names.
HL_MIN_SCORES = (2, 3, 4)
HL_NAMES = ("Fair", "Good", "VeryGood")
# Window-length ranges (seconds) of the moment-retrieval report: (min, max], "full" = every query.
MR_LENGTH_RANGES = {"short": (0, 10), "middle": (10, 30), "long": (30, 150), "full": (0, 150)}


def _pct(v: float) -> float:
    return float(f"{100 * v:.2f}")


def highlight_gt_matrix(
    duration: float, relevant_clip_ids: Sequence[int], saliency_scores: Sequence[Sequence[float]], clip_length=2.0
) -> np.ndarray:
    """The ``(num_clips, annotators)`` saliency matrix of one video: ``int(duration / clip_length)`` clips, zero
    except the relevant clips, which take their annotators' scores (QVHighlights: 3 annotators, scores 0..4)."""
    num_clips = int(duration / clip_length)
    scores = np.asarray(saliency_scores, dtype=np.float64)
    ids = np.asarray(relevant_clip_ids, dtype=np.int64)
    if scores.ndim != 2 or scores.shape[0] != ids.shape[0]:
        raise ValueError(
            f"saliency_scores must be one row of annotator scores per relevant clip ({ids.shape[0]} clips), "
            f"got shape {scores.shape}"
        )
    if ids.size and (ids.min() < 0 or ids.max() >= num_clips):
        raise ValueError(f"relevant_clip_ids must lie in [0, {num_clips}) for duration {duration}, got {ids.tolist()}")
    out = np.zeros((num_clips, scores.shape[1]))
    out[ids] = scores
    return out


def _clip_ap(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Moment-DETR's ``get_ap``: the precision-recall curve over distinct score thresholds (scikit-learn's
    ``precision_recall_curve``), precision made monotone from the high-recall end, and the plain mean of the
    precision at each distinct recall level (recall compared in float32). All-negative -> 0, all-positive -> 1."""
    if np.all(y_true == y_true[0]):
        return 0.0 if y_true[0] == 0 else 1.0
    # Descending score; ties grouped into one threshold, so their order inside the group does not matter.
    order = np.argsort(y_score, kind="mergesort")[::-1]
    s, t = y_score[order], y_true[order]
    last_of_group = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tps = np.cumsum(t)[last_of_group]
    precision = tps / (1.0 + last_of_group)
    recall = tps / tps[-1]
    # From the lowest threshold (recall 1) up, with the curve's closing point (recall 0) after it.
    precision, recall = precision[::-1], np.r_[recall[::-1], 0.0].astype(np.float32)
    precision = np.maximum.accumulate(precision)
    return float(np.mean(precision[np.nonzero(np.diff(recall))[0]]))


def highlight_metrics(
    pred_saliency: Sequence[Sequence[float]],
    gt_saliency: Sequence[np.ndarray],
    min_scores: Sequence[float] = HL_MIN_SCORES,
    names: Sequence[str] = HL_NAMES,
) -> dict[str, dict[str, float]]:
    """Highlight detection as Moment-DETR's ``eval_highlight``: for each saliency threshold, HIT@1 and mAP in percent.

    A clip is positive for an annotator when its score is ``>= min_score``. **HIT@1**: the clip of highest
    predicted saliency (first on ties) is a hit when any annotator marks it positive (a clip past the video's end is
    a miss); averaged over queries. **mAP**: per query and annotator, the AP of the clip ranking (Moment-DETR's
    ``get_ap``: predictions truncated or zero-padded to the video's clip count), averaged over all of them.

    Args:
        pred_saliency: per query, one predicted saliency score per clip.
        gt_saliency: per query, a ``(num_clips, annotators)`` score matrix (see :func:`highlight_gt_matrix`).
        min_scores, names: thresholds and their report names (default ``2, 3, 4`` = Fair, Good, VeryGood).

    Returns:
        ``{"HL-min-Fair": {"HL-mAP": ..., "HL-Hit1": ...}, ...}`` rounded as Moment-DETR (``f"{100 * v:.2f}"``).

    Raises:
        ValueError: different query counts, an empty query, non-finite scores, a matrix that is not 2-D, thresholds
            and names that do not pair up.
    """
    if len(pred_saliency) != len(gt_saliency):
        raise ValueError(f"pred_saliency has {len(pred_saliency)} queries but gt_saliency has {len(gt_saliency)}")
    if len(pred_saliency) == 0:
        raise ValueError("highlight_metrics needs at least one query")
    min_scores, names = list(min_scores), list(names)
    if not min_scores or len(min_scores) != len(names):
        raise ValueError(f"min_scores and names must pair one name with each threshold, got {min_scores} and {names}")
    preds, gts = [], []
    for q, (p, g) in enumerate(zip(pred_saliency, gt_saliency)):
        p, g = np.asarray(p, dtype=np.float64), np.asarray(g, dtype=np.float64)
        if p.ndim != 1 or p.size == 0 or not np.isfinite(p).all():
            raise ValueError(f"pred_saliency[{q}] must be a non-empty 1-D list of finite scores, got shape {p.shape}")
        if g.ndim != 2 or g.shape[0] == 0 or not np.isfinite(g).all():
            raise ValueError(f"gt_saliency[{q}] must be a finite (num_clips, annotators) matrix, got shape {g.shape}")
        preds.append(p)
        gts.append(g)
    out = {}
    for min_score, name in zip(min_scores, names):
        binary = [(g >= min_score).astype(np.float64) for g in gts]
        hits = np.zeros((len(preds), max(b.shape[1] for b in binary)))
        aps = np.zeros_like(hits)
        for q, (p, b) in enumerate(zip(preds, binary)):
            top = int(np.argmax(p))
            if top < b.shape[0]:
                hits[q, : b.shape[1]] = b[top]
            n = b.shape[0]
            score = p[:n] if p.size >= n else np.r_[p, np.zeros(n - p.size)]
            for w in range(b.shape[1]):
                aps[q, w] = _clip_ap(b[:, w], score)
        out[f"HL-min-{name}"] = {"HL-mAP": _pct(np.mean(aps)), "HL-Hit1": _pct(np.mean(np.max(hits, 1)))}
    return out


def temporal_nms(
    windows: Sequence[Sequence[float]], iou_threshold: float, max_after_nms: int = 100
) -> list[list[float]]:
    """Moment-DETR's ``temporal_nms``: ``[start, end, score]`` windows by descending score (stable), each kept
    window removing the later ones whose hull IoU with it is ``> iou_threshold``; at most ``max_after_nms`` kept.

    Hull IoU = intersection / (max end - min start), 0 when that is 0. A single window is returned as is.

    Raises:
        ValueError: a window that is not three finite numbers, a NaN ``iou_threshold``, ``max_after_nms`` not an
            integer >= 0.
    """
    rows = [list(map(float, w)) for w in windows]
    if any(len(w) != 3 or not all(math.isfinite(v) for v in w) for w in rows):
        raise ValueError("temporal_nms takes [start, end, score] windows of finite numbers")
    if math.isnan(float(iou_threshold)):
        raise ValueError("iou_threshold must be a number, got NaN")
    limit = as_integer(max_after_nms)
    if limit is None or limit < 0:
        raise ValueError(f"max_after_nms must be an integer >= 0, got {max_after_nms!r}")
    max_after_nms = limit
    if len(rows) <= 1:
        return rows
    pending = sorted(rows, key=lambda w: w[2], reverse=True)
    kept: list[list[float]] = []
    while len(pending) > 1 and len(kept) < max_after_nms:
        head = pending[0]
        pending = [head] + [w for w in pending[1:] if _hull_iou(head, w) <= iou_threshold]
        kept.append(pending.pop(0))
    if len(kept) < max_after_nms and pending:
        kept.append(pending.pop(0))
    return kept


def _hull_iou(a: Sequence[float], b: Sequence[float]) -> float:
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    hull = max(a[1], b[1]) - min(a[0], b[0])
    return 0.0 if hull == 0 else inter / hull


def _field(record: Mapping, key: str, where: str, i: int):
    """record[key], or a ValueError naming the record."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}[{i}] must be a dict (a JSON object), got {type(record).__name__}")
    if key not in record:
        raise ValueError(f"{where}[{i}] (qid {record.get('qid', '?')!r}) has no {key!r} field")
    return record[key]


def _pred_windows(d: Mapping, i: int) -> np.ndarray:
    w = np.asarray(_field(d, "pred_relevant_windows", "submission", i), dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != 3 or w.shape[0] == 0:
        raise ValueError(
            f"submission[{i}] (qid {d['qid']!r}): pred_relevant_windows must be one or more [start, end, score] "
            f"rows, got shape {w.shape}"
        )
    return w


def _mr_report(submission: list[Mapping], ground_truth: list[Mapping]) -> dict[str, dict[str, float]]:
    by_qid = {d["qid"]: d for d in ground_truth}
    qids = [d["qid"] for d in submission]
    pred = [_pred_windows(d, i) for i, d in enumerate(submission)]
    gts = [by_qid[q]["relevant_windows"] for q in qids]
    m = moment_retrieval_metrics(
        [p[:, :2] for p in pred], [p[:, 2] for p in pred], gts, sort_by_score=False, round_digits=2
    )
    thds = [k.split("@")[1] for k in m if k.startswith("mAP@")]
    return {
        "MR-mAP": {**{t: m[f"mAP@{t}"] for t in thds}, "average": m["mAP"]},
        "MR-R1": {t: m[f"R1@{t}"] for t in thds},
    }


def qvhighlights_eval(
    submission: Sequence[Mapping], ground_truth: Sequence[Mapping], match_number: bool = True
) -> dict[str, dict]:
    """Moment-DETR's ``eval_submission`` on QVHighlights-format records (JSON lines loaded as dicts).

    Submission records: ``qid``, ``pred_relevant_windows`` (``[start, end, score]``, ranked) and/or
    ``pred_saliency_scores`` (one per 2-second clip). Ground truth: ``qid``, ``duration``, ``relevant_windows``,
    ``relevant_clip_ids``, ``saliency_scores``. Returns ``{"brief": {...}, "full"/"short"/"middle"/"long": {"MR-mAP",
    "MR-R1"}, "HL-min-Fair"/"Good"/"VeryGood": {"HL-mAP", "HL-Hit1"}}`` with Moment-DETR's keys and rounding.

    Raises:
        ValueError: query ids that differ between the files (``match_number=False`` keeps the shared ones), a
            duplicated qid, or a record missing a field.
    """
    submission, ground_truth = list(submission), list(ground_truth)
    pred_qids = [_field(d, "qid", "submission", i) for i, d in enumerate(submission)]
    gt_qids = [_field(d, "qid", "ground_truth", i) for i, d in enumerate(ground_truth)]
    for name, qids in (("submission", pred_qids), ("ground_truth", gt_qids)):
        if len(set(qids)) != len(qids):
            raise ValueError(f"{name} lists a qid more than once")
    if set(pred_qids) != set(gt_qids):
        if match_number:
            raise ValueError(
                f"qids in ground_truth and submission must match ({len(set(pred_qids) - set(gt_qids))} only in the "
                f"submission, {len(set(gt_qids) - set(pred_qids))} only in the ground truth); match_number=False "
                "evaluates the shared ones"
            )
        shared = set(pred_qids) & set(gt_qids)
        submission = [d for d in submission if d["qid"] in shared]
        ground_truth = [d for d in ground_truth if d["qid"] in shared]
    if not submission:
        raise ValueError("no query to evaluate")
    metrics: dict[str, dict] = {}
    brief: dict[str, float] = {}
    if "pred_relevant_windows" in submission[0]:
        for i, d in enumerate(ground_truth):
            _field(d, "relevant_windows", "ground_truth", i)
        for name, (lo, hi) in MR_LENGTH_RANGES.items():
            sub, gt = submission, ground_truth
            if (lo, hi) != (0, 150):
                # Keep the GT windows whose length lies in (lo, hi], and the queries that still have one.
                gt = [
                    {**d, "relevant_windows": [w for w in d["relevant_windows"] if lo < w[1] - w[0] <= hi]}
                    for d in ground_truth
                ]
                gt = [d for d in gt if d["relevant_windows"]]
                keep = {d["qid"] for d in gt}
                sub = [d for d in submission if d["qid"] in keep]
            if sub:
                metrics[name] = _mr_report(sub, gt)
        full = metrics["full"]
        brief.update(
            {
                "MR-full-mAP": full["MR-mAP"]["average"],
                "MR-full-mAP@0.5": full["MR-mAP"]["0.5"],
                "MR-full-mAP@0.75": full["MR-mAP"]["0.75"],
                **{f"MR-{n}-mAP": metrics[n]["MR-mAP"]["average"] for n in ("short", "middle", "long") if n in metrics},
                "MR-full-R1@0.5": full["MR-R1"]["0.5"],
                "MR-full-R1@0.7": full["MR-R1"]["0.7"],
            }
        )
        brief = dict(sorted(brief.items()))
    if "pred_saliency_scores" in submission[0]:
        at = {d["qid"]: i for i, d in enumerate(ground_truth)}
        gt_mats = [
            highlight_gt_matrix(
                *(
                    _field(ground_truth[at[d["qid"]]], key, "ground_truth", at[d["qid"]])
                    for key in ("duration", "relevant_clip_ids", "saliency_scores")
                )
            )
            for d in submission
        ]
        hl = highlight_metrics(
            [_field(d, "pred_saliency_scores", "submission", i) for i, d in enumerate(submission)], gt_mats
        )
        metrics.update(hl)
        brief.update({f"{k}-{sub.split('-')[1]}": v for k, m in hl.items() for sub, v in m.items()})
    return {"brief": brief, **dict(sorted(metrics.items()))}
