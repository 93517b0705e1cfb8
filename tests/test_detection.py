"""vlkernels.detection.COCOeval against pycocotools 2.0.11: eval arrays, stats and evalImgs bit for bit."""

import contextlib
import copy
import io
import json

import numpy as np
import pytest

from vlkernels.detection import COCOeval
from vlkernels.detection.synthetic import detection_data

pycoco = pytest.importorskip("pycocotools.cocoeval")
from coco_runs import anchor as _anchor  # noqa: E402
from coco_runs import coco as _coco  # noqa: E402
from coco_runs import ours as _ours  # noqa: E402


def _same_eval_imgs(a: list, b) -> None:
    assert len(a) == len(b)
    for n, (x, y) in enumerate(zip(a, b)):
        assert (x is None) == (y is None), n
        if x is None:
            continue
        assert x.keys() == y.keys()
        for k in x:
            xv, yv = x[k], y[k]
            if isinstance(xv, np.ndarray):
                assert isinstance(yv, np.ndarray) and xv.dtype.kind == yv.dtype.kind, (n, k)
                np.testing.assert_array_equal(xv, yv, err_msg=f"evalImgs[{n}][{k}]")
                assert xv.shape == yv.shape
            else:
                assert xv == yv, (n, k, xv, yv)


def _check(gt, res, iou="bbox", setup=None, eval_imgs=True):
    P = _anchor(gt, res, iou, setup)
    V = _ours(gt, res, iou, setup)
    for k in ("precision", "recall", "scores"):
        assert P.eval[k].shape == V.eval[k].shape, k
        np.testing.assert_array_equal(P.eval[k], V.eval[k], err_msg=k)
    assert P.eval["counts"] == V.eval["counts"]
    np.testing.assert_array_equal(P.stats, V.stats)
    if eval_imgs:
        _same_eval_imgs(P.evalImgs, V.evalImgs)
    return P, V


@pytest.mark.parametrize("iou", ["bbox", "segm"])
def test_cocoeval_generated_equals_pycocotools(iou):
    gt, res = detection_data(n_images=60, masks=True, seed=3)
    _check(gt, res, iou)


@pytest.mark.slow  # pycocotools' Python loops are most of its time (left out of the sanitized run)
def test_cocoeval_generated_larger_bbox():
    gt, res = detection_data(n_images=300, seed=4)
    _check(gt, res, "bbox", eval_imgs=False)


def _tiny(anns, n_img=2, cats=(1, 2, 3)):
    images = [{"id": i + 1, "height": 100, "width": 120} for i in range(n_img)]
    full = []
    for k, a in enumerate(anns):
        a = dict(a)
        a.setdefault("id", k + 1)
        a.setdefault("iscrowd", 0)
        a.setdefault("area", a["bbox"][2] * a["bbox"][3])
        full.append(a)
    return {"images": images, "categories": [{"id": c} for c in cats], "annotations": full}


def _det(img, cat, box, score):
    return {"image_id": img, "category_id": cat, "bbox": list(box), "score": score}


BASE_GT = [
    {"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30]},
    {"image_id": 1, "category_id": 1, "bbox": [50, 50, 40, 20]},
    {"image_id": 2, "category_id": 2, "bbox": [0, 0, 100, 90]},
    {"image_id": 2, "category_id": 1, "bbox": [5, 5, 10, 10]},
]
BASE_DT = [
    _det(1, 1, (11, 11, 30, 30), 0.9),
    _det(1, 1, (52, 50, 40, 22), 0.8),
    _det(1, 2, (0, 0, 20, 20), 0.7),
    _det(2, 2, (3, 2, 95, 85), 0.6),
    _det(2, 1, (6, 6, 9, 9), 0.5),
]


def test_cocoeval_no_detections():
    _check(_tiny(BASE_GT), [])


def test_cocoeval_category_without_ground_truth():
    # Category 3 has detections but no ground truth: precision and recall stay -1 there.
    _, V = _check(_tiny(BASE_GT), [*BASE_DT, _det(1, 3, (10, 10, 30, 30), 0.95)])
    assert (V.eval["precision"][:, :, 2] == -1).all()


def test_cocoeval_all_crowd():
    gt = [dict(a, iscrowd=1) for a in BASE_GT]
    _check(_tiny(gt), [*BASE_DT, _det(1, 1, (12, 12, 5, 5), 0.4), _det(1, 1, (20, 20, 5, 5), 0.3)])


def test_cocoeval_crowd_mixed_matches_many():
    gt = [*BASE_GT, {"image_id": 1, "category_id": 1, "bbox": [0, 0, 100, 100], "iscrowd": 1}]
    dets = [*BASE_DT, *(_det(1, 1, (60 - 5 * k, 5 + 3 * k, 20, 20), 0.45 - 0.01 * k) for k in range(6))]
    _check(_tiny(gt), dets)


def test_cocoeval_duplicate_detections_and_equal_scores():
    dets = [_det(1, 1, (11, 11, 30, 30), 0.5) for _ in range(4)] + [_det(1, 1, (50, 50, 40, 20), 0.5) for _ in range(3)]
    dets += [_det(2, 1, (5, 5, 10, 10), 0.5), _det(2, 2, (0, 0, 100, 90), 0.5), _det(2, 2, (0, 0, 100, 90), 0.5)]
    _check(_tiny(BASE_GT), dets)


def test_cocoeval_area_range_borders():
    # Ground-truth areas and detection areas exactly on 32**2 and 96**2 (ranges are closed on both ends).
    gt = [
        {"image_id": 1, "category_id": 1, "bbox": [0, 0, 32, 32], "area": 1024},
        {"image_id": 1, "category_id": 1, "bbox": [40, 0, 48, 64], "area": 96**2},
        {"image_id": 2, "category_id": 1, "bbox": [0, 0, 96, 96], "area": 9216.0},
        {"image_id": 2, "category_id": 2, "bbox": [0, 0, 31, 33], "area": 1023.0},
    ]
    dets = [
        _det(1, 1, (0, 0, 32, 32), 0.9),
        _det(1, 1, (40, 0, 48, 64), 0.8),
        _det(1, 1, (90, 60, 32, 32), 0.85),
        _det(2, 1, (1, 1, 96, 96), 0.7),
        _det(2, 2, (0, 0, 32, 32), 0.6),
    ]
    _check(_tiny(gt), dets)


def test_cocoeval_use_cats_0():
    gt, res = detection_data(n_images=15, seed=5)
    _check(gt, res, setup=lambda p: setattr(p, "useCats", 0))


def test_cocoeval_custom_params():
    gt, res = detection_data(n_images=25, seed=6)

    def setup(p):
        p.maxDets = [20, 1, 5]
        p.imgIds = p.imgIds[3:17]
        p.catIds = p.catIds[::2]
        p.iouThrs = np.array([0.3, 0.5, 0.9])
        p.recThrs = np.linspace(0, 1, 11)
        p.areaRng = [[0, 1e10], [0, 500], [500, 1e10]]
        p.areaRngLbl = ["all", "small", "large"]

    P = _anchor(gt, res, "bbox", setup)
    V = _ours(gt, res, "bbox", setup)
    for k in ("precision", "recall", "scores"):
        np.testing.assert_array_equal(P.eval[k], V.eval[k])
    _same_eval_imgs(P.evalImgs, V.evalImgs)


def test_cocoeval_reads_reassigned_inputs_and_maxdets_arrays():
    """pycocotools re-reads cocoGt and cocoDt on every evaluate(): results or a ground truth assigned after the first
    evaluation are the ones evaluated (they were ignored: AP 1.0 where pycocotools gives 0.0). maxDets as a numpy
    array evaluates as a list does; with useCats=0 catIds are left as given."""
    gt, res = detection_data(n_images=10, seed=8)
    gt2, res2 = copy.deepcopy(gt), copy.deepcopy(res)
    for a in gt2["annotations"][::2]:
        a["bbox"][0] += 0.3 * a["bbox"][2]
    for r in res2[::3]:
        r["bbox"][1] += 0.4 * r["bbox"][3]
    P = pycoco.COCOeval(_coco(gt), _coco(gt).loadRes(copy.deepcopy(res)), "bbox")
    V = COCOeval(copy.deepcopy(gt), copy.deepcopy(res), "bbox")
    with contextlib.redirect_stdout(io.StringIO()):
        for E in (P, V):
            E.evaluate()
        P.cocoDt, V.cocoDt = _coco(gt).loadRes(copy.deepcopy(res2)), copy.deepcopy(res2)
        for E in (P, V):
            E.evaluate()
            E.accumulate()
        np.testing.assert_array_equal(P.eval["precision"], V.eval["precision"])
        P.cocoGt, V.cocoGt = _coco(gt2), copy.deepcopy(gt2)
        for E in (P, V):
            E.evaluate()
            E.accumulate()
        np.testing.assert_array_equal(P.eval["precision"], V.eval["precision"])

    def setup(p):
        p.maxDets = np.array([1, 10, 100])
        p.useCats = 0
        p.catIds = [int(c) for c in p.catIds]

    P, V = _anchor(gt, res, "bbox", setup), _ours(gt, res, "bbox", setup)
    np.testing.assert_array_equal(P.stats, V.stats)
    assert all(type(c) is int for c in V.params.catIds)
    with pytest.raises(AttributeError, match="evalImgs is read-only here"):
        V.evalImgs = []


def test_cocoeval_reads_annotations_edited_in_place():
    """The same COCO objects, their annotations edited between two evaluate() calls (scores swapped, then a ground
    truth made crowd): pycocotools reads them again, and so does the drop-in (it kept its first read: AP 1.0 where
    pycocotools gives 0.5, then -1)."""
    gt = {
        "images": [{"id": 1, "width": 100, "height": 100}],
        "categories": [{"id": 1, "name": "a"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400, "iscrowd": 0}
        ],
    }
    res = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "score": 0.9},
        {"image_id": 1, "category_id": 1, "bbox": [60, 60, 20, 20], "score": 0.5},
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        pg, vg = _coco(gt), _coco(gt)
        pd, vd = pg.loadRes(copy.deepcopy(res)), vg.loadRes(copy.deepcopy(res))
        P, V = pycoco.COCOeval(pg, pd, "bbox"), COCOeval(vg, vd, "bbox")
        aps = []
        for edit in (None, "swap scores", "crowd"):
            for g, d in ((pg, pd), (vg, vd)):
                if edit == "swap scores":
                    d.anns[1]["score"], d.anns[2]["score"] = d.anns[2]["score"], d.anns[1]["score"]
                if edit == "crowd":
                    g.anns[1]["iscrowd"] = 1
            for E in (P, V):
                E.evaluate()
                E.accumulate()
                E.summarize()
            np.testing.assert_array_equal(P.eval["precision"], V.eval["precision"])
            np.testing.assert_array_equal(P.stats, V.stats)
            aps.append(float(P.stats[0]))
    assert aps == pytest.approx([1.0, 0.5, -1.0])  # every edit changes the answer


def test_cocoeval_accepts_coco_objects_and_paths(tmp_path):
    gt, res = detection_data(n_images=10, seed=7)
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "res.json").write_text(json.dumps(res))
    P = _anchor(gt, res, "bbox")
    cg = _coco(gt)
    with contextlib.redirect_stdout(io.StringIO()):
        cd = cg.loadRes(copy.deepcopy(res))
    for g, d in ((cg, cd), (str(tmp_path / "gt.json"), tmp_path / "res.json")):
        V = _ours(g, d, "bbox")
        np.testing.assert_array_equal(P.eval["precision"], V.eval["precision"])
        np.testing.assert_array_equal(P.stats, V.stats)


def test_cocoeval_summary_lines_equal_pycocotools():
    gt, res = detection_data(n_images=10, seed=8)
    outs = []
    for E in (_anchor(gt, res, "bbox"), _ours(gt, res, "bbox")):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            E.summarize()
        outs.append(buf.getvalue())
    assert outs[0] == outs[1] and outs[0].count("\n") == 12


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda r: r[0].update(image_id=999), r"results\[0\]\['image_id'\] = 999"),
        (lambda r: r[1].update(bbox=[1, 1, -2, 3]), r"results\[1\].*negative width"),
        (lambda r: r[2].update(score=float("nan")), r"results\[2\]\['score'\] must be finite"),
        (lambda r: r[3].pop("score"), r"results\[3\] has no 'score'"),
        (lambda r: r[1].update(category_id=77), r"results\[1\]\['category_id'\] = 77"),
        (lambda r: r[0].update(bbox=[1, 2, 3]), r"results\[0\] 'bbox' must be a list of 4"),
        (lambda r: r[4].update(bbox=[1, 2, float("inf"), 3]), r"results\[4\]\['bbox'\] must be finite"),
        (lambda r: r.__setitem__(2, [1, 2]), r"results\[2\] must be a dict"),
        (lambda r: r[3].update(score="high"), r"results\[3\] 'score' must be a number"),
    ],
)
def test_cocoeval_bad_results_raise(mutate, match):
    res = copy.deepcopy(BASE_DT)
    mutate(res)
    with pytest.raises(ValueError, match=match):
        COCOeval(_tiny(BASE_GT), res, "bbox").evaluate()


def test_cocoeval_wrong_segmentation_size_raises():
    gt, res = detection_data(n_images=3, masks=True, seed=9)
    res[5]["segmentation"] = {"size": [7, 9], "counts": "0"}
    with pytest.raises(ValueError, match=r"results\[5\]\['segmentation'\] has size \[7, 9\] but its image is"):
        COCOeval(gt, res, "segm").evaluate()
    res = detection_data(n_images=3, masks=True, seed=9)[1]
    for counts, what in (("!!", "invalid character"), ("0P", "truncated count"), ("0ooooooo1", "longer than 7")):
        gt2 = copy.deepcopy(gt)
        gt2["annotations"][1]["segmentation"]["counts"] = counts
        with pytest.raises(ValueError, match=rf"annotations\[1\]\['segmentation'\]:.*{what}"):
            COCOeval(gt2, res, "segm").evaluate()
    gt2 = copy.deepcopy(gt)
    gt2["annotations"][2]["segmentation"]["counts"] = "05"
    with pytest.raises(ValueError, match=r"annotations\[2\]\['segmentation'\]:.*runs sum to 5"):
        COCOeval(gt2, res, "segm").evaluate()


def test_cocoeval_bad_files_and_ground_truth_raise(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [')
    with pytest.raises(ValueError, match="bad.json' is not valid JSON"):
        COCOeval(str(bad), [], "bbox")
    with pytest.raises(ValueError, match="not valid JSON"):
        COCOeval(_tiny(BASE_GT), str(bad), "bbox").evaluate()
    gt = _tiny(BASE_GT)
    gt["annotations"][2]["image_id"] = 50
    with pytest.raises(ValueError, match=r"annotations\[2\]\['image_id'\] = 50"):
        COCOeval(gt, BASE_DT, "bbox")
    gt = _tiny(BASE_GT)
    gt["annotations"][1]["id"] = 1
    with pytest.raises(ValueError, match="id 1 appears more than once"):
        COCOeval(gt, BASE_DT, "bbox")
    with pytest.raises(ValueError, match="iouType"):
        COCOeval(_tiny(BASE_GT), BASE_DT, "keypoints")
    gt = _tiny(BASE_GT)
    gt["annotations"][3]["bbox"] = [5, 5, 10, -1]
    with pytest.raises(ValueError, match=r"annotations\[3\]\['bbox'\] has a negative width or height"):
        COCOeval(gt, BASE_DT, "bbox").evaluate()
    with pytest.raises(ValueError, match="ground truth needs a list 'images'"):
        COCOeval({"annotations": [], "categories": []}, BASE_DT, "bbox")
    with pytest.raises(ValueError, match="results must be a list of detection dicts"):
        COCOeval(_tiny(BASE_GT), {"bbox": [1, 2, 3, 4]}, "bbox").evaluate()


def test_cli_detection_prints_pycocotools_lines_and_writes_json(tmp_path, capsys):
    from vlkernels.cli import main

    gt, res = detection_data(n_images=10, seed=10)
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "res.json").write_text(json.dumps(res))
    P = _anchor(gt, res, "bbox")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        P.summarize()
    capsys.readouterr()
    out = tmp_path / "out.json"
    assert main(["detection", str(tmp_path / "gt.json"), str(tmp_path / "res.json"), "--json", str(out)]) == 0
    assert capsys.readouterr().out == buf.getvalue() + f"wrote {out}\n"
    got = json.loads(out.read_text())
    assert got["stats"] == [float(v) for v in P.stats] and got["AP"] == float(P.stats[0])
    (tmp_path / "bad.json").write_text("[{")
    assert main(["detection", str(tmp_path / "gt.json"), str(tmp_path / "bad.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    unwritable = tmp_path / "no_such_dir" / "out.json"
    assert main(["detection", str(tmp_path / "gt.json"), str(tmp_path / "res.json"), "--json", str(unwritable)]) == 2
    captured = capsys.readouterr()
    # Refused before the evaluation runs (no summary printed).
    assert f"--json {unwritable}: folder" in captured.err and "Average Precision" not in captured.out


def test_cocoeval_segm_uncompressed_crowd_rle_equals_pycocotools():
    from pycocotools import mask as coco_mask

    gt, res = detection_data(n_images=20, masks=True, seed=15)
    for a in gt["annotations"][::3]:
        # COCO stores crowd regions as uncompressed runs over the column-major pixels.
        m = coco_mask.decode({"size": a["segmentation"]["size"], "counts": a["segmentation"]["counts"].encode()})
        flat = m.flatten(order="F")
        runs = np.diff(np.r_[0, np.flatnonzero(np.diff(flat)) + 1, flat.size]).tolist()
        a["segmentation"] = {"size": a["segmentation"]["size"], "counts": ([0] if flat[0] else []) + runs}
        a["iscrowd"] = 1
    _check(gt, res, "segm")


def _poly(box):
    x, y, w, h = box
    return [[x, y, x + w, y, x + w, y + h, x, y + h]]


def _segm_case(gt_anns, dets):
    """The hand-made box cases as masks: ground truths as polygons, detections as compressed RLE strings (made by
    pycocotools from the same polygons), every detection keeping its box (loadRes: area = w * h)."""
    from pycocotools import mask as coco_mask

    gt = _tiny([dict(a, segmentation=_poly(a["bbox"])) for a in gt_anns])
    res = []
    for d in dets:
        rle = coco_mask.merge(coco_mask.frPyObjects(_poly(d["bbox"]), 100, 120))
        res.append(dict(d, segmentation={"size": [100, 120], "counts": rle["counts"].decode()}))
    return gt, res


_EQUAL_SCORES = [_det(1, 1, (11, 11, 30, 30), 0.5) for _ in range(4)] + [_det(2, 2, (0, 0, 100, 90), 0.5)] * 2
_SEGM_CASES = {
    "no_detections": (BASE_GT, [], None),
    "category_without_ground_truth": (BASE_GT, [*BASE_DT, _det(1, 3, (10, 10, 30, 30), 0.95)], None),
    "all_crowd": ([dict(a, iscrowd=1) for a in BASE_GT], [*BASE_DT, _det(1, 1, (12, 12, 5, 5), 0.4)], None),
    "duplicates_equal_scores": (BASE_GT, _EQUAL_SCORES, None),
    "area_range_borders": (
        [dict(a, area=float(a["bbox"][2] * a["bbox"][3])) for a in BASE_GT[:2]]
        + [{"image_id": 2, "category_id": 1, "bbox": [0, 0, 32, 32], "area": 1024.0}],
        [_det(1, 1, (10, 10, 32, 32), 0.9), _det(2, 1, (0, 0, 96, 96), 0.8), _det(2, 1, (0, 0, 32, 32), 0.7)],
        None,
    ),
    "use_cats_0": (BASE_GT, BASE_DT, lambda p: setattr(p, "useCats", 0)),
    "custom_max_dets": (BASE_GT, [*BASE_DT, *_EQUAL_SCORES], lambda p: setattr(p, "maxDets", [1, 2, 3])),
}


@pytest.mark.parametrize("case", list(_SEGM_CASES))
def test_cocoeval_segm_edge_cases_equal_pycocotools(case):
    gt_anns, dets, setup = _SEGM_CASES[case]
    gt, res = _segm_case(gt_anns, dets)
    _check(gt, res, "segm", setup=setup)


def test_cocoeval_segm_validates_detections_that_meet_no_ground_truth():
    # Only detections sharing an (image, category) with a ground truth are decoded for IoU; the others are still
    # checked in full, so a malformed mask there is an error, never a silent skip.
    gt, res = _segm_case(BASE_GT, [*BASE_DT, _det(1, 3, (10, 10, 30, 30), 0.95)])
    for counts, what in (("!!", "invalid character"), ("05", "runs sum to 5"), ("0ooooooo1", "longer than 7")):
        bad = copy.deepcopy(res)
        bad[5]["segmentation"]["counts"] = counts
        with pytest.raises(ValueError, match=rf"results\[5\]\['segmentation'\]:.*{what}"):
            COCOeval(gt, bad, "segm").evaluate()
    bad = copy.deepcopy(res)
    bad[5]["segmentation"]["size"] = [100, 121]
    with pytest.raises(ValueError, match=r"results\[5\]\['segmentation'\] has size \[100, 121\]"):
        COCOeval(gt, bad, "segm").evaluate()
    bad = copy.deepcopy(res)
    bad[5]["segmentation"] = 7
    with pytest.raises(ValueError, match=r"results\[5\]\['segmentation'\] must be an RLE dict or a list of polygons"):
        COCOeval(gt, bad, "segm").evaluate()


def test_detection_bindings_reject_bad_tensors():
    # The bindings check every extent, offset and index they follow: called directly with bad arrays they raise.
    from vlkernels import _ext

    C = _ext.load()
    i64, u8 = np.int64, np.uint8

    def ev(**kw):
        a = dict(
            kind=0,
            gt_off=np.array([0, 1], i64),
            dt_off=np.array([0, 2], i64),
            gt_box=np.zeros((1, 4)),
            dt_box=np.zeros((2, 4)),
            gt_masks=None,
            dt_masks=None,
            gt_crowd=np.zeros(1, u8),
            gt_ignore=np.zeros(1, u8),
            gt_area=np.zeros(1),
            dt_area=np.zeros(2),
            gt_id_nz=np.ones(1, u8),
            dt_id_pos=np.ones(2, u8),
            extra=None,
            area_rng=np.array([[0.0, 1e10]]),
            thr=np.array([0.5]),
            status=np.zeros((1, 1, 2), u8),
            npig=np.zeros((1, 1), i64),
            dm=None,
            gm=None,
            gi=None,
        )
        a.update(kw)
        C.det_evaluate(*a.values())

    ev()  # the well-formed call runs
    cases = [
        ({"gt_off": np.array([0, 2], i64)}, "gt_off must start at 0 and end at 1"),
        ({"dt_off": np.array([0, 3, 2], i64)}, "dt_off must have size 2"),
        ({"dt_off": np.array([1, 2], i64)}, "dt_off must start at 0"),
        ({"gt_box": np.zeros((1, 4), np.float32)}, "gt_box has dtype float32"),
        ({"dt_box": np.zeros((3, 4))}, "dt_box must have size 2"),
        ({"dt_box": np.zeros((4, 4))[::2]}, "dt_box must be contiguous"),
        ({"gt_crowd": np.zeros(2, u8)}, "gt_crowd must have size 1"),
        ({"status": np.zeros((1, 2, 2), u8)}, "status must have size 1 in dimension 1"),
        ({"npig": np.zeros(1, i64)}, "npig must have 2 dimensions"),
        ({"gm": np.zeros((1, 1, 5), i64)}, "gt_match must have size 1"),
        ({"kind": 1}, "gt_masks must be"),
        (
            {"kind": 1, "gt_masks": (np.zeros(3, i64), np.array([0, 4], i64), np.zeros(1, i64))},
            "gt_masks must start at 0 and end at 3",
        ),
        ({"thr": "0.5"}, "thr must be a tensor or array supporting DLPack"),
        ({"kind": 3}, "kind must be 0"),
    ]
    for kw, match in cases:
        with pytest.raises((ValueError, TypeError), match=match):
            ev(**kw)
    ro = np.zeros((1, 1, 2), u8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="status is read-only"):
        ev(status=ro)

    def acc(**kw):
        a = dict(
            dt_off=np.array([0, 2], i64),
            group=np.array([0], i64),
            n_groups=1,
            status=np.zeros((1, 1, 2), u8),
            npig=np.ones((1, 1), i64),
            score=np.array([0.9, 0.8]),
            area_src=np.array([0], i64),
            rec=np.linspace(0, 1, 3),
            max_dets=np.array([1], i64),
            precision=-np.ones((1, 3, 1, 1, 1)),
            recall=-np.ones((1, 1, 1, 1)),
            scores=None,
        )
        a.update(kw)
        C.det_accumulate(*a.values())

    acc()
    for kw, match in [
        ({"group": np.array([1], i64)}, "cell_group holds 1"),
        ({"n_groups": 2}, "n_groups must be in"),
        ({"area_src": np.array([1], i64)}, "area_src holds 1"),
        ({"area_src": np.array([0, 0], i64)}, "area_src has more entries"),
        ({"max_dets": np.array([1, 2], i64)}, "max_dets has more entries"),
        ({"status": np.zeros((1, 1, 3), u8)}, "status must have size 2"),
        ({"recall": -np.ones((1, 2, 1, 1))}, "recall must have size 1"),
        ({"score": np.zeros(2, np.float32)}, "score has dtype float32"),
    ]:
        with pytest.raises(ValueError, match=match):
            acc(**kw)
    items = [{"segmentation": {"size": [2, 2], "counts": "04"}}]
    h, w = np.array([2], i64), np.array([2], i64)
    convert = lambda k, h, w: None  # never called: the mask is a compressed RLE
    out = _det_masks(items, np.array([0], i64), h, w, None, convert, "r")
    assert out[0].tolist() == [0, 4] and out[2].tolist() == [4]
    out = _det_masks(items, np.array([0], i64), h, w, np.zeros(1, u8), convert, "r")
    assert out[0].tolist() == [] and out[2].tolist() == [0]
    with pytest.raises(ValueError, match="rows holds 1, not an item index"):
        _det_masks(items, np.array([1], i64), h, w, None, convert, "r")
    with pytest.raises(ValueError, match="h must have size 1"):
        _det_masks(items, np.array([0], i64), np.array([2, 2], i64), w, None, convert, "r")
    with pytest.raises(ValueError, match="need must have size 1"):
        _det_masks(items, np.array([0], i64), h, w, np.ones(2, u8), convert, "r")
    with pytest.raises(ValueError, match="offsets must have size 2"):
        C.det_mask_runs(items, np.array([0], i64), h, w, None, convert, "r", np.zeros(3, i64))
    # Phase 2 writes only where the offsets say, and checks them against the strings and the outputs.
    rows = np.array([0], i64)
    counts = C.det_mask_runs(items, rows, h, w, None, convert, "r", np.zeros(2, i64))
    outs = dict(offsets=np.array([0, 2], i64), csum=np.zeros(2, i64), area=np.zeros(1, i64), bbox=np.zeros((1, 4)))
    for kw, match in [
        (
            {"offsets": np.array([0, 1], i64), "csum": np.zeros(1, i64)},
            r"r\[0\]\['segmentation'\]: malformed RLE string: holds more runs than its offsets give \(1\)",
        ),
        ({"offsets": np.array([0, 3], i64), "csum": np.zeros(3, i64)}, "holds 2 runs but its offsets give 3"),
        ({"offsets": np.array([0, 2], i64), "csum": np.zeros(5, i64)}, "offsets must start at 0 and end at 5"),
        ({"area": np.zeros(2, i64)}, "area must have size 1"),
        ({"bbox": np.zeros((1, 4), np.float32)}, "bbox has dtype float32"),
    ]:
        a = dict(outs, **kw)
        with pytest.raises(ValueError, match=match):
            C.det_mask_decode(counts, rows, h, w, None, a["offsets"], a["csum"], a["area"], a["bbox"], "r")
    with pytest.raises(ValueError, match="counts must hold one string per row"):
        C.det_mask_decode(counts * 2, rows, h, w, None, *outs.values(), "r")
    with pytest.raises(ValueError, match="'counts' must be bytes or a str"):
        C.det_mask_decode([4], rows, h, w, None, *outs.values(), "r")
    with pytest.raises(ValueError, match="dropped .* offsets give it 2 runs"):
        C.det_mask_decode(counts, rows, h, w, np.zeros(1, u8), *outs.values(), "r")
    # Strings other than the ones phase 1 read are checked again, kept or dropped: a bad character, a count cut off.
    for need in (None, np.zeros(1, u8)):
        o = dict(outs, offsets=np.zeros(2, i64), csum=np.zeros(0, i64)) if need is not None else outs
        for bad, match in [("0\x7f", "invalid character at position 1"), ("0P", "truncated count at end of string")]:
            with pytest.raises(ValueError, match=r"r\[0\]\['segmentation'\]: malformed RLE string: " + match):
                C.det_mask_decode([bad], rows, h, w, need, *o.values(), "r")
    C.det_mask_decode(counts, rows, h, w, None, *outs.values(), "r")
    assert outs["csum"].tolist() == [0, 4] and outs["bbox"].tolist() == [[0.0, 0.0, 2.0, 2.0]]


def _det_masks(items, rows, h, w, need, convert, where):
    """Both phases of the segmentation reader: (csum, offsets, area, bbox)."""
    from vlkernels import _ext

    C = _ext.load()
    offsets = np.empty(rows.shape[0] + 1, np.int64)
    counts = C.det_mask_runs(items, rows, h, w, need, convert, where, offsets)
    csum, area, bbox = np.empty(offsets[-1], np.int64), np.empty(rows.shape[0], np.int64), np.empty((len(rows), 4))
    C.det_mask_decode(counts, rows, h, w, need, offsets, csum, area, bbox, where)
    return csum, offsets, area, bbox


def test_det_masks_area_and_box_equal_pycocotools():
    # det_masks finds rleToBbox boxes by walking (column, row) run by run: random masks (runs that wrap columns,
    # empty and full masks, a 1-pixel-high image) against pycocotools' area / toBbox.
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(0)
    items, hs, ws = [], [], []
    for k in range(300):
        h, w = (int(rng.integers(1, 40)), int(rng.integers(1, 40))) if k % 50 else (1, 17)
        m = (rng.random((h, w)) < [0.02, 0.3, 0.9, 0.0, 1.0][k % 5]).astype(np.uint8)
        if k % 7 == 0:
            m[:, : w // 2] = 1  # foreground runs that span whole columns
        rle = coco_mask.encode(np.asfortranarray(m))
        items.append({"segmentation": {"size": [h, w], "counts": rle["counts"].decode()}})
        hs.append(h)
        ws.append(w)
    rows = np.arange(len(items), dtype=np.int64)
    h, w = np.array(hs, np.int64), np.array(ws, np.int64)
    _, _, area, bbox = _det_masks(items, rows, h, w, None, lambda *a: None, "r")
    rles = [dict(it["segmentation"], counts=it["segmentation"]["counts"].encode()) for it in items]
    np.testing.assert_array_equal(area, [coco_mask.area(r) for r in rles])
    np.testing.assert_array_equal(bbox, np.stack([coco_mask.toBbox(r) for r in rles]))


@pytest.mark.slow  # pycocotools' Python loops are most of its time (left out of the sanitized run)
def test_cocoeval_one_category_beyond_one_sort_chunk_equals_pycocotools():
    # 70,000 detections of one category with tied scores: accumulate sorts them in interruptible chunks of 2^16 and
    # merges; the order must stay pycocotools' stable mergesort.
    gt, res = detection_data(n_images=700, n_cats=1, seed=5)
    assert len(res) > 2**16

    def setup(p):
        # Two thresholds and one area range: the sort is the same per (category, area, maxDets) cell, and
        # pycocotools' per-threshold, per-area Python loops (most of the test's time) run 20x fewer times.
        p.iouThrs = np.array([0.5, 0.75])
        p.areaRng, p.areaRngLbl = [p.areaRng[0]], [p.areaRngLbl[0]]

    _check(gt, res, "bbox", setup=setup, eval_imgs=False)
