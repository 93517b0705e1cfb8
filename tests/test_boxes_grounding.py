"""Grounding metrics: conventions pinned by hand-computed cases, and Moment-DETR's evaluation re-derived in numpy."""

import numpy as np
import pytest
import torch

from vlkernels.boxes import moment_retrieval_metrics, rec_accuracy, ris_metrics
from vlkernels.boxes.reference import moment_ap_ref, segment_iou_ref


def test_rec_accuracy_iou_vs_giou_protocol():
    # I = 81, U = 119, enclosing C = 121: IoU = 0.6807, GIoU = IoU - 2/121 = 0.6641.
    pred = torch.tensor([[[0.0, 0, 10, 10]]])
    gt = torch.tensor([[1.0, 1, 11, 11]])
    s = torch.ones(1, 1)
    assert rec_accuracy(pred, s, gt, thresholds=(0.67,)) == {"P@1@0.67": 1.0}
    assert rec_accuracy(pred, s, gt, thresholds=(0.67,), criterion="giou") == {"P@1@0.67": 0.0}
    assert rec_accuracy(pred, s, gt, thresholds=(0.66,), criterion="giou") == {"P@1@0.66": 1.0}


def test_rec_accuracy_ranking_ties_and_inclusive_threshold():
    gt = torch.tensor([[0.0, 0, 10, 20], [0.0, 0, 10, 10]])
    pred = torch.tensor(
        [
            [[50.0, 50, 60, 60], [0.0, 0, 10, 10], [0.0, 0, 10, 20]],  # best box ranked second (IoU exactly 0.5)
            [[0.0, 0, 10, 10], [50.0, 50, 60, 60], [0.0, 0, 1, 1]],  # tie in score: index 0 ranks first
        ]
    )
    scores = torch.tensor([[0.9, 0.5, 0.1], [0.7, 0.7, 0.2]])
    out = rec_accuracy(pred, scores, gt, thresholds=(0.5, 0.9), k=(1, 2, 5))
    assert out == {
        "P@1@0.5": 0.5,
        "P@1@0.9": 0.5,
        "P@2@0.5": 1.0,
        "P@2@0.9": 0.5,
        "P@5@0.5": 1.0,
        "P@5@0.9": 1.0,
    }
    # xywh boxes give the same answer; degenerate (NaN IoU) candidates never hit.
    xywh = pred.clone()
    xywh[..., 2:] -= xywh[..., :2]
    gxywh = gt.clone()
    gxywh[:, 2:] -= gxywh[:, :2]
    assert rec_accuracy(xywh, scores, gxywh, thresholds=(0.5, 0.9), k=(1, 2, 5), fmt="xywh") == out
    zero = torch.zeros(1, 1, 4)
    assert rec_accuracy(zero, torch.ones(1, 1), torch.zeros(1, 4)) == {"P@1@0.5": 0.0}


def test_rec_accuracy_errors():
    p, s, g = torch.zeros(2, 3, 4), torch.zeros(2, 3), torch.zeros(2, 4)
    with pytest.raises(ValueError, match="scores must have shape"):
        rec_accuracy(p, s[:, :2], g)
    with pytest.raises(ValueError, match="gt_boxes must have 2 rows"):
        rec_accuracy(p, s, g[:1])
    with pytest.raises(ValueError, match="criterion"):
        rec_accuracy(p, s, g, criterion="diou")
    with pytest.raises(ValueError, match="k values"):
        rec_accuracy(p, s, g, k=(0,))
    with pytest.raises(ValueError, match="at least one"):
        rec_accuracy(p[:0], s[:0], g[:0])
    with pytest.raises(ValueError, match="last dimension 4"):
        rec_accuracy(p[..., :3], s, g)
    with pytest.raises(ValueError, match="integers >= 1"):
        rec_accuracy(p, s, g, k=(1.5,))
    with pytest.raises(ValueError, match="thresholds"):
        rec_accuracy(p, s, g, thresholds=(float("nan"),))
    with pytest.raises(ValueError, match="scores hold NaN"):
        rec_accuracy(p, torch.full((2, 3), float("nan")), g)
    assert rec_accuracy(p, s, g, k=(2.0,)).keys() == {"P@2@0.5"}


def _iou_f64(a, b):
    """IoU of two xyxy boxes in float64 (the plain formula)."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    iw, ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0])), max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.mark.parametrize(
    "pred_dtype, gt_box",
    [
        (torch.int64, [0.0, 0.0, 10.9, 10.9]),
        (torch.int32, [0.0, 0.0, 10.9, 10.9]),
        (torch.float16, [0, 0, 10.003, 10.003]),
    ],
)
def test_rec_accuracy_keeps_the_ground_truth_in_the_promoted_dtype(pred_dtype, gt_box):
    """Integer or half-precision predictions against a float32 ground truth: the IoU is that of the boxes as given
    (torch's type promotion), not of a ground truth truncated or rounded to the predictions' dtype."""
    pred = torch.tensor([[[0, 0, 10, 10]]], dtype=pred_dtype)
    gt = torch.tensor([gt_box], dtype=torch.float32)
    iou = _iou_f64(pred[0, 0].tolist(), gt[0].tolist())
    assert iou < 1.0
    below, above = iou - 1e-4, iou + 1e-4
    got = rec_accuracy(pred, torch.ones(1, 1), gt, thresholds=(below, above))
    assert got == {f"P@1@{below:g}": 1.0, f"P@1@{above:g}": 0.0}


def ris_case():
    pred = torch.zeros(3, 4, 4, dtype=torch.bool)
    gt = torch.zeros(3, 4, 4, dtype=torch.bool)
    pred[0, :2, :2] = gt[0, :2, :2] = True  # IoU 1
    # sample 1: both empty
    pred[2, 0, :2] = True
    gt[2, 0, :4] = True  # I = 2, U = 4
    return pred, gt


@pytest.mark.parametrize(
    "empty, expected",
    [
        ("zero", {"mIoU": 0.5, "cIoU": 0.75, "Pr@0.5": 2 / 3, "Pr@0.9": 1 / 3}),
        ("one", {"mIoU": 2.5 / 3, "cIoU": 0.75, "Pr@0.5": 1.0, "Pr@0.9": 2 / 3}),
    ],
)
def test_ris_metrics_empty_mask_policies(empty, expected):
    pred, gt = ris_case()
    out = ris_metrics(pred, gt, empty=empty, thresholds=(0.5, 0.9))
    assert out.keys() == expected.keys()
    for k, v in expected.items():
        assert out[k] == pytest.approx(v, abs=1e-15), k
    listed = ris_metrics(list(pred.to(torch.uint8)), list(gt), empty=empty, thresholds=(0.5, 0.9))
    assert listed == out


def test_ris_metrics_all_empty_and_ragged_sizes():
    e = torch.zeros(2, 3, 3, dtype=torch.bool)
    assert ris_metrics(e, e)["cIoU"] == 0.0
    assert ris_metrics(e, e, empty="one") == {
        "mIoU": 1.0,
        "cIoU": 1.0,
        **{f"Pr@{t}": 1.0 for t in (0.5, 0.6, 0.7, 0.8, 0.9)},
    }
    a = [torch.ones(2, 3, dtype=torch.bool), torch.ones(5, 1, dtype=torch.bool)]
    b = [torch.ones(2, 3, dtype=torch.bool), torch.zeros(5, 1, dtype=torch.bool)]
    out = ris_metrics(a, b, thresholds=(0.5,))
    assert out == {"mIoU": 0.5, "cIoU": 6 / 11, "Pr@0.5": 0.5}


def test_ris_metrics_errors():
    m = torch.zeros(2, 3, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="differ"):
        ris_metrics(m, m[:, :2])
    with pytest.raises(ValueError, match="empty must be"):
        ris_metrics(m, m, empty="nan")
    with pytest.raises(ValueError, match="predicted and"):
        ris_metrics([m[0]], [m[0], m[1]])
    with pytest.raises(ValueError, match="at least one"):
        ris_metrics(m[:0], m[:0])
    with pytest.raises(ValueError, match="dtype"):
        ris_metrics(m.float(), m.float())


def test_moment_retrieval_greedy_matching_hand_computed():
    # Two GT windows; predictions by score: exact match of g0, a duplicate of g0 (g0 already taken, g1 has IoU 0
    # -> false positive), exact match of g1. AP@0.5 = 0.5 * 1 + 0.5 * 2/3 = 5/6.
    pred = [[[0.0, 10.0], [1.0, 10.0], [20.0, 30.0]]]
    scores = [[0.9, 0.8, 0.7]]
    gt = [[[0.0, 10.0], [20.0, 30.0]]]
    out = moment_retrieval_metrics(pred, scores, gt, thresholds=(0.5,), round_digits=None)
    assert out["R1@0.5"] == 100.0
    assert out["mAP@0.5"] == pytest.approx(100 * 5 / 6, abs=1e-12)
    assert moment_retrieval_metrics(pred, scores, gt, thresholds=(0.5,))["mAP"] == 83.33


def test_moment_retrieval_threshold_rounding():
    # np.linspace(0.5, 0.95, 10) holds values a hair off their 2-decimal labels; Moment-DETR rounds them, so an IoU
    # of exactly 0.7 (7/10) hits at 0.7 even where the raw linspace value exceeds 0.7.
    raw = np.linspace(0.5, 0.95, 10)
    r = float(f"{raw[4]:.2f}")
    assert r == 0.7
    out = moment_retrieval_metrics([[[0.0, 7.0]]], [[1.0]], [[[0.0, 10.0]]])
    assert out["R1@0.7"] == 100.0 and out["mAP@0.7"] == 100.0 and out["R1@0.75"] == 0.0
    assert list(out) == [f"R1@{t}" for t in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)] + [
        f"mAP@{t}" for t in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
    ] + ["mAP"]


def test_moment_retrieval_top10_and_list_order():
    # 11 predictions; the only match has the lowest score and is cut by the top-10 rule.
    pred = [[[50.0 + i, 51.0 + i] for i in range(10)] + [[0.0, 10.0]]]
    scores = [[1.0 - 0.01 * i for i in range(11)]]
    gt = [[[0.0, 10.0]]]
    assert moment_retrieval_metrics(pred, scores, gt)["mAP"] == 0.0
    assert moment_retrieval_metrics(pred, scores, gt, max_pred_windows=11)["mAP@0.5"] == pytest.approx(
        100 / 11, abs=0.01
    )
    # List order vs score order: Moment-DETR's R1 reads the first listed window.
    pred2, scores2 = [[[0.0, 10.0], [40.0, 50.0]]], [[0.1, 0.9]]
    assert moment_retrieval_metrics(pred2, scores2, gt, sort_by_score=False)["R1@0.5"] == 100.0
    assert moment_retrieval_metrics(pred2, scores2, gt)["R1@0.5"] == 0.0


def moment_detr_reference(pred, scores, gt, thds, max_pred=10):
    """compute_mr_r1 / compute_mr_ap re-derived: list order (already sorted by score), numpy IoU."""
    r1, aps = [], []
    for p, s, g in zip(pred, scores, gt):
        p, s, g = np.asarray(p)[:max_pred], np.asarray(s)[:max_pred], np.asarray(g)
        best = int(np.argmax(segment_iou_ref(p[:1], g)[0]))
        r1.append(segment_iou_ref(p[:1], g[best : best + 1], aligned=True, union="hull")[0])
        aps.append(moment_ap_ref(p, s, g, thds))
    r1 = np.asarray(r1)
    ap_thds = np.asarray(aps).mean(0)
    out = {f"R1@{t}": float(f"{np.mean(r1 >= t) * 100:.2f}") for t in thds}
    out.update({f"mAP@{t}": float(f"{100 * v:.2f}") for t, v in zip(thds, ap_thds)})
    out["mAP"] = float(f"{100 * np.mean(ap_thds):.2f}")
    return out


def test_moment_retrieval_matches_moment_detr_on_random_queries():
    g = np.random.default_rng(0)
    pred, scores, gt = [], [], []
    for _ in range(60):
        n_p, n_g = g.integers(1, 14), g.integers(1, 4)
        starts = g.integers(0, 70, n_p) * 2.0
        pw = np.stack([starts, starts + g.integers(1, 20, n_p) * 2.0], 1)
        s = np.sort(g.random(n_p))[::-1]
        gs = g.integers(0, 70, n_g) * 2.0
        gw = np.stack([gs, gs + g.integers(1, 20, n_g) * 2.0], 1)
        # Copy a few GT windows into predictions so high-IoU matches exist.
        pw[: min(n_g, n_p)] = gw[: min(n_g, n_p)] + g.integers(-2, 3, (min(n_g, n_p), 2))
        pw[:, 1] = np.maximum(pw[:, 1], pw[:, 0] + 1)
        pred.append(pw)
        scores.append(s)
        gt.append(gw)
    thds = [float(f"{t:.2f}") for t in np.linspace(0.5, 0.95, 10)]
    assert moment_retrieval_metrics(pred, scores, gt) == moment_detr_reference(pred, scores, gt, thds)
    as_tensors = [torch.from_numpy(p) for p in pred], [torch.from_numpy(s.copy()) for s in scores], gt
    assert moment_retrieval_metrics(*as_tensors) == moment_detr_reference(pred, scores, gt, thds)


def test_moment_retrieval_errors():
    with pytest.raises(ValueError, match="same queries"):
        moment_retrieval_metrics([[[0.0, 1.0]]], [], [[[0.0, 1.0]]])
    with pytest.raises(ValueError, match="need >= 1"):
        moment_retrieval_metrics([[[0.0, 1.0]]], [[1.0]], [np.zeros((0, 2))])
    with pytest.raises(ValueError, match="scores"):
        moment_retrieval_metrics([[[0.0, 1.0]]], [[1.0, 2.0]], [[[0.0, 1.0]]])
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        moment_retrieval_metrics([[0.0, 1.0]], [[1.0]], [[[0.0, 1.0]]])
    with pytest.raises(ValueError, match="NaN"):
        moment_retrieval_metrics([[[0.0, np.nan]]], [[1.0]], [[[0.0, 1.0]]])
    with pytest.raises(ValueError, match="max_pred_windows"):
        moment_retrieval_metrics([[[0.0, 1.0]]], [[1.0]], [[[0.0, 1.0]]], max_pred_windows=0)
    with pytest.raises(ValueError, match="max_pred_windows must be an integer"):  # 2.5 was truncated to 2
        moment_retrieval_metrics([[[0.0, 1.0]]], [[1.0]], [[[0.0, 1.0]]], max_pred_windows=2.5)
    # A NaN threshold gave {'R1@nan': 0.0, 'mAP@nan': 100.0}; no threshold gave mAP NaN.
    for thresholds in ((float("nan"),), (0.5, float("inf")), ()):
        with pytest.raises(ValueError, match="thresholds must be one or more finite"):
            moment_retrieval_metrics([[[0.0, 1.0]]], [[1.0]], [[[0.0, 1.0]]], thresholds=thresholds)
    with pytest.raises(ValueError, match="at least one query"):
        moment_retrieval_metrics([], [], [])


def test_moment_retrieval_iou_tie_rule():
    """Exact IoU ties: the higher ground-truth index is tried first (documented; Moment-DETR's unstable argsort is
    platform-dependent here). Hand-computed: prediction [4,6] has IoU 2/3 with both [3,6] (index 0) and [4,7] (index
    1) and takes [4,7]; [5,7] then has IoU 2/3 only with the taken [4,7] and 1/4 with [3,6]: a false positive.
    Precision (1, 1/2) at recall (1/5, 1/5) -> AP 0.2. The other tie order would give 2 TPs, AP 0.4."""
    gt = [[3.0, 6.0], [4.0, 7.0], [2.0, 4.0], [3.0, 4.0], [2.0, 5.0]]
    out = moment_retrieval_metrics([[[4.0, 6.0], [5.0, 7.0]]], [[1.0, 0.9]], [gt], thresholds=(0.5,))
    assert out["mAP@0.5"] == 20.0
    # Same windows with the tie broken by geometry (the second GT made slightly better for the first prediction):
    gt_lower = [[3.0, 6.0], [4.0, 7.01], *gt[2:]]
    out2 = moment_retrieval_metrics([[[4.0, 6.0], [5.0, 7.0]]], [[1.0, 0.9]], [gt_lower], thresholds=(0.5,))
    assert out2["mAP@0.5"] == 40.0
