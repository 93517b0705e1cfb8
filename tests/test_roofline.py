"""The roofline MODEL's byte counts (vlkernels/roofline.py) against the bytes every Triton program of the contrastive
and retrieval kernels loads, stores and adds atomically in an instrumented interpreter run, on small odd shapes that
cross many partial tiles; and the model's bounds at the training case."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vlkernels import roofline
from vlkernels._triton import interpreting, triton_installed
from vlkernels.contrastive import configs
from vlkernels.testing import count_memory_traffic

counted_run = pytest.mark.skipif(
    not (triton_installed() and interpreting()), reason="counts the interpreter's memory operations"
)
REPO = Path(__file__).resolve().parents[1]

DTYPES = {torch.float32: 4, torch.bfloat16: 2}
# BLOCK_M != BLOCK_N so a transposed term in the model cannot pass; D = 20 is not a multiple of BLOCK_K.
N, M, D = 37, 45, 20


def _counted(fn, *args, **kw) -> roofline.Traffic:
    with count_memory_traffic() as c:
        fn(*args, **kw)
    return roofline.Traffic(**c.total)


def _features(dtype):
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, D, generator=g).to(dtype), torch.randn(M, D, generator=g).to(dtype)


@counted_run
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_lse_pair_fwd_bytes_equal_the_model(dtype, monkeypatch):
    from vlkernels.contrastive import ops

    t = configs.Tiles(32, 16, 16, 4, 1)
    monkeypatch.setattr(configs, "INTERPRETER", {k: t for k in configs.KINDS})
    x, y = _features(dtype)
    counted = _counted(ops.lse_pair_fwd, x, y, torch.tensor(2.0), 0)
    programs = ops._num_programs(x, -(-N // t.block_m))
    assert counted == roofline.lse_pair_fwd_traffic(N, M, D, DTYPES[dtype], t.block_m, t.block_n, programs)


def _sweep_args(loss: str, given: set[str]) -> dict:
    g = torch.Generator().manual_seed(1)
    kw = dict(acc_a="acc" in given, acc_b="accb" in given, write_ds="dsum" in given, write_loss="loss" in given,
              write_gsum="gsum" in given)  # fmt: skip
    if loss == "info_nce":
        kw.update(rows=(torch.randn(N, generator=g), torch.randn(N, generator=g)),
                  cols=(torch.randn(M, generator=g), torch.randn(M, generator=g)),
                  bias=torch.randn(N, generator=g))  # fmt: skip
    elif "groups" in given:
        ids = torch.randint(0, 5, (N + M,), generator=g)
        kw.update(rows=(ids[:N], None), cols=(ids[N:], None))
    if "bias" in given:
        kw["bias"] = torch.tensor([-1.5])
    return kw


@counted_run
@pytest.mark.parametrize("group_n", [1, 2])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", configs._sweep_variants(), ids=lambda v: v[0])
def test_grad_sweep_bytes_equal_the_model(variant, dtype, group_n, monkeypatch):
    from vlkernels.contrastive import kernels, ops

    label, _, loss, given = variant
    t = configs.Tiles(32, 16, 16, 4, 1, group_n=group_n)
    monkeypatch.setattr(configs, "INTERPRETER", {k: t for k in configs.KINDS})
    x, y = _features(dtype)
    tile = kernels._info_nce_grad_tile if loss == "info_nce" else kernels._siglip_grad_tile
    kw = _sweep_args(loss, given)
    counted = _counted(ops._grad_rows, x, y, torch.tensor(2.0), tile, **kw)
    flags = {k: v for k, v in kw.items() if k.startswith(("acc_", "write_"))}
    shape = (N, M, D, DTYPES[dtype], t.block_m, t.block_n)
    model = roofline.grad_sweep_traffic(*shape, loss=loss, groups="groups" in given, bias="bias" in given,
                                        group_n=group_n, **flags)  # fmt: skip
    assert counted == model, label


@counted_run
def test_every_program_of_a_sweep_moves_its_share(monkeypatch):
    # Each program moves what the model gives for its own row block (32 rows, then 5) swept against all of y.
    from vlkernels.contrastive import kernels, ops

    t = configs.Tiles(32, 16, 16, 4, 1, group_n=2)
    monkeypatch.setattr(configs, "INTERPRETER", dict.fromkeys(configs.KINDS, t))
    x, y = _features(torch.float32)
    kw = _sweep_args("info_nce", {"acc", "accb", "dsum"})
    with count_memory_traffic() as c:
        ops._grad_rows(x, y, torch.tensor(2.0), kernels._info_nce_grad_tile, **kw)
    assert sorted(c.per_program) == [(0, 0, 0), (1, 0, 0)]
    flags = dict(acc_a=True, acc_b=True, write_ds=True, group_n=t.group_n)
    for pid, moved in c.per_program.items():
        rows = min(t.block_m, N - pid[0] * t.block_m)
        one = roofline.grad_sweep_traffic(rows, M, D, 4, t.block_m, t.block_n, **flags)
        assert roofline.Traffic(**moved) == one, pid


def _retrieval_inputs(dtype, n_q=37, n_g=45, d=D):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(n_q, d, generator=g, dtype=torch.float64)
    gal = torch.randn(n_g, d, generator=g, dtype=torch.float64)
    gal[40:] = gal[:5]  # tied gallery rows: undecided pairs for the rank screen
    return q.to(dtype), gal.to(dtype)


def _two_splits(n_g, n_q, block_m, block_n, device):
    # The interpreter's one "SM" gives one split at these shapes: two splits exercise the per-split terms.
    half = -(-n_g // 2)
    per = -(-half // block_n) * block_n  # half the gallery, rounded up to whole column tiles
    return -(-n_g // per), per


def _mask_tiles(rows, cols, t) -> int:
    """Tiles (of ``t``) holding any of the (row, column) entries a launch reported."""
    return len({(int(r) // t.block_m, int(c) // t.block_n) for r, c in zip(rows, cols)})


@counted_run
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_retrieval_kernels_bytes_equal_the_model(dtype, monkeypatch):
    # Byte counts from the interpreter; the data-dependent inputs of the model (mask tiles appended, pairs
    # re-checked) are read from what the launchers report.
    from vlkernels.retrieval import configs as rc
    from vlkernels.retrieval import triton_screen as ts

    t = rc.Tile(32, 16, 32, 4, 1, max_slots=4)  # BLOCK_M != BLOCK_N; D = 20 < BLOCK_K
    monkeypatch.setattr(rc, "INTERPRETER", t)
    monkeypatch.setattr(ts, "_splits", _two_splits)
    reported = []
    collect = ts._collect
    monkeypatch.setattr(ts, "_collect", lambda *a: reported.append(collect(*a)) or reported[-1])
    cpu = torch.device("cpu")
    ker = ts.ScreenCount(cpu, dtype)
    qr, gr = _retrieval_inputs(dtype)
    q, g = ts.make_operand(qr), ts.make_operand(gr)
    n_q, n_g = qr.shape[0], gr.shape[0]
    elem, raw, split = q.h.element_size(), q.raw.element_size(), q.split
    assert split == (dtype != torch.float16)
    _, per = _two_splits(n_g, n_q, t.block_m, t.block_n, cpu)
    assert -(-n_g // per) == 2

    # Exact scores of listed pairs (ground truth).
    rows, cols = torch.tensor([0, 1, 36, 36, 5, 20]), torch.tensor([0, 44, 3, 40, 33, 33])
    assert _counted(ts.exact_scores, q.raw, g.raw, rows, cols) == roofline.exact_score_traffic(6, D, raw)

    # Rank screen with 3 positive slots (one launch of SLOTS = 4), then the exact re-check of its undecided pairs.
    gen = torch.Generator().manual_seed(3)
    pos = torch.randint(0, n_g, (n_q, 3), generator=gen)
    pos[:, 0] = torch.arange(n_q) % 5  # positives with a tied twin: undecided
    thr = (q.raw.double() @ g.raw.double().T).gather(1, pos)
    counted = _counted(ker.count, q, g, thr, pos, torch.zeros(n_q, 3, dtype=torch.int64))
    ((und_r, und_c, _),) = reported
    assert ker.rechecked == und_r.numel() > 0
    model = roofline.rank_screen_traffic(n_q, n_g, D, elem, t.block_m, t.block_n, 4, per, split,
                                         _mask_tiles(und_r, und_c, t))  # fmt: skip
    assert counted == model + roofline.exact_score_traffic(und_r.numel(), D, raw)

    # Top-k pass A, fused: k + exclusions = 5 -> BLOCK_N 16.
    block_n = rc.topk_block_n(cpu, dtype, 5)
    tk = rc.topk_tile(cpu, dtype, block_n)
    _, per_k = _two_splits(n_g, n_q, tk.block_m, block_n, cpu)
    counted = _counted(ts._bound_keys, q, g, block_n, 0, ker)
    assert counted == roofline.topk_bound_traffic(n_q, n_g, D, elem, tk.block_m, block_n, per_k, split)

    # Pass A past the fused budget: dense lower-bound tiles.
    best = torch.full((n_q, 3), torch.iinfo(torch.int64).min, dtype=torch.int64)
    counted = _counted(ts._merge_bounds, best, q, g, 0, None, ker)
    assert counted == roofline.bound_tile_traffic(n_q, n_g, D, elem, t.block_m, t.block_n, split)

    # Pass B: candidates above each query's limit (its 4th best exact score).
    lim = ts.round32(torch.topk(q.raw.double() @ g.raw.double().T, 4, dim=1).values[:, -1])[1].contiguous()
    with count_memory_traffic() as c:
        cand_r, cand_c = ts._candidates(q, g, lim, ker)
    assert cand_r.numel() >= 4 * n_q
    model = roofline.topk_collect_traffic(n_q, n_g, D, elem, t.block_m, t.block_n, per, split,
                                          _mask_tiles(cand_r, cand_c, t))  # fmt: skip
    assert roofline.Traffic(**c.total) == model


def test_training_case_names_its_bounds():
    # The model at B = 65536, D = 768, bf16 (H100 SXM): every term the sweep moves, and the bound it hits.
    n, d, gpu = 65536, 768, roofline.H100_SXM
    fwd, dual = roofline.info_nce_kernels(n, n, d, "bf16", gpu)
    t = configs.CUDA[(90, "bf16")]["info_nce_dual"]
    unit = 2.0 * n * n * d
    assert dual.flops == 3 * unit and fwd.flops == unit
    # The accumulator rows are read and written once per group of column tiles: N·D·8 per group, per row block.
    rmw = 8.0 * n * d * (-(-(n // t.block_n) // t.group_n))
    assert dual.extra["traffic"].store == pytest.approx(rmw / 2 + 4.0 * n)
    assert dual.extra["traffic"].atomic == pytest.approx(4.0 * n * d * (n // t.block_m))
    for w in (fwd, dual):
        terms = w.terms(gpu)
        assert w.bound(gpu) == max(terms, key=terms.get)
        assert w.seconds(gpu) == max(terms.values())
    case = roofline.work("contrastive/loss_gpu", {"n": n, "d": d}, index=0)
    assert case.seconds(gpu) == pytest.approx(fwd.seconds(gpu) + dual.seconds(gpu))
    assert "MODEL" in roofline.kernel_table()


def test_docs_tables_are_generated_from_the_model_and_the_profile():
    docs = (REPO / "docs" / "gpu.md").read_text()
    assert roofline.render_docs(docs) == docs, "regenerate with: vlkernels gpu-profile --docs docs/gpu.md"
    with pytest.raises(ValueError, match="begin roofline-cases"):
        roofline.render_docs("no tables here")
    with pytest.raises(ValueError, match="no '<!-- end roofline-cases -->'"):
        roofline.render_docs("<!-- begin roofline-cases -->\n")


def test_tiles_reject_a_column_group_the_sweep_cannot_take():
    with pytest.raises(ValueError, match="group_n must be 1 or 2"):
        configs.Tiles(64, 64, 64, 8, 2, group_n=4)


@counted_run
def test_count_memory_traffic_counts_enabled_lanes_per_program():
    # A hand-counted kernel: each of 2 programs loads 10 fp32 lanes and 1 scalar, stores 3 fp16, adds 5 int64.
    import triton
    import triton.language as tl

    @triton.jit
    def probe(src_ptr, dst_ptr, cnt_ptr):
        pid = tl.program_id(0)
        offs = tl.arange(0, 16)
        v = tl.load(src_ptr + pid * 16 + offs, mask=offs < 10, other=0.0) + tl.load(src_ptr)
        tl.store(dst_ptr + pid * 16 + offs, v.to(tl.float16), mask=offs < 3)
        tl.atomic_add(cnt_ptr + offs, offs.to(tl.int64), mask=offs < 5)

    src, dst, cnt = torch.ones(32), torch.zeros(32, dtype=torch.float16), torch.zeros(16, dtype=torch.int64)
    with count_memory_traffic() as c:
        probe[(2,)](src, dst, cnt)
    one = {"load": 44, "store": 6, "atomic": 40}
    assert c.per_program == {(0, 0, 0): one, (1, 0, 0): one}
    assert c.total == {k: 2 * v for k, v in one.items()}
    assert dst[:3].tolist() == [2.0] * 3 and cnt[:5].tolist() == [0, 2, 4, 6, 8]
