"""box_iou / segment_iou against torchvision's formulas (float64 reference; torchvision does not install beside
this torch) and Moment-DETR's numpy temporal IoU."""

import numpy as np
import pytest
import torch

from vlkernels.boxes.reference import box_iou_ref, segment_iou_ref, to_xyxy_ref
from vlkernels.ops import box_iou, segment_iou

KINDS = ["iou", "giou", "diou", "ciou"]
FMTS = ["xyxy", "xywh", "cxcywh"]


def grid_boxes(*shape, seed=0):
    """Coordinates on a 1/4 grid in [0, 8]: independent corners give inverted, zero-area, identical and touching
    boxes often, and every sum/product is exact in fp32, so fp32 and fp64 see the same degenerate cases."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 33, (*shape, 4), generator=g).double() / 4


def proper_boxes(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(*shape, 2, generator=g, dtype=torch.float64) * 50
    wh = torch.rand(*shape, 2, generator=g, dtype=torch.float64) * 20 + 0.5
    return torch.cat([xy, xy + wh], -1)


def close(out, ref, dtype):
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(out.double(), ref, equal_nan=True, **tol)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_box_iou_matches_torchvision_formula_with_degenerate_boxes(kind, fmt, dtype):
    a, b = grid_boxes(37, seed=1), grid_boxes(41, seed=2)
    # Identical and touching boxes, zero-area and inverted ones (also plentiful in the random grid).
    a[0], b[0] = torch.tensor([1.0, 1, 3, 3]), torch.tensor([1.0, 1, 3, 3])
    a[1], b[1] = torch.tensor([0.0, 0, 2, 2]), torch.tensor([2.0, 0, 4, 2])
    a[2], b[2] = torch.tensor([1.0, 1, 1, 1]), torch.tensor([1.0, 1, 1, 1])
    a[3], b[3] = torch.tensor([3.0, 3, 1, 1]), torch.tensor([0.0, 0, 4, 4])
    eps = 1e-7 if kind in ("diou", "ciou") else 0.0
    out = box_iou(a.to(dtype), b.to(dtype), fmt=fmt, kind=kind, eps=eps)
    assert out.dtype == dtype and out.shape == (37, 41)
    close(out, box_iou_ref(a, b, fmt, kind, eps=eps), dtype)
    if kind in ("iou", "giou") and fmt == "xyxy":
        assert torch.isnan(out[2, 2]) and not torch.isnan(out[0, 0])  # 0/0 -> NaN, as torchvision
        assert out[0, 0] == 1 and out[1, 1] == 0  # touching boxes: I = 0, and C = U so GIoU = 0 too


def test_box_iou_hand_values():
    a = torch.tensor([[0.0, 0, 2, 2]])
    b = torch.tensor([[1.0, 1, 3, 3], [4.0, 0, 6, 2]])
    torch.testing.assert_close(box_iou(a, b), torch.tensor([[1 / 7, 0.0]]))
    # GIoU of disjoint boxes: 0 - (C - U) / C with C = 6 * 2, U = 8.
    torch.testing.assert_close(box_iou(a, b, kind="giou")[0, 1], torch.tensor(-(12 - 8) / 12))
    # xywh and cxcywh describe the same boxes.
    xywh = torch.tensor([[0.0, 0, 2, 2]]), torch.tensor([[1.0, 1, 2, 2]])
    cxcywh = torch.tensor([[1.0, 1, 2, 2]]), torch.tensor([[2.0, 2, 2, 2]])
    torch.testing.assert_close(box_iou(*xywh, fmt="xywh"), torch.tensor([[1 / 7]]))
    torch.testing.assert_close(box_iou(*cxcywh, fmt="cxcywh"), torch.tensor([[1 / 7]]))


@pytest.mark.parametrize("kind", KINDS)
def test_box_iou_eps_placement(kind):
    a, b = grid_boxes(9, seed=3), grid_boxes(11, seed=4)
    close(box_iou(a, b, kind=kind, eps=0.5), box_iou_ref(a, b, kind=kind, eps=0.5), torch.float64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", KINDS)
def test_box_iou_half_inputs_computed_and_returned_in_fp32(dtype, kind):
    a, b = proper_boxes(33, seed=5).to(dtype), proper_boxes(17, seed=6).to(dtype)
    out = box_iou(a, b, kind=kind, eps=1e-7)
    assert out.dtype == torch.float32
    close(out, box_iou_ref(a.double(), b.double(), kind=kind, eps=1e-7), torch.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_box_iou_batched_aligned_and_noncontiguous(kind):
    a, b = proper_boxes(2, 3, 13, seed=7), proper_boxes(2, 3, 13, seed=8)
    close(box_iou(a, b, kind=kind), box_iou_ref(a, b, kind=kind), torch.float64)
    close(box_iou(a, b, kind=kind, aligned=True), box_iou_ref(a, b, kind=kind, aligned=True), torch.float64)
    wide = proper_boxes(2, 26, 8, seed=9)
    nc1, nc2 = wide[:, ::2, 2:6], wide[:, 1::2, 1:5]
    assert not nc1.is_contiguous()
    close(box_iou(nc1, nc2, kind=kind), box_iou_ref(nc1, nc2, kind=kind), torch.float64)
    # Rows crossing many thread chunks.
    big1, big2 = proper_boxes(1000, seed=10), proper_boxes(257, seed=11)
    close(box_iou(big1, big2, kind=kind), box_iou_ref(big1, big2, kind=kind), torch.float64)


@pytest.mark.parametrize("shapes", [((0, 4), (5, 4)), ((5, 4), (0, 4)), ((0, 3, 4), (0, 2, 4)), ((1, 4), (1, 4))])
def test_box_iou_empty_and_single(shapes):
    a, b = proper_boxes(*shapes[0][:-1]), proper_boxes(*shapes[1][:-1])
    out = box_iou(a, b)
    assert out.shape == (*shapes[0][:-1], shapes[1][-2])
    close(out, box_iou_ref(a, b), torch.float64)


@pytest.mark.parametrize("aligned", [False, True])
def test_box_iou_ragged_valid_counts(aligned):
    a, b = proper_boxes(3, 6, seed=12), proper_boxes(3, 6, seed=13)
    # Padding is degenerate (zeros): with eps=0 the formula would give NaN there; the kernel writes 0.
    a[0, 4:] = 0
    b[1, 2:] = 0
    v1, v2 = torch.tensor([4, 6, 0]), [6, 2, 3]
    out = box_iou(a, b, kind="giou", aligned=aligned, valid1=v1, valid2=v2)
    ref = box_iou_ref(a, b, kind="giou", aligned=aligned)
    for bi in range(3):
        for i in range(6):
            cols = [i] if aligned else range(6)
            for j in cols:
                got = out[bi, i] if aligned else out[bi, i, j]
                want = ref[bi, i] if aligned else ref[bi, i, j]
                inside = i < v1[bi] and j < v2[bi]
                assert got == (want if inside else 0), (bi, i, j)


@pytest.mark.parametrize("kind", ["iou", "giou", "diou"])
@pytest.mark.parametrize("aligned", [False, True])
def test_box_iou_gradcheck(kind, aligned):
    # Finite differences of the C++ forward against the reference backward; boxes without coordinate ties.
    a = proper_boxes(2, 4, seed=14).requires_grad_()
    b = proper_boxes(2, 4, seed=15).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: box_iou(x, y, kind=kind, aligned=aligned, eps=1e-7), (a, b))
    # xywh and a ragged batch: padded boxes get exactly zero gradient.
    v = torch.tensor([3, 4])
    fn = lambda x, y: box_iou(x, y, fmt="xywh", kind=kind, aligned=aligned, valid1=v)
    assert torch.autograd.gradcheck(fn, (a, b))
    fn(a, b).sum().backward()
    assert torch.all(a.grad[0, 3] == 0)


def test_box_iou_ciou_gradient_matches_torchvision_rule():
    # torchvision treats alpha as a constant (no_grad); the reference backward does too.
    a = proper_boxes(5, seed=16).requires_grad_()
    b = proper_boxes(7, seed=17).requires_grad_()
    up = torch.randn(5, 7, dtype=torch.float64)
    ga = torch.autograd.grad((box_iou(a, b, kind="ciou", eps=1e-7) * up).sum(), (a, b))
    gr = torch.autograd.grad((box_iou_ref(a, b, kind="ciou", eps=1e-7) * up).sum(), (a, b))
    for x, y in zip(ga, gr):
        torch.testing.assert_close(x, y)


def test_box_iou_half_gradient_dtype():
    a = proper_boxes(4, seed=18).half().requires_grad_()
    b = proper_boxes(3, seed=19).half()
    box_iou(a, b).sum().backward()
    assert a.grad.dtype == torch.float16 and torch.isfinite(a.grad).all()


def test_box_iou_validation_errors():
    a = proper_boxes(3)
    with pytest.raises(ValueError, match="last dimension 4"):
        box_iou(a[:, :3], a)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        box_iou(a[0], a)
    with pytest.raises(ValueError, match="batch dims"):
        box_iou(proper_boxes(2, 3), proper_boxes(3, 3))
    with pytest.raises(ValueError, match="NaN"):
        bad = a.clone()
        bad[1, 2] = float("nan")
        box_iou(bad, a)
    with pytest.raises(ValueError, match="NaN"):
        box_iou(a, torch.full((2, 4), float("inf"), dtype=torch.float64))
    with pytest.raises(ValueError, match="dtype"):
        box_iou(a, a.float())
    with pytest.raises(ValueError, match="dtype"):
        box_iou(a.bool(), a.bool())
    with pytest.raises(ValueError, match="share a dtype"):
        box_iou(a.long(), a.int())
    with pytest.raises(ValueError, match="fmt"):
        box_iou(a, a, fmt="yxyx")
    with pytest.raises(ValueError, match="kind"):
        box_iou(a, a, kind="wiou")
    with pytest.raises(ValueError, match="eps"):
        box_iou(a, a, eps=-1.0)
    with pytest.raises(ValueError, match="aligned"):
        box_iou(a, proper_boxes(4), aligned=True)
    with pytest.raises(ValueError, match="valid1 counts"):
        box_iou(proper_boxes(2, 3), proper_boxes(2, 3), valid1=[1, 4])
    # A boolean mask or fractional counts are not read as counts.
    with pytest.raises(ValueError, match="valid1 has dtype bool"):
        box_iou(proper_boxes(2, 3), proper_boxes(2, 3), valid1=[True, False])
    with pytest.raises(ValueError, match="valid2 has dtype float"):
        box_iou(proper_boxes(2, 3), proper_boxes(2, 3), valid2=[1.5, 2])
    with pytest.raises(ValueError, match="batch shape"):
        box_iou(proper_boxes(2, 3), proper_boxes(2, 3), valid2=[1, 2, 3])
    with pytest.raises(ValueError, match="torch.Tensor"):
        box_iou(a.tolist(), a)


def test_box_iou_custom_op_registration():
    a, b = proper_boxes(1, 5).float(), proper_boxes(1, 6).float()
    torch.library.opcheck(torch.ops.vlkernels.box_iou.default, (a, b, 0, 1, False, 0.0, None, None))


@pytest.mark.parametrize("union", ["sum", "hull"])
@pytest.mark.parametrize("aligned", [False, True])
def test_segment_iou_bit_identical_to_moment_detr(union, aligned):
    g = torch.Generator().manual_seed(20)
    s1 = torch.randint(0, 16, (2, 37, 2), generator=g).double() / 2
    s2 = torch.randint(0, 16, (2, 37 if aligned else 41, 2), generator=g).double() / 2
    s1[0, 0] = s2[0, 0] = torch.tensor([3.0, 3.0])  # zero-length identical: sum -> NaN, hull -> 0
    s1[0, 1] = torch.tensor([0.1, 0.7])
    s2[0, 1] = torch.tensor([0.3, 1.9])  # inexact decimals exercise the rounding order
    out = segment_iou(s1, s2, aligned=aligned, union=union)
    ref = np.stack([segment_iou_ref(x.numpy(), y.numpy(), aligned, union) for x, y in zip(s1, s2)])
    assert out.dtype == torch.float64
    np.testing.assert_array_equal(out.numpy(), ref)
    out32 = segment_iou(s1.float(), s2.float(), aligned=aligned, union=union)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), torch.from_numpy(ref), rtol=1e-6, atol=1e-6, equal_nan=True)


def test_segment_iou_hand_values_and_errors():
    torch.testing.assert_close(
        segment_iou(torch.tensor([[0.0, 2.0]]), torch.tensor([[1.0, 3.0]])), torch.tensor([[1 / 3]])
    )
    assert segment_iou(torch.tensor([[0.0, 1.0]]), torch.tensor([[2.0, 3.0]]), union="hull")[0, 0] == 0
    assert segment_iou(torch.zeros(0, 2), torch.zeros(3, 2)).shape == (0, 3)
    with pytest.raises(ValueError, match="last dimension 2"):
        segment_iou(torch.zeros(3, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="union"):
        segment_iou(torch.zeros(3, 2), torch.zeros(3, 2), union="iou")
    with pytest.raises(ValueError, match="NaN"):
        segment_iou(torch.full((1, 2), float("nan")), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="batch dims"):
        segment_iou(torch.zeros(2, 1, 2), torch.zeros(3, 1, 2))
    with pytest.raises(ValueError, match="aligned"):
        segment_iou(torch.zeros(2, 2), torch.zeros(3, 2), aligned=True)


def test_to_xyxy_ref_roundtrip():
    b = proper_boxes(5)
    xywh = torch.cat([b[:, :2], b[:, 2:] - b[:, :2]], -1)
    torch.testing.assert_close(to_xyxy_ref(xywh, "xywh"), b)


# torchvision's own integer cases (test/test_ops.py, TestBoxIou & co: INT_BOXES x INT_BOXES2, atol 1e-4).
_TV_INT_BOXES = [[0, 0, 100, 100], [0, 0, 50, 50], [200, 200, 300, 300], [0, 0, 25, 25]]
_TV_INT_BOXES2 = [[0, 0, 100, 100], [0, 0, 50, 50], [200, 200, 300, 300]]
_TV_DIOU = [[1.0, 0.1875, -0.4444], [0.1875, 1.0, -0.5625], [-0.4444, -0.5625, 1.0], [-0.0781, 0.1875, -0.6267]]
_TV_INT_EXPECTED = {
    ("iou", 0.0): [[1.0, 0.25, 0.0], [0.25, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0625, 0.25, 0.0]],
    ("giou", 0.0): [[1.0, 0.25, -0.7778], [0.25, 1.0, -0.8611], [-0.7778, -0.8611, 1.0], [0.0625, 0.25, -0.8819]],
    ("diou", 1e-7): [
        [1.0, 0.1875, -0.4444],
        [0.1875, 1.0, -0.5625],
        [-0.4444, -0.5625, 1.0],
        [-0.0781, 0.1875, -0.6267],
    ],
    ("ciou", 1e-7): [
        [1.0, 0.1875, -0.4444],
        [0.1875, 1.0, -0.5625],
        [-0.4444, -0.5625, 1.0],
        [-0.0781, 0.1875, -0.6267],
    ],
}


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("kind_eps", list(_TV_INT_EXPECTED))
def test_box_iou_integer_boxes_torchvision_cases(dtype, kind_eps):
    kind, eps = kind_eps
    out = box_iou(
        torch.tensor(_TV_INT_BOXES, dtype=dtype), torch.tensor(_TV_INT_BOXES2, dtype=dtype), kind=kind, eps=eps
    )
    assert out.dtype == torch.float32  # torchvision: integer areas, true division -> the default float dtype
    torch.testing.assert_close(out, torch.tensor(_TV_INT_EXPECTED[kind_eps]), rtol=0.0, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_box_iou_integer_boxes_exact(dtype):
    """IoU of integer boxes is inter/union of exact integers rounded once to fp32 (IEEE division is correctly
    rounded, and fp64 -> fp32 double rounding of a quotient is innocuous): compare bitwise with that."""
    g = torch.Generator().manual_seed(3)
    hi = 100 if dtype in (torch.uint8, torch.int8) else 5000
    xy = torch.randint(0, hi, (2, 60, 2), generator=g)
    wh = torch.randint(0, hi // 4, (2, 60, 2), generator=g)
    boxes = torch.cat([xy, xy + wh], -1).clamp(max=torch.iinfo(dtype).max).to(dtype)
    a, b = boxes[0].to(torch.int64), boxes[1].to(torch.int64)
    area = lambda t: (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])
    wh_i = (torch.minimum(a[:, None, 2:], b[None, :, 2:]) - torch.maximum(a[:, None, :2], b[None, :, :2])).clamp(min=0)
    inter = wh_i[..., 0] * wh_i[..., 1]
    union = area(a)[:, None] + area(b)[None, :] - inter
    want = (inter.double() / union.double()).float()
    got = box_iou(boxes[0], boxes[1])
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(-1), want.nan_to_num(-1))
    aligned = box_iou(boxes[0], boxes[1], aligned=True, valid1=40, valid2=40)
    assert torch.equal(aligned[:40], want.diagonal()[:40]) and bool((aligned[40:] == 0).all())


def test_box_iou_registration_op_validates_inputs():
    """The registered op is public in practice; bad shapes, counts and enums raise instead of reading
    out of bounds. (Named *registration*: torch rethrows op errors in C++, which the ASan run cannot host.)"""
    op = torch.ops.vlkernels.box_iou
    good = torch.rand(1, 5, 4)
    with pytest.raises(Exception, match="B, N, 4"):
        op(torch.rand(1, 5, 3), good, 0, 0, False, 0.0, None, None)
    with pytest.raises(Exception, match="valid1"):
        op(good, good, 0, 0, False, 0.0, torch.tensor([9]), None)
    with pytest.raises(Exception, match="valid2"):
        op(good, good, 0, 0, False, 0.0, None, torch.tensor([1], dtype=torch.int32))
    with pytest.raises(Exception, match="fmt"):
        op(good, good, 7, 0, False, 0.0, None, None)
    assert op(good, good, 0, 0, False, 0.0, None, None).shape == (1, 5, 5)


class _LazyExt:
    def __getattr__(self, name):
        from vlkernels import _ext

        return getattr(_ext.load(), name)


def _box_binding_cases():
    """(call, exception, message) for the C++ bindings called directly with a wrong tensor: C++ checks what it
    indexes, so each is an exception naming the argument, never an out-of-bounds read."""
    C = _LazyExt()  # loaded when a case runs, not at collection
    b1, b2, out = torch.rand(2, 3, 4), torch.rand(2, 5, 4), torch.empty(2, 3, 5)
    v = torch.tensor([1, 3])
    ro = np.zeros((2, 3, 5), dtype=np.float32)
    ro.flags.writeable = False

    def box(x1=b1, x2=b2, o=out, fmt=0, kind=0, aligned=False, v1=None, v2=None):
        return lambda: C.box_iou(x1, x2, o, fmt, kind, aligned, 0.0, v1, v2)

    s1, s2, so = torch.rand(2, 3, 2), torch.rand(2, 4, 2), torch.empty(2, 3, 4)
    words, area = torch.empty(3, 2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)
    w1, a1 = torch.zeros(1, 3, 2, dtype=torch.int64), torch.zeros(1, 3, dtype=torch.int64)
    iou_out, inter = torch.empty(1, 3, 3, dtype=torch.float64), torch.empty(1, 3, 3, dtype=torch.int64)
    dt, gt = torch.rand(2, 4, dtype=torch.float64), torch.rand(3, 4, dtype=torch.float64)
    crowd, cout = torch.zeros(3, dtype=torch.uint8), torch.empty(2, 3, dtype=torch.float64)
    return {
        "box-int-dtype": (box(x1=b1.int()), ValueError, "boxes1 has dtype int32"),
        "box-mixed-dtype": (box(x2=b2.double()), ValueError, "boxes2 has dtype float64; expected one of float32"),
        "box-last-dim": (box(x1=torch.rand(2, 3, 3)), ValueError, "boxes1 must have size 4 in dimension 2"),
        "box-rank": (box(x1=b1[0]), ValueError, "boxes1 must have 3 dimensions"),
        "box-batch": (box(x2=b2[:1]), ValueError, "boxes2 must have size 2 in dimension 0"),
        "box-stride": (box(x1=torch.rand(2, 3, 8)[..., ::2]), ValueError, "boxes1 must be contiguous"),
        "box-out-short": (box(o=torch.empty(2, 3, 4)), ValueError, "out must have size 5 in dimension 2"),
        "box-out-dtype": (box(o=out.double()), ValueError, "out has dtype float64"),
        "box-out-readonly": (box(o=ro), ValueError, "out is read-only"),
        "box-aligned": (box(o=torch.empty(2, 3), aligned=True), ValueError, "boxes2 must have size 3 in dimension 1"),
        "box-valid-dtype": (box(v1=v.int()), ValueError, "valid1 has dtype int32"),
        "box-valid-shape": (box(v2=torch.tensor([1, 2, 3])), ValueError, "valid2 must have size 2"),
        "box-valid-stride": (box(v1=torch.tensor([1, 0, 3, 0])[::2]), ValueError, "valid1 must be contiguous"),
        "box-fmt": (box(fmt=7), ValueError, "fmt must lie in"),
        "box-kind": (box(kind=-1), ValueError, "kind must lie in"),
        "box-device": (box(x2=torch.empty(2, 5, 4, device="meta")), ValueError, "boxes2"),
        "box-grad": (box(x1=b1.clone().requires_grad_()), ValueError, "boxes1 cannot be exported"),
        "box-not-tensor": (box(x1=[[0.0, 0.0, 1.0, 1.0]]), TypeError, "boxes1 must be a tensor"),
        "seg-last-dim": (lambda: C.segment_iou(s1, torch.rand(2, 4, 4), so, 0, False), ValueError, "seg2 must have"),
        "seg-out": (lambda: C.segment_iou(s1, s2, so[:, :2], 0, False), ValueError, "out must have size 3"),
        "seg-mode": (lambda: C.segment_iou(s1, s2, so, 2, False), ValueError, "mode must lie in"),
        "pack-dtype": (
            lambda: C.mask_pack(torch.zeros(3, 100, dtype=torch.bool), words, area),
            ValueError,
            "dtype bool",
        ),
        "pack-words": (lambda: C.mask_pack(torch.zeros(3, 129, dtype=torch.uint8), words, area), ValueError, "words"),
        "pack-area": (lambda: C.mask_pack(torch.zeros(3, 100, dtype=torch.uint8), words, area[:2]), ValueError, "area"),
        "maskiou-words": (
            lambda: C.mask_iou(w1, a1, torch.zeros(1, 3, 1, dtype=torch.int64), a1, False, iou_out, inter),
            ValueError,
            "words2 must have size 2 in dimension 2",
        ),
        "maskiou-area": (lambda: C.mask_iou(w1, a1[:, :2], w1, a1, False, iou_out, inter), ValueError, "area1"),
        "maskiou-out": (lambda: C.mask_iou(w1, a1, w1, a1, False, iou_out.float(), inter), ValueError, "out has"),
        "maskiou-inter": (lambda: C.mask_iou(w1, a1, w1, a1, False, iou_out, inter[..., :2]), ValueError, "inter"),
        "cocobox-crowd": (lambda: C.coco_box_iou(dt, gt, crowd[:2], cout), ValueError, "iscrowd"),
        "cocobox-dtype": (lambda: C.coco_box_iou(dt.float(), gt, crowd, cout), ValueError, "dt has dtype float32"),
    }


@pytest.mark.parametrize("case", sorted(_box_binding_cases()))
def test_box_bindings_reject_bad_tensors(case):
    call, exc, match = _box_binding_cases()[case]
    with pytest.raises(exc, match=match):
        call()


def test_box_bindings_accept_numpy_and_write_what_torch_writes():
    # The bindings take any DLPack array: numpy in, the kernel's float64 values out, equal to the torch path.
    from vlkernels import _ext

    a, b = proper_boxes(1, 4, seed=3).numpy(), proper_boxes(1, 6, seed=4).numpy()
    out = np.empty((1, 4, 6))
    _ext.load().box_iou(a, b, out, 0, 1, False, 0.0)
    np.testing.assert_array_equal(out, box_iou(torch.from_numpy(a), torch.from_numpy(b), kind="giou").numpy())


@pytest.mark.parametrize("kind,aligned,ragged", [("iou", False, False), ("giou", False, True), ("ciou", True, True)])
def test_box_iou_compile_opcheck(kind, aligned, ragged):
    # One autograd pattern: custom_op + register_fake + register_autograd, opcheck-clean
    # (schema, fake tensor, autograd registration, AOT dispatch).
    a = proper_boxes(2, 3, seed=1).requires_grad_()
    b = proper_boxes(2, 3 if aligned else 4, seed=2).requires_grad_()
    valid = torch.tensor([2, 3]) if ragged else None
    args = (a, b, 0, KINDS.index(kind), aligned, 1e-7, valid, None)
    torch.library.opcheck(torch.ops.vlkernels.box_iou.default, args)


@pytest.mark.parametrize("kind", KINDS)
def test_box_iou_compiles_fullgraph_with_grad(kind):
    # torch.compile traces forward and backward without a graph break; values and gradients equal torchvision's
    # formula (the float64 reference) differentiated by autograd.
    a = proper_boxes(2, 5, seed=5).requires_grad_()
    b = proper_boxes(2, 7, seed=6).requires_grad_()
    up = torch.rand(2, 5, 7, dtype=torch.float64)
    torch._dynamo.reset()

    def f(x, y):
        # The registered op (box_iou's value checks, e.g. finiteness, read data and stay outside the graph).
        return torch.ops.vlkernels.box_iou(x, y, 0, KINDS.index(kind), False, 1e-7, None, None) * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = compiled(a, b)
    ga = torch.autograd.grad((out * up).sum(), (a, b))
    ref = box_iou_ref(a, b, kind=kind, eps=1e-7) * 2
    gr = torch.autograd.grad((ref * up).sum(), (a, b))
    close(out.detach(), ref.detach(), torch.float64)
    for got, want in zip(ga, gr):
        close(got, want, torch.float64)


def test_segment_iou_op_registration_validates_itself():
    # torch.ops.vlkernels.segment_iou skips segment_iou's Python checks: the C++ binding refuses what it cannot index.
    s = torch.rand(1, 3, 2)
    with pytest.raises(ValueError, match="seg2 must have size 2 in dimension 2"):
        torch.ops.vlkernels.segment_iou(s, torch.rand(1, 3, 4), 0, False)
    with pytest.raises(ValueError, match="seg1 has dtype float16"):
        torch.ops.vlkernels.segment_iou(s.half(), s.half(), 0, False)
    with pytest.raises(ValueError, match="seg1 must be contiguous"):
        torch.ops.vlkernels.segment_iou(torch.rand(1, 3, 4)[..., ::2], s, 0, False)
    with pytest.raises(ValueError, match="mode must lie in"):
        torch.ops.vlkernels.segment_iou(s, s, 5, False)
    with pytest.raises(ValueError, match=r"\(B, N, 2\)"):
        torch.ops.vlkernels.segment_iou(s[0], s[0], 0, False)
