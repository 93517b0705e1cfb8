"""vlkernels.detection.LVISEval against lvis-api 0.5.3: precision, recall, results and eval_imgs bit for bit."""

import contextlib
import copy
import io
import logging

import numpy as np
import pytest

from vlkernels.detection import LVISEval
from vlkernels.detection.synthetic import detection_data

lvis = pytest.importorskip("lvis")


@pytest.fixture(autouse=True)
def _np_float_alias(monkeypatch):
    # lvis-api 0.5.3 calls np.float (the builtin float, removed from numpy in 1.24).
    monkeypatch.setattr(np, "float", float, raising=False)


def _anchor(gt, res, iou, setup=None):
    g = lvis.LVIS.__new__(lvis.LVIS)
    g.logger = logging.getLogger("lvis-test")
    g.dataset = copy.deepcopy(gt)
    g._create_index()
    d = lvis.LVISResults(g, copy.deepcopy(res))
    E = lvis.LVISEval(g, d, iou)
    if setup:
        setup(E.params)
    E.run()
    return E


def _check(gt, res, iou, setup=None, eval_imgs=True):
    logging.getLogger("lvis").setLevel(logging.ERROR)
    L = _anchor(gt, res, iou, setup)
    V = LVISEval(gt, res, iou)
    if setup:
        setup(V.params)
    V.run()
    for k in ("precision", "recall"):
        assert L.eval[k].shape == V.eval[k].shape
        np.testing.assert_array_equal(L.eval[k], V.eval[k], err_msg=k)
    assert list(L.results.items()) == list(V.results.items())
    if eval_imgs:
        assert len(L.eval_imgs) == len(V.eval_imgs)
        for n, (x, y) in enumerate(zip(L.eval_imgs, V.eval_imgs)):
            assert (x is None) == (y is None), n
            if x is not None:
                assert x.keys() == y.keys()
                for k in x:
                    np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=f"{n} {k}")
    return L, V


@pytest.mark.parametrize("iou", ["bbox", "segm"])
def test_lvis_generated_equals_lvis_api(iou):
    # 330 detections per image: LVISResults keeps the 300 best of each.
    gt, res = detection_data(n_images=12, n_cats=60, dets_per_image=330, masks=True, lvis=True, seed=21)
    _check(gt, res, iou)


def test_lvis_zero_area_and_custom_category_order():
    gt, res = detection_data(n_images=20, n_cats=40, dets_per_image=50, lvis=True, seed=22)
    gt["annotations"][0]["area"] = 0.0  # get_ann_ids keeps only 0 < area < inf
    res[3]["bbox"][2] = 0.0

    def setup(p):
        p.cat_ids = p.cat_ids[::-1][:25]
        p.img_ids = p.img_ids[2:]

    _check(gt, res, "bbox", setup)


def test_lvis_print_results_lines():
    gt, res = detection_data(n_images=8, n_cats=30, dets_per_image=40, lvis=True, seed=23)
    L, V = _check(gt, res, "bbox", eval_imgs=False)
    out = []
    for E in (L, V):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            E.print_results()
        out.append(buf.getvalue())
    assert out[0] == out[1] and out[0].count("\n") == 13


def test_lvis_bad_input_raises():
    gt, res = detection_data(n_images=4, n_cats=10, dets_per_image=10, lvis=True, seed=24)
    bad = copy.deepcopy(gt)
    del bad["images"][1]["neg_category_ids"]
    with pytest.raises(ValueError, match="neg_category_ids"):
        LVISEval(bad, res, "bbox")
    E = LVISEval(gt, res, "bbox")
    E.params.use_cats = 0
    with pytest.raises(ValueError, match="use_cats"):
        E.evaluate()
    bad = copy.deepcopy(gt)
    bad["categories"][0]["frequency"] = "x"
    with pytest.raises(ValueError, match="frequency 'x'"):
        LVISEval(bad, res, "bbox").evaluate()
    r = copy.deepcopy(res)
    r[2]["image_id"] = -5
    with pytest.raises(ValueError, match=r"results\[\d+\]\['image_id'\] = -5"):
        LVISEval(gt, r, "bbox")
    with pytest.raises(ValueError, match="iou_type"):
        LVISEval(gt, res, "keypoints")


def test_lvis_params_changed_after_evaluate():
    """eval_imgs follows the params evaluate() ran with, as lvis-api's (filled inside evaluate) does; accumulate()
    refuses params whose thresholds, ranges or ids changed since (lvis-api raises IndexError or reads another
    threshold's row: AP75 came out 1.0 where it is 0); ids stay Python ints, as lvis-api keeps them."""
    logging.getLogger("lvis").setLevel(logging.ERROR)
    gt, res = detection_data(n_images=6, n_cats=12, dets_per_image=15, lvis=True, seed=25)
    L = _anchor(gt, res, "bbox")
    V = LVISEval(gt, res, "bbox")
    V.evaluate()
    V.params.iou_thrs = np.array([0.5])
    V.params.area_rng = [[0, 1e10]]
    assert len(V.eval_imgs) == len(L.eval_imgs)
    for x, y in zip(L.eval_imgs, V.eval_imgs):
        assert (x is None) == (y is None)
        if x is not None:
            assert np.asarray(x["dt_matches"]).shape == np.asarray(y["dt_matches"]).shape
            assert type(y["category_id"]) is int
    with pytest.raises(ValueError, match=r"params.iou_thrs changed since evaluate\(\); run evaluate\(\) again"):
        V.accumulate()
    assert all(type(c) is int for c in V.params.cat_ids)
