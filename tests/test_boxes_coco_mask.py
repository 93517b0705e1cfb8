"""The pycocotools.mask drop-in (vlkernels.boxes.coco_mask) run side by side with pycocotools.mask itself: the cases of
faster_coco_eval's tests/test_mask_api.py on both modules, every return value compared in type, dtype, shape, memory
order and bytes, the cocoapi demo flow with the module swapped, and the no-copy reading of pycocotools' layout."""

import pickle
import tracemalloc

import numpy as np
import pytest
import torch
from pycocotools import mask as pycoco_mask

from vlkernels import _ext
from vlkernels.boxes import coco_mask
from vlkernels.ops import RleCounts, mask_iou, rle_area, rle_encode

MODULES = [pycoco_mask, coco_mask]
IDS = ["pycocotools", "vlkernels"]


def same(a, b):
    """Equal as pycocotools' users see them: type, and for arrays dtype, shape, memory order and bytes."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        # Memory order: the strides of every axis longer than 1 (numpy leaves the others, and empty arrays', free).
        long_axes = [k for k, n in enumerate(a.shape) if n > 1]
        assert a.size == 0 or [a.strides[k] for k in long_axes] == [b.strides[k] for k in long_axes]
        assert a.tobytes("A") == b.tobytes("A")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    else:
        assert a == b or (a != a and b != b), (a, b)


def both(fn, *args):
    """fn(module, *args) for pycocotools and the drop-in; their results must be the same."""
    ref, ours = (fn(m, *args) for m in MODULES)
    same(ours, ref)
    return ours


def random_masks(h, w, n, seed):
    g = np.random.default_rng(seed)
    x = g.integers(0, 10, size=(h, w, n), dtype=np.uint8)
    return np.asfortranarray((x >= 4).astype(np.uint8))


# faster_coco_eval tests/test_mask_api.py (its setUp): boxes, their RLEs on a 20x20 image, the polygons' RLEs.
BBOXES = np.array(
    [[3.0, 5.0, 4.0, 1.0], [5.0, 3.0, 3.0, 5.0], [8.0, 5.0, 8.0, 5.0], [3.0, 4.0, 7.0, 3.0], [2.0, 5.0, 2.0, 7.0],
     [8.0, 1.0, 9.0, 9.0], [8.0, 1.0, 9.0, 6.0], [7.0, 1.0, 9.0, 4.0], [4.0, 5.0, 4.0, 5.0], [2.0, 4.0, 5.0, 4.0]]
)  # fmt: skip
BBOX_RLES = [
    {"size": [20, 20], "counts": c}
    for c in [b"Q21c000000o7", b"W35?000]7", b"U55?0000000000000[2", b"P23a000000000000T6", b"]17=0k9",
              b"Q59;000000000000000k1", b"Q56>000000000000000k1", b"]44`0000000000000000_2", b"e25?00000[7",
              b"\\14`00000000P8"]
]  # fmt: skip
POLY_RLES = [
    {"size": [20, 20], "counts": b"U36>1OO2Lm6"},
    {"size": [20, 20], "counts": b"h02`012N_O0`00@1>OB3`0MQ8"},
    {"size": [20, 20], "counts": b"]1120=210AN>1BOT9"},
]
UNCOMPRESSED = {"size": [1350, 1080], "counts": [0, 5, 5, 5, 5, 2, 3, 5, 2, 3, 5, 2, 3, 55]}
COMPRESSED = {"size": [1350, 1080], "counts": b"05500MN3ON3ONe1"}  # runs sum to 100: transcoded, not decodable
OTHER_SIZE = {"size": [4, 5], "counts": b"d0"}  # an empty 4x5 mask


@pytest.fixture(scope="module")
def fce_rles():
    """faster_coco_eval's setUp: one random mask per (h, w) in 64..256 step 64, ~60% foreground."""
    rles, areas = [], []
    for h in range(64, 320, 64):
        for w in range(64, 320, 64):
            x = random_masks(h, w, 1, seed=h * 1000 + w)
            areas.append(int(x.sum()))
            rles += pycoco_mask.encode(x)
    return rles, areas


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_coco_mask_fce_area_and_roundtrip(module, fce_rles):
    rles, areas = fce_rles
    assert module.area(rles).tolist() == areas
    assert module.area(rles[0]) == areas[0]
    for r in rles:
        assert module.encode(module.decode([r])) == [r]
        assert module.encode(module.decode(r)) == r


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_coco_mask_fce_frpyobjects_merge_tobbox(module):
    assert module.frPyObjects(BBOXES, 20, 20) == BBOX_RLES
    assert module.frPyObjects(UNCOMPRESSED, 1350, 1080) == COMPRESSED
    assert module.frPyObjects([UNCOMPRESSED], 1350, 1080) == [COMPRESSED]
    assert module.merge([BBOX_RLES[0]]) == BBOX_RLES[0]
    merged = {"size": [20, 20], "counts": b"\\18<00N1100N2000000000000000000k1"}
    assert module.merge(BBOX_RLES) == merged and module.merge(BBOX_RLES, 0) == merged
    assert module.merge(BBOX_RLES, 1) == {"size": [20, 20], "counts": b"`<"}
    assert module.toBbox(BBOX_RLES).tolist() == BBOXES.tolist()
    assert module.toBbox(BBOX_RLES[0]).tolist() == BBOXES[0].tolist()


@pytest.mark.parametrize("module", MODULES, ids=IDS)
@pytest.mark.parametrize(
    ("crowd", "expected"),
    [
        ([1, 1], [[1.0, 0.5], [0.1333, 1.0]]),
        ([0, 0], [[1.0, 0.1176], [0.1176, 1.0]]),
        ([1, 0], [[1.0, 0.1176], [0.1333, 1.0]]),
        ([0, 1], [[1.0, 0.5], [0.1176, 1.0]]),
    ],
)
def test_coco_mask_fce_iou(module, crowd, expected):
    assert module.iou(BBOX_RLES[:2], BBOX_RLES[:2], crowd).round(4).tolist() == expected
    poly = module.iou(POLY_RLES, POLY_RLES, [0, 0, 0]).round(4).tolist()
    assert poly == [[1.0, 0.1562, 0.1], [0.1562, 1.0, 0.2174], [0.1, 0.2174, 1.0]]


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_coco_mask_fce_tobbox_full_and_partial_image(module):
    full = np.asfortranarray(np.array([[0, 1], [1, 1]], np.uint8))
    assert module.toBbox(module.encode(full)).tolist() == [0, 0, 2, 2]
    m = np.zeros((10, 10, 1), dtype=np.uint8, order="F")
    m[2:4, 3:6, :] = 1
    assert module.toBbox(module.encode(m)[0]).tolist() == [3, 2, 3, 2]


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_coco_mask_fce_zero_leading_runs(module):
    # Leading zero-length runs (a foreground run of length 0 first): decode, re-encode, same box.
    rle = module.frPyObjects({"size": [30, 20], "counts": [0, 0, 0, 5, 20, 7, 568]}, 30, 20)
    again = module.encode(module.decode(rle))
    assert module.toBbox(rle).tolist() == module.toBbox(again).tolist()
    assert module.toBbox(module.encode(module.decode([rle]))).tolist() == [module.toBbox(rle).tolist()]


def test_coco_mask_invalid_rle_counts_raise():
    # faster_coco_eval's case: a string whose runs fall short of h*w. pycocotools decodes part of a mask; we raise.
    rle = {"size": [1024, 1024], "counts": "jd`0=`o06J5L4M3L3N2N2N2N2N1O2N2N101N1O2O0O1O2N100O1O2N100O1"}
    with pytest.raises(ValueError, match="runs sum to"):
        coco_mask.decode(rle)


@pytest.mark.parametrize("hw", [(1, 1), (1, 37), (37, 1), (23, 41), (64, 48), (480, 640)])
def test_coco_mask_matches_pycocotools_everywhere(hw):
    h, w = hw
    m = random_masks(h, w, 7, seed=h + w)
    m[:, :, 1] = 0
    m[:, :, 2] = 1
    rles = both(lambda mod: mod.encode(m))
    both(lambda mod: mod.encode(m[:, :, 3]))
    both(lambda mod: mod.encode(m.astype(bool, order="F")))
    # (pycocotools' decode([]) returns an array of undefined shape: not compared)
    for fn in (pycoco_mask.decode, pycoco_mask.area, pycoco_mask.toBbox):
        for arg in (rles, rles[4], []) if fn is not pycoco_mask.decode else (rles, rles[4]):
            same(getattr(coco_mask, fn.__name__)(arg), fn(arg))
    str_rles = [{"size": r["size"], "counts": r["counts"].decode()} for r in rles]
    both(lambda mod: mod.decode(str_rles))
    crowd = [k % 2 for k in range(7)]
    both(lambda mod: mod.iou(rles, rles, crowd))
    both(lambda mod: mod.iou(rles[:3], str_rles, np.array(crowd)))
    both(lambda mod: mod.iou(rles[:2], rles[5:], [True, False]))
    both(lambda mod: mod.iou([], rles, crowd))
    both(lambda mod: mod.iou(rles, [], []))
    boxes = both(lambda mod: mod.toBbox(rles))
    both(lambda mod: mod.iou(boxes, boxes[:3], [0, 1, 0]))
    both(lambda mod: mod.iou(boxes.tolist(), boxes[:3].tolist(), [0, 1, 0]))
    both(lambda mod: mod.iou(boxes.astype(np.int64), boxes[:2], [0, 0]))
    both(lambda mod: mod.iou(np.zeros((0, 4)), boxes, [0] * 7))
    both(lambda mod: mod.merge(rles, 0))
    both(lambda mod: mod.merge(rles, 1))
    both(lambda mod: mod.merge(tuple(rles[:3])))
    both(lambda mod: mod.merge([]))


def demo_flow(mask_utils, anns, h, w):
    """cocoapi's demo and COCO.annToRLE / annToMask, written against `mask_utils`: polygons -> frPyObjects -> merge,
    uncompressed crowd RLE -> frPyObjects; then decode, area, toBbox, iou of everything, and the re-encoded masks."""
    rles = []
    for ann in anns:
        segm = ann["segmentation"]
        if isinstance(segm, list):
            rles.append(mask_utils.merge(mask_utils.frPyObjects(segm, h, w)))
        elif isinstance(segm["counts"], list):
            rles.append(mask_utils.frPyObjects(segm, h, w))
        else:
            rles.append(segm)
    masks = np.stack([mask_utils.decode(r) for r in rles], axis=2)
    crowd = [a["iscrowd"] for a in anns]
    return {
        "rles": rles,
        "masks": masks,
        "areas": mask_utils.area(rles),
        "one_area": mask_utils.area(rles[0]),
        "boxes": mask_utils.toBbox(rles),
        "one_box": mask_utils.toBbox(rles[0]),
        "iou": mask_utils.iou(rles, rles, crowd),
        "box_iou": mask_utils.iou(mask_utils.toBbox(rles), mask_utils.toBbox(rles), crowd),
        "reencoded": mask_utils.encode(np.asfortranarray(masks)),
        "union": mask_utils.merge(rles),
    }


def coco_like_annotations(h, w, n, seed):
    """Annotations as COCO stores them: multi-part polygons (object), uncompressed RLE (crowd), compressed RLE."""
    g = np.random.default_rng(seed)
    anns = []
    for k in range(n):
        if k % 5 == 4:
            m = np.zeros((h, w), np.uint8, order="F")
            y, x = g.integers(0, h - 20), g.integers(0, w - 20)
            m[y : y + g.integers(5, 20), x : x + g.integers(5, 20)] = 1
            runs = np.diff(np.flatnonzero(np.diff(np.r_[0, m.ravel(order="F"), 2]) != 0), prepend=0).tolist()
            anns.append({"segmentation": {"size": [h, w], "counts": runs}, "iscrowd": 1})
            continue
        parts = []
        for _ in range(1 + k % 3):
            cx, cy, r = g.uniform(0, w), g.uniform(0, h), g.uniform(3, 60)
            t = np.sort(g.uniform(0, 2 * np.pi, size=int(g.integers(3, 24))))
            rad = r * g.uniform(0.5, 1.0, size=t.size)
            parts.append(np.stack([cx + rad * np.cos(t), cy + rad * np.sin(t)], 1).round(2).ravel().tolist())
        anns.append({"segmentation": parts, "iscrowd": 0})
    anns.append({"segmentation": pycoco_mask.encode(np.asfortranarray(np.eye(h, w, dtype=np.uint8))), "iscrowd": 0})
    return anns


@pytest.mark.parametrize("seed", [0, 1])
def test_coco_mask_swapped_into_the_cocoapi_demo_flow(seed):
    anns = coco_like_annotations(427, 640, 24, seed)
    ref = demo_flow(pycoco_mask, anns, 427, 640)
    ours = demo_flow(coco_mask, anns, 427, 640)
    same(ours, ref)
    assert pickle.dumps(ours) == pickle.dumps(ref)  # the very objects a script would save


def test_coco_mask_reads_pycocotools_layout_in_place(monkeypatch):
    # The Fortran (H, W, N) buffer itself reaches the C++ encoder (pointer and strides), and no numpy copy is made.
    m = np.zeros((480, 640, 40), np.uint8, order="F")
    for k in range(40):  # object-like masks: small outputs, so a copy of the 12 MB input would stand out
        m[10 * k : 10 * k + 100, 5 * k : 5 * k + 300, k] = 1
    seen = []
    real = _ext.load()

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def rle_encode(self, masks):
            seen.append((masks.data_ptr(), masks.shape, masks.stride()))
            return real.rle_encode(masks)

    monkeypatch.setattr(_ext, "load", lambda: Spy())
    tracemalloc.start()
    try:
        out = coco_mask.encode(m)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == [(m.ctypes.data, (40, 480, 640), (480 * 640, 1, 480))]
    assert peak < m.nbytes // 10  # the mask is 12 MB; numpy copies would be traced
    assert out == pycoco_mask.encode(m)
    # A read-only array and a bool view are read in place too.
    seen.clear()
    ro = m.astype(bool, order="F")
    ro.flags.writeable = False
    monkeypatch.setattr(_ext, "load", lambda: Spy())
    assert coco_mask.encode(ro) == out
    assert seen[0][0] == ro.ctypes.data


def test_coco_mask_layouts_pycocotools_refuses_are_read():
    m = random_masks(23, 31, 4, seed=5)
    ref = pycoco_mask.encode(m)
    assert coco_mask.encode(np.ascontiguousarray(m)) == ref  # C order: pycocotools raises "not Fortran contiguous"
    assert coco_mask.encode(m[:, ::-1][:, ::-1]) == ref  # negative strides (copied: torch views cannot hold them)
    # A reversed length-1 axis: numpy calls the array contiguous and keeps the negative stride (it was refused).
    one = np.zeros((1, 4), np.uint8)
    one[0, 1] = 1
    assert coco_mask.encode(np.asfortranarray(one[:, :, None])[::-1]) == pycoco_mask.encode(
        np.asfortranarray(one[:, :, None])
    )
    assert coco_mask.encode(one[::-1]) == pycoco_mask.encode(np.asfortranarray(one))
    box = np.array([[0, 0, 5, 5.0]])
    assert coco_mask.frPyObjects(box[::-1], 10, 10) == pycoco_mask.frPyObjects(box, 10, 10)
    assert coco_mask.encode(np.ascontiguousarray(m[:, :, 1])) == ref[1]
    wide = np.ones((23, 31, 8), np.uint8, order="F")
    wide[:, :, ::2] = m
    assert coco_mask.encode(wide[:, :, ::2]) == ref


def test_ops_accept_numpy_arrays():
    m = random_masks(19, 27, 5, seed=7).transpose(2, 0, 1)  # (N, H, W) view of a Fortran array
    ref = pycoco_mask.encode(np.asfortranarray(m.transpose(1, 2, 0)))
    assert rle_encode(m) == ref and rle_encode(m[2]) == ref[2]
    rc = rle_encode(m, compress=False)
    again = RleCounts(rc.counts.numpy(), rc.offsets.numpy(), rc.size)
    assert again.to_coco() == ref
    np.testing.assert_array_equal(rle_area(again).numpy(), pycoco_mask.area(ref))
    np.testing.assert_array_equal(mask_iou(m, m).numpy(), pycoco_mask.iou(ref, ref, [0] * 5))
    torch.testing.assert_close(mask_iou(m, torch.from_numpy(np.ascontiguousarray(m))), mask_iou(m, m))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: coco_mask.encode([[0, 1]]), TypeError, "numpy array"),
        (lambda: coco_mask.encode(np.zeros((2, 2, 1), np.int32, order="F")), ValueError, "dtype int32"),
        (lambda: coco_mask.encode(np.zeros((4,), np.uint8)), ValueError, r"\(H, W, N\) or \(H, W\)"),
        (lambda: coco_mask.encode(np.zeros((1, 1, 1, 1), np.uint8)), ValueError, r"\(H, W, N\) or \(H, W\)"),
        (lambda: coco_mask.decode([BBOX_RLES[0], OTHER_SIZE]), ValueError, "share one size"),
        (lambda: coco_mask.decode({"size": [4, 5], "counts": b"zz"}), ValueError, "malformed RLE"),
        (lambda: coco_mask.area([{"size": [4, 5]}]), ValueError, "'size' and 'counts'"),
        (lambda: coco_mask.area(5), ValueError, "list of RLE dicts"),
        (lambda: coco_mask.toBbox([{"size": [4, 5], "counts": b"9"}]), ValueError, "runs sum to"),
        (lambda: coco_mask.iou(BBOX_RLES, BBOX_RLES, None), TypeError, "pyiscrowd"),
        (lambda: coco_mask.iou(BBOX_RLES, BBOX_RLES, [0]), ValueError, "one flag per ground truth"),
        (lambda: coco_mask.iou(BBOX_RLES, BBOXES, [0] * 10), ValueError, "both be RLE lists"),
        (lambda: coco_mask.iou(BBOX_RLES[0], BBOX_RLES, [0] * 10), TypeError, "dt must be a list"),
        (lambda: coco_mask.iou(np.zeros((2, 3)), BBOXES, [0] * 10), ValueError, r"must be \(N, 4\)"),
        (lambda: coco_mask.iou([BBOX_RLES[0], BBOXES[0]], BBOX_RLES, [0] * 10), ValueError, "mixes"),
        (lambda: coco_mask.iou(BBOX_RLES, [OTHER_SIZE], [0]), ValueError, "masks must match"),
        (lambda: coco_mask.iou(np.array([[0, 0, np.nan, 1]]), BBOXES, [0] * 10), ValueError, "NaN"),
        (lambda: coco_mask.merge(BBOX_RLES[0]), ValueError, "list of RLE dicts"),
        (lambda: coco_mask.merge([BBOX_RLES[0], OTHER_SIZE]), ValueError, "one size"),
        (lambda: coco_mask.frPyObjects(5, 4, 4), TypeError, "fr_py_objects takes"),
    ],
)
def test_coco_mask_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
