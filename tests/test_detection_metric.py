"""mean_average_precision / MeanAveragePrecision against torchmetrics 1.9 (its pycocotools backend), and the
distributed gather (gloo, 2 processes) against one process."""

import os

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks
from safetensors.torch import load_file, save_file

from vlkernels.detection import MeanAveragePrecision, mean_average_precision
from vlkernels.detection.synthetic import detection_data

coco_mask = pytest.importorskip("pycocotools.mask")


def _helpers():
    # Imported where used, not with the module: the gloo ranks import this module for their worker and need none of
    # torchmetrics (seconds of imports a rank).
    return pytest.importorskip("torchmetrics.detection.helpers")


def _batch(n_images, seed, masks=False, max_dets=None):
    """Per-image tensors from the generated COCO-shaped set (xyxy float32 boxes, labels, scores, uint8 masks); the
    first `max_dets` detections of each image when given (the same ground truth and detections otherwise)."""
    gt, res = detection_data(n_images=n_images, masks=masks, seed=seed)
    preds, target = [], []
    for img in gt["images"]:
        i, h, w = img["id"], img["height"], img["width"]
        for items, out, is_pred in ((res, preds, True), (gt["annotations"], target, False)):
            mine = [a for a in items if a["image_id"] == i][: max_dets if is_pred else None]
            b = torch.tensor([a["bbox"] for a in mine], dtype=torch.float32).reshape(-1, 4)
            d = {
                "boxes": torch.cat([b[:, :2], b[:, :2] + b[:, 2:]], 1),
                "labels": torch.tensor([a["category_id"] for a in mine], dtype=torch.int64),
            }
            if is_pred:
                d["scores"] = torch.tensor([a["score"] for a in mine], dtype=torch.float32)
            else:
                d["iscrowd"] = torch.tensor([a["iscrowd"] for a in mine], dtype=torch.int64)
            if masks:
                m = [coco_mask.decode({"size": [h, w], "counts": a["segmentation"]["counts"].encode()}) for a in mine]
                d["masks"] = torch.from_numpy(np.stack(m)) if m else torch.zeros(0, h, w, dtype=torch.uint8)
            out.append(d)
    return preds, target


def _torchmetrics(preds, target, iou_type="bbox", box_format="xyxy", iou_thresholds=None, rec_thresholds=None, **kw):
    """torchmetrics' own COCO conversion and evaluation; only torchvision's box_convert (torchvision does not
    install beside this torch) is restated, in the boxes' dtype, and torchmetrics' reshape of empty boxes to (0, 4)."""
    types = (iou_type,) if isinstance(iou_type, str) else iou_type
    helpers = _helpers()
    backend = helpers.CocoBackend("pycocotools")

    def boxes(item):
        b = item["boxes"].reshape(-1, 4)
        if box_format == "xywh":
            return b
        if box_format == "cxcywh":
            cx, cy, w, h = b.unbind(-1)
            b = torch.stack((cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h), -1)
        return torch.stack((b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]), -1)

    def rles(item):
        return tuple(
            (tuple(r["size"]), r["counts"])
            for r in (coco_mask.encode(np.asfortranarray(m)) for m in item["masks"].numpy())
        )

    bb = "bbox" in types
    sg = "segm" in types
    iou_thr = iou_thresholds or torch.linspace(0.5, 0.95, 10).tolist()
    rec_thr = rec_thresholds or torch.linspace(0.0, 1.00, 101).tolist()
    return helpers._calculate_map_with_coco(
        backend,
        [t["labels"] for t in target],
        [boxes(t) for t in target] if bb else [],
        [rles(t) for t in target] if sg else [],
        [t.get("iscrowd", torch.zeros_like(t["labels"])) for t in target],
        [t.get("area", torch.zeros_like(t["labels"])) for t in target],
        [p["labels"] for p in preds],
        [boxes(p) for p in preds] if bb else [],
        [rles(p) for p in preds] if sg else [],
        [p["scores"] for p in preds],
        types,
        kw.get("average", "macro"),
        iou_thr,
        rec_thr,
        [1, 10, 100],
        kw.get("class_metrics", False),
        kw.get("extended_summary", False),
    )


def _same(ours, ref):
    ref = {k: v.squeeze() if v.numel() == 1 else v for k, v in ref.items()}
    assert ours.keys() == ref.keys()
    for k in ref:
        assert ours[k].dtype == ref[k].dtype, k
        torch.testing.assert_close(ours[k], ref[k], rtol=0, atol=0, msg=k)


@pytest.mark.parametrize("kw", [{}, {"class_metrics": True}, {"average": "micro"}])
def test_mean_average_precision_bbox_equals_torchmetrics(kw):
    preds, target = _batch(40, seed=11)
    _same(mean_average_precision(preds, target, **kw), _torchmetrics(preds, target, **kw))


def test_mean_average_precision_segm_and_both_equal_torchmetrics():
    preds, target = _batch(12, seed=12, masks=True)
    _same(mean_average_precision(preds, target, iou_type="segm"), _torchmetrics(preds, target, "segm"))
    both = ("bbox", "segm")
    _same(mean_average_precision(preds, target, iou_type=both), _torchmetrics(preds, target, both))


def test_metric_update_compute_reset():
    preds, target = _batch(20, seed=13)
    m = MeanAveragePrecision()
    m.update(preds[:7], target[:7])
    m.update(preds[7:], target[7:])
    _same(m.compute(), _torchmetrics(preds, target))
    m.reset()
    m.update(preds[:5], target[:5])
    _same(m.compute(), _torchmetrics(preds[:5], target[:5]))


def test_mean_average_precision_bad_input_raises():
    box, label = torch.tensor([[0.0, 0, 10, 10]]), torch.tensor([1])
    p = [{"boxes": box, "scores": torch.tensor([float("nan")]), "labels": label}]
    t = [{"boxes": torch.tensor([[0.0, 0, 10, 10]]), "labels": torch.tensor([1])}]
    with pytest.raises(ValueError, match=r"preds\[0\]\['scores'\]"):
        mean_average_precision(p, t)
    p[0]["scores"] = torch.tensor([0.5])
    with pytest.raises(ValueError, match="one dict per image"):
        mean_average_precision(p, t + t)
    with pytest.raises(ValueError, match=r"target\[0\]\['boxes'\] must be \(1, 4\)"):
        mean_average_precision(p, [{"boxes": torch.zeros(2, 4), "labels": torch.tensor([1])}])
    # Labels with no boxes (torchmetrics: "different length"); a numpy broadcast error or an IndexError before.
    for empty in (torch.zeros(0, 4), torch.zeros(0)):
        with pytest.raises(ValueError, match=r"target\[0\]\['boxes'\] must be \(1, 4\)"):
            mean_average_precision(p, [{"boxes": empty, "labels": torch.tensor([1])}])
        with pytest.raises(ValueError, match=r"preds\[0\]\['boxes'\] must be \(1, 4\)"):
            mean_average_precision([{**p[0], "boxes": empty}], t)
    with pytest.raises(ValueError, match="negative size"):
        mean_average_precision(p, [{"boxes": torch.tensor([[5.0, 5, 1, 1]]), "labels": torch.tensor([1])}])
    with pytest.raises(ValueError, match="iou_type"):
        mean_average_precision(p, t, iou_type="keypoints")


def test_metric_update_refuses_whole_batches_and_copies_its_inputs():
    """A refused batch adds nothing (its earlier images included); a box of negative size is refused at update()
    (else every later compute() would fail); a caller's buffer changed after update() leaves the state as it was."""
    preds, target = _batch(8, seed=21)
    m = MeanAveragePrecision()
    m.update(preds[:3], target[:3])
    nan = {**preds[4], "scores": torch.full_like(preds[4]["scores"], float("nan"))}
    with pytest.raises(ValueError, match=r"preds\[4\]\['scores'\]"):
        m.update([preds[3], nan], target[3:5])
    inverted = {"boxes": torch.tensor([[5.0, 5, 1, 1]]), "labels": torch.tensor([1])}
    with pytest.raises(ValueError, match=r"target\[4\]\['boxes'\]\[0\] has a negative size \(xyxy\)"):
        m.update(preds[3:5], [target[3], inverted])
    with pytest.raises(ValueError, match=r"preds\[3\]\['labels'\] has dtype torch.uint16"):
        m.update([{**preds[3], "labels": preds[3]["labels"].to(torch.uint16)}], target[3:4])
    buf = [{k: v.clone() for k, v in d.items()} for d in preds[3:]]
    m.update(buf, target[3:])
    for d in buf:
        d["scores"].fill_(0.5)
        d["labels"].fill_(7)
    _same(m.compute(), _torchmetrics(preds, target))


def _mixed_dtypes():
    """Per rank, images whose tensors differ in dtype from the other rank's: int64 boxes and uint8 labels and fp16
    scores on rank 0, fractional fp32 boxes, a label past uint8 and close fp32 scores on rank 1, an image without
    detections given as float tensors (as torchmetrics' tests do), int16 labels and iscrowd."""
    t = torch.tensor
    a = (
        {
            "boxes": t([[0, 0, 10, 10], [20, 20, 30, 30]]),
            "labels": t([1, 1], dtype=torch.uint8),
            "scores": t([0.5, 0.25], dtype=torch.float16),
        },
        {"boxes": t([[0, 0, 10, 10]]), "labels": t([1], dtype=torch.uint8), "iscrowd": t([0], dtype=torch.int16)},
    )
    b = (
        {"boxes": t([[0.5, 0.5, 10.25, 10.75], [1.0, 1, 9, 9]]), "labels": t([300, 300]), "scores": t([0.5, 0.5001])},
        {"boxes": t([[0.0, 0, 10, 10]]), "labels": t([300], dtype=torch.int16)},
    )
    e = (
        {"boxes": torch.zeros(0, 4), "labels": t([]), "scores": t([])},
        {"boxes": t([[0.0, 0, 5, 5]]), "labels": t([1], dtype=torch.int16)},
    )
    return [a, e], [b]  # interleaved: a, b, e


def _mixed_worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        m = MeanAveragePrecision(class_metrics=True)
        items = _mixed_dtypes()[rank]
        m.update([p for p, _ in items], [t for _, t in items])
        res = m.compute()
        save_file({k: v.contiguous() for k, v in res.items()}, os.path.join(out, f"rank{rank}.safetensors"))
    finally:
        torch.distributed.destroy_process_group()


def test_metric_distributed_gloo_keeps_each_images_dtypes(tmp_path):
    """The gather sends every value in a dtype that holds all ranks' values exactly and restores each image's own
    dtype (it used to cast every rank's values to rank 0's: fractional boxes truncated, close scores tied, labels
    wrapped, an empty float tensor refused)."""
    run_ranks(_mixed_worker, 2, str(tmp_path))
    (a, e), (b,) = _mixed_dtypes()
    want = mean_average_precision([a[0], b[0], e[0]], [a[1], b[1], e[1]], class_metrics=True)
    for r in range(2):
        _same(load_file(tmp_path / f"rank{r}.safetensors"), want)


# The first 20 of each image's 100 detections: the gather's work is the full-image uint8 masks (~300 MB with 100,
# seconds of decoding and exchanging them a rank on 2 cores); the fields, dtypes and per-image orders it restores are
# the same with 20, and the detections still outnumber the ground truths (up to 12 an image, one crowd).
_DIST_BATCH = (10, 14, True, 20)


def _worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        preds, target = _batch(*_DIST_BATCH)
        m = MeanAveragePrecision(iou_type=("bbox", "segm"))
        # Rank r holds images r, r + 2, ...: the gather restores the original order.
        m.update(preds[rank::world], target[rank::world])
        res = m.compute()
        save_file({k: v.contiguous() for k, v in res.items()}, os.path.join(out, f"rank{rank}.safetensors"))
    finally:
        torch.distributed.destroy_process_group()


def test_metric_distributed_gloo_equals_single_process(tmp_path):
    run_ranks(_worker, 2, str(tmp_path))
    preds, target = _batch(*_DIST_BATCH)
    want = mean_average_precision(preds, target, iou_type=("bbox", "segm"))
    for r in range(2):
        got = load_file(tmp_path / f"rank{r}.safetensors")
        _same(got, want)


# torchmetrics' tests/unittests/detection/test_map.py cases (TestMapProperties and the functional tests), with the
# answer of torchmetrics' own COCO path above as the reference.
def _b(*rows):
    return torch.tensor(rows, dtype=torch.float32)


_TM_INPUTS = {  # torchmetrics' _inputs: two batches of two images (COCO ids 42, 73, 74, 987)
    "preds": [
        {"boxes": _b([258.15, 41.29, 606.41, 285.07]), "scores": _b(0.236), "labels": torch.IntTensor([4])},
        {
            "boxes": _b([61.00, 22.75, 565.00, 632.42], [12.66, 3.32, 281.26, 275.23]),
            "scores": _b(0.318, 0.726),
            "labels": torch.IntTensor([3, 2]),
        },
        {
            "boxes": _b(
                [87.87, 276.25, 384.29, 379.43],
                [0.00, 3.66, 142.15, 316.06],
                [296.55, 93.96, 314.97, 152.79],
                [328.94, 97.05, 342.49, 122.98],
                [356.62, 95.47, 372.33, 147.55],
                [464.08, 105.09, 495.74, 146.99],
                [276.11, 103.84, 291.44, 150.72],
            ),
            "scores": _b(0.546, 0.3, 0.407, 0.611, 0.335, 0.805, 0.953),
            "labels": torch.IntTensor([4, 1, 0, 0, 0, 0, 0]),
        },
        {
            "boxes": _b(
                [72.92, 45.96, 91.23, 80.57],
                [45.17, 45.34, 66.28, 79.83],
                [82.28, 47.04, 99.66, 78.50],
                [59.96, 46.17, 80.35, 80.48],
                [75.29, 23.01, 91.85, 50.85],
                [71.14, 1.10, 96.96, 28.33],
                [61.34, 55.23, 77.14, 79.57],
                [41.17, 45.78, 60.99, 78.48],
                [56.18, 44.80, 64.42, 56.25],
            ),
            "scores": _b(0.532, 0.204, 0.782, 0.202, 0.883, 0.271, 0.561, 0.204, 0.349),
            "labels": torch.IntTensor([49] * 9),
        },
    ],
    "target": [
        {"boxes": _b([214.1500, 41.2900, 562.4100, 285.0700]), "labels": torch.IntTensor([4])},
        {"boxes": _b([13.00, 22.75, 548.98, 632.42], [1.66, 3.32, 270.26, 275.23]), "labels": torch.IntTensor([2, 2])},
        {
            "boxes": _b(
                [61.87, 276.25, 358.29, 379.43],
                [2.75, 3.66, 162.15, 316.06],
                [295.55, 93.96, 313.97, 152.79],
                [326.94, 97.05, 340.49, 122.98],
                [356.62, 95.47, 372.33, 147.55],
                [462.08, 105.09, 493.74, 146.99],
                [277.11, 103.84, 292.44, 150.72],
            ),
            "labels": torch.IntTensor([4, 1, 0, 0, 0, 0, 0]),
        },
        {
            "boxes": _b(
                [72.92, 45.96, 91.23, 80.57],
                [50.17, 45.34, 71.28, 79.83],
                [81.28, 47.04, 98.66, 78.50],
                [63.96, 46.17, 84.35, 80.48],
                [75.29, 23.01, 91.85, 50.85],
                [56.39, 21.65, 75.66, 45.54],
                [73.14, 1.10, 98.96, 28.33],
                [62.34, 55.23, 78.14, 79.57],
                [44.17, 45.78, 63.99, 78.48],
                [58.18, 44.80, 66.42, 56.25],
            ),
            "labels": torch.IntTensor([49] * 10),
        },
    ],
}
_BOX = _b([214.1500, 41.2900, 562.4100, 285.0700])
_EMPTY_PRED = {"boxes": torch.Tensor([]), "scores": torch.Tensor([]), "labels": torch.IntTensor([])}
_EMPTY_GT = {"boxes": torch.Tensor([]), "labels": torch.IntTensor([])}
_TM_CASES = {
    "inputs": (_TM_INPUTS["preds"], _TM_INPUTS["target"], {}),
    # _inputs2: the same box twice, the second image without ground truth (torchmetrics #943)
    "inputs2": (
        [{"boxes": _b([258.0, 41.0, 606.0, 285.0]), "scores": _b(0.536), "labels": torch.IntTensor([0])}] * 2,
        [{"boxes": _b([214.0, 41.0, 562.0, 285.0]), "labels": torch.IntTensor([0])}, _EMPTY_GT],
        {},
    ),
    # _inputs3: an empty prediction, a target carrying scores (ignored)
    "inputs3": (
        [{"boxes": _b([258.0, 41.0, 606.0, 285.0]), "scores": _b(0.536), "labels": torch.IntTensor([0])}, _EMPTY_PRED],
        [
            {"boxes": _b([214.0, 41.0, 562.0, 285.0]), "labels": torch.IntTensor([0])},
            {"boxes": _b([1.0, 2.0, 3.0, 4.0]), "scores": _b(0.8), "labels": torch.IntTensor([1])},
        ],
        {},
    ),
    "empty_preds": ([_EMPTY_PRED], [{"boxes": _BOX, "labels": torch.IntTensor([4])}], {}),
    "empty_ground_truths": ([{"boxes": _BOX, "scores": _b(0.5), "labels": torch.IntTensor([4])}], [_EMPTY_GT], {}),
    "empty_preds_xywh": (
        [_EMPTY_PRED],
        [{"boxes": _b([214.15, 41.29, 348.26, 243.78]), "labels": torch.IntTensor([4])}],
        {"box_format": "xywh"},
    ),
    "empty_ground_truths_cxcywh": (
        [{"boxes": _b([388.28, 163.18, 348.26, 243.78]), "scores": _b(0.5), "labels": torch.IntTensor([4])}],
        [_EMPTY_GT],
        {"box_format": "cxcywh"},
    ),
    "missing_pred": (
        [{"boxes": _b([10, 20, 15, 25]), "scores": _b(0.9), "labels": torch.IntTensor([0])}, _EMPTY_PRED],
        [{"boxes": _b([10, 20, 15, 25]), "labels": torch.IntTensor([0])}] * 2,
        {},
    ),
    "missing_gt": (
        [
            {"boxes": _b([10, 20, 15, 25]), "scores": _b(0.9), "labels": torch.IntTensor([0])},
            {"boxes": _b([10, 20, 15, 25]), "scores": _b(0.95), "labels": torch.IntTensor([0])},
        ],
        [{"boxes": _b([10, 20, 15, 25]), "labels": torch.IntTensor([0])}, _EMPTY_GT],
        {},
    ),
    "custom_thresholds": (_TM_INPUTS["preds"], _TM_INPUTS["target"], {"iou_thresholds": [0.1, 0.2]}),
    "custom_iou_and_recall_thresholds": (
        _TM_INPUTS["preds"],
        _TM_INPUTS["target"],
        {"iou_thresholds": [0.2, 0.7], "rec_thresholds": [0.25, 0.5, 0.75]},
    ),
    "class_metrics": (_TM_INPUTS["preds"], _TM_INPUTS["target"], {"class_metrics": True}),
    "micro": (_TM_INPUTS["preds"], _TM_INPUTS["target"], {"average": "micro", "class_metrics": True}),
}
for _fmt in ("xyxy", "xywh", "cxcywh"):
    # test_for_box_format: only the right format scores 1 at IoU 0.2 (torchmetrics #1908)
    _TM_CASES[f"box_format_{_fmt}"] = (
        [{"boxes": _b([0.5, 0.5, 1, 1]), "scores": _b(1.0), "labels": torch.tensor([0])}],
        [{"boxes": _b([0, 0, 1, 1]), "labels": torch.tensor([0])}],
        {"box_format": _fmt, "iou_thresholds": [0.2]},
    )


@pytest.mark.parametrize("case", list(_TM_CASES))
def test_mean_average_precision_torchmetrics_cases(case):
    preds, target, kw = _TM_CASES[case]
    _same(mean_average_precision(preds, target, **kw), _torchmetrics(preds, target, **kw))


def test_mean_average_precision_torchmetrics_box_format_answers():
    # torchmetrics' expected values: map 1 for the right format, 0 for the other two.
    for fmt, want in (("xyxy", 1.0), ("xywh", 0.0), ("cxcywh", 0.0)):
        preds, target, kw = _TM_CASES[f"box_format_{fmt}"]
        assert mean_average_precision(preds, target, **kw)["map"].item() == want
    # custom IoU thresholds without 0.5 / 0.75: map_50 and map_75 are -1
    preds, target, kw = _TM_CASES["custom_thresholds"]
    res = mean_average_precision(preds, target, **kw)
    assert res["map_50"].item() == -1 and res["map_75"].item() == -1


@pytest.mark.parametrize("side", ["target", "preds"])
def test_mean_average_precision_segm_empty_masks_answer_minus_one(side):
    """torchmetrics' test_segm_iou_empty_gt_mask / _pred_mask: an image without masks passed as Tensor([]) or
    BoolTensor([]) (shape (0,)); when one side has no mask at all every value is -1 and classes is the label."""
    mask = torch.zeros(1, 10, 10, dtype=torch.bool)
    if side == "target":
        preds = [{"masks": mask, "scores": _b(0.5), "labels": torch.IntTensor([4])}]
        target = [{"masks": torch.Tensor([]), "labels": torch.IntTensor([])}]
    else:
        preds = [{"masks": torch.BoolTensor([]), "scores": torch.Tensor([]), "labels": torch.IntTensor([])}]
        target = [{"masks": mask, "labels": torch.IntTensor([4])}]
    res = mean_average_precision(preds, target, iou_type="segm")
    _same(res, _torchmetrics(preds, target, "segm"))
    assert all(v.item() == -1 for k, v in res.items() if k != "classes") and res["classes"].item() == 4
    m = MeanAveragePrecision(iou_type="segm")
    m.update(preds, target)
    _same(m.compute(), _torchmetrics(preds, target, "segm"))


def test_mean_average_precision_segm_some_images_without_masks():
    preds, target = _batch(6, seed=16, masks=True)
    target[2] = {"masks": torch.Tensor([]), "labels": torch.IntTensor([])}
    preds[4] = {"masks": torch.BoolTensor([]), "scores": torch.Tensor([]), "labels": torch.IntTensor([])}
    _same(mean_average_precision(preds, target, iou_type="segm"), _torchmetrics(preds, target, "segm"))


@pytest.mark.parametrize("iou_type", ["segm", ("bbox", "segm")])
def test_mean_average_precision_images_without_targets_but_with_detections(iou_type):
    """An image with no target but with detections: left out with segm alone, where torchmetrics skips an image
    without masks; kept (its detections false positives) with ("bbox", "segm"), where it skips one only without
    boxes too."""
    preds, target = _batch(6, seed=17, masks=True)
    h, w = target[3]["masks"].shape[-2:]
    target[3] = {
        "boxes": torch.zeros(0, 4),
        "labels": torch.zeros(0, dtype=torch.int64),
        "masks": torch.zeros(0, h, w, dtype=torch.uint8),
        "iscrowd": torch.zeros(0, dtype=torch.int64),
    }
    assert preds[3]["labels"].numel() > 0
    _same(mean_average_precision(preds, target, iou_type=iou_type), _torchmetrics(preds, target, iou_type))


def test_micro_class_metrics_with_both_types_scores_each_type_micro():
    """("bbox", "segm") with average="micro" and class_metrics: every summary value as torchmetrics gives it without
    class_metrics, and bbox's per-class values as it gives them (torchmetrics scores the second type per category in
    this one combination: README, "What differs on purpose")."""
    preds, target = _batch(8, seed=18, masks=True)
    both = ("bbox", "segm")
    ours = mean_average_precision(preds, target, iou_type=both, average="micro", class_metrics=True)
    plain = _torchmetrics(preds, target, both, average="micro")
    full = _torchmetrics(preds, target, both, average="micro", class_metrics=True)
    for k in plain:
        want = full[k] if k.startswith("bbox_") and "per_class" in k else plain[k]
        if "per_class" in k and not k.startswith("bbox_"):
            continue
        want = want.squeeze() if want.numel() == 1 else want
        torch.testing.assert_close(ours[k], want, rtol=0, atol=0, msg=k)


def test_mean_average_precision_torchmetrics_extended_summary_shapes():
    # test_for_extended_stats: precision / recall / scores of 4 images x 6 classes (no 'ious' here)
    res = mean_average_precision(_TM_INPUTS["preds"], _TM_INPUTS["target"], extended_summary=True)
    ref = _torchmetrics(_TM_INPUTS["preds"], _TM_INPUTS["target"], extended_summary=True)
    assert res["precision"].shape == (10, 101, 6, 4, 3) and res["recall"].shape == (10, 6, 4, 3)
    for k in ("precision", "recall", "scores"):
        torch.testing.assert_close(res[k], ref[k], rtol=0, atol=0)


def test_mean_average_precision_torchmetrics_bad_inputs_raise():
    """test_error_on_wrong_input's cases: each a ValueError (the messages are vlkernels')."""
    t = [{"boxes": torch.Tensor(), "labels": torch.IntTensor()}]
    cases = [
        ((torch.Tensor(), []), "preds must be a sequence"),
        (([], torch.Tensor()), "target must be a sequence"),
        (([{}], [{}, {}]), "one dict per image"),
        (([{"scores": torch.Tensor(), "labels": torch.IntTensor()}], t), r"preds\[0\]\['boxes'\] must be a tensor"),
        (([{"boxes": torch.Tensor(), "labels": torch.IntTensor()}], t), r"preds\[0\]\['scores'\] must be a tensor"),
        (([{"boxes": torch.Tensor(), "scores": torch.Tensor()}], t), r"preds\[0\]\['labels'\] must be a tensor"),
        (([dict(_EMPTY_PRED)], [{"labels": torch.IntTensor()}]), r"target\[0\]\['boxes'\] must be a tensor"),
        (([dict(_EMPTY_PRED)], [{"boxes": torch.Tensor()}]), r"target\[0\]\['labels'\] must be a tensor"),
        (([dict(_EMPTY_PRED, boxes=[])], t), r"preds\[0\]\['boxes'\] must be a tensor"),
        (([dict(_EMPTY_PRED, scores=[])], t), r"preds\[0\]\['scores'\] must be a tensor"),
        (([dict(_EMPTY_PRED, labels=[])], t), r"preds\[0\]\['labels'\] must be a tensor"),
        (([dict(_EMPTY_PRED)], [{"boxes": [], "labels": torch.IntTensor()}]), r"target\[0\]\['boxes'\] must be"),
        (([dict(_EMPTY_PRED)], [{"boxes": torch.Tensor(), "labels": []}]), r"target\[0\]\['labels'\] must be"),
    ]
    for (p, tg), match in cases:
        with pytest.raises(ValueError, match=match):
            mean_average_precision(p, tg)
        with pytest.raises(ValueError, match=match):
            MeanAveragePrecision().update(p, tg)
    with pytest.raises(ValueError, match="max_detection_thresholds must hold 3 values"):
        MeanAveragePrecision(max_detection_thresholds=[1, 10])


@pytest.mark.parametrize("label", [2**31, -(2**31) - 1, 2**40])
def test_mean_average_precision_label_beyond_int32_raises(label):
    p = [{"boxes": _b([0, 0, 10, 10]), "scores": _b(0.5), "labels": torch.tensor([label])}]
    t = [{"boxes": _b([0, 0, 10, 10]), "labels": torch.tensor([1])}]
    with pytest.raises(ValueError, match=rf"preds\[0\]\['labels'\] holds {label}: labels must lie in \[-2\*\*31"):
        mean_average_precision(p, t)
    with pytest.raises(ValueError, match=r"target\[0\]\['labels'\] holds"):
        mean_average_precision([dict(p[0], labels=torch.tensor([1]))], [dict(t[0], labels=torch.tensor([label]))])
    # The largest int32 label is evaluated (classes keep it).
    top = torch.tensor([2**31 - 1])
    ok = mean_average_precision([dict(p[0], labels=top)], [dict(t[0], labels=top)])
    assert ok["map"].item() == 1.0 and ok["classes"].item() == 2**31 - 1
