"""Each `vlkernels selftest` tolerance admits what a GPU may legally compute differently and rejects a wrong result.

The legal variants are emulated on CPU in numpy fp32, every operation rounded: dot products and sums in reversed
order with every multiply-add fused (one rounding of a·b + acc, as FMA contraction and tl.dot do), exp at the edge of
ex2.approx's error (2^-22 relative, after rounding z·log2 e), sqrt and division at 2 ulp (sqrt.approx, div.full),
and the gradient G rounded to the input dtype before the backward GEMMs. The float64 formula is the reference.
"""

import numpy as np
import pytest
import torch

from vlkernels import selftest
from vlkernels.selftest import U32

F32 = np.float32


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b.T in fp32 from the last k down, each step a·b + acc rounded once (a·b is exact in float64)."""
    acc = np.zeros((a.shape[0], b.shape[0]), F32)
    for k in reversed(range(a.shape[1])):
        acc = (np.outer(a[:, k].astype(np.float64), b[:, k].astype(np.float64)) + acc).astype(F32)
    return acc


def _rsum(a: np.ndarray, axis=None) -> np.ndarray:
    """fp32 sum in reversed sequential order."""
    if axis is None:
        return np.flip(a.ravel()).cumsum(dtype=F32)[-1]
    return np.take(np.flip(a, axis).cumsum(axis, dtype=F32), -1, axis=axis)


def _exp(z: np.ndarray) -> np.ndarray:
    """ex2.approx(z·log2 e) at the edge of its error bound (3u before the final rounding: 4u in all)."""
    z2 = (z.astype(F32) * F32(np.log2(np.e))).astype(F32)
    return (np.exp2(z2.astype(np.float64)) * (1 + 3 * U32)).astype(F32)


def _approx(v: np.ndarray) -> np.ndarray:
    """A result at the edge of 2 ulp (sqrt.approx, div.full): 3u before the final rounding."""
    return (v.astype(np.float64) * (1 + 3 * U32)).astype(F32)


def _round_to(a: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype).float().numpy()


def _emulated_loss(kind, x, y, s, b, up, dtype):
    """The loss leaves as a GPU may legally compute them (see the module docstring)."""
    x, y = x.float().numpy(), y.float().numpy()
    n = x.shape[0]
    s, b, up = F32(s), F32(b), F32(up)
    raw = _dot(x, y)
    logit = (s * raw).astype(F32)
    eye = np.eye(n, dtype=bool)
    if kind == "info_nce":
        lse = []
        for axis in (1, 0):
            m = logit.max(axis, keepdims=True)
            lse.append((m + np.log(_rsum(_exp(logit - m), axis)).reshape(m.shape)).astype(F32))
        diag = np.diagonal(logit)
        loss = (_rsum(lse[0].ravel() - diag) / F32(n) + _rsum(lse[1].ravel() - diag) / F32(n)) / F32(2)
        da = F32(up / F32(2 * n))
        g = da * _exp(logit - lse[0]) + da * _exp(logit - lse[1]) - np.where(eye, F32(2) * da, F32(0))
        leaves = {"loss": loss}
    else:
        t = np.where(eye, -(logit + b), logit + b).astype(F32)
        e = _exp(-np.abs(t))
        w = (F32(1) + e).astype(F32)
        log1p = np.where(w == 1, e, _approx(np.log(w) * e / (w - F32(1))))
        sp = (np.maximum(t, F32(0)) + log1p).astype(F32)
        sig = _approx(np.where(t >= 0, F32(1) / w, e / w))
        inv = F32(F32(1) / F32(n))
        leaves = {"loss": _rsum(sp * inv)}
        g = (np.where(eye, -sig, sig) * F32(inv * up)).astype(F32)
        leaves_bias = _rsum(g)
    leaves["d_scale"] = _rsum(g * raw)
    gq = _round_to(g, dtype)
    leaves["d_image"] = (s * _dot(gq, y.T)).astype(F32)
    leaves["d_text"] = (s * _dot(gq.T, x.T)).astype(F32)
    if kind == "siglip":
        leaves["d_bias"] = leaves_bias
    return {k: torch.as_tensor(np.asarray(v, np.float64)) for k, v in leaves.items()}


def _reference_loss(kind, x, y, s, b, up):
    x = x.double().requires_grad_()
    y = y.double().requires_grad_()
    st = torch.tensor(s, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    loss = selftest._loss_ref(kind, x, y, st, bt)
    (loss * up).backward()
    out = {"loss": loss.detach(), "d_image": x.grad, "d_text": y.grad, "d_scale": st.grad}
    if kind == "siglip":
        out["d_bias"] = bt.grad
    return out


@pytest.mark.parametrize("kind", ["info_nce", "siglip"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,d", [(37, 24), (17, 40)])
def test_loss_bound_admits_gpu_arithmetic_and_rejects_a_perturbation(kind, dtype, n, d):
    g = torch.Generator().manual_seed(n * d)
    x = (torch.randn(n, d, generator=g) / d**0.5).to(dtype)
    y = (torch.randn(n, d, generator=g) / d**0.5).to(dtype)
    bound = selftest.loss_bound(kind, x, y, 10.0, -5.0, 0.37, dtype)
    ref = _reference_loss(kind, x, y, 10.0, -5.0, 0.37)
    got = _emulated_loss(kind, x, y, 10.0, -5.0, 0.37, dtype)
    assert set(bound) == set(ref) == set(got)
    # A relative error the bound must reject: 0.1% of the leaf's magnitude in fp32, 5% in bf16 (G in bf16: 2^-9).
    rel = 1e-3 if dtype == torch.float32 else 5e-2
    for leaf, e in ref.items():
        err = float((got[leaf] - e).abs().max())
        assert err <= bound[leaf], (leaf, err, bound[leaf])
        wrong = got[leaf].clone().reshape(-1)
        wrong[0] += rel * float(e.abs().max())
        assert float((wrong.reshape(e.shape) - e).abs().max()) > bound[leaf], (leaf, bound[leaf])


def test_loss_bound_rejects_tf32_products():
    # TF32 is not legal for fp32 operands (tl.dot gets input_precision="ieee"): its 10-bit mantissas must fail.
    n, d = 37, 24
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(n, d, generator=g) / d**0.5, torch.randn(n, d, generator=g) / d**0.5

    def tf32(t):
        return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

    bound = selftest.loss_bound("info_nce", x, y, 10.0, -5.0, 0.37, torch.float32)
    ref = _reference_loss("info_nce", x, y, 10.0, -5.0, 0.37)
    got = _emulated_loss("info_nce", tf32(x), tf32(y), 10.0, -5.0, 0.37, torch.float32)
    assert float((got["loss"] - ref["loss"]).abs()) > bound["loss"]
    assert float((got["d_image"] - ref["d_image"]).abs().max()) > bound["d_image"]


def test_retrieval_scores_are_exact_under_any_legal_arithmetic():
    # The selftest's integer embeddings: TF32 and fp16 hold them exactly, and a reordered fused fp32 dot product
    # equals the exact one, so ranks, top-K and metrics can be compared exactly.
    g = torch.Generator().manual_seed(1)
    img, txt = selftest._int_embeddings(13, 64, g), selftest._int_embeddings(65, 64, g)
    assert torch.equal((img.view(torch.int32) & ~0x1FFF).view(torch.float32), img)
    assert torch.equal(img.half().float(), img)
    exact = txt.double() @ img.double().T
    assert torch.equal(torch.from_numpy(_dot(txt.numpy(), img.numpy())).double(), exact)
    # Not so for real-valued embeddings: there a reordered sum moves the scores (hence ties could move ranks).
    real = torch.randn(65, 64, generator=g)
    assert not torch.equal(torch.from_numpy(_dot(real.numpy(), real.numpy())), (real @ real.T))


def _box_iou_np(a: np.ndarray, b: np.ndarray, kind: str, fused: bool) -> np.ndarray:
    """box_math.h's pair_iou (xyxy, eps = 0) in fp32, every operation rounded; ``fused`` contracts a*b+c into FMA
    where nvcc's default -fmad=true may (inter's product into the union, the enclosing area into encl - uni)."""
    ax1, ay1, ax2, ay2 = (a[:, i, None] for i in range(4))
    bx1, by1, bx2, by2 = (b[None, :, i] for i in range(4))
    area_a, area_b = (ax2 - ax1) * (ay2 - ay1), (bx2 - bx1) * (by2 - by1)
    w = np.maximum(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), F32(0))
    h = np.maximum(np.minimum(ay2, by2) - np.maximum(ay1, by1), F32(0))
    inter = w * h
    if fused:
        uni = ((area_a + area_b).astype(np.float64) - w.astype(np.float64) * h).astype(F32)
    else:
        uni = area_a + area_b - inter
    iou = inter / (uni + F32(0))
    if kind == "iou":
        return iou
    cw = np.maximum(np.maximum(ax2, bx2) - np.minimum(ax1, bx1), F32(0))
    ch = np.maximum(np.maximum(ay2, by2) - np.minimum(ay1, by1), F32(0))
    encl = cw * ch
    if fused:
        return iou - (cw.astype(np.float64) * ch - uni).astype(F32) / (encl + F32(0))
    return iou - (encl - uni) / (encl + F32(0))


@pytest.mark.parametrize("kind", ["iou", "giou"])
def test_box_iou_twin_is_bit_exact_and_contraction_is_not(kind):
    # Tolerance 0 between the CUDA kernel and its CPU twin holds because neither contracts (-fmad=false,
    # -ffp-contract=off): the CPU build equals the uncontracted formula bit for bit, and a contracted evaluation (what
    # nvcc's default would compile) differs, so a GPU build without -fmad=false would fail the check.
    from vlkernels.ops import box_iou

    g = torch.Generator().manual_seed(2)
    xy = torch.rand(257 + 300, 2, generator=g) * 100
    boxes = torch.cat([xy, xy + torch.rand(557, 2, generator=g) * 50 + 0.5], 1)
    a, b = boxes[:257], boxes[257:]
    got = box_iou(a, b, kind=kind).numpy()
    plain = _box_iou_np(a.numpy(), b.numpy(), kind, fused=False)
    fused = _box_iou_np(a.numpy(), b.numpy(), kind, fused=True)
    assert np.array_equal(got, plain)
    assert np.abs(fused - plain).max() > 0


def test_exact_ops_are_exact_in_any_order():
    # mask_iou / rle_iou: integer counts (any order, integer atomics) then one IEEE division; count_above: comparisons.
    from vlkernels.ops import count_above, mask_iou

    g = torch.Generator().manual_seed(3)
    ma, mb = torch.rand(7, 23, 37, generator=g) < 0.5, torch.rand(5, 23, 37, generator=g) < 0.5
    fa, fb = ma.flatten(1).numpy()[:, ::-1].astype(np.int64), mb.flatten(1).numpy()[:, ::-1].astype(np.int64)
    inter = fa @ fb.T
    uni = fa.sum(1)[:, None] + fb.sum(1)[None, :] - inter
    assert np.array_equal(mask_iou(ma, mb).numpy(), inter / uni)
    flipped = ma.clone()
    flipped[0, 0, 0] = ~flipped[0, 0, 0]
    assert not np.array_equal(mask_iou(flipped, mb).numpy(), inter / uni)
    scores, thr = torch.randn(6, 50, generator=g), torch.randn(6, generator=g)
    perm = torch.randperm(50, generator=g)
    assert torch.equal(count_above(scores[:, perm].contiguous(), thr), count_above(scores, thr))
    assert not torch.equal(count_above(scores, thr - 0.5), count_above(scores, thr))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_l2_normalize_bound(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(37, 130, generator=g).to(dtype)
    xf = x.float().numpy()
    norm = _approx(np.sqrt(_rsum(xf * xf, 1)))
    y = _round_to((xf * _approx(F32(1) / norm)[:, None]).astype(F32), dtype)
    e = x.double() / x.double().norm(dim=1, keepdim=True)
    tol = selftest.l2_normalize_bound(x) + torch.finfo(dtype).eps / 2  # the output's rounding to the dtype
    assert float((torch.from_numpy(y).double() - e).abs().max()) <= tol
    assert float((torch.from_numpy(y).double() * (1 + 10 * tol) - e).abs().max()) > tol


def test_siglip_score_bound():
    g = torch.Generator().manual_seed(6)
    n, per, d = 37, 3, 130
    img, txt = torch.randn(n * per, d, generator=g), torch.randn(n, d, generator=g)
    i32, t32 = img.numpy(), np.repeat(txt.numpy(), per, 0)
    dots = np.diagonal(_dot(i32, t32))
    norms = _approx(np.sqrt(_rsum(i32 * i32, 1))) * _approx(np.sqrt(_rsum(t32 * t32, 1)))
    cos = _approx(dots / norms.astype(F32))
    got = torch.sigmoid(torch.from_numpy(cos).double() * 8.0 - 2.0).view(n, per).mean(1)
    e_cos = torch.nn.functional.cosine_similarity(img.double().view(n, per, d), txt.double()[:, None], dim=2)
    e = torch.sigmoid(e_cos * 8.0 - 2.0).mean(1)
    tol = selftest.siglip_score_bound(d, 8.0)
    assert float((got - e).abs().max()) <= tol
    assert float((got + 2 * tol - e).abs().max()) > tol
