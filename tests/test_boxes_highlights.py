"""QVHighlights highlight detection and temporal NMS against independent references: Moment-DETR's ``get_ap``
semantics through scikit-learn's own ``precision_recall_curve`` (the function Moment-DETR calls), a plain loop
reference written from the definitions, and hand-computed cases."""

import numpy as np
import pytest

from vlkernels.boxes.highlights import (
    _clip_ap,
    highlight_gt_matrix,
    highlight_metrics,
    qvhighlights_eval,
    temporal_nms,
)


def _get_ap_sklearn(y_true, y_predict):
    """Moment-DETR's get_ap, written from its description on top of scikit-learn."""
    from sklearn.metrics import precision_recall_curve

    if len(set(y_true.tolist())) == 1:
        return 0 if y_true[0] == 0 else 1
    precision, recall, _ = precision_recall_curve(y_true, y_predict)
    recall = recall.astype(np.float32)
    for i in range(1, len(precision)):
        precision[i] = max(precision[i - 1], precision[i])
    return np.mean(precision[np.where(np.diff(recall))])


def _ap_loops(y_true, y_score):
    """The same quantity from the definitions, with plain loops: one point per distinct score threshold."""
    if len(set(y_true.tolist())) == 1:
        return 0.0 if y_true[0] == 0 else 1.0
    pos = y_true.sum()
    points = []
    for thr in sorted(set(y_score.tolist()), reverse=True):
        sel = y_score >= thr
        points.append((y_true[sel].sum() / pos, y_true[sel].sum() / sel.sum()))
    levels = {}
    for r, _ in points:
        # interpolated precision at recall level r: best precision at any recall >= r
        levels[np.float32(r)] = max(p for rr, p in points if rr >= r)
    return float(np.mean([levels[r] for r in sorted(levels, reverse=True) if r > 0]))


@pytest.mark.parametrize("seed", range(40))
def test_clip_ap_matches_sklearn_get_ap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    y = (rng.random(n) < rng.random()).astype(np.float64)
    # Coarse scores make many ties (grouped into one threshold).
    s = np.round(rng.random(n) * rng.choice([3, 10, 1000]), 0) if seed % 2 else rng.random(n)
    got = _clip_ap(y, s)
    assert got == pytest.approx(_ap_loops(y, s), abs=1e-12)
    pytest.importorskip("sklearn")
    assert got == _get_ap_sklearn(y, s)


def test_highlight_metrics_hand_computed():
    # One video, 4 clips, 3 annotators.
    gt = highlight_gt_matrix(8.0, [1, 2], [[4, 2, 1], [3, 3, 4]])
    assert gt.shape == (4, 3) and gt[0].tolist() == [0, 0, 0] and gt[2].tolist() == [3, 3, 4]
    pred = [0.1, 0.5, 0.9, 0.2]  # top clip 2
    out = highlight_metrics([pred], [gt])
    # Fair (>=2): clip 2 positive for all annotators -> hit. Good (>=3): positive for all -> hit. VeryGood (>=4):
    # annotator 3 marks clip 2 -> hit (max over annotators).
    assert [out[k]["HL-Hit1"] for k in ("HL-min-Fair", "HL-min-Good", "HL-min-VeryGood")] == [100.0, 100.0, 100.0]
    # VeryGood, annotator 1: only clip 1 positive, ranked 2nd -> AP 1/2; annotator 2: no positive -> 0;
    # annotator 3: clip 2 ranked 1st -> 1. mAP = (0.5 + 0 + 1) / 3.
    assert out["HL-min-VeryGood"]["HL-mAP"] == float(f"{100 * 1.5 / 3:.2f}")


def test_highlight_metrics_pads_and_truncates_predictions():
    gt = highlight_gt_matrix(8.0, [3], [[4, 4, 4]])
    # Shorter prediction: missing clips score 0; the top clip index 0 is a miss.
    short = highlight_metrics([[0.3, 0.2]], [gt])["HL-min-VeryGood"]
    assert short["HL-Hit1"] == 0.0
    # Longer prediction: the argmax past the video's end is a miss; AP uses the first 4 scores only.
    long = highlight_metrics([[0.1, 0.2, 0.3, 0.8, 5.0]], [gt])["HL-min-VeryGood"]
    assert long["HL-Hit1"] == 0.0 and long["HL-mAP"] == 100.0


def test_highlight_errors():
    with pytest.raises(ValueError, match="relevant_clip_ids"):
        highlight_gt_matrix(4.0, [2], [[1, 1, 1]])
    with pytest.raises(ValueError, match="saliency_scores"):
        highlight_gt_matrix(8.0, [1, 2], [[1, 1, 1]])
    with pytest.raises(ValueError, match="queries"):
        highlight_metrics([[1.0]], [])
    with pytest.raises(ValueError, match="finite"):
        highlight_metrics([[float("nan")]], [np.zeros((1, 3))])
    # Thresholds and names are paired: a fourth threshold was dropped by zip.
    with pytest.raises(ValueError, match="pair one name with each threshold"):
        highlight_metrics([[1.0]], [np.zeros((1, 3))], min_scores=(2, 3, 4, 1))


def test_temporal_nms_refuses_non_finite_input():
    """Moment-DETR suppresses nothing where an IoU or the threshold is NaN (its test is IoU > threshold), and a
    NaN-valued comparison dropped every window here: both are refused by name, as the other functions refuse NaN."""
    with pytest.raises(ValueError, match="iou_threshold must be a number"):
        temporal_nms([[0, 1, 0.5], [0, 1, 0.4], [5, 6, 0.3]], float("nan"))
    for bad in ([[0, float("inf"), 0.9], [0, 1, 0.8]], [[float("nan"), 2, 0.9], [0, 2, 0.8]], [[0, 1, float("nan")]]):
        with pytest.raises(ValueError, match="finite numbers"):
            temporal_nms(bad, 0.5)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="max_after_nms must be an integer"):
            temporal_nms([[0, 1, 0.5]], 0.5, max_after_nms=bad)


def _nms_ref(preds, thd, max_after=100):
    """Greedy temporal NMS from its definition (BSN / Moment-DETR): repeatedly keep the best remaining window and
    drop every other window whose hull IoU with it exceeds thd."""
    rest = sorted(preds, key=lambda w: -w[2])
    kept = []
    while rest and len(kept) < max_after:
        best = rest.pop(0)
        kept.append(best)
        out = []
        for w in rest:
            inter = max(0.0, min(best[1], w[1]) - max(best[0], w[0]))
            hull = max(best[1], w[1]) - min(best[0], w[0])
            if (inter / hull if hull else 0.0) <= thd:
                out.append(w)
        rest = out
    return kept


@pytest.mark.parametrize("seed", range(30))
def test_temporal_nms_matches_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    st = rng.integers(0, 50, n).astype(float)
    preds = [[s, s + float(rng.integers(0, 20)), float(np.round(rng.random(), 1))] for s in st]
    thd = float(rng.choice([0.3, 0.5, 0.7]))
    assert temporal_nms(preds, thd) == _nms_ref(preds, thd)
    assert temporal_nms(preds, thd, max_after_nms=3) == _nms_ref(preds, thd, 3)


def test_qvhighlights_eval_report_layout_and_ranges():
    gt = [
        {
            "qid": 1,
            "duration": 20,
            "relevant_windows": [[0, 6], [10, 30]],
            "relevant_clip_ids": [0, 1],
            "saliency_scores": [[4, 4, 4], [2, 2, 2]],
        },
        {
            "qid": 2,
            "duration": 20,
            "relevant_windows": [[2, 40]],
            "relevant_clip_ids": [5],
            "saliency_scores": [[3, 1, 0]],
        },
    ]
    sub = [
        {"qid": 1, "pred_relevant_windows": [[0, 6, 0.9], [10, 30, 0.5]], "pred_saliency_scores": [0.9] + [0.1] * 9},
        {"qid": 2, "pred_relevant_windows": [[2, 40, 0.8]], "pred_saliency_scores": [0.0] * 5 + [1.0] + [0.0] * 4},
    ]
    out = qvhighlights_eval(sub, gt)
    # short (0, 10]: only qid 1's [0, 6] window; its two predictions: the first matches -> AP 1 at every threshold.
    assert out["short"]["MR-mAP"]["average"] == 100.0 and out["short"]["MR-R1"]["0.7"] == 100.0
    # middle (10, 30]: qid 1's [10, 30]; the top-1 [0, 6] misses it, AP: 2nd prediction hits -> precision 1/2.
    assert out["middle"]["MR-R1"]["0.5"] == 0.0 and out["middle"]["MR-mAP"]["average"] == 50.0
    assert out["long"]["MR-mAP"]["average"] == 100.0 and out["full"]["MR-mAP"]["average"] == 100.0
    assert set(out["brief"]) >= {
        "MR-full-mAP",
        "MR-full-R1@0.7",
        "MR-short-mAP",
        "HL-min-VeryGood-mAP",
        "HL-min-Fair-Hit1",
    }
    assert out["HL-min-Fair"]["HL-Hit1"] == 100.0  # qid 1 clip 0 (scores 4) and qid 2 clip 5 (max 3)
    assert out["HL-min-VeryGood"]["HL-Hit1"] == 50.0
    with pytest.raises(ValueError, match="must match"):
        qvhighlights_eval(sub[:1], gt)
    assert qvhighlights_eval(sub[:1], gt, match_number=False)["full"]["MR-mAP"]["average"] == 100.0


def test_qvhighlights_eval_names_a_missing_or_malformed_field():
    """A record missing a field (or a window without its score) is a ValueError naming the record and the field, as
    documented; it was a KeyError or an IndexError from inside the evaluation."""
    gt = [{"qid": 1, "duration": 20, "relevant_windows": [[0, 6]], "relevant_clip_ids": [0], "saliency_scores": [[4]]}]
    sub = [{"qid": 1, "pred_relevant_windows": [[0, 6, 0.9]], "pred_saliency_scores": [0.9] * 10}]
    assert qvhighlights_eval(sub, gt)["full"]["MR-mAP"]["average"] == 100.0
    cases = [
        ([{k: v for k, v in sub[0].items() if k != "qid"}], gt, r"submission\[0\] \(qid '\?'\) has no 'qid'"),
        (sub, [{k: v for k, v in gt[0].items() if k != "relevant_windows"}], "has no 'relevant_windows'"),
        (sub, [{k: v for k, v in gt[0].items() if k != "duration"}], "has no 'duration'"),
        ([{**sub[0], "pred_relevant_windows": [[0, 6]]}], gt, r"\[start, end, score\] rows, got shape \(1, 2\)"),
        ([{**sub[0], "pred_relevant_windows": []}], gt, r"\[start, end, score\] rows, got shape \(0,\)"),
        ([sub[0], {"qid": 2, "pred_saliency_scores": [0.1] * 10}], [*gt, {**gt[0], "qid": 2}], "no 'pred_relevant"),
        (["qid 1"], gt, "must be a dict"),
    ]
    for s, g, match in cases:
        with pytest.raises(ValueError, match=match):
            qvhighlights_eval(s, g)
