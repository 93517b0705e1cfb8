"""Exact scores and the certified screens: the C++ primitive equals the numpy definition bit for bit, the screens'
error bounds hold on adversarial inputs (also under emulated AMX denormal flushing), and every CPU path gives the
ranks of the exact scores whatever the screen."""

import numpy as np
import pytest
import torch

from vlkernels import _ext
from vlkernels.retrieval import cpu, evaluate, gemm, rank_metrics, topk
from vlkernels.retrieval import screen as scr
from vlkernels.retrieval.cpu import exact_pairs
from vlkernels.retrieval.positives import Positives
from vlkernels.retrieval.reference import evaluate_ref, exact_scores_ref, ranks_ref, topk_ref


def _adversarial(kind: str, n: int, d: int, rng: np.random.Generator, dtype=np.float32) -> np.ndarray:
    """Rows that stress a screen: near-ties, extreme magnitudes, denormals, one dominant dimension."""
    x = rng.standard_normal((n, d))
    if kind == "duplicates":
        x = x[rng.integers(0, max(1, n // 4), n)]
    elif kind == "ulp":  # copies one ulp apart in one coordinate
        x = np.repeat(x[: -(-n // 3)], 3, axis=0)[:n].astype(dtype)
        j = rng.integers(0, d, n)
        x[np.arange(n), j] = np.nextafter(x[np.arange(n), j], np.inf if rng.random() < 0.5 else -np.inf)
    elif kind == "huge":
        x = x * (1e17 if dtype == np.float32 else 1e140)
    elif kind == "tiny":
        x = x * (1e-22 if dtype == np.float32 else 1e-160)
    elif kind == "denormal":
        x = x * (1e-41 if dtype == np.float32 else 1e-310)
    elif kind == "dominant":
        x[:, 0] *= 1e6
    elif kind == "mixed_scale":
        x = x * np.exp(rng.uniform(-30, 30, (n, 1)))
    elif kind == "integers":  # many exact ties
        x = rng.integers(-2, 3, (n, d)).astype(np.float64)
    return x.astype(dtype)


KINDS = ["gauss", "duplicates", "ulp", "huge", "tiny", "denormal", "dominant", "mixed_scale", "integers"]


@pytest.mark.parametrize("d", [1, 7, 8, 9, 64, 515])
@pytest.mark.parametrize("kind", KINDS)
def test_exact_pairs_bit_equal_to_definition(d, kind):
    rng = np.random.default_rng(d * 31 + len(kind))
    for dq, dg in ((np.float32, np.float32), (np.float64, np.float64), (np.float32, np.float64)):
        q, g = _adversarial(kind, 23, d, rng, dq), _adversarial(kind, 17, d, rng, dg)
        qi, gi = rng.integers(0, 23, 400), rng.integers(0, 17, 400)
        got = exact_pairs(torch.from_numpy(q), torch.from_numpy(g), qi, gi)
        want = exact_scores_ref(q, g, (qi, gi))
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), (kind, d, dq, dg)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 8), (33, 65, 9), (70, 131, 515)])
@pytest.mark.parametrize("kind", KINDS)
def test_exact_tile_bit_equal_to_definition(shape, kind):
    """The dense blocked kernels (with AVX2 four rows by three columns, the lanes in two passes, fused multiply-adds
    for fp32 sources and rounded products for fp64 ones; without it two by two, unfused) give every pair of a tile
    the definition's score bit for bit, short edges (rows and columns not a multiple of the block), D not a multiple
    of 8 and rows at a stride included."""
    C = _ext.load()
    r, c, d = shape
    rng = np.random.default_rng(r * 7 + len(kind))
    for dt in (np.float32, np.float64):
        q, g = _adversarial(kind, r, d, rng, dt), _adversarial(kind, c, d, rng, dt)
        wide = torch.zeros(c, d + 3, dtype=torch.float64)[:, 1 : d + 1]  # rows at a stride
        wide.copy_(torch.from_numpy(g))
        out = torch.full((r, c), float("nan"), dtype=torch.float64)
        C.exact_tile(torch.from_numpy(q).double(), wide, out, dt == np.float32)
        assert np.array_equal(out.numpy().view(np.int64), exact_scores_ref(q, g).view(np.int64)), (kind, dt)


def test_exact_tile_refuses_bad_shapes():
    C = _ext.load()
    q, g = torch.zeros(3, 4, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="out"):
        C.exact_tile(q, g, torch.empty(3, 3, dtype=torch.float64), True)
    with pytest.raises(ValueError, match="g"):
        C.exact_tile(q, torch.zeros(2, 5, dtype=torch.float64), torch.empty(3, 2, dtype=torch.float64), True)
    with pytest.raises(ValueError, match="q"):
        C.exact_tile(q.float(), g, torch.empty(3, 2, dtype=torch.float64), True)


def test_exact_scores_ref_full_matrix_equals_pairs_and_widens_low_precision():
    rng = np.random.default_rng(3)
    q = torch.from_numpy(rng.standard_normal((5, 19))).to(torch.bfloat16)
    g = torch.from_numpy(rng.standard_normal((4, 19))).to(torch.float16)
    full = exact_scores_ref(q, g)
    qi, gi = np.repeat(np.arange(5), 4), np.tile(np.arange(4), 5)
    assert np.array_equal(full.reshape(-1), exact_scores_ref(q, g, (qi, gi)))
    assert np.array_equal(full.reshape(-1), exact_pairs(q.float(), g.float(), qi, gi))


def test_exact_pairs_refuses_bad_indices():
    C = _ext.load()
    q, g = torch.zeros(3, 4), torch.zeros(2, 4)
    out = torch.empty(1, dtype=torch.float64)
    with pytest.raises(ValueError, match="gi holds 2 at 0"):
        C.exact_pairs(q, g, torch.tensor([0]), torch.tensor([2]), out)
    with pytest.raises(ValueError, match="same D"):
        C.exact_pairs(q, torch.zeros(2, 5), torch.tensor([0]), torch.tensor([0]), out)


def _bound(sc: scr.Screen, a: scr.Side, b: scr.Side, s_hat: np.ndarray) -> np.ndarray:
    r, c = a.terms.numpy(), b.terms.numpy()
    return sum(r[k][:, None] * c[k][None, :] for k in range(3)) + r[3][:, None] + c[3][None, :] + sc.rel * np.abs(s_hat)


def _flush(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < np.float32(2.0**-126), np.float32(0), x).astype(np.float32)


def _amx_emulated(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """bf16 GEMM as AMX does it: bf16 inputs (denormals already flushed), fp32 products and running sums with
    denormal results flushed to zero, one fp32 add per product in increasing d, output rounded to bf16 and
    flushed."""
    x, y = a.float().numpy(), b.float().numpy()
    acc = np.zeros((x.shape[0], y.shape[0]), dtype=np.float32)
    for d in range(x.shape[1]):
        p = _flush(x[:, d, None] * y[None, :, d])
        acc = _flush(acc + p)
    return _flush(torch.from_numpy(acc).bfloat16().float().numpy())


@pytest.mark.parametrize("kind", [*KINDS, "bf16_denormal"])
@pytest.mark.parametrize("name", ["fp32", "bf16", "bf16_amx"])
def test_screen_bound_never_violated(kind, name):
    rng = np.random.default_rng(len(kind) * 7 + len(name))
    d = 37
    if kind == "bf16_denormal":  # products and sums in the fp32 denormal range, inputs near bf16's smallest normal
        x = (rng.standard_normal((40, d)) * 2.0**-63).astype(np.float32)
        y = (rng.standard_normal((30, d)) * 2.0**-64).astype(np.float32)
    else:
        x, y = _adversarial(kind, 40, d, rng), _adversarial(kind, 30, d, rng)
    sc = scr.Screen(name.split("_")[0], d)
    a, b = sc.side(torch.from_numpy(x), True), sc.side(torch.from_numpy(y), False)
    if a.max_norm * b.max_norm >= scr.FP32_RANGE[1]:  # fp32 would overflow: the engine takes fp64 there
        sc = scr.Screen("fp64", d)
        a, b = sc.side(torch.from_numpy(x), True), sc.side(torch.from_numpy(y), False)
    s_hat = _amx_emulated(a.operand, b.operand) if name == "bf16_amx" and sc.name == "bf16" else sc.matmul(a, b)
    s_hat = np.asarray(s_hat, dtype=np.float64)
    s = exact_scores_ref(x, y)
    bound = _bound(sc, a, b, s_hat)
    assert np.all(bound > 0)
    assert np.all(np.abs(s_hat - s) <= bound), np.max(np.abs(s_hat - s) / bound)


def test_bf16_split_flushes_subnormals_into_the_residual():
    x = torch.tensor([[1.0, 2.0**-130, -(2.0**-127), 3.0e-39, 1.5]])
    h, lo = scr.bf16_split(x)
    assert torch.all((h.float().abs() >= 2.0**-126) | (h.float() == 0))
    assert torch.equal(h.float() + lo, x)  # exact split


def _brute(img, txt, t2i: Positives, i2t: Positives):
    s = exact_scores_ref(txt, img)
    return ranks_ref(s, t2i), ranks_ref(s.T, i2t)


@pytest.mark.parametrize("kind", KINDS)
# The fp32 screen's tiles through either GEMM library (retrieval/gemm.py): the bound holds for any fp32 GEMM.
@pytest.mark.parametrize("screen,blas", [("fp32", "torch"), ("fp32", "numpy"), ("bf16", "torch")])
def test_every_cpu_path_equals_exact_brute_force(kind, screen, blas, monkeypatch):
    monkeypatch.setenv(gemm.ENV, blas)
    rng = np.random.default_rng(len(kind) + (screen == "bf16"))
    d = 19
    img = _adversarial(kind, 41, d, rng)
    lab = rng.integers(0, 41, 97)
    txt = img[lab] + _adversarial(kind, 97, d, rng) * (0.5 if kind != "ulp" else 0.0)
    if kind in ("ulp", "duplicates", "integers"):
        txt = np.concatenate([txt[:30], img[lab[30:]]]).astype(np.float32)  # exact positive ties
    img_t, txt_t = torch.from_numpy(img), torch.from_numpy(txt.astype(np.float32))
    got = evaluate(img_t, txt_t, lab, chunk_rows=16, chunk_cols=8, screen=screen, empty="skip")
    t2i = Positives.from_labels(lab, 41)
    want_t2i, want_i2t = _brute(img, txt.astype(np.float32), t2i, t2i.transpose(allow_empty=True).without_empty()[0])
    assert np.array_equal(got.ranks["text_to_image"].ranks, want_t2i.ranks)
    assert np.array_equal(got.ranks["image_to_text"].ranks, want_i2t.ranks)
    assert got.meta["screen"] in (screen, "fp64") and 0 <= got.meta["rechecked_fraction"] <= 1
    _m, r = rank_metrics(txt_t, img_t, [[int(v)] for v in lab], chunk_rows=13, chunk_cols=5, screen=screen)
    assert np.array_equal(r.ranks, want_t2i.ranks)
    for k in (1, 7, 41):
        ex = [[int(lab[i])] for i in range(97)] if k == 7 else None
        v, i = topk(txt_t, img_t, k, ex, chunk_queries=10, chunk_gallery=16, screen=screen)
        rv, ri = topk_ref(txt_t, img_t, k, exclude=None if ex is None else Positives.from_lists(ex, 41))
        assert torch.equal(i, ri)
        assert torch.equal(v, rv[:, : v.shape[1]].float())


def test_evaluate_equals_reference_with_fp64_and_mixed_inputs():
    rng = np.random.default_rng(5)
    img = _adversarial("mixed_scale", 23, 11, rng, np.float64)
    lab = np.arange(60) % 23
    txt = img[lab] * 1.0000000001
    got = evaluate(torch.from_numpy(img), torch.from_numpy(txt.astype(np.float32)), lab, chunk_rows=7, chunk_cols=5)
    assert got == evaluate_ref(img, txt.astype(np.float32), lab) and got.meta["screen"] == "fp64"


def test_screen_switch_and_choice(monkeypatch):
    monkeypatch.delenv(scr.ENV, raising=False)
    monkeypatch.setattr(scr, "cpu_bf16_hardware", lambda: False)
    assert scr.choose(None, torch.float32) == "fp32"
    assert scr.choose("bf16", torch.float32) == "bf16"
    assert scr.choose("bf16", torch.float64) == "fp64"
    monkeypatch.setattr(scr, "cpu_bf16_hardware", lambda: True)
    monkeypatch.setattr(scr, "bf16_measures_faster", lambda: True)
    assert scr.choose(None, torch.float32) == "bf16"
    assert scr.choose("fp32", torch.float32) == "fp32"
    monkeypatch.setenv(scr.ENV, "fp32")
    assert scr.choose(None, torch.float32) == "fp32"
    img = torch.eye(4)
    assert evaluate(img, img, [0, 1, 2, 3]).meta["screen"] == "fp32"
    monkeypatch.setenv(scr.ENV, "int8")
    with pytest.raises(ValueError, match="VLKERNELS_RETRIEVAL_SCREEN must be one of"):
        evaluate(img, img, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="screen must be one of"):
        topk(img, img, 2, screen="fp16")


def test_huge_norms_take_the_fp64_screen_and_stay_exact():
    rng = np.random.default_rng(9)
    img = (rng.standard_normal((20, 16)) * 1e18).astype(np.float32)
    lab = np.arange(40) % 20
    txt = (img[lab] + rng.standard_normal((40, 16)) * 1e17).astype(np.float32)
    got = evaluate(img, txt, lab, screen="bf16")
    assert got == evaluate_ref(img, txt, lab) and got.meta["screen"] == "fp64"


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_refused_by_name(bad):
    img = torch.eye(3)
    txt = torch.eye(3).clone()
    txt[1, 2] = bad
    with pytest.raises(ValueError, match="text_emb contains NaN/Inf"):
        evaluate(img, txt, [0, 1, 2])
    with pytest.raises(ValueError, match="gallery contains NaN/Inf"):
        topk(img, txt, 2)


@pytest.mark.parametrize("screen", [None, "fp32"])
@pytest.mark.parametrize("kind", ["gauss", "duplicates", "ulp", "integers", "mixed_scale", "denormal"])
def test_topk_large_k_and_many_row_groups_equals_exact_brute_force(kind, screen):
    """Top-k past one group of rows (64) and one block of columns of the C++ selection, k from a few to
    nearly the whole gallery, with exclusions: the screened path (every member re-checked at large k) and, with the
    automatic screen at k >= 1/DENSE_SHARE of the gallery, the dense exact tiles."""
    rng = np.random.default_rng(11)
    q = torch.from_numpy(_adversarial(kind, 150, 37, rng))
    g = torch.from_numpy(_adversarial(kind, 300, 37, rng))
    if kind in ("duplicates", "ulp"):
        q[:40] = g[:40]  # queries equal to gallery rows: exact ties at the top
    ex = Positives.from_pairs(np.arange(150), rng.integers(0, 300, 150), 150, 300, queries=[])
    for k in (5, 100, 290):
        for exclude in (None, ex):
            v, i = res = topk(q, g, k, exclude, chunk_queries=150, chunk_gallery=300, screen=screen)
            rv, ri = topk_ref(q, g, k, exclude=exclude)
            assert torch.equal(i, ri), (k, exclude is not None)
            assert torch.equal(v, rv.float())
            dense = screen is None and k * scr.DENSE_SHARE >= 300
            assert (res.meta["screen"] == "exact") == dense, res.meta
            if dense:
                assert res.meta["rechecked_fraction"] == 1.0


def test_topk_excluded_runs_and_negative_rows_equal_exact_brute_force():
    """The selection's lower bound of each row's k-th best screened score (maxima of blocks of the row) skips the
    excluded pairs and orders negative scores: queries whose gallery is excluded in long runs (whole blocks, rows left
    with fewer than k), rows of only negative scores, k from 1 to past what is left."""
    rng = np.random.default_rng(13)
    g = torch.from_numpy(np.abs(rng.standard_normal((400, 24))).astype(np.float32))
    q = torch.from_numpy(rng.standard_normal((130, 24)).astype(np.float32))
    q[:65] = -q[:65].abs()  # every score of these rows is negative
    runs = [(i, j) for i in range(0, 130, 2) for j in range(3 * i, min(400, 3 * i + 350))]
    ex = Positives.from_pairs(*map(np.array, zip(*runs)), 130, 400, queries=[])
    for k in (1, 7, 40, 60):
        for exclude in (None, ex):
            got = topk(q, g, k, exclude, chunk_queries=130, chunk_gallery=400, screen="fp32")
            rv, ri = topk_ref(q, g, k, exclude=exclude)
            assert torch.equal(got[1], ri), (k, exclude is not None)
            assert torch.equal(got[0], rv.float())


@pytest.mark.parametrize("k", [32, 40, 90])
@pytest.mark.parametrize("max_chunk", [None, 16])
def test_topk_dense_path_across_gallery_chunks_row_slices_and_fp64(k, max_chunk, monkeypatch):
    """The dense exact path with one or several gallery chunks (a chunk of 2k, or capped below k so that the first
    chunks' candidates all stay), row slices of DENSE_ROWS and query chunks, fp32 and fp64 inputs, exclusions in
    every chunk: equal to the float64 brute force and to the screened path."""
    if max_chunk is not None:
        monkeypatch.setattr(cpu, "DENSE_MAX_CHUNK", max_chunk)
    rng = np.random.default_rng(12)
    for dt in (np.float32, np.float64):
        q = torch.from_numpy(_adversarial("duplicates", cpu.DENSE_ROWS + 37, 21, rng, dt))
        g = torch.from_numpy(_adversarial("duplicates", 90, 21, rng, dt))
        q[:20] = g[:20]
        ex = Positives.from_pairs(np.arange(len(q)), rng.integers(0, 90, len(q)), len(q), 90, queries=[])
        got = topk(q, g, k, ex, chunk_queries=100, chunk_gallery=32)
        rv, ri = topk_ref(q, g, k, exclude=ex)
        assert got.meta["screen"] == "exact"
        assert torch.equal(got[1], ri) and torch.equal(got[0], rv.to(got[0].dtype))
        plain = topk(q, g, k, ex, chunk_queries=100, chunk_gallery=32, screen="fp32")
        assert plain.meta["screen"] != "exact"
        assert torch.equal(plain[1], got[1]) and torch.equal(plain[0], got[0])


@pytest.mark.parametrize("order", ["rising", "falling", "shuffled"])
@pytest.mark.parametrize("k", [1, 7, 40])
def test_topk_stream_with_floors_equals_exact_brute_force(order, k):
    """Rows holding k members are scanned at their floor before any maxima: a gallery whose scores rise chunk after
    chunk (every later chunk beats the floor: the scan keeps many and the maxima pass runs), fall (almost nothing
    reaches the floor) or come shuffled, with near-ties and exclusions, equals the float64 brute force."""
    rng = np.random.default_rng(31 + k)
    d, n_g = 24, 600
    base = rng.standard_normal(d)
    steps = np.linspace(0.0, 1.0, n_g)
    if order == "falling":
        steps = steps[::-1]
    elif order == "shuffled":
        steps = rng.permutation(steps)
    g = steps[:, None] * base + 1e-3 * rng.standard_normal((n_g, d))
    g[1::7] = g[::7][: len(g[1::7])]  # duplicates: exact ties across chunks
    q = base + 0.05 * rng.standard_normal((50, d))
    q, g = torch.from_numpy(q.astype(np.float32)), torch.from_numpy(g.astype(np.float32))
    ex = Positives.from_pairs(np.arange(50), rng.integers(0, n_g, 50), 50, n_g, queries=[])
    got = topk(q, g, k, ex, chunk_queries=32, chunk_gallery=64, screen="fp32")
    rv, ri = topk_ref(q, g, k, exclude=ex)
    assert torch.equal(got[1], ri) and torch.equal(got[0], rv.float())


@pytest.mark.parametrize("pattern", ["sampled_high", "rising", "shuffled"])
@pytest.mark.parametrize("k", [300, 600])
def test_screened_topk_at_large_k_equals_exact_brute_force(pattern, k):
    """At k a large share of the gallery the screened path's first threshold comes from a strided sample of each row
    (lowered until k scores reach it, else the maxima of strided sets): galleries whose sampled places hold the
    highest scores (at k = 600 the sample runs out and the maxima take over), scores rising along the gallery, and
    shuffled ones, with near-ties, equal the float64 brute force."""
    rng = np.random.default_rng(k)
    n_g, d = 2048, 16
    j = np.arange(n_g, dtype=np.float64)
    lead = {"sampled_high": np.where(j % 4 == 0, 10.0 + j / n_g, j / n_g), "rising": j / n_g}.get(
        pattern, rng.permutation(j) / n_g
    )
    g = np.concatenate([lead[:, None], 1e-4 * rng.standard_normal((n_g, d - 1))], axis=1)
    q = np.concatenate([np.ones((40, 1)), 1e-3 * rng.standard_normal((40, d - 1))], axis=1)
    q, g = torch.from_numpy(q.astype(np.float32)), torch.from_numpy(g.astype(np.float32))
    got = topk(q, g, k, screen="fp32")
    assert got.meta["screen"] != "exact"
    rv, ri = topk_ref(q, g, k)
    assert torch.equal(got[1], ri) and torch.equal(got[0], rv.float())


@pytest.mark.parametrize("k", [5, 100, 300, 700])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_topk_update_merges_tiles_into_sorted_rows(k, dtype):
    """The running top-k merged tile by tile (gallery indices from c0 or given per candidate; NaN skipped) equals
    Python's sort of everything seen, and every row is left in order, so the final sort has nothing to do: heavy
    ties, -0 beside +0, infinities, tiles narrower and wider than k (the radix order of long candidate lists, the
    cut of the candidates to k, the bar set by a full selection)."""
    C = _ext.load()
    rng = np.random.default_rng(k)
    rows, cols, tiles = 5, 600, 3
    pool = np.array([0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 2.0**-140])
    seen = [[] for _ in range(rows)]
    vals = torch.full((rows, k), float("-inf"), dtype=dtype)
    idx = torch.full((rows, k), -1, dtype=torch.int64)
    for t in range(tiles):
        s = np.where(rng.random((rows, cols)) < 0.3, rng.choice(pool, (rows, cols)), rng.standard_normal((rows, cols)))
        s[rng.random((rows, cols)) < 0.1] = np.nan
        s = torch.from_numpy(s).to(dtype)
        given = t == 1  # the middle tile with explicit indices (shards side by side)
        ci = torch.from_numpy(rng.permutation(10_000)[: rows * cols].reshape(rows, cols)) if given else None
        C.topk_update(s, t * cols, ci, vals, idx)
        for r in range(rows):
            for j in range(cols):
                if not np.isnan(s[r, j].item()):
                    seen[r].append((s[r, j].item(), int(ci[r, j]) if given else t * cols + j))
    for r in range(rows):
        want = sorted(seen[r], key=lambda p: (-p[0], p[1]))[:k]
        want += [(float("-inf"), -1)] * (k - len(want))
        assert idx[r].tolist() == [i for _, i in want]
        bits = torch.int64 if dtype == torch.float64 else torch.int32
        assert torch.equal(vals[r].view(bits), torch.tensor([v for v, _ in want], dtype=dtype).view(bits))


@pytest.mark.parametrize("pattern", ["rising", "falling", "periodic_high", "periodic_low", "ties", "shuffled"])
@pytest.mark.parametrize("k", [10, 300, 1500, 4000])
def test_topk_update_cut_keeps_the_best_whatever_the_order(pattern, k):
    """A tile far wider than k is cut at a threshold drawn from a strided sample of its scores before the sort: scores
    rising or falling along the row, a period that puts only the highest (or only the lowest) scores where the sample
    reads, one value repeated over most of the row, and shuffled scores; into an empty selection and into one already
    full. Equal to Python's sort of everything seen."""
    C = _ext.load()
    rng = np.random.default_rng(k)
    rows, cols = 3, 4096
    j = np.arange(cols, dtype=np.float64)
    base = {
        "rising": j,
        "falling": -j,
        "periodic_high": np.where(j % 8 == 0, 1e4 + j, j),
        "periodic_low": np.where(j % 8 == 0, -1e4 - j, j),
        "ties": np.where(j % 5 == 0, j, 7.0),
        "shuffled": rng.permutation(j),
    }[pattern]
    vals = torch.full((rows, k), float("-inf"), dtype=torch.float64)
    idx = torch.full((rows, k), -1, dtype=torch.int64)
    seen = [[] for _ in range(rows)]
    for t, shift in enumerate((0.0, 0.5)):
        s = np.stack([base + shift + r for r in range(rows)])
        s[:, 1::97] = np.nan
        C.topk_update(torch.from_numpy(s), t * cols, None, vals, idx)
        for r in range(rows):
            seen[r] += [(s[r, c], t * cols + c) for c in range(cols) if not np.isnan(s[r, c])]
        for r in range(rows):
            want = sorted(seen[r], key=lambda p: (-p[0], p[1]))[:k]
            assert idx[r].tolist() == [i for _, i in want]
            assert vals[r].tolist() == [v for v, _ in want]


@pytest.mark.parametrize("kind", ["gauss", "huge", "tiny", "denormal", "dominant", "mixed_scale"])
def test_norms_are_upper_bounds(kind):
    """fp32 norms from torch's fp32 norm, inflated: never below the float64 norm of the row, and above it by at most
    a few fp32 rounding steps plus sqrt(D) times the square root of fp32's smallest normal (the squares that may
    have underflowed); inf only when a square overflows fp32."""
    rng = np.random.default_rng(3)
    x = _adversarial(kind, 64, 515, rng)
    exact = np.sqrt(np.array([np.sum(np.square(r.astype(np.float64))) for r in x]))
    got = scr.norms(torch.from_numpy(x)).numpy()
    finite = np.isfinite(got)
    assert np.all(got[finite] >= exact[finite] * (1 + 2.0**-40))
    assert np.all(got[finite] <= exact[finite] * (1 + 1e-3) + np.sqrt(515 * 2.0**-126) * 1.01)
    assert np.all(exact[~finite] > 2.0**60)


@pytest.mark.parametrize("k", [7, 255, 256, 300, 4096])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sort_order_equals_a_plain_sort(k, dtype):
    """Rows sorted by score descending, then index ascending, empty slots (index -1) last: against Python's sort, on
    rows of heavy ties, -0 beside +0, infinities, magnitudes of every exponent and empties (both the comparison sort
    of short rows and the radix sort of long ones)."""
    rng = np.random.default_rng(k)
    rows = 6
    pool = np.array([0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 1e-300, -1e-300, 3e38, 2.0**-140])
    vals = np.where(
        rng.random((rows, k)) < 0.4,
        rng.choice(pool, (rows, k)),
        rng.standard_normal((rows, k)) * 10.0 ** rng.integers(-30, 30, (rows, k)),
    )
    vals = torch.from_numpy(vals).to(dtype)
    vals[1] = vals[1, 0]  # one row of a single score
    vals[2, : k // 2] = float("-inf")  # half empty
    idx = torch.from_numpy(np.stack([rng.permutation(10 * k)[:k] for _ in range(rows)])).long()
    idx[2, : k // 2] = -1
    got_v, got_i = cpu.sort_topk(vals.clone(), idx.clone())  # sorted in place
    # A sorted row is left as it is, and a row with one pair out of order at its end is sorted.
    again_v, again_i = cpu.sort_topk(got_v.clone(), got_i.clone())
    assert torch.equal(again_i, got_i) and torch.equal(again_v, got_v)
    swap_v, swap_i = got_v.clone(), got_i.clone()
    swap_v[:, [-2, -1]], swap_i[:, [-2, -1]] = swap_v[:, [-1, -2]], swap_i[:, [-1, -2]]
    swap_v, swap_i = cpu.sort_topk(swap_v, swap_i)
    assert torch.equal(swap_i, got_i)
    for r in range(rows):
        pairs = sorted(zip(vals[r].tolist(), idx[r].tolist()), key=lambda p: (-p[0], p[1] < 0, p[1]))
        assert got_i[r].tolist() == [i for _, i in pairs]
        # Bit for bit: -0 and +0 keep their own signs.
        want_v = torch.tensor([v for v, _ in pairs], dtype=dtype)
        assert torch.equal(
            got_v[r].view(torch.int64 if dtype == torch.float64 else torch.int32),
            want_v.view(torch.int64 if dtype == torch.float64 else torch.int32),
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_path_equals_exact_brute_force(kind, dtype):
    """The torch twin (what a device without Triton runs; here on CPU tensors, sub-tiles crossing the device
    chunks): its fp32 matmul screen re-checks what it cannot certify, so ranks and top-k equal the exact
    definition's on near-ties, exact ties and extreme magnitudes, for fp32 and fp64 (narrowed) inputs."""
    rng = np.random.default_rng(len(kind) + 50 * (dtype == np.float64))
    d = 19
    img = _adversarial(kind, 41, d, rng, dtype)
    lab = rng.integers(0, 41, 97)
    txt = img[lab] + _adversarial(kind, 97, d, rng, dtype) * (0.5 if kind != "ulp" else 0.0)
    if kind in ("ulp", "duplicates", "integers"):
        txt = np.concatenate([txt[:30], img[lab[30:]]]).astype(dtype)
    img_t, txt_t = torch.from_numpy(img), torch.from_numpy(txt.astype(dtype))
    got = evaluate(img_t, txt_t, lab, backend="torch", device_chunk=16, empty="skip")
    t2i = Positives.from_labels(lab, 41)
    want_t2i, want_i2t = _brute(img, txt.astype(dtype), t2i, t2i.transpose(allow_empty=True).without_empty()[0])
    assert np.array_equal(got.ranks["text_to_image"].ranks, want_t2i.ranks)
    assert np.array_equal(got.ranks["image_to_text"].ranks, want_i2t.ranks)
    assert got.meta["path"] == "torch" and got.meta["screen"] == "fp32"
    assert 0 <= got.meta["rechecked_fraction"] <= 1
    _m, r = rank_metrics(txt_t, img_t, [[int(v)] for v in lab], backend="torch", device_chunk=16)
    assert np.array_equal(r.ranks, want_t2i.ranks)
    for k in (1, 7, 41):
        ex = [[int(lab[i])] for i in range(97)] if k == 7 else None
        got = topk(txt_t, img_t, k, ex, backend="torch", device_chunk=16)
        rv, ri = topk_ref(txt_t, img_t, k, exclude=None if ex is None else Positives.from_lists(ex, 41))
        assert torch.equal(got[1], ri) and torch.equal(got[0], rv)
        assert got.meta["screen"] == "fp32" and got.meta["rechecked_pairs"] >= 97 * min(k, 40)


def test_torch_path_counting_exact_when_fp32_matmuls_may_round_inputs():
    """With torch allowed to compute fp32 matmuls in reduced precision the bound widens (inputs rounded as bf16):
    still the exact ranks, with more pairs re-checked."""
    rng = np.random.default_rng(3)
    img = _adversarial("ulp", 41, 19, rng)
    lab = rng.integers(0, 41, 97)
    txt = np.concatenate([img[lab[:30]] + 1e-3 * rng.standard_normal((30, 19)), img[lab[30:]]]).astype(np.float32)
    img_t, txt_t = torch.from_numpy(img), torch.from_numpy(txt)
    t2i = Positives.from_labels(lab, 41)
    want_t2i, _ = _brute(img, txt, t2i, t2i.transpose(allow_empty=True).without_empty()[0])
    ieee = evaluate(img_t, txt_t, lab, backend="torch", device_chunk=16, empty="skip")
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        got = evaluate(img_t, txt_t, lab, backend="torch", device_chunk=16, empty="skip")
    finally:
        torch.set_float32_matmul_precision(prev)
    assert np.array_equal(got.ranks["text_to_image"].ranks, want_t2i.ranks)
    assert got.meta["rechecked_pairs"] > ieee.meta["rechecked_pairs"]


def _near_pairs(kind: str, n_img: int, n_txt: int, d: int, seed: int):
    """Images of an adversarial kind and captions of them (the first 60 % moved by noise, the rest equal to their
    image: ties at the positives)."""
    rng = np.random.default_rng(seed)
    img = _adversarial(kind, n_img, d, rng)
    lab = rng.integers(0, n_img, n_txt)
    m = n_txt * 3 // 5
    txt = np.concatenate([img[lab[:m]] + 0.3 * rng.standard_normal((m, d)), img[lab[m:]]]).astype(np.float32)
    return img, txt, lab


def _assert_ranks_exact(got, img: np.ndarray, txt: np.ndarray, lab: np.ndarray) -> None:
    t2i = Positives.from_labels(lab, len(img))
    want_t2i, want_i2t = _brute(img, txt, t2i, t2i.transpose(allow_empty=True).without_empty()[0])
    assert np.array_equal(got.ranks["text_to_image"].ranks, want_t2i.ranks)
    assert np.array_equal(got.ranks["image_to_text"].ranks, want_i2t.ranks)


@pytest.mark.parametrize("kind", ["gauss", "duplicates", "integers"])
def test_torch_path_exact_under_any_screen_error_within_the_bound(kind, monkeypatch):
    """The certificate, not the matmul's luck: with every screened score moved by up to its bound (random signs),
    the torch path's ranks and top-k are still the exact definition's."""
    from vlkernels.retrieval import torch_screen

    real = torch_screen.TorchScreenCount._scores
    gen = torch.Generator().manual_seed(7)

    def worst(self, q, g, r0, r1, c0, c1):
        # Any value within the bound of the score (float64 products: ~1e-16 off it, far inside the margin).
        _, b = real(self, q, g, r0, r1, c0, c1)
        s = q.raw[r0:r1].double() @ g.raw[c0:c1].double().T
        sign = torch.randint(0, 2, s.shape, generator=gen).double() * 2 - 1
        return s + sign * b * (1 - 2.0**-10), b

    monkeypatch.setattr(torch_screen.TorchScreenCount, "_scores", worst)
    img, txt, lab = _near_pairs(kind, 41, 97, 19, seed=11)
    img_t, txt_t = torch.from_numpy(img), torch.from_numpy(txt)
    _assert_ranks_exact(evaluate(img_t, txt_t, lab, backend="torch", device_chunk=16, empty="skip"), img, txt, lab)
    for k in (1, 5, 41):
        v, i = topk(txt_t, img_t, k, backend="torch", device_chunk=16)
        rv, ri = topk_ref(txt_t, img_t, k)
        assert torch.equal(i, ri) and torch.equal(v, rv)


@pytest.mark.parametrize("kind", ["gauss", "duplicates", "integers", "mixed_scale"])
def test_cpu_path_exact_under_any_screen_error_within_the_bound(kind, monkeypatch):
    """The CPU certificate, not the GEMM's luck: with every fp32 screened score moved by up to its bound (random
    signs; the bound of Screen's terms), top-k (one gallery chunk: the first tile's floor; several: the floor over
    kept members) and ranks are still the exact definition's."""
    gen = torch.Generator().manual_seed(5)

    def moved(self, a, b, out=None):
        assert self.rel == 0  # the fp32 screen (or fp64 where a tile needs it): no term in |s_hat|
        s = a.data.double() @ b.data.double().T  # float64: ~1e-16 off the exact score, far inside the margin
        ta, tb = a.terms, b.terms
        bound = sum(ta[p][:, None] * tb[p][None, :] for p in range(3)) + ta[3][:, None] + tb[3][None, :]
        sign = torch.randint(0, 2, s.shape, generator=gen).double() * 2 - 1
        p = (s + sign * bound * 0.9).to(self.dtype)
        off = (p.double() - s).abs() > bound * 0.95  # rounding to the tile dtype took it past the margin: step back
        p[off] = torch.nextafter(p[off], s[off].to(self.dtype))
        return p if out is None else out.copy_(p)

    monkeypatch.setattr(scr.Screen, "matmul", moved)
    img, txt, lab = _near_pairs(kind, 70, 150, 23, seed=17)
    img_t, txt_t = torch.from_numpy(img), torch.from_numpy(txt)
    for k in (1, 6, 30):
        rv, ri = topk_ref(txt_t, img_t, k)
        for chunk in (70, 16):
            v, i = topk(txt_t, img_t, k, chunk_queries=64, chunk_gallery=chunk, screen="fp32")
            assert torch.equal(i, ri), (k, chunk)
            assert torch.equal(v, rv.float()), (k, chunk)
    _assert_ranks_exact(evaluate(img_t, txt_t, lab, screen="fp32", empty="skip"), img, txt, lab)
