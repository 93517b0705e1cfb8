"""mean_average_precision / MeanAveragePrecision against torchmetrics 1.9 (its pycocotools backend), and the
distributed gather (gloo, 2 processes) against one process."""

import os

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from vlkernels.detection import MeanAveragePrecision, mean_average_precision
from vlkernels.detection.synthetic import detection_data

helpers = pytest.importorskip("torchmetrics.detection.helpers")
coco_mask = pytest.importorskip("pycocotools.mask")


def _batch(n_images, seed, masks=False):
    """Per-image tensors from the generated COCO-shaped set (xyxy float32 boxes, labels, scores, uint8 masks)."""
    gt, res = detection_data(n_images=n_images, masks=masks, seed=seed)
    preds, target = [], []
    for img in gt["images"]:
        i, h, w = img["id"], img["height"], img["width"]
        for items, out, is_pred in ((res, preds, True), (gt["annotations"], target, False)):
            mine = [a for a in items if a["image_id"] == i]
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


def _torchmetrics(preds, target, iou_type="bbox", **kw):
    """torchmetrics' own COCO conversion and evaluation; only torchvision's box_convert (torchvision does not
    install beside this torch) is restated: xyxy -> xywh as (x1, y1, x2 - x1, y2 - y1) in float32."""
    types = (iou_type,) if isinstance(iou_type, str) else iou_type
    backend = helpers.CocoBackend("pycocotools")

    def boxes(item):
        b = item["boxes"]
        return torch.stack((b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]), -1)

    def rles(item):
        return tuple(
            (tuple(r["size"]), r["counts"])
            for r in (coco_mask.encode(np.asfortranarray(m)) for m in item["masks"].numpy())
        )

    bb = "bbox" in types
    sg = "segm" in types
    iou_thr = torch.linspace(0.5, 0.95, 10).tolist()
    rec_thr = torch.linspace(0.0, 1.00, 101).tolist()
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
        False,
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
    with pytest.raises(ValueError, match="negative size"):
        mean_average_precision(p, [{"boxes": torch.tensor([[5.0, 5, 1, 1]]), "labels": torch.tensor([1])}])
    with pytest.raises(ValueError, match="iou_type"):
        mean_average_precision(p, t, iou_type="keypoints")


def _worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        preds, target = _batch(10, seed=14, masks=True)
        m = MeanAveragePrecision(iou_type=("bbox", "segm"))
        # Rank r holds images r, r + 2, ...: the gather restores the original order.
        m.update(preds[rank::world], target[rank::world])
        res = m.compute()
        save_file({k: v.contiguous() for k, v in res.items()}, os.path.join(out, f"rank{rank}.safetensors"))
    finally:
        torch.distributed.destroy_process_group()


def test_metric_distributed_gloo_equals_single_process(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_worker, args=(2, port, str(tmp_path)), nprocs=2, start_method="forkserver")
    preds, target = _batch(10, seed=14, masks=True)
    want = mean_average_precision(preds, target, iou_type=("bbox", "segm"))
    for r in range(2):
        got = load_file(tmp_path / f"rank{r}.safetensors")
        _same(got, want)
