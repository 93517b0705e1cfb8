"""COCO RLE as run counts on device (RleCounts): encode / decode / area / bbox / IoU against pycocotools itself.

On CPU these run the C++ twins of the CUDA kernels (the same per-element code, csrc/boxes/rle_counts.h); the
``gpu`` tests run the CUDA kernels against the same references when a GPU exists."""

import numpy as np
import pytest
import torch
from pycocotools import mask as coco_mask

from vlkernels import _ext
from vlkernels.boxes import rle_counts
from vlkernels.ops import RleCounts, rle_area, rle_decode, rle_encode, rle_iou, rle_to_bbox

CHUNK = 4096  # pixels per encode block (csrc/boxes/rle_counts.h kChunk)


@pytest.fixture(params=[False, True], ids=["range-per-call", "gpu-split"])
def split(request, monkeypatch):
    """Run the CPU twins both ways: one call per range, and replaying the CUDA split (thread ranges of a block with
    their exclusive scan, 32 warp-lane slices) — the latter is exactly what each CUDA thread computes."""
    monkeypatch.setattr(rle_counts, "_REPLAY_GPU_SPLIT", request.param)
    return request.param


def coco_encode(masks: np.ndarray) -> list:
    return coco_mask.encode(np.asfortranarray(masks.transpose(1, 2, 0)))


def runs_ref(mask: np.ndarray) -> np.ndarray:
    """COCO runs of one (H, W) mask, from the format's definition: column-major, background first."""
    flat = (mask.T.reshape(-1) != 0).astype(np.int8)
    change = np.flatnonzero(np.diff(np.concatenate([[0], flat])))
    return np.diff(np.concatenate([[0], change, [flat.size]]))


def masks_zoo(n: int, h: int, w: int, seed: int) -> np.ndarray:
    """Empty, full, single-pixel, first/last-pixel, noise, rectangles, ellipses, stripes and checkerboards."""
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.zeros((n, h, w), dtype=np.uint8)
    for k in range(n):
        kind = k % 9
        if kind == 1:
            out[k] = 1
        elif kind == 2:
            out[k, g.integers(h), g.integers(w)] = 1
        elif kind == 3:
            out[k, 0, 0] = out[k, h - 1, w - 1] = 1
        elif kind == 4:
            out[k] = g.random((h, w)) < g.uniform(0.05, 0.6)
        elif kind in (5, 6):
            cy, cx = g.uniform(0, h), g.uniform(0, w)
            ry, rx = g.uniform(0.5, max(h / 2, 0.6)), g.uniform(0.5, max(w / 2, 0.6))
            if kind == 5:
                out[k] = (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)
            else:
                out[k] = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        elif kind == 7:
            period = int(g.integers(2, 9))
            out[k] = ((yy + int(g.integers(period))) % period < period // 2) & (xx >= w // 4)
        elif kind == 8:
            out[k] = (yy + xx) % 2
    return out


SIZES = [(1, 1), (1, 37), (37, 1), (23, 41), (64, 48), (67, 131)]  # 67 x 131 spans three 4096-pixel chunks


@pytest.mark.parametrize("hw", SIZES)
def test_rle_counts_encode_equals_pycocotools(hw, split):
    masks = masks_zoo(19, *hw, seed=hw[0] * 7 + hw[1])
    rc = rle_encode(torch.from_numpy(masks), compress=False)
    assert isinstance(rc, RleCounts) and len(rc) == 19 and rc.size == hw
    assert rc.counts.dtype == torch.int64 and rc.offsets.dtype == torch.int64
    for k in range(len(masks)):
        runs = rc.counts[rc.offsets[k] : rc.offsets[k + 1]].numpy()
        np.testing.assert_array_equal(runs, runs_ref(masks[k]))
    ref = coco_encode(masks)
    assert rc.to_coco() == ref  # pycocotools' rleToString, byte for byte
    back = RleCounts.from_coco(ref)  # pycocotools' strings through our rleFrString
    assert torch.equal(back.counts, rc.counts) and torch.equal(back.offsets, rc.offsets)


def test_rle_counts_encode_chunk_and_thread_boundaries(split):
    # Boundaries exactly on 16-pixel thread and 4096-pixel chunk edges, and a pixel-by-pixel alternation (the most
    # boundaries a chunk can hold): the block-scan decomposition replayed by the CPU twin must place each one.
    h, w = 64, 3 * CHUNK // 64 + 5
    flat = np.zeros((4, h * w), dtype=np.uint8)
    flat[0, CHUNK - 1 : CHUNK + 1] = 1
    flat[0, 2 * CHUNK :] = 1
    flat[1, ::2] = 1
    flat[2, np.arange(h * w) % 32 < 16] = 1
    flat[3, CHUNK:] = 1
    masks = flat.reshape(4, w, h).transpose(0, 2, 1)  # column-major flat order -> (H, W)
    rc = rle_encode(torch.from_numpy(np.ascontiguousarray(masks)), compress=False)
    assert rc.to_coco() == coco_encode(masks)
    for k in range(4):
        np.testing.assert_array_equal(rc.counts[rc.offsets[k] : rc.offsets[k + 1]].numpy(), runs_ref(masks[k]))


def test_rle_counts_encode_inputs():
    masks = masks_zoo(9, 13, 17, seed=1)
    ref = coco_encode(masks)
    t = torch.from_numpy(masks)
    assert rle_encode(t.bool(), compress=False).to_coco() == ref
    assert rle_encode(t * 7, compress=False).to_coco() == ref  # any nonzero byte is foreground
    view = torch.from_numpy(np.ascontiguousarray(masks.transpose(0, 2, 1))).transpose(1, 2)  # not contiguous
    assert rle_encode(view, compress=False).to_coco() == ref
    sliced = torch.from_numpy(masks_zoo(18, 13, 34, seed=1))[::2, :, ::2]  # strided batch and columns
    assert rle_encode(sliced, compress=False).to_coco() == coco_encode(np.ascontiguousarray(sliced.numpy()))
    assert rle_encode(sliced) == coco_encode(np.ascontiguousarray(sliced.numpy()))
    one = rle_encode(t[4], compress=False)
    assert len(one) == 1 and one.to_coco() == [ref[4]]
    # The string path and the counts path agree.
    assert rle_encode(t) == ref


def test_rle_counts_decode_area_bbox_equal_pycocotools(split):
    for hw in SIZES:
        masks = masks_zoo(12, *hw, seed=hw[1])
        ref = coco_encode(masks)
        rc = RleCounts.from_coco(ref)
        dec = rle_decode(rc)
        assert dec.dtype == torch.uint8 and dec.shape == (12, *hw) and dec.is_contiguous()
        np.testing.assert_array_equal(dec.numpy(), coco_mask.decode(ref).transpose(2, 0, 1))
        area = rle_area(rc)
        assert area.dtype == torch.int64 and area.shape == (12,)
        np.testing.assert_array_equal(area.numpy(), coco_mask.area(ref).astype(np.int64))
        np.testing.assert_array_equal(rle_to_bbox(rc).numpy(), coco_mask.toBbox(ref))


def test_rle_counts_noncanonical_runs_match_pycocotools(split):
    # Zero-length runs in user-supplied counts (pycocotools accepts them; its bbox even wraps in 32 bits).
    lists = [[1, 0, 2, 0, 3], [0, 6], [6], [2, 2, 0, 0, 2], [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1], [3, 3, 0]]
    rles = [{"size": [2, 3], "counts": c} for c in lists]
    ref = coco_mask.frPyObjects(rles, 2, 3)  # pycocotools' rleToString of the same runs
    counts = torch.tensor([v for c in lists for v in c])
    offsets = torch.tensor(np.concatenate([[0], np.cumsum([len(c) for c in lists])]))
    rc = RleCounts(counts, offsets, (2, 3))
    assert rc.to_coco() == ref
    assert torch.equal(RleCounts.from_coco(rles).counts, counts)
    np.testing.assert_array_equal(rle_decode(rc).numpy(), coco_mask.decode(ref).transpose(2, 0, 1))
    np.testing.assert_array_equal(rle_area(rc).numpy(), coco_mask.area(ref).astype(np.int64))
    np.testing.assert_array_equal(rle_to_bbox(rc).numpy(), coco_mask.toBbox(ref))
    # IoU: the exact value from the decoded masks. pycocotools' run merge stops early when both run lists reach a
    # zero-length run at once (here dt [2, 2, 0, 0, 2] vs gt [0, 1, 0, 1, ...] gives 0.5 instead of 2 / 6); runs it
    # produces itself never hold such zeros, so the canonical tests above are bit-exact against it.
    dense = coco_mask.decode(ref).transpose(2, 0, 1).reshape(len(ref), -1).astype(np.int64)
    crowd = np.arange(len(ref)) % 2
    inter = dense @ dense.T
    area = dense.sum(1)
    union = np.where(crowd[None, :] == 1, area[:, None], area[:, None] + area[None, :] - inter)
    exact = np.where(inter > 0, inter / np.maximum(union, 1), 0.0)
    np.testing.assert_array_equal(rle_iou(rc, rc, crowd).numpy(), exact)
    np.testing.assert_array_equal(rle_iou(rles, rles, crowd).numpy(), exact)
    assert coco_mask.iou(ref, ref, crowd)[3, 4] == 0.5 and exact[3, 4] == 2 / 6


@pytest.mark.parametrize("crowd_every", [0, 1, 3])
@pytest.mark.parametrize("hw", [(1, 1), (9, 1), (23, 41), (67, 131)])
def test_rle_counts_iou_bit_identical_to_pycocotools(hw, crowd_every, split):
    dt_masks, gt_masks = masks_zoo(29, *hw, seed=3), masks_zoo(18, *hw, seed=4)
    dt, gt = coco_encode(dt_masks), coco_encode(gt_masks)
    iscrowd = [int(crowd_every > 0 and k % crowd_every == 0) for k in range(len(gt))]
    ref = coco_mask.iou(dt, gt, iscrowd)
    ours = rle_iou(rle_encode(torch.from_numpy(dt_masks), compress=False), RleCounts.from_coco(gt), iscrowd)
    assert ours.dtype == torch.float64 and ours.shape == (29, 18)
    np.testing.assert_array_equal(ours.numpy(), ref)
    assert ours[0, 0] == 0  # two empty masks -> 0, as pycocotools
    # The string path (column planes) agrees with the counts path; iscrowd as a bool tensor.
    crowd_t = torch.tensor(iscrowd, dtype=torch.bool)
    np.testing.assert_array_equal(rle_iou(dt, gt, crowd_t).numpy(), ref)


def test_rle_counts_iou_many_intervals(split):
    # Many foreground intervals per mask (stripes, checkerboard, noise): long merges, several B intervals per A.
    h, w = 50, 70
    yy, xx = np.mgrid[0:h, 0:w]
    masks = np.stack([(yy // p + xx // q) % 2 for p in (1, 2, 3, 7) for q in (1, 5, 70)]).astype(np.uint8)
    masks = np.concatenate([masks, masks_zoo(9, h, w, seed=5)])
    rles = coco_encode(masks)
    rc = RleCounts.from_coco(rles)
    crowd = [k % 4 == 1 for k in range(len(rles))]
    np.testing.assert_array_equal(rle_iou(rc, rc, crowd).numpy(), coco_mask.iou(rles, rles, crowd))


def test_rle_counts_empty_and_zero_pixels():
    none = rle_encode(torch.zeros(0, 5, 4, dtype=torch.bool), compress=False)
    assert len(none) == 0 and none.counts.numel() == 0 and none.offsets.tolist() == [0]
    assert rle_decode(none).shape == (0, 5, 4)
    assert rle_area(none).shape == (0,) and rle_to_bbox(none).shape == (0, 4)
    gt = rle_encode(torch.from_numpy(masks_zoo(3, 5, 4, seed=6)), compress=False)
    assert rle_iou(none, gt, [0, 1, 0]).shape == (0, 3)
    assert rle_iou(gt, none).shape == (3, 0)
    flat = rle_encode(torch.zeros(3, 0, 5, dtype=torch.uint8), compress=False)
    assert flat.counts.tolist() == [0, 0, 0]
    assert flat.to_coco() == coco_encode(np.zeros((3, 0, 5), dtype=np.uint8))
    assert rle_decode(flat).shape == (3, 0, 5)
    assert rle_area(flat).tolist() == [0, 0, 0]


def test_rle_counts_tensor_api():
    masks = torch.from_numpy(masks_zoo(6, 11, 7, seed=7))
    rc = rle_encode(masks, compress=False)
    assert len(rc.to("cpu")) == 6 and rc.device == torch.device("cpu") and "n=6" in repr(rc)
    as_int32 = RleCounts(rc.counts.to(torch.int32), rc.offsets, [np.int64(11), 7])
    assert as_int32.counts.dtype == torch.int64 and torch.equal(rle_decode(as_int32), masks)
    with pytest.raises(AttributeError, match="immutable"):
        rc.counts = rc.counts


def test_rle_counts_custom_op_registration():
    rc = rle_encode(torch.from_numpy(masks_zoo(5, 9, 7, seed=12)), compress=False)
    gt = rle_encode(torch.from_numpy(masks_zoo(3, 9, 7, seed=13)), compress=False)
    crowd = torch.tensor([0, 1, 0], dtype=torch.uint8)
    ops = torch.ops.vlkernels
    torch.library.opcheck(ops.rle_counts_decode.default, (rc.counts, rc.offsets, 9, 7))
    torch.library.opcheck(ops.rle_counts_area.default, (rc.counts, rc.offsets))
    torch.library.opcheck(ops.rle_counts_bbox.default, (rc.counts, rc.offsets, 9, 7))
    torch.library.opcheck(ops.rle_counts_iou.default, (rc.counts, rc.offsets, gt.counts, gt.offsets, 9, 7, crowd))


def _good():
    return torch.tensor([1, 3, 4]), torch.tensor([0, 2, 3]), (2, 2)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c, o, s: (c.float(), o, s), "counts has dtype"),
        (lambda c, o, s: (c[None], o, s), "counts must have 1 dimensions"),
        (lambda c, o, s: (c, o.int(), s), "offsets has dtype"),
        (lambda c, o, s: (c, o.to("meta"), s), "one device"),
        (lambda c, o, s: (c, o, (2.0, 2)), "integers"),
        (lambda c, o, s: (c, o, (2, 2, 1)), "integers"),
        (lambda c, o, s: (c, o, (True, 4)), "integers"),
        (lambda c, o, s: (c, o, (-1, 2)), "non-negative"),
        (lambda c, o, s: (c, o, (2**16, 2**16)), "2\\*\\*32"),
        (lambda c, o, s: (c, o[:0], s), "N \\+ 1"),
        (lambda c, o, s: (c, o + 1, s), "start at 0"),
        (lambda c, o, s: (c, torch.tensor([0, 2]), s), "end at counts.numel"),
        (lambda c, o, s: (c, torch.tensor([0, 3, 2, 3]), s), "non-decreasing"),
        (lambda c, o, s: (torch.tensor([5, -1, 4]), o, (3, 3)), "counts\\[1\\] = -1"),
        (lambda c, o, s: (torch.tensor([1, 3, 5]), o, s), "counts\\[2\\] = 5"),
        (lambda c, o, s: (torch.tensor([1, 3, 3]), o, s), "mask 1: runs sum to 3"),
    ],
)
def test_rle_counts_validation_errors(edit, match):
    RleCounts(*_good())
    with pytest.raises(ValueError, match=match):
        RleCounts(*edit(*_good()))


def test_rle_counts_op_errors():
    a = rle_encode(torch.from_numpy(masks_zoo(2, 4, 5, seed=8)), compress=False)
    b = rle_encode(torch.from_numpy(masks_zoo(2, 5, 4, seed=8)), compress=False)
    with pytest.raises(ValueError, match="masks must match"):
        rle_iou(a, b)
    with pytest.raises(ValueError, match="both be RleCounts"):
        rle_iou(a, a.to_coco())
    with pytest.raises(ValueError, match="iscrowd"):
        rle_iou(a, a, [0, 0, 1])
    with pytest.raises(ValueError, match="share one size"):
        RleCounts.from_coco(a.to_coco() + b.to_coco())
    with pytest.raises(ValueError, match="empty"):
        RleCounts.from_coco([])
    with pytest.raises(ValueError, match="runs sum to"):
        RleCounts.from_coco([{"size": [2, 5], "counts": b"52"}])
    with pytest.raises(ValueError, match="dtype"):
        rle_encode(torch.zeros(2, 3, 4), compress=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_rle_counts_cuda_equals_pycocotools():
    for hw in SIZES:
        dt_masks, gt_masks = masks_zoo(29, *hw, seed=9), masks_zoo(18, *hw, seed=10)
        dt_ref, gt_ref = coco_encode(dt_masks), coco_encode(gt_masks)
        dt = rle_encode(torch.from_numpy(dt_masks).cuda(), compress=False)
        assert dt.device.type == "cuda" and dt.to_coco() == dt_ref
        assert rle_encode(torch.from_numpy(dt_masks).cuda()) == dt_ref
        gt = RleCounts.from_coco(gt_ref, device="cuda")
        np.testing.assert_array_equal(rle_decode(dt).cpu().numpy(), dt_masks)
        np.testing.assert_array_equal(rle_area(gt).cpu().numpy(), coco_mask.area(gt_ref).astype(np.int64))
        np.testing.assert_array_equal(rle_to_bbox(gt).cpu().numpy(), coco_mask.toBbox(gt_ref))
        crowd = torch.arange(18, device="cuda") % 3 == 0
        ours = rle_iou(dt, gt, crowd)
        assert ours.device.type == "cuda"
        np.testing.assert_array_equal(ours.cpu().numpy(), coco_mask.iou(dt_ref, gt_ref, crowd.cpu().numpy()))
    # Strided CUDA input, empty sets and zero-pixel masks on the device.
    view = torch.from_numpy(masks_zoo(12, 40, 30, seed=11)).cuda().transpose(1, 2)
    assert rle_encode(view, compress=False).to_coco() == coco_encode(np.ascontiguousarray(view.cpu().numpy()))
    none = rle_encode(torch.zeros(0, 5, 4, dtype=torch.bool, device="cuda"), compress=False)
    assert len(none) == 0 and rle_decode(none).shape == (0, 5, 4) and rle_iou(none, none).shape == (0, 0)
    flat = rle_encode(torch.zeros(3, 0, 5, dtype=torch.uint8, device="cuda"), compress=False)
    assert flat.counts.tolist() == [0, 0, 0] and rle_area(flat).tolist() == [0, 0, 0]


def _op_cases():
    good_c, good_o = torch.tensor([1, 3, 0, 4]), torch.tensor([0, 2, 4])
    ops = torch.ops.vlkernels
    return [
        # int32 counts read as int64 would run past the buffer.
        (
            lambda: ops.rle_counts_decode(torch.tensor([1, 3], dtype=torch.int32).view(torch.int64), good_o[:2], 2, 2),
            "offsets must start at 0 and end",
        ),
        (lambda: ops.rle_counts_area(good_c.to(torch.int16), good_o), "dtype int16"),
        (lambda: ops.rle_counts_area(good_c, torch.tensor([0, 2, 400])), "end at counts.numel"),
        (lambda: ops.rle_counts_area(good_c, torch.tensor([0, 3, 1, 4])), "non-decreasing"),
        (lambda: ops.rle_counts_area(good_c, torch.tensor([5, 4])), "start at 0"),
        (lambda: ops.rle_counts_area(torch.tensor([1, -3]), torch.tensor([0, 2])), r"\[0, 2\*\*32\)"),
        (lambda: ops.rle_counts_decode(good_c, torch.tensor([0, 2, 9]), 2, 2), "end at counts.numel"),
        (lambda: ops.rle_counts_decode(good_c, good_o, 3, 2), "runs sum to"),
        (lambda: ops.rle_counts_decode(good_c, good_o.to(torch.int32), 2, 2), "offsets has dtype int32"),
        (lambda: ops.rle_counts_bbox(good_c, torch.tensor([0, 5]), 2, 2), "end at counts.numel"),
        (
            lambda: ops.rle_counts_iou(
                good_c, good_o, good_c, torch.tensor([0, 1]), 2, 2, torch.zeros(1, dtype=torch.uint8)
            ),
            "end at counts.numel",
        ),
        (
            lambda: ops.rle_counts_iou(good_c, good_o, good_c, good_o, 2, 2, torch.zeros(1, dtype=torch.uint8)),
            "one flag per ground truth",
        ),
    ]


# "registration" in the name keeps this out of the ASan run: torch's dispatcher turns the op's ValueError into a C++
# exception, and the preloaded sanitizer runtime aborts on any __cxa_throw. The C++ check itself runs there (below).
@pytest.mark.parametrize("k", range(12))
def test_op_registration_validates_inputs(k):
    call, match = _op_cases()[k]
    with pytest.raises(ValueError, match=match):
        call()


def test_cpu_bindings_check_the_csr():
    # The C++ entry points refuse a CSR that would make them read outside counts (what reaches them from any path).
    C = _ext.load()
    counts, out = torch.tensor([1, 3, 0, 4]), torch.zeros(2, dtype=torch.int64)
    bad = torch.tensor([0, 2, 400])
    with pytest.raises(ValueError, match="offsets is not a valid CSR: offsets must end at the number of runs"):
        C.rle_area(counts, bad, out)
    with pytest.raises(ValueError, match="non-decreasing"):
        C.rle_area(counts, torch.tensor([0, 3, 1]), out)
    img = torch.zeros(2, 2, 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match="offsets"):
        C.rle_decode_csum(counts.cumsum(0), bad, img)
    assert not out.any() and not img.any()


class _LazyExt:
    def __getattr__(self, name):
        from vlkernels import _ext

        return getattr(_ext.load(), name)


def _rle_binding_cases():
    """(call, message) for the RLE bindings called directly with a wrong tensor or CSR: a ValueError naming the
    argument, never an out-of-bounds read or write (this file runs under ASan)."""
    C = _LazyExt()  # loaded when a case runs, not at collection
    counts, offsets = torch.tensor([1, 3, 0, 4]), torch.tensor([0, 2, 4])
    i64 = dict(dtype=torch.int64)
    out2, box2 = torch.zeros(2, **i64), torch.zeros(2, 4, dtype=torch.float64)
    hw = torch.tensor([4, 4])
    masks = torch.zeros(2, 3, 5, dtype=torch.uint8)
    csum = counts.cumsum(0)
    area, crowd, iou = torch.tensor([3, 4]), torch.zeros(2, dtype=torch.uint8), torch.empty(2, 2, dtype=torch.float64)
    one_mask = torch.zeros(1, 4, 4, dtype=torch.uint8)
    strs = (torch.tensor(list(b"1304"), dtype=torch.uint8), torch.tensor([0, 2, 4]))
    one_mask[0, 1:3, 1:3] = 1
    return {
        "area-counts-dtype": (lambda: C.rle_area(counts.int(), offsets, out2), "counts has dtype int32"),
        "area-counts-stride": (lambda: C.rle_area(torch.arange(8)[::2], offsets, out2), "counts must be contiguous"),
        "area-offsets-rank": (lambda: C.rle_area(counts, offsets[None], out2), "offsets must have 1 dimensions"),
        "area-offsets-empty": (lambda: C.rle_area(counts, offsets[:0], out2), "offsets must hold N"),
        "area-offsets-start": (lambda: C.rle_area(counts, torch.tensor([1, 2, 4]), out2), "offsets\\[0\\] must be 0"),
        "area-negative-run": (
            lambda: C.rle_area(torch.tensor([1, -3, 0, 4]), offsets, out2),
            "counts holds -3 at index 1",
        ),
        "area-out-short": (lambda: C.rle_area(counts, offsets, out2[:1]), "out must have size 2"),
        "area-parts": (lambda: C.rle_area(counts, offsets, out2, 0), "parts must be >= 1"),
        "area-device": (lambda: C.rle_area(counts, offsets.to("meta"), out2), "offsets"),
        "bbox-h": (lambda: C.rle_to_bbox(counts, offsets, hw[:1], hw, box2), "h must have size 2"),
        "bbox-out": (lambda: C.rle_to_bbox(counts, offsets, hw, hw, box2[:, :3]), "out must have size 4"),
        "decode-out": (lambda: C.rle_decode_csum(csum, offsets, torch.zeros(3, 2, 2, dtype=torch.uint8)), "out must"),
        "decode-out-dtype": (lambda: C.rle_decode_csum(csum, offsets, torch.zeros(2, 2, 2)), "out has dtype float32"),
        "to-strings-csr": (lambda: C.rle_to_strings(counts, torch.tensor([0, 2, 9])), "offsets is not a valid CSR"),
        "parse-hw": (lambda: C.rle_parse(*strs, hw[:1], offsets, counts.clone()), "hw must have size 2"),
        "parse-counts-short": (lambda: C.rle_parse(*strs, hw, torch.tensor([0, 2, 9]), counts.clone()), "run_offsets"),
        "parse-string-offsets": (
            lambda: C.rle_parse(strs[0], torch.tensor([0, 2, 9]), hw, offsets, counts.clone()),
            "string_offsets is not a valid CSR",
        ),
        "run-offsets-out": (lambda: C.rle_string_run_offsets(*strs, offsets[:2]), "run_offsets must have size 3"),
        "polygons-csr": (
            lambda: C.rle_from_polygons(torch.zeros(6, dtype=torch.float64), torch.tensor([0, 5]), 4, 4),
            "polygon_offsets is not a valid CSR",
        ),
        "polygons-odd": (
            lambda: C.rle_from_polygons(torch.zeros(5, dtype=torch.float64), torch.tensor([0, 2]), 4, 4),
            "even number",
        ),
        "merge-strings-csr": (
            lambda: C.rle_merge_strings(strs[0], torch.tensor([0, 3]), 2, 2, False),
            "string_offsets is not a valid CSR",
        ),
        "iou-size": (
            lambda: C.rle_iou_csum(csum, offsets, area, box2, csum, offsets, area, box2, 2**20, 2**20, crowd, iou),
            "h\\*w < 2\\*\\*32",
        ),
        "iou-crowd": (
            lambda: C.rle_iou_csum(csum, offsets, area, box2, csum, offsets, area, box2, 2, 2, crowd[:1], iou),
            "iscrowd must have",
        ),
        "iou-out": (
            lambda: C.rle_iou_csum(csum, offsets, area, box2, csum, offsets, area, box2, 2, 2, crowd, iou[:1]),
            "out must have size 2",
        ),
        "iou-csum-bbox": (
            lambda: C.rle_iou_csum(csum, offsets, area, box2, csum, offsets, area, box2[:1], 2, 2, crowd, iou),
            "gt_bbox must have size 2",
        ),
        "iou-csum-area": (
            lambda: C.rle_iou_csum(csum, offsets, area.int(), box2, csum, offsets, area, box2, 2, 2, crowd, iou),
            "dt_area has dtype int32",
        ),
        "iou-csum-offsets": (
            lambda: C.rle_iou_csum(
                csum, offsets, area, box2, csum, torch.tensor([0, 3, 1]), area, box2, 2, 2, crowd, iou
            ),
            "gt_offsets is not a valid CSR",
        ),
        "encode-dtype": (lambda: C.rle_encode(masks.int()), "masks has dtype int32"),
        "encode-rank": (lambda: C.rle_encode(masks[0]), "masks must have 3 dimensions"),
        "encode-runs-dtype": (lambda: C.rle_encode_run_offsets(masks.bool(), offsets), "masks has dtype bool"),
        "encode-runs-offsets": (lambda: C.rle_encode_run_offsets(masks, offsets[:2]), "run_offsets must have size 3"),
        "encode-runs-mismatch": (
            lambda: C.rle_encode_runs(masks, torch.tensor([0, 2, 4]), counts.clone()),
            "run_offsets does not match",
        ),
        "count-chunks-shape": (
            lambda: C.rle_count_chunks(masks, torch.zeros(2, 2, **i64)),
            "chunk_cnt must have size 1",
        ),
        "runs-from-ends-out": (lambda: C.rle_runs_from_ends(counts, offsets, 4, out2), "counts must have size 4"),
        "write-ends-offsets": (
            lambda: C.rle_write_ends(masks, torch.zeros(2, 1, **i64), torch.tensor([0, 4]), counts.clone()),
            "offsets must have size 3",
        ),
        # A chunk_base that does not come from these masks would write past the mask's slots: refused, not written.
        "write-ends-base": (
            lambda: C.rle_write_ends(one_mask, torch.tensor([[3]]), torch.tensor([0, 5]), torch.full((5,), -7)),
            "chunk_base does not match",
        ),
    }


@pytest.mark.parametrize("case", sorted(_rle_binding_cases()))
def test_rle_bindings_reject_bad_tensors(case):
    call, match = _rle_binding_cases()[case]
    with pytest.raises(ValueError, match=match):
        call()


def test_rle_bindings_accept_numpy_and_any_mask_strides():
    # DLPack arrays from numpy; masks read in place with their strides (a Fortran-order view): pycocotools' runs.
    C = _ext.load()
    g = np.random.default_rng(7)
    m = np.asfortranarray((g.random((9, 11, 3)) < 0.4).astype(np.uint8))
    offsets = np.empty(4, dtype=np.int64)
    C.rle_encode_run_offsets(m.transpose(2, 0, 1), offsets)
    counts = np.empty(offsets[-1], dtype=np.int64)
    C.rle_encode_runs(m.transpose(2, 0, 1), offsets, counts)
    ref = coco_mask.encode(m)
    strings = C.rle_to_strings(counts, offsets)
    assert strings == [r["counts"] for r in ref]
    area = np.zeros(3, dtype=np.int64)
    C.rle_area(counts, offsets, area)
    np.testing.assert_array_equal(area, coco_mask.area(ref))


def test_rle_iou_binding_reads_runs_of_another_size_in_bounds():
    # Runs that are not masks of the h x w passed (a direct call; the Python layer never makes one): the CPU column
    # planes are built only from columns inside [0, w), so the answer is the interval merge's, read in bounds
    # (this file runs under ASan).
    C = _ext.load()
    counts = torch.tensor([3, 40, 5, 2, 1, 9])
    offsets = torch.tensor([0, 3, 6])
    csum = counts.cumsum(0)
    area = torch.tensor([40, 2])
    box = torch.tensor([[0.0, 0.0, 9.0, 9.0]] * 2, dtype=torch.float64)
    crowd = torch.zeros(2, dtype=torch.uint8)
    out, ref = torch.empty(2, 2, dtype=torch.float64), torch.empty(2, 2, dtype=torch.float64)
    C.rle_iou_csum(csum, offsets, area, box, csum, offsets, area, box, 4, 2, crowd, out)
    C.rle_iou_csum(csum, offsets, area, box, csum, offsets, area, box, 4, 2, crowd, ref, 32)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
