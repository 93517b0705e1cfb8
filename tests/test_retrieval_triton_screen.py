"""The Triton path's certified screen (vlkernels/retrieval/triton_screen.py, kernels interpreted on CPU under
TRITON_INTERPRET=1) against the exact retrieval definition: the float64 8-lane scores of the numpy reference loop
and brute-force ranks / top-k from them. Adversarial data: near ties, duplicates, huge, tiny and denormal values,
fp32 overflow in the screen, one dominant dimension, unnormalized rows; fp16, bf16, fp32 and fp64 inputs; device
chunks, exclusions, the fused and the large-k top-K paths, and undecided-buffer overflows."""

import os

import numpy as np
import pytest
import torch

from vlkernels.retrieval import Positives, evaluate, rank_metrics, topk
from vlkernels.retrieval import triton_screen as screen
from vlkernels.retrieval.metrics import metrics_from_ranks
from vlkernels.retrieval.reference import ranks_ref

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs CUDA or TRITON_INTERPRET=1",
)
pytest.importorskip("triton")

from vlkernels.retrieval.reference import exact_scores_ref  # noqa: E402

KINDS = ("plain", "near_ties", "duplicates", "huge", "overflow", "tiny", "denormal", "dominant", "unnormalized")


def _data(kind: str, dtype=torch.float32, n_img=24, per=2, d=20, seed=3):
    """(images, texts, labels) of one adversarial kind, as ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(n_img, d, generator=g, dtype=torch.float64)
    lab = np.arange(n_img * per) % n_img
    txt = img[torch.from_numpy(lab)] + 0.7 * torch.randn(len(lab), d, generator=g, dtype=torch.float64)
    if kind == "near_ties":
        # Pairs of images one fp32 ulp apart in one coordinate (and exact duplicates of texts): scores that agree
        # in all but the last bits, far inside any screen's error.
        img32 = img.float()
        img32[1::2] = img32[0::2]
        img32[1::2, 3] = torch.nextafter(img32[1::2, 3], torch.tensor(float("inf")))
        img = img32.double()
        txt[1::3] = txt[0::3][: len(txt[1::3])]
    elif kind == "duplicates":
        img[:10] = img[0]
        txt[:12] = txt[0]
    elif kind == "huge":
        img, txt = img * 1e17, txt * 3e16
    elif kind == "overflow":  # finite fp32 inputs whose products overflow fp32: the screen gives inf / NaN
        img, txt = img * 2e19, txt * 3e19
    elif kind == "tiny":  # products below fp32's subnormals: the screen sees 0
        img, txt = img * 1e-24, txt * 1e-23
    elif kind == "denormal":  # fp32 subnormal elements (bf16 halves flushed: everything sits in the residual)
        img, txt = img * 1e-39, txt
        img[::3] *= 1e36
    elif kind == "dominant":  # one huge shared coordinate: scores ~1e8 that differ in units
        img[:, 0] = 1e4
        txt[:, 0] = 1e4
        txt[::2, 0] += 1e-3
    elif kind == "unnormalized":
        img = img * torch.exp(3 * torch.randn(n_img, 1, generator=g, dtype=torch.float64))
        txt = txt * torch.exp(3 * torch.randn(len(lab), 1, generator=g, dtype=torch.float64))
    return img.to(dtype), txt.to(dtype), lab


def _want_ranks(img, txt, lab):
    """Brute-force ranks of both directions from the exact score matrix (stable sort: ties to the lower index)."""
    s = exact_scores_ref(txt, img)
    t2i = Positives.from_labels(lab, len(img))
    return {"text_to_image": ranks_ref(s, t2i), "image_to_text": ranks_ref(s.T, t2i.transpose())}


def _want_topk(q, g, k, exclude=None):
    s = exact_scores_ref(q, g)
    if exclude is not None:
        for i, row in enumerate(exclude):
            s[i, row] = -np.inf
    vals = np.full((len(q), k), -np.inf)
    idx = np.full((len(q), k), -1)
    for i in range(len(q)):
        o = np.argsort(-s[i], kind="stable")
        o = o[np.isfinite(s[i][o])][:k]
        vals[i, : len(o)], idx[i, : len(o)] = s[i][o], o
    return torch.from_numpy(vals), torch.from_numpy(idx)


def _check_evaluate(img, txt, lab, **kw):
    got = evaluate(img, txt, lab, backend="triton", **kw)
    want = _want_ranks(img, txt, lab)
    for d, r in want.items():
        np.testing.assert_array_equal(got.ranks[d].ranks, r.ranks, err_msg=d)
        assert got[d] == metrics_from_ranks(r), d
    # Every text's pair against every image, every image's pairs (one per text) against every text.
    m = got.meta
    assert m["path"] == "triton" and m["decisions"] == len(txt) * len(img) + len(txt) * len(txt), m
    assert m["screen"] == {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(img.dtype, "bf16x3"), m
    assert (
        0 <= m["rechecked_pairs"] <= m["decisions"] and m["rechecked_fraction"] == m["rechecked_pairs"] / m["decisions"]
    )
    return got


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("d", [1, 7, 8, 37])
def test_exact_scores_kernel_is_the_definition_bit_for_bit(dtype, d):
    g = torch.Generator().manual_seed(d)
    q = torch.randn(19, d, generator=g, dtype=torch.float64) * 10 ** torch.randint(-3, 4, (19, 1), generator=g)
    x = torch.randn(23, d, generator=g, dtype=torch.float64)
    q, x = q.to(dtype), x.to(dtype)
    rows = torch.randint(0, 19, (70,), generator=g)
    cols = torch.randint(0, 23, (70,), generator=g)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    op_q, op_x = screen.make_operand(q.to(dev)), screen.make_operand(x.to(dev))
    got = screen.exact_scores(op_q.raw, op_x.raw, rows.to(dev), cols.to(dev)).cpu().numpy()
    want = exact_scores_ref(q, x, (rows.numpy(), cols.numpy()))
    assert np.array_equal(got.view(np.int64), want.view(np.int64))  # the same bits (signed zeros aside: none here)


@pytest.mark.parametrize("kind", KINDS)
def test_screen_interval_holds_the_exact_score(kind):
    """lo = s_hat - B <= s (dense lower-bound kernel) and s_hat + B >= s (every pair collected at limit s), for
    every pair of every adversarial kind; and the bound is not vacuous on plain data."""
    from vlkernels.retrieval.kernels import _bound_tile_kernel

    img, txt, _ = _data(kind)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # compiled kernels where a GPU exists
    for dtype in (torch.float32, torch.float16) if kind == "plain" else (torch.float32,):
        q, g = screen.make_operand(txt.to(dev, dtype)), screen.make_operand(img.to(dev, dtype))
        s = torch.from_numpy(exact_scores_ref(txt.to(dtype), img.to(dtype))).to(dev)
        t = screen.screen_tile(dev, dtype)
        _, _, abs_err = screen.bound_constants(q.raw.shape[1], q.split)
        lo = torch.empty(s.shape, dtype=torch.float32, device=dev)
        n_q, n_g = s.shape
        _bound_tile_kernel[(-(-n_q // t.block_m), -(-n_g // t.block_n))](
            *screen._args(q, g), lo, n_q, n_g, q.raw.shape[1], q.h.stride(0), g.h.stride(0), abs_err,
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, SPLIT=q.split,
            num_warps=t.num_warps, num_stages=t.num_stages,
        )  # fmt: skip
        assert bool((lo.double() <= s).all()), kind
        ker = screen.ScreenCount(dev, dtype)
        for c in range(0, n_g, 5):  # each row's limit at its exact score in column c: s_hat + B >= s collects it
            lim = screen.round32(s[:, c].contiguous())[1]  # rounded down: <= s
            rows, cols = screen._candidates(q, g, lim, ker)
            hit = set((rows * n_g + cols).tolist())
            assert all(r * n_g + c in hit for r in range(n_q)), (kind, c)
        if kind == "plain":
            norm = lambda x: torch.linalg.vector_norm(x.double(), dim=1)
            scale = norm(txt)[:, None] * norm(img)
            slack = ((s - lo.double()) / scale).max()
            assert slack < (5e-3 if dtype == torch.float16 else 2e-4)  # fp16: 2^-11 input rounding, fp32: ~3D·2^-22


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_ranks_are_exact_on_adversarial_data(kind):
    img, txt, lab = _data(kind)
    got = _check_evaluate(img, txt, lab, device_chunk=32)  # 48 texts: two query chunks, the second partial
    if kind == "duplicates":  # exact ties cannot be decided by a screen: their re-checks are reported
        assert got.meta["rechecked_pairs"] > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("kind", ["plain", "near_ties", "duplicates"])
def test_evaluate_ranks_are_exact_for_every_input_dtype(kind, dtype):
    img, txt, lab = _data(kind, dtype=dtype, d=13 if dtype == torch.float64 else 20)
    _check_evaluate(img, txt, lab)


def test_mixed_dtypes_and_general_positives():
    img, txt, _ = _data("near_ties")
    img = img.half()
    pos = Positives.from_lists([[i % 24, (5 * i) % 24, (7 * i + 1) % 24] for i in range(len(txt))], 24)
    _, got = rank_metrics(txt, img, pos, backend="triton", device_chunk=32)
    np.testing.assert_array_equal(got.ranks, ranks_ref(exact_scores_ref(txt, img), pos).ranks)


def test_undecided_buffer_overflow_reruns_and_splits(monkeypatch):
    """A first buffer of one tile (rerun with room for all), then a cap of one tile per launch (columns split in
    halves down to launches that fit, a single column taken whole): the same exact ranks, nothing dropped."""
    img, txt, lab = _data("duplicates", n_img=20)
    monkeypatch.setattr(screen, "FIRST_TILES", 1)
    _check_evaluate(img, txt, lab)
    monkeypatch.setattr(screen, "MAX_TILES", 1)
    _check_evaluate(img, txt, lab)


@pytest.mark.parametrize("kind", ["near_ties", "duplicates", "overflow"])  # plain data: tests/test_retrieval_dist.py
def test_topk_is_exact_fused_and_large_k(kind, monkeypatch):
    img, txt, _ = _data(kind)
    q = txt[:20]
    ex = [[i % 24, (3 * i) % 24] for i in range(20)]
    for k in (1, 4):
        (v, i) = res = topk(q, img, k, exclude=ex if k == 4 else None, backend="triton", device_chunk=16)
        wv, wi = _want_topk(q, img, k, ex if k == 4 else None)
        assert torch.equal(i, wi) and torch.equal(v, wv), (kind, k)
        assert res.meta["path"] == "triton" and res.meta["decisions"] == len(q) * len(img)
        assert k <= res.meta["rechecked_pairs"] / len(q) <= len(img)  # every member is scored exactly
    # Past the fused kernel's budget: dense lower-bound tiles and torch.topk (and a tiny candidate buffer).
    monkeypatch.setattr(screen, "max_fused_k", lambda device: 2)
    monkeypatch.setattr(screen, "FIRST_TILES", 1)
    v, i = topk(q, img, 6, exclude=ex, backend="triton", device_chunk=16)
    wv, wi = _want_topk(q, img, 6, ex)
    assert torch.equal(i, wi) and torch.equal(v, wv), kind


def test_topk_fp64_and_short_rows():
    img, txt, _ = _data("near_ties")
    v, i = topk(txt[:9], img.double(), 3, backend="triton")  # fp64 gallery: exact scores in fp64, fp32 queries
    wv, wi = _want_topk(txt[:9], img.double(), 3)
    assert torch.equal(i, wi) and torch.equal(v, wv)
    # Exclusions leaving fewer than k items: rows padded with (-inf, -1).
    ex = [list(range(22))] * 3
    v, i = topk(txt[:3], img, 4, exclude=ex, backend="triton")
    wv, wi = _want_topk(txt[:3], img, 4, ex)
    assert torch.equal(i, wi) and torch.equal(v, wv)
    assert (i[:, 2:] == -1).all()
