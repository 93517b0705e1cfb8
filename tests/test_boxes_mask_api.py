"""COCO mask construction (frPyObjects: polygons, boxes, uncompressed RLE) and merge, against pycocotools itself and
the cases of faster_coco_eval's tests/test_mask_api.py (pycocotools has no tests of its own)."""

import numpy as np
import pytest
import torch
from pycocotools import _mask as coco_c
from pycocotools import mask as coco_mask

from vlkernels.boxes import coco_mask as vlk_mask
from vlkernels.boxes import (
    fr_py_objects,
    rle_from_bboxes,
    rle_from_polygons,
    rle_from_uncompressed,
    rle_merge,
)
from vlkernels.ops import rle_decode

# faster_coco_eval tests/test_mask_api.py: its boxes, polygons and expected strings (taken from pycocotools).
FCE_BBOXES = np.array(
    [
        [3.0, 5.0, 4.0, 1.0],
        [5.0, 3.0, 3.0, 5.0],
        [8.0, 5.0, 8.0, 5.0],
        [3.0, 4.0, 7.0, 3.0],
        [2.0, 5.0, 2.0, 7.0],
        [8.0, 1.0, 9.0, 9.0],
        [8.0, 1.0, 9.0, 6.0],
        [7.0, 1.0, 9.0, 4.0],
        [4.0, 5.0, 4.0, 5.0],
        [2.0, 4.0, 5.0, 4.0],
    ]
)
FCE_BBOX_RLES = [
    b"Q21c000000o7",
    b"W35?000]7",
    b"U55?0000000000000[2",
    b"P23a000000000000T6",
    b"]17=0k9",
    b"Q59;000000000000000k1",
    b"Q56>000000000000000k1",
    b"]44`0000000000000000_2",
    b"e25?00000[7",
    b"\\14`00000000P8",
]
# fmt: off
FCE_POLY = np.array([
    [7., 8., 9., 3., 7., 1., 5., 1., 5., 8., 3., 4., 4., 7., 7., 8.],
    [4., 4., 7., 5., 5., 9., 3., 1., 2., 3., 1., 6., 6., 2., 2., 9.],
    [5., 3., 7., 1., 2., 5., 4., 9., 6., 6., 4., 8., 2., 9., 7., 4.],
    [5., 1., 1., 4., 7., 9., 2., 3., 6., 9., 7., 4., 3., 8., 1., 2.],
    [7., 5., 5., 8., 5., 3., 8., 8., 2., 6., 8., 7., 4., 6., 2., 6.],
    [8., 8., 4., 7., 6., 3., 9., 4., 9., 4., 7., 8., 7., 8., 2., 9.],
    [2., 8., 8., 6., 5., 8., 4., 8., 9., 4., 8., 3., 4., 5., 9., 7.],
    [4., 1., 8., 3., 8., 7., 9., 1., 3., 7., 5., 4., 9., 1., 9., 7.],
    [1., 4., 2., 9., 3., 4., 5., 5., 1., 4., 2., 1., 3., 1., 8., 8.],
    [6., 6., 4., 5., 9., 9., 1., 9., 8., 6., 5., 4., 3., 4., 7., 1.],
])
# fmt: on
FCE_POLY_RLES = [
    b"U36>1OO2Lm6",
    b"h02`012N_O0`00@1>OB3`0MQ8",
    b"]1120=210AN>1BOT9",
    b"f01c01^OO>0E0R11[O0AO]8",
    b"e22a0O@0b0010X7",
    b"f2110>212OO2Mj6",
    b"S21c00M1AO?110@O?0l6",
    b"V31c010000g6",
    b"f04?OBN?131O01N10X7",
    b"`11c00K0E1:0F090F2a0MX7",
]
FCE_UNCOMPRESSED = {"size": [1350, 1080], "counts": [0, 5, 5, 5, 5, 2, 3, 5, 2, 3, 5, 2, 3, 55]}
FCE_COMPRESSED = {"size": [1350, 1080], "counts": b"05500MN3ON3ONe1"}


def rles20(strings):
    return [{"size": [20, 20], "counts": s} for s in strings]


def test_faster_coco_eval_cases():
    assert rle_from_bboxes(FCE_BBOXES, 20, 20) == rles20(FCE_BBOX_RLES) == coco_c.frBbox(FCE_BBOXES, 20, 20)
    assert rle_from_polygons(FCE_POLY, 20, 20) == rles20(FCE_POLY_RLES) == coco_c.frPoly(FCE_POLY, 20, 20)
    assert fr_py_objects(list(FCE_POLY), 20, 20) == rles20(FCE_POLY_RLES)
    assert fr_py_objects(FCE_BBOXES, 20, 20) == rles20(FCE_BBOX_RLES)
    # The uncompressed RLE there does not sum to h*w: pycocotools transcodes it as given, and so does this.
    assert fr_py_objects(FCE_UNCOMPRESSED, 1350, 1080) == FCE_COMPRESSED
    assert fr_py_objects([FCE_UNCOMPRESSED], 1350, 1080) == [FCE_COMPRESSED]
    assert rle_from_uncompressed([FCE_UNCOMPRESSED]) == coco_c.frUncompressedRLE([FCE_UNCOMPRESSED], 1350, 1080)
    boxes = rles20(FCE_BBOX_RLES)
    assert rle_merge(boxes[:1]) == boxes[0]
    assert (
        rle_merge(boxes) == rle_merge(boxes, 0) == {"size": [20, 20], "counts": b"\\18<00N1100N2000000000000000000k1"}
    )
    assert rle_merge(boxes, 1) == {"size": [20, 20], "counts": b"`<"}


def random_polygon(g, kind, h, w):
    k = int(g.integers(1, 25))
    span = max(h, w)
    if kind == "self_intersecting":
        return g.uniform(0, span, 2 * k)
    if kind == "off_image":
        return g.uniform(-span, 2 * span, 2 * k)
    if kind == "sub_pixel":
        return g.uniform(-0.7, 0.7, 2 * k) + g.integers(0, span)
    if kind == "tenth_pixel_ties":
        # x.1 .. x.9 put 5x + .5 on exact integers and the walk's rounding on exact .5 ties.
        return g.integers(-5, 5, 2 * k) / 10 + g.integers(0, span, 2 * k)
    if kind == "degenerate":
        # repeated vertices, collinear points, one or two vertices
        t = np.sort(g.uniform(0, 1, k))
        d = g.uniform(-span / 4, span, 4)
        p = np.stack([d[0] + t * d[2], d[1] + t * d[3]], 1).round(int(g.integers(0, 3)))
        return np.repeat(p, g.integers(1, 3, k), 0).ravel()
    if kind == "huge":
        return g.uniform(-3e5, 3e5, 2 * min(k, 4))
    if kind == "convex":
        ang = np.sort(g.uniform(0, 2 * np.pi, max(k, 3)))
        r = g.uniform(0.5, span / 2)
        c = g.uniform(0, span, 2)
        return np.stack([c[0] + r * np.cos(ang), c[1] + r * np.sin(ang)], 1).ravel().round(2)
    raise AssertionError(kind)


KINDS = ["self_intersecting", "off_image", "sub_pixel", "tenth_pixel_ties", "degenerate", "huge", "convex"]


@pytest.mark.parametrize("kind", KINDS)
def test_rle_from_polygons_matches_pycocotools(kind):
    g = np.random.default_rng(KINDS.index(kind))
    # pycocotools walks every 1/5 pixel of the boundary: ~0.1 s per polygon at 1e6 pixels.
    for _ in range(6 if kind == "huge" else 60):
        h, w = int(g.integers(1, 120)), int(g.integers(1, 120))
        polys = [random_polygon(g, kind, h, w).tolist() for _ in range(1 if kind == "huge" else int(g.integers(1, 4)))]
        ours = fr_py_objects(polys, h, w) if len(polys[0]) > 4 else rle_from_polygons(polys, h, w)
        assert ours == coco_c.frPoly(polys, h, w), (h, w, polys)
        assert rle_merge(ours) == coco_mask.merge(ours)
        assert rle_merge(ours, intersect=True) == coco_mask.merge(ours, intersect=True)


def test_rle_from_polygons_empty_and_tiny_images():
    square = [0.0, 0.0, 3.0, 0.0, 3.0, 3.0, 0.0, 3.0]
    for h, w in [(1, 1), (0, 5), (5, 1), (1, 5)]:
        assert rle_from_polygons([square, [], [2.0, 2.0]], h, w) == coco_c.frPoly([square, [], [2.0, 2.0]], h, w)
    assert rle_from_polygons([], 4, 4) == []
    assert fr_py_objects([], 4, 4) == []


def test_rle_from_bboxes_matches_pycocotools():
    g = np.random.default_rng(11)
    for _ in range(40):
        h, w = int(g.integers(1, 200)), int(g.integers(1, 200))
        b = np.concatenate([g.uniform(-20, 220, (7, 2)), g.uniform(-30, 220, (7, 2))], 1)
        b[::2] = np.round(b[::2] * 10) / 10  # tenth-pixel ties
        b[1, 2:] = 0  # empty box
        ref = coco_mask.frPyObjects(b, h, w)
        assert rle_from_bboxes(b, h, w) == ref
        assert fr_py_objects(b.tolist(), h, w) == ref  # pycocotools wants an ndarray; a list is accepted here
        assert fr_py_objects(torch.from_numpy(b), h, w) == ref
        assert fr_py_objects(b[3].tolist(), h, w) == ref[3]  # one flat box -> one dict
    assert rle_from_bboxes(np.zeros((0, 4)), 5, 5) == coco_mask.frPyObjects(np.zeros((0, 4)), 5, 5) == []


def test_fr_py_objects_dispatch_like_pycocotools():
    h, w = 30, 40
    poly = [1.0, 1.0, 20.5, 2.0, 18.0, 25.2, 3.3, 20.0]
    box = [2.0, 3.0, 10.5, 7.25]
    rle = {"size": [h, w], "counts": [17, 5, 25, 5, 1148]}
    for obj in ([poly], [poly, poly[:6]], [np.array(poly)], np.array([box]), [rle], rle):
        assert fr_py_objects(obj, h, w) == coco_mask.frPyObjects(obj, h, w)
    # Forms pycocotools 2.0.11 fails on: the evident result here, equal to pycocotools' own per-kind functions.
    for obj in (poly, box, [box], (poly,), []):
        with pytest.raises((TypeError, IndexError, Exception)):
            coco_mask.frPyObjects(obj, h, w)
    assert fr_py_objects(poly, h, w) == coco_c.frPoly([poly], h, w)[0]
    assert fr_py_objects(box, h, w) == coco_c.frBbox(np.array([box]), h, w)[0]
    assert fr_py_objects([box], h, w) == coco_c.frBbox(np.array([box]), h, w)
    assert fr_py_objects((poly,), h, w) == coco_c.frPoly([poly], h, w)
    # A list of dicts with compressed counts is re-encoded from its runs.
    compressed = coco_mask.frPyObjects([rle], h, w)
    assert fr_py_objects(compressed, h, w) == compressed
    # Integral floats for h and w (JSON) are accepted.
    assert fr_py_objects([poly], float(h), float(w)) == coco_mask.frPyObjects([poly], h, w)


def test_uncompressed_rle_keeps_its_own_size():
    rles = [{"size": [3, 4], "counts": [2, 5, 5]}, {"size": [2, 2], "counts": np.array([0, 4])}]
    assert rle_from_uncompressed(rles) == coco_c.frUncompressedRLE(rles, 0, 0)
    assert fr_py_objects(rles, 99, 99) == coco_mask.frPyObjects(rles, 99, 99)


def column_runs(mask):
    """Uncompressed COCO runs of one mask: column-major, starting with background."""
    flat = mask.T.ravel()
    change = np.flatnonzero(np.diff(np.r_[0, flat, 2]))  # the appended 2 closes the last run
    return np.diff(np.r_[0, change]).tolist()


def test_rle_merge_matches_pycocotools_and_decoded_masks():
    g = np.random.default_rng(5)
    for n in (1, 2, 3, 7):
        masks = (g.random((23, 17, n)) < 0.4).astype(np.uint8)
        masks[:, :, 0] = 0 if n == 3 else masks[:, :, 0]
        masks[0, 0, -1] = 1  # a zero-length first run
        rles = coco_mask.encode(np.asfortranarray(masks))
        for inter in (False, True):
            ours = rle_merge(rles, intersect=inter)
            assert ours == coco_mask.merge(rles, intersect=int(inter))
            want = masks.all(2) if inter else masks.any(2)
            np.testing.assert_array_equal(rle_decode(ours).numpy(), want)
        # str and uncompressed counts are accepted too (pycocotools takes bytes/str only)
        as_str = [{"size": r["size"], "counts": r["counts"].decode()} for r in rles]
        assert rle_merge(as_str) == coco_mask.merge(rles)
        runs = [{"size": [23, 17], "counts": column_runs(m)} for m in masks.transpose(2, 0, 1)]
        assert rle_merge(runs) == coco_mask.merge(rles)
    assert rle_merge([]) == coco_mask.merge([]) == {"size": [0, 0], "counts": b""}


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: rle_from_polygons([[1, 2, 3, 4, 5, 6, 7]], 9, 9), ValueError, "7 coordinates"),
        (lambda: rle_from_polygons([[1, 2, 3, 4, float("nan"), 6]], 9, 9), ValueError, "coordinate 4 is nan"),
        (lambda: rle_from_polygons([[0, 0, 3, 0, 3, float("inf")]], 9, 9), ValueError, "finite"),
        (lambda: rle_from_polygons([[0, 0, 3e8, 0, 3, 3]], 9, 9), ValueError, "1e8"),
        (lambda: rle_from_polygons([[0, 0, "3", 0, 3, 3]], 9, 9), TypeError, "coordinate 2 is a str"),
        (lambda: rle_from_polygons([[[0, 0], [3, 0], [3, 3]]], 9, 9), TypeError, "coordinate 0 is a list"),
        (lambda: rle_from_polygons([np.zeros((3, 2))], 9, 9), ValueError, "flat"),
        (lambda: rle_from_polygons([{1, 2, 3, 4, 5, 6}], 9, 9), TypeError, "polygon 0"),
        (lambda: rle_from_polygons("abcdef", 9, 9), TypeError, "polygons"),
        (lambda: rle_from_bboxes([[0, 0, 1]], 9, 9), ValueError, r"\(N, 4\)"),
        (lambda: rle_from_bboxes([[0, 0, float("nan"), 1]], 9, 9), ValueError, "box 0"),
        (lambda: fr_py_objects([[1, 2, 3, 4, 5, 6]], -1, 9), ValueError, "h must be non-negative"),
        (lambda: fr_py_objects([[1, 2, 3, 4, 5, 6]], 9, 2.5), TypeError, "w must be an integer"),
        (lambda: fr_py_objects([[1, 2, 3, 4, 5, 6]], True, 9), TypeError, "bool"),
        (lambda: fr_py_objects([[1, 2, 3, 4, 5, 6]], 2**17, 2**16), ValueError, "2\\*\\*32"),
        (lambda: fr_py_objects({1, 2}, 9, 9), TypeError, "fr_py_objects takes"),
        (lambda: fr_py_objects({"counts": [81]}, 9, 9), TypeError, "'size' and 'counts'"),
        (lambda: fr_py_objects([None], 9, 9), TypeError, "list items"),
        (lambda: fr_py_objects({"size": [3, 3], "counts": [-1, 10]}, 3, 3), ValueError, r"\[0, 2\*\*32\)"),
        (lambda: fr_py_objects({"size": [3, 3], "counts": [1.5, 7.5]}, 3, 3), ValueError, "integer"),
        (lambda: rle_merge({"size": [1, 1], "counts": b"1"}), ValueError, "list of RLE dicts"),
        (
            lambda: rle_merge([{"size": [1, 2], "counts": b"2"}, {"size": [2, 1], "counts": b"2"}]),
            ValueError,
            "one size",
        ),
        (lambda: rle_merge([{"size": [1, 2], "counts": b"3"}]), ValueError, "runs sum to"),
        (lambda: rle_merge([{"size": [1, 2], "counts": "2é"}]), ValueError, "non-ASCII"),
    ],
)
def test_mask_api_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_zero_width_image_gives_a_valid_empty_rle():
    # pycocotools compares against w - 1 in unsigned arithmetic, so w = 0 lets every column through and its RLE
    # covers pixels a 0-wide image does not have; here the only valid RLE of a 0-pixel image.
    box = np.array([[1.0, 1.0, 5.0, 5.0]])
    ref = coco_mask.frPyObjects(box, 10, 0)[0]
    with pytest.raises(ValueError, match="runs sum to"):
        rle_decode(ref)
    assert fr_py_objects(box, 10, 0) == [{"size": [10, 0], "counts": b"0"}]


@pytest.mark.parametrize(
    "size",
    [[2, 3], (2, 3), np.array([2, 3]), np.array([2, 3], dtype=np.uint8), [np.int64(2), np.uint32(3)], [2.0, 3.0]],
    ids=["list", "tuple", "ndarray", "ndarray_uint8", "numpy_scalars", "integral_floats"],
)
def test_rle_size_forms_pycocotools_reads(size):
    """An RLE's 'size' in every form pycocotools reads (np.array(mask.shape) is common) gives its answers."""
    rle = {"size": size, "counts": b"132"}
    plain = {"size": [2, 3], "counts": b"132"}
    np.testing.assert_array_equal(vlk_mask.decode(rle), coco_mask.decode(plain))
    np.testing.assert_array_equal(vlk_mask.area([rle]), coco_mask.area([rle]))
    np.testing.assert_array_equal(vlk_mask.toBbox([rle]), coco_mask.toBbox([rle]))
    np.testing.assert_array_equal(vlk_mask.iou([rle], [plain], [0]), coco_mask.iou([rle], [plain], [0]))
    assert vlk_mask.merge([rle, plain]) == coco_mask.merge([rle, plain])
    assert vlk_mask.frPyObjects([{"size": size, "counts": [1, 3, 2]}], 2, 3) == coco_mask.frPyObjects(
        [{"size": size, "counts": [1, 3, 2]}], 2, 3
    )


@pytest.mark.parametrize("size", [["2", "3"], [2.5, 3], "23", np.array([[2, 3]]), [2], None])
def test_rle_size_refused_by_name(size):
    """Sizes that are not two integers are refused, naming the field: strings (pycocotools raises too), a fractional
    height (pycocotools would truncate it), a 2-D array, one number, None."""
    with pytest.raises(ValueError, match=r"rles\[0\]\['size'\]"):
        vlk_mask.area([{"size": size, "counts": b"132"}])
