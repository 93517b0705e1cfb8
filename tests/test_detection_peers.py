"""COCOeval and LVISEval on what the anchors' users pass: ``COCO.loadRes`` and ``LVISResults`` objects of bbox-only
and segm-only results (loadRes stores numpy boxes and areas for the latter), numpy fields, the COCO val2014 workflow
(polygon and crowd-RLE ground truths, bbox-only and segm-only fake results), and detectron2's COCO evaluation cases
(fields omitted, empty sets, degenerate params). Every number is compared with pycocotools 2.0.11 / lvis-api 0.5.3
run on the same objects.

The real 100-image val2014 files (``instances_val2014_100.json`` and cocoapi's
``instances_val2014_fake{bbox,segm}100_results.json``) are read from ``VLKERNELS_COCO_VAL2014`` or the shared data
folder's ``detection/val2014_100`` when either holds them; every case also runs on a generated set of the same shape,
made here.
"""

import contextlib
import copy
import io
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from shared_data import shared_data_dir

from vlkernels.detection import COCOeval, LVISEval
from vlkernels.detection.synthetic import detection_data

pycoco = pytest.importorskip("pycocotools.cocoeval")
coco_mask = pytest.importorskip("pycocotools.mask")
from coco_runs import coco as _coco  # noqa: E402
from pycocotools.coco import COCO  # noqa: E402


def _load_res(gt: COCO, res) -> COCO:
    with contextlib.redirect_stdout(io.StringIO()):
        return gt.loadRes(copy.deepcopy(res) if isinstance(res, list) else res)


def _run(E, setup=None):
    if setup:
        setup(E.params)
    with contextlib.redirect_stdout(io.StringIO()):
        E.evaluate()
        E.accumulate()
        E.summarize()
    return E


def _same(P, V) -> None:
    for k in ("precision", "recall", "scores"):
        assert P.eval[k].shape == V.eval[k].shape, k
        np.testing.assert_array_equal(P.eval[k], V.eval[k], err_msg=k)
    np.testing.assert_array_equal(P.stats, V.stats)


def _octagon(box) -> list:
    """A polygon inscribed in the xywh box (COCO ground truths are polygons)."""
    x, y, w, h = box
    a, b = 0.3 * w, 0.3 * h
    return [
        [x + a, y, x + w - a, y, x + w, y + b, x + w, y + h - b, x + w - a, y + h, x + a, y + h, x, y + h - b, x, y + b]
    ]


def _val2014_like(n_images=100, seed=31):
    """A generated set shaped like COCO val2014's 100-image subset and cocoapi's fake results: ground truths as
    polygons (crowd regions as uncompressed RLE, as COCO stores them) with pycocotools' mask areas; results as a
    bbox-only list and a segm-only list (compressed RLE strings, no 'bbox'), like the two fake results files."""
    gt, res = detection_data(n_images=n_images, seed=seed)
    size = {i["id"]: (i["height"], i["width"]) for i in gt["images"]}
    for a in gt["annotations"]:
        h, w = size[a["image_id"]]
        poly = _octagon(a["bbox"])
        rle = coco_mask.merge(coco_mask.frPyObjects(poly, h, w))
        a["area"] = float(coco_mask.area(rle))
        if a["iscrowd"]:
            flat = coco_mask.decode(rle).flatten(order="F")
            runs = np.diff(np.r_[0, np.flatnonzero(np.diff(flat)) + 1, flat.size]).tolist()
            a["segmentation"] = {"size": [h, w], "counts": ([0] if flat[0] else []) + runs}
        else:
            a["segmentation"] = poly
    bbox_res = [{k: r[k] for k in ("image_id", "category_id", "bbox", "score")} for r in res]
    segm_res = []
    for r in res:
        h, w = size[r["image_id"]]
        rle = coco_mask.merge(coco_mask.frPyObjects(_octagon(r["bbox"]), h, w))
        segm_res.append(
            {
                "image_id": r["image_id"],
                "category_id": r["category_id"],
                "segmentation": {"size": [h, w], "counts": rle["counts"].decode()},
                "score": r["score"],
            }
        )
    return gt, bbox_res, segm_res


@pytest.fixture(scope="module")
def val2014_like():
    return _val2014_like()


@pytest.mark.parametrize("results", ["bbox_only", "segm_only"])
@pytest.mark.parametrize("iou", ["bbox", "segm"])
def test_cocoeval_load_res_objects_equal_pycocotools(val2014_like, results, iou):
    gt, bbox_res, segm_res = val2014_like
    res = bbox_res if results == "bbox_only" else segm_res
    cg = _coco(gt)
    cd = _load_res(cg, res)
    if results == "segm_only":
        # The shape that broke the reader: loadRes stores toBbox arrays and numpy areas.
        assert isinstance(cd.dataset["annotations"][0]["bbox"], np.ndarray)
    P = _run(pycoco.COCOeval(cg, cd, iou))
    # The same loadRes object, and the list it came from.
    _same(P, _run(COCOeval(cg, cd, iou)))
    _same(P, _run(COCOeval(gt, res, iou)))


def test_cocoeval_paths_of_the_fake_results_equal_pycocotools(val2014_like, tmp_path):
    gt, bbox_res, segm_res = val2014_like
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    for name, res, iou in (("bbox", bbox_res, "bbox"), ("segm", segm_res, "segm")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(res))
        with contextlib.redirect_stdout(io.StringIO()):
            cg = COCO(str(tmp_path / "gt.json"))
        P = _run(pycoco.COCOeval(cg, _load_res(cg, str(path)), iou))
        _same(P, _run(COCOeval(str(tmp_path / "gt.json"), str(path), iou)))


def test_cocoeval_numpy_fields_equal_pycocotools_on_lists(val2014_like):
    """Numpy boxes, scores, ids and areas in a results list or a ground truth (what a model's postprocessing hands
    over): the answer of pycocotools on the same values as Python lists (pycocotools' loadRes itself fails on a
    numpy 'bbox': it compares it with [])."""
    gt, bbox_res, segm_res = val2014_like
    cg = _coco(gt)
    np_res = [
        dict(
            r,
            bbox=np.asarray(r["bbox"], dtype=np.float64),
            score=np.float64(r["score"]),
            image_id=np.int64(r["image_id"]),
            category_id=np.int32(r["category_id"]),
        )
        for r in bbox_res
    ]
    P = _run(pycoco.COCOeval(cg, _load_res(cg, bbox_res), "bbox"))
    _same(P, _run(COCOeval(gt, np_res, "bbox")))
    np_gt = copy.deepcopy(gt)
    for a in np_gt["annotations"]:
        a["bbox"] = np.asarray(a["bbox"])
        a["area"] = np.float64(a["area"])
        a["id"] = np.int64(a["id"])
    _same(P, _run(COCOeval(np_gt, bbox_res, "bbox")))
    np_segm = [
        dict(r, segmentation=dict(r["segmentation"], counts=r["segmentation"]["counts"].encode())) for r in segm_res
    ]
    P = _run(pycoco.COCOeval(cg, _load_res(cg, segm_res), "segm"))
    _same(P, _run(COCOeval(gt, np_segm, "segm")))


def _val2014_dir() -> Path:
    d = os.environ.get("VLKERNELS_COCO_VAL2014")
    shared = shared_data_dir()
    if not d and shared is None:
        pytest.skip("no folder of the public 100-image val2014 files (VLKERNELS_COCO_VAL2014 or shared data)")
    d = Path(d) if d else shared / "detection" / "val2014_100"
    names = ("instances_val2014_100.json", "instances_val2014_fakebbox100_results.json")
    names += ("instances_val2014_fakesegm100_results.json",)
    if not all((d / n).is_file() for n in names):
        pytest.skip(f"{d} does not hold {', '.join(names)}")
    return d


@pytest.mark.parametrize("iou", ["bbox", "segm"])
def test_cocoeval_real_val2014_fake_results_equal_pycocotools(iou):
    d = _val2014_dir()
    gt_path = str(d / "instances_val2014_100.json")
    res_path = str(d / f"instances_val2014_fake{iou}100_results.json")
    with contextlib.redirect_stdout(io.StringIO()):
        cg = COCO(gt_path)
    cd = _load_res(cg, res_path)
    # cocoapi's demo restricts the evaluation to the first 100 images of the result set, sorted.
    img_ids = sorted(cg.getImgIds())[:100]

    def setup(p):
        p.imgIds = img_ids

    P = _run(pycoco.COCOeval(cg, cd, iou), setup)
    _same(P, _run(COCOeval(cg, cd, iou), setup))
    _same(P, _run(COCOeval(gt_path, res_path, iou), setup))
    with open(res_path) as f:
        res = json.load(f)
    _same(P, _run(COCOeval(cg, res, iou), setup))


# detectron2's tests/data/test_coco_evaluation.py cases (fields omitted, empty sets, degenerate params), run on a
# two-image set made here: pycocotools and vlkernels must agree where pycocotools evaluates; where it raises,
# vlkernels raises a ValueError naming the field, or evaluates where README's "What differs on purpose" says so.
def _d2_set():
    gt = {
        "categories": [{"id": 1, "name": "person"}, {"id": 65, "name": "bed"}],
        "images": [{"id": 285, "height": 640, "width": 586}, {"id": 139, "height": 426, "width": 640}],
        "annotations": [],
    }
    boxes = [(139, 1, [412.8, 157.61, 53.05, 138.01]), (139, 1, [384.43, 172.21, 15.12, 35.74])]
    boxes.append((285, 65, [20.5, 40.0, 300.0, 420.0]))
    for k, (img, cat, box) in enumerate(boxes):
        h, w = (426, 640) if img == 139 else (640, 586)
        poly = _octagon(box)
        area = float(coco_mask.area(coco_mask.merge(coco_mask.frPyObjects(poly, h, w))))
        gt["annotations"].append(
            {"segmentation": poly, "area": area, "iscrowd": 0, "image_id": img, "bbox": box}
            | {"category_id": cat, "id": 1000 + k}
        )
    dets = []
    for img, cat, box, score in (
        (139, 1, [417.33, 159.27, 47.66, 143.0], 0.99498),
        (139, 1, [383.59, 172.08, 17.96, 36.95], 0.76854),
        (139, 1, [457.84, 158.88, 9.9, 8.77], 0.07093),
        (285, 65, [25.0, 35.0, 290.0, 430.0], 0.5),
    ):
        h, w = (426, 640) if img == 139 else (640, 586)
        rle = coco_mask.merge(coco_mask.frPyObjects(_octagon(box), h, w))
        seg = {"size": [h, w], "counts": rle["counts"].decode()}
        dets.append({"image_id": img, "category_id": cat, "bbox": box, "score": score, "segmentation": seg})
    return gt, dets


def _d2_experiments():
    gt, dets = _d2_set()
    ex = {"full": (dets, gt, {})}
    ex["empty_dt"] = ([], gt, {})
    g = copy.deepcopy(gt)
    g["annotations"] = []
    ex["empty_gt"] = (dets, g, {})
    ex["no_categories"] = (dets, gt, {"useCats": 0})
    ex["no_ious"] = (dets, gt, {"iouThrs": []})
    ex["no_rec_thrs"] = (dets, gt, {"recThrs": []})
    ex["no_max_dets"] = (dets, gt, {"maxDets": []})
    ex["one_max_det"] = (dets, gt, {"maxDets": [1]})
    ex["no_area"] = (dets, gt, {"areaRng": [], "areaRngLbl": []})
    for field in ("id", "image_id", "category_id", "score", "area", "iscrowd", "ignore", "bbox", "segmentation"):
        g = copy.deepcopy(gt)
        for a in g["annotations"]:
            a.pop(field, None)
        ex["omit_gt_" + field] = (dets, g, {})
        ex["omit_dt_" + field] = ([{k: v for k, v in d.items() if k != field} for d in dets], gt, {})
    return ex


# Where pycocotools raises: what vlkernels does instead (a ValueError matching the pattern, or "evaluates" for a
# documented difference: a missing iscrowd is 0; an empty result list evaluates to zeros / -1).
_D2_PEER_FAILS = {
    "no_max_dets": r"params.maxDets must be",
    "no_ious": r"params.iouThrs must be a non-empty",
    "one_max_det": r"summarize needs 3 params.maxDets",
    "omit_gt_id": r"annotations\[0\] has no 'id'",
    "omit_gt_image_id": r"annotations\[0\] has no 'image_id'",
    "omit_gt_category_id": r"annotations\[0\] has no 'category_id'",
    "omit_gt_area": r"annotations\[0\] has no 'area'",
    "omit_gt_iscrowd": "evaluates",
    "omit_gt_bbox": r"annotations\[0\] has no 'bbox'|annotations\[0\]\['segmentation'\]",
    "omit_gt_segmentation": r"annotations\[0\]\['segmentation'\]|has no 'segmentation'",
    "omit_dt_image_id": r"results\[0\] has no 'image_id'",
    "omit_dt_category_id": r"results\[0\] has no 'category_id'",
    "omit_dt_score": r"results\[0\] has no 'score'",
    "omit_dt_segmentation": r"no 'segmentation'|segmentation",
    "empty_dt": "evaluates",
}


@pytest.mark.parametrize("name", list(_d2_experiments()))
@pytest.mark.parametrize("iou", ["bbox", "segm"])
def test_cocoeval_detectron2_cases(name, iou):
    dt, gt, params = _d2_experiments()[name]

    def setup(p):
        for k, v in params.items():
            setattr(p, k, v)

    peer_error = None
    try:
        cg = _coco(gt)
        P = _run(pycoco.COCOeval(cg, _load_res(cg, dt), iou), setup)
    except Exception as e:  # any pycocotools failure is the fact compared here
        peer_error = e
    if peer_error is None:
        V = _run(COCOeval(gt, dt, iou), setup)
        for k in ("precision", "recall"):
            np.testing.assert_array_equal(P.eval[k], V.eval[k], err_msg=f"{name} {k}")
        np.testing.assert_array_equal(P.stats, V.stats)
        return
    expect = _D2_PEER_FAILS.get(name)
    assert expect is not None, f"{name}/{iou}: pycocotools raised {peer_error!r}; add the expected vlkernels outcome"
    if expect == "evaluates":
        V = _run(COCOeval(gt, dt, iou), setup)
        assert np.asarray(V.stats).shape == (12,)
        return
    with pytest.raises(ValueError, match=expect):
        _run(COCOeval(gt, dt, iou), setup)


def test_cocoeval_detectron2_unknown_category_raises():
    """detectron2's test_unknown_category: a prediction of a category the ground truth lacks (pycocotools drops it
    silently; detectron2 asserts) is a ValueError naming the result."""
    gt, dets = _d2_set()
    dets = copy.deepcopy(dets)
    dets[1]["category_id"] = 80
    with pytest.raises(ValueError, match=r"results\[1\]\['category_id'\] = 80 is not an id"):
        COCOeval(gt, dets, "bbox").evaluate()


# LVISResults of segm-only and bbox-only results.
lvis = pytest.importorskip("lvis")


@pytest.fixture
def _np_float_alias(monkeypatch):
    # lvis-api 0.5.3 calls np.float (the builtin float, removed from numpy in 1.24).
    monkeypatch.setattr(np, "float", float, raising=False)


@pytest.mark.usefixtures("_np_float_alias")
@pytest.mark.parametrize(
    "results, iou", [("bbox_only", "bbox"), ("bbox_only", "segm"), ("segm_only", "bbox"), ("segm_only", "segm")]
)
def test_lvis_results_objects_equal_lvis_api(results, iou):
    logging.getLogger("lvis").setLevel(logging.ERROR)
    gt, res = detection_data(n_images=10, n_cats=30, dets_per_image=40, masks=True, lvis=True, seed=41)
    if results == "bbox_only":
        # LVISResults gives each box result the polygon of its corners (segm evaluates those).
        res = [{k: v for k, v in r.items() if k != "segmentation"} for r in res]
    else:
        res = [{k: v for k, v in r.items() if k != "bbox"} for r in res]
    g = lvis.LVIS.__new__(lvis.LVIS)
    g.logger = logging.getLogger("lvis-test")
    g.dataset = copy.deepcopy(gt)
    g._create_index()
    d = lvis.LVISResults(g, copy.deepcopy(res))
    if results == "segm_only":
        assert isinstance(d.dataset["annotations"][0]["bbox"], np.ndarray)
    L = lvis.LVISEval(g, d, iou)
    L.run()
    for V in (LVISEval(g, d, iou), LVISEval(gt, res, iou)):
        V.run()
        for k in ("precision", "recall"):
            np.testing.assert_array_equal(L.eval[k], V.eval[k], err_msg=k)
        assert list(L.results.items()) == list(V.results.items())
