"""The detection readers on hostile input: mask sizes whose h*w does not fit COCO RLE, ids beyond 2**53 and near
2**63 (exact int64 end to end, compared with pycocotools, which keeps Python ints), non-integer params ids, label
overflow, and the ``vlkernels detection`` CLI on malformed files (a message naming the file / annotation, exit 2,
never a traceback)."""

import contextlib
import copy
import io
import json
import re

import numpy as np
import pytest

from vlkernels.detection import COCOeval, LVISEval

pycoco = pytest.importorskip("pycocotools.cocoeval")
coco_mask = pytest.importorskip("pycocotools.mask")
from coco_runs import anchor as _anchor  # noqa: E402
from coco_runs import ours as _ours  # noqa: E402

BIG = 2**53


def _gt(img_ids=(1, 2), cat_ids=(1, 2), anns=None, size=(100, 120)):
    h, w = size
    images = [{"id": i, "height": h, "width": w} for i in img_ids]
    if anns is None:
        anns = [
            {"image_id": img_ids[0], "category_id": cat_ids[0], "bbox": [10, 10, 30, 30]},
            {"image_id": img_ids[-1], "category_id": cat_ids[-1], "bbox": [50, 40, 40, 20]},
        ]
    full = [dict({"id": k + 1, "iscrowd": 0, "area": a["bbox"][2] * a["bbox"][3]}, **a) for k, a in enumerate(anns)]
    return {"images": images, "categories": [{"id": c} for c in cat_ids], "annotations": full}


def _det(img, cat, box, score=0.9):
    return {"image_id": img, "category_id": cat, "bbox": list(box), "score": score}


def _same(gt, res, iou="bbox", setup=None):
    P, V = _anchor(gt, res, iou, setup), _ours(gt, res, iou, setup)
    for k in ("precision", "recall", "scores"):
        np.testing.assert_array_equal(P.eval[k], V.eval[k], err_msg=k)
    np.testing.assert_array_equal(P.stats, V.stats)
    return P, V


# --- image sizes: read only for masks -------------------------------------------------------------------------------


def test_bbox_ground_truth_without_image_sizes_equals_pycocotools():
    """Image 'height' / 'width' are read only to make masks: a bbox evaluation of a dataset without them gives
    pycocotools' answers (hand-made bbox datasets often leave them out)."""
    gt = _gt()
    for img in gt["images"]:
        del img["height"], img["width"]
    _same(gt, [_det(1, 1, (11, 10, 30, 30)), _det(2, 2, (50, 40, 40, 22), 0.5), _det(2, 1, (0, 0, 5, 5), 0.7)])


@pytest.mark.parametrize("iou", ["bbox", "segm"])
def test_rle_masks_without_image_sizes_equal_pycocotools(iou):
    """RLE ground truths and segmentation-only results on images without sizes: an RLE carries its own size. For
    bbox pycocotools evaluates them (boxes from toBbox) and so does this; for segm its annToRLE reads the image size
    first and raises KeyError, where this evaluates the masks as pycocotools does once the sizes are given."""
    from pycocotools import mask as coco_mask

    def rle(y0, x0, y1, x1):
        m = np.zeros((20, 30), dtype=np.uint8, order="F")
        m[y0:y1, x0:x1] = 1
        r = coco_mask.encode(m)
        return {"size": r["size"], "counts": r["counts"].decode()}

    gt = _gt(anns=[{"image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 8]}, {"image_id": 2, "category_id": 2,
                                                                                "bbox": [5, 5, 6, 6]}])  # fmt: skip
    gt["annotations"][0]["segmentation"] = rle(2, 2, 10, 12)
    gt["annotations"][1]["segmentation"] = rle(5, 5, 11, 11)
    for img in gt["images"]:
        del img["height"], img["width"]
    res = [
        {"image_id": 1, "category_id": 1, "segmentation": rle(2, 3, 10, 12), "score": 0.9},
        {"image_id": 2, "category_id": 2, "segmentation": rle(4, 5, 11, 12), "score": 0.8},
        {"image_id": 2, "category_id": 1, "segmentation": rle(0, 0, 3, 3), "score": 0.7},
    ]
    if iou == "bbox":
        _same(gt, res, iou)
        return
    sized = copy.deepcopy(gt)
    for img in sized["images"]:
        img.update(height=20, width=30)
    P, V = _anchor(sized, res, iou), _ours(gt, res, iou)
    for k in ("precision", "recall", "scores"):
        np.testing.assert_array_equal(P.eval[k], V.eval[k], err_msg=k)
    np.testing.assert_array_equal(P.stats, V.stats)


def test_segm_without_image_sizes_names_the_image():
    gt = _gt(anns=[{"image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 4], "segmentation": [[0, 0, 4, 0, 4, 4]]}])
    del gt["images"][0]["height"]
    res = [{"image_id": 1, "category_id": 1, "segmentation": [[0, 0, 4, 0, 4, 4]], "score": 0.9}]
    with pytest.raises(ValueError, match=r"images\[0\] \(id 1\) needs a non-negative 'height' and 'width' to make"):
        COCOeval(gt, res, "segm").evaluate()


# --- h*w beyond COCO RLE's 32-bit sizes, on every segmentation path ---------------------------------------------


@pytest.mark.parametrize(
    "size",
    [(2**32, 2**32), (2**16, 2**16), (2**31, 3), (1, 2**32)],
)
@pytest.mark.parametrize("path", ["compressed", "uncompressed", "polygon"])
@pytest.mark.parametrize("side", ["annotations", "results"])
def test_segm_mask_size_beyond_2_32_pixels_raises(size, path, side):
    h, w = size
    seg = {
        "compressed": {"size": [h, w], "counts": ""},
        "uncompressed": {"size": [h, w], "counts": [h * w]},
        "polygon": [[1, 1, 5, 1, 5, 5]],
    }[path]
    # Image 1 has the huge size; the other side's annotation sits on image 2 (100 x 120).
    poly = [[1, 1, 5, 1, 5, 5]]
    gt = _gt(
        img_ids=(1, 2),
        cat_ids=(1,),
        anns=[{"image_id": 1 if side == "annotations" else 2, "category_id": 1, "bbox": [1, 1, 4, 4]}],
    )
    gt["images"][0].update(height=h, width=w)
    gt["annotations"][0]["segmentation"] = seg if side == "annotations" else poly
    res = [dict(_det(1 if side == "results" else 2, 1, (1, 1, 4, 4)), segmentation=seg if side == "results" else poly)]
    with pytest.raises(ValueError, match=rf"{side}\[0\]\['segmentation'\] is on an image of {h} x {w} pixels; COCO"):
        COCOeval(gt, res, "segm").evaluate()


def test_segm_largest_mask_size_is_evaluated():
    # 65535 x 65537 = 2**32 - 1 pixels, the largest COCO RLE holds: evaluated as pycocotools does.
    h, w = 65535, 65537
    seg = coco_mask.frPyObjects([[10, 10, 40, 10, 40, 40, 10, 40]], h, w)[0]
    seg = {"size": [h, w], "counts": seg["counts"].decode()}
    gt = _gt(
        img_ids=(1,), cat_ids=(1,), anns=[{"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30]}], size=(h, w)
    )
    gt["annotations"][0]["segmentation"] = seg
    gt["annotations"][0]["area"] = float(coco_mask.area(dict(seg, counts=seg["counts"].encode())))
    res = [dict(_det(1, 1, (10, 10, 30, 30)), segmentation=seg)]
    _same(gt, res, "segm")


# --- ids: exact int64 ---------------------------------------------------------------------------------------------


def test_category_ids_beyond_2_53_are_distinct():
    # 2**53 and 2**53 + 1 are one double: read through float64 a detection of 2**53 matched 2**53 + 1 (AP 1.0).
    gt = _gt(cat_ids=(BIG, BIG + 1))
    res = [_det(1, BIG, (10, 10, 30, 30)), _det(2, BIG + 1, (50, 40, 40, 20)), _det(2, BIG, (50, 40, 40, 20), 0.5)]
    _, V = _same(gt, res)
    assert [int(c) for c in V.params.catIds] == [BIG, BIG + 1]
    # A category only the results name is refused (pycocotools drops it silently).
    gt1 = _gt(cat_ids=(BIG + 1,))
    with pytest.raises(ValueError, match=rf"results\[0\]\['category_id'\] = {BIG} is not an id of the ground-truth"):
        COCOeval(gt1, [_det(1, BIG, (10, 10, 30, 30))], "bbox").evaluate()


def test_image_ids_beyond_2_53_are_distinct_and_checked():
    gt = _gt(img_ids=(BIG, BIG + 1))
    res = [_det(BIG, 1, (10, 10, 30, 30)), _det(BIG + 1, 2, (50, 40, 40, 20))]
    P, V = _same(gt, res)
    ids = [e["image_id"] for e in V.evalImgs if e is not None]
    assert ids == [e["image_id"] for e in P.evalImgs if e is not None] and {BIG, BIG + 1} == set(ids)
    # A detection on an image the ground truth lacks (pycocotools: AssertionError in loadRes).
    with pytest.raises(ValueError, match=rf"results\[1\]\['image_id'\] = {BIG + 2} is not an id of the ground-truth"):
        COCOeval(gt, [res[0], _det(BIG + 2, 1, (1, 1, 2, 2))], "bbox").evaluate()


def test_annotation_ids_beyond_2_53_stay_exact_in_eval_imgs():
    gt = _gt(img_ids=(1,), cat_ids=(1,), anns=[{"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30]}] * 2)
    gt["annotations"][0]["id"], gt["annotations"][1]["id"] = BIG, BIG + 1
    res = [_det(1, 1, (10, 10, 30, 30))]
    P, V = _same(gt, res)
    assert V.evalImgs[0]["gtIds"] == P.evalImgs[0]["gtIds"] == [BIG, BIG + 1]


def test_ids_near_2_63(tmp_path):
    top, low = 2**63 - 1, -(2**63)
    gt = _gt(img_ids=(low, top), cat_ids=(top, low))
    res = [_det(low, top, (10, 10, 30, 30)), _det(top, low, (50, 40, 40, 20))]
    _same(gt, res)
    # Through a JSON file (json keeps big ints exact).
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "res.json").write_text(json.dumps(res))
    V = _ours(str(tmp_path / "gt.json"), str(tmp_path / "res.json"))
    assert [int(i) for i in V.params.imgIds] == [low, top]
    for bad in (2**63, -(2**63) - 1, 10**30):
        g = _gt(img_ids=(1, bad))
        with pytest.raises(ValueError, match=r"images\[1\]\['id'\] is outside the int64"):
            COCOeval(g, [], "bbox")


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda g, r: g["images"][0].update(id=1.5), r"images\[0\]\['id'\] must be an integer, got 1.5"),
        (lambda g, r: g["images"][0].update(id="1"), r"images\[0\]\['id'\] must be an integer, not a string"),
        (lambda g, r: g["images"][1].update(id=float(BIG + 2)), r"images\[1\]\['id'\] is a float beyond 2\*\*53"),
        (lambda g, r: g["categories"][1].update(id=None), r"categories\[1\]\['id'\] must be an integer, got None"),
        (lambda g, r: g["annotations"][1].update(id=[1]), r"annotations\[1\]\['id'\] must be an integer"),
        (lambda g, r: g["images"][0].update(height=10.5), r"images\[0\]\['height'\] must be an integer"),
        (lambda g, r: g["annotations"][0].update(iscrowd=2), r"annotations\[0\]\['iscrowd'\] must be 0 or 1"),
        (lambda g, r: r[0].update(image_id=float("nan")), r"results\[0\]\['image_id'\] must be an integer, got nan"),
        (lambda g, r: r[0].update(category_id=2**64), r"results\[0\]\['category_id'\] is outside the int64 range"),
        (lambda g, r: r[1].update(image_id=10**5000), r"results\[1\]\['image_id'\] is outside the int64 range"),
    ],
)
def test_non_integer_ids_raise(mutate, match):
    gt, res = _gt(), [_det(1, 1, (10, 10, 30, 30)), _det(2, 2, (50, 40, 40, 20))]
    mutate(gt, res)
    with pytest.raises(ValueError, match=match):
        COCOeval(gt, res, "bbox").evaluate()


def test_integral_float_and_numpy_ids_equal_their_ints():
    gt, res = _gt(), [_det(1, 1, (10, 10, 30, 30)), _det(2, 2, (50, 40, 40, 20)), _det(2, 1, (0, 0, 5, 5), 0.3)]
    P = _anchor(gt, res)
    g2 = copy.deepcopy(gt)
    g2["images"][0]["id"] = 1.0
    g2["annotations"][1]["category_id"] = np.int16(2)
    r2 = copy.deepcopy(res)
    r2[1]["image_id"] = np.uint64(2)
    V = _ours(g2, r2)
    np.testing.assert_array_equal(P.eval["precision"], V.eval["precision"])


def test_params_ids_must_be_integers():
    gt, res = _gt(), [_det(1, 1, (10, 10, 30, 30)), _det(2, 2, (50, 40, 40, 20))]
    E = COCOeval(gt, res, "bbox")
    E.params.imgIds = [1.5, 2]
    # pycocotools selects nothing for 1.5 and answers as for [2] (AP 1.0); truncating gave [1, 2] (AP 0.252 in the
    # report). Refused, naming the entry.
    with pytest.raises(ValueError, match=r"params.imgIds\[0\] must be an integer, got 1.5 \(ids are integers\)"):
        E.evaluate()
    E = COCOeval(gt, res, "bbox")
    E.params.catIds = [1, "2"]
    with pytest.raises(ValueError, match=r"params.catIds\[1\] must be an integer, not a string"):
        E.evaluate()
    E = COCOeval(gt, res, "bbox")
    E.params.imgIds = 7
    with pytest.raises(ValueError, match="params.imgIds must be a list of integer ids, got int"):
        E.evaluate()

    # Integral floats and numpy arrays select as their ints do (pycocotools: 2.0 == 2 as a dict key).
    def setup(p):
        p.imgIds = [2.0]
        p.catIds = np.array([2, 1], dtype=np.uint8)

    _same(gt, res, setup=setup)


@pytest.mark.usefixtures("_np_float_alias")
def test_lvis_params_ids_must_be_integers():
    from vlkernels.detection.synthetic import detection_data

    gt, res = detection_data(n_images=4, n_cats=10, dets_per_image=10, lvis=True, seed=5)
    E = LVISEval(gt, res, "bbox")
    E.params.img_ids = [1.5]
    with pytest.raises(ValueError, match=r"params.img_ids\[0\] must be an integer, got 1.5"):
        E.evaluate()
    E = LVISEval(gt, res, "bbox")
    E.params.cat_ids = [E.params.cat_ids[0] + 0.5]
    with pytest.raises(ValueError, match=r"params.cat_ids\[0\] must be an integer"):
        E.evaluate()
    g = copy.deepcopy(gt)
    g["images"][1]["neg_category_ids"] = ["x"]
    with pytest.raises(ValueError, match=r"images\[1\]\['neg_category_ids'\]\[0\] must be an integer, not a string"):
        LVISEval(g, res, "bbox")


@pytest.fixture
def _np_float_alias(monkeypatch):
    monkeypatch.setattr(np, "float", float, raising=False)


# --- the CLI on malformed files ----------------------------------------------------------------------------------


def _cli(tmp_path, gt, res, iou="segm", raw_gt: bytes | None = None):
    from vlkernels.cli import main

    g, r = tmp_path / "gt.json", tmp_path / "res.json"
    g.write_bytes(raw_gt if raw_gt is not None else json.dumps(gt).encode())
    r.write_text(json.dumps(res))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["detection", str(g), str(r), "--iou-type", iou])
    return code, err.getvalue()


def _segm_gt(seg):
    gt = _gt(img_ids=(1,), cat_ids=(1,), anns=[{"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 30]}])
    gt["annotations"][0]["segmentation"] = seg
    return gt


_RES = [dict(_det(1, 1, (10, 10, 30, 30)), segmentation=[[10, 10, 40, 10, 40, 40]])]


@pytest.mark.parametrize(
    "seg, match",
    [
        (
            [["10", "10", "40", "10", "40", "40"]],
            r"annotations\[0\]\['segmentation'\]: polygon 0: coordinate 0 is a str",
        ),
        ([None], r"annotations\[0\]\['segmentation'\]: .*got NoneType"),
        ({"size": [100, 120]}, r"annotations\[0\]\['segmentation'\] is an RLE dict without 'size' and 'counts'"),
        ([], r"annotations\[0\]\['segmentation'\] is an empty list; expected polygons"),
        ("abc", r"annotations\[0\]\['segmentation'\] must be an RLE dict or a list of polygons, got str"),
        ({"size": [100, 120], "counts": None}, r"annotations\[0\]\['segmentation'\]: .*counts"),
        ({"size": [100, 120], "counts": [1, "x"]}, r"annotations\[0\]\['segmentation'\]: "),
        ({"size": [2**32, 2**32], "counts": ""}, r"annotations\[0\]\['segmentation'\] has size"),
    ],
)
def test_cli_malformed_segmentation_names_the_annotation(tmp_path, seg, match):
    code, err = _cli(tmp_path, _segm_gt(seg), _RES)
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: ") and re.search(match, err), err


def test_cli_malformed_files_name_the_file(tmp_path):
    gt = _segm_gt([[10, 10, 40, 10, 40, 40]])
    deep = b"[" * 100_000 + b"]" * 100_000
    for raw, match in (
        (deep, "nests arrays / objects too deeply"),
        (json.dumps(gt).encode()[:-3] + b"\xff\xfe}", "is not UTF-8, -16 or -32 text"),
        (b'{"images": [1e99999999999]', "is not valid JSON"),
        (b"\x00\x00", "is not valid JSON|is not UTF-8"),
    ):
        code, err = _cli(tmp_path, None, _RES, raw_gt=raw)
        assert code == 2 and "Traceback" not in err, err
        assert f"'{tmp_path / 'gt.json'}'" in err and re.search(match, err), err


def test_cli_accepts_bom_and_utf16_files_as_json_does(tmp_path):
    gt = _segm_gt([[10, 10, 40, 10, 40, 40, 10, 40]])
    code, _ = _cli(tmp_path, gt, _RES)
    assert code == 0
    want = _ours(gt, _RES, "segm").stats
    for raw in (
        b"\xef\xbb\xbf" + json.dumps(gt).encode(),
        json.dumps(gt).encode("utf-16"),
        json.dumps(gt).encode("utf-32"),
    ):
        assert json.loads(raw) == gt
        code, err = _cli(tmp_path, None, _RES, raw_gt=raw)
        assert code == 0, err
        np.testing.assert_array_equal(_ours(str(tmp_path / "gt.json"), _RES, "segm").stats, want)
