"""The Triton retrieval path streamed in device chunks and sharded over real gloo groups (kernels interpreted on CPU
under TRITON_INTERPRET=1), against the fp64 full-matrix reference, the reference script's code, and the unsharded
CPU path."""

import json
import os
import types

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks

from vlkernels.cli import main as cli_main
from vlkernels.retrieval import Positives, evaluate, rank_metrics, topk
from vlkernels.retrieval.metrics import metrics_from_ranks
from vlkernels.retrieval.reference import evaluate_ref, ranks_ref, topk_ref
from vlkernels.retrieval.seed_reference import compute_retrieval_metrics, evaluate_retrieval

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs CUDA or TRITON_INTERPRET=1",
)
pytest.importorskip("triton")

SEED_KEYS = ("R@1", "R@5", "R@10", "MeanR", "MedianR")


def _data(n_img=45, n_txt=150, d=16, seed=0):
    """Small-integer embeddings (every dot product exact in fp16 and fp32, in any order) with crafted exact ties:
    texts 39/40 and 99/100 identical (shard boundaries of the gloo tests), images 12/13 identical."""
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(-2, 3, (n_img, d), generator=g).float()
    lab = np.arange(n_txt) % n_img
    txt = img[torch.from_numpy(lab)] + torch.randint(-2, 3, (n_txt, d), generator=g).float()
    txt[40], txt[100] = txt[39], txt[99]
    img[13] = img[12]
    return img, txt, lab


def _general_positives(n_txt, n_img, seed=1):
    """Uneven positive counts (up to 11 captions for image 0: two slot launches) and a subset of queries."""
    g = torch.Generator().manual_seed(seed)
    qs = torch.randint(0, n_txt, (260,), generator=g).numpy()
    gs = torch.randint(0, n_img, (260,), generator=g).numpy()
    qs = np.concatenate([qs, np.arange(11) * 13])
    gs = np.concatenate([gs, np.zeros(11, dtype=np.int64)])
    t2i = Positives.from_pairs(qs, gs, n_txt, n_img, queries=np.unique(qs))
    i2t = Positives.from_pairs(gs, qs, n_img, n_txt, queries=np.unique(gs))
    return t2i, i2t


class _StableNumpy(types.SimpleNamespace):
    """numpy with a stable argsort: the seed's code on tie-heavy scores, ties ordered by index (the documented
    policy; the seed's quicksort leaves tie order unspecified)."""

    def __getattr__(self, name):
        return getattr(np, name)

    def argsort(self, a):
        return np.argsort(a, kind="stable")


def _seed_stable(img, txt, lab, monkeypatch):
    monkeypatch.setitem(compute_retrieval_metrics.__globals__, "np", _StableNumpy())
    try:
        return evaluate_retrieval(img.double().numpy(), txt.double().numpy(), list(range(len(img))), list(lab))
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_evaluate_triton_chunked_equals_reference(dtype, monkeypatch):
    img, txt, lab = _data()
    img, txt = img.to(dtype), txt.to(dtype)
    want = evaluate_ref(img, txt, lab)
    seed = _seed_stable(img, txt, lab, monkeypatch)
    whole = evaluate(img, txt, lab, backend="triton")
    chunked = evaluate(img, txt, lab, backend="triton", device_chunk=20)  # rounded to 32 rows: 5 x 2 chunk pairs
    assert whole == chunked == want
    for d in seed:
        for k in SEED_KEYS:
            assert chunked[d][k] == seed[d][k], (d, k)
    for d in want:
        np.testing.assert_array_equal(chunked.ranks[d].ranks, whole.ranks[d].ranks)
    if dtype != torch.float32:
        return
    # General positives, more than MAX_SLOTS per query: every slot launch on every chunk pair.
    t2i, i2t = _general_positives(len(txt), len(img))
    got = evaluate(img, txt, t2i=t2i, i2t=i2t, backend="triton", device_chunk=32)
    s = (txt.double() @ img.double().T).numpy()
    for d, pos, sc in (("text_to_image", t2i, s), ("image_to_text", i2t, s.T)):
        ref = ranks_ref(sc, pos)
        np.testing.assert_array_equal(got.ranks[d].ranks, ref.ranks)
        assert got[d] == metrics_from_ranks(ref)


def test_evaluate_triton_streams_memory_mapped_files(tmp_path, capsys):
    from safetensors.torch import save_file

    img, txt, lab = _data(n_img=40, n_txt=101)
    np.save(tmp_path / "img.npy", img.half().numpy())
    np.save(tmp_path / "txt.npy", txt.half().numpy())
    save_file({"t": txt.bfloat16()}, str(tmp_path / "txt.safetensors"))
    got = evaluate(tmp_path / "img.npy", tmp_path / "txt.npy", lab, backend="triton", device_chunk=32, progress=True)
    assert got == evaluate_ref(img, txt, lab)
    got = evaluate(img.bfloat16(), tmp_path / "txt.safetensors", lab, backend="triton", device_chunk=64)
    assert got == evaluate_ref(img, txt, lab)
    assert "retrieval" in capsys.readouterr().err  # tqdm bar over chunk pairs, as on the CPU path
    out = tmp_path / "out.json"
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": lab.tolist()}))
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    argv += ["--gt", str(tmp_path / "gt.json"), "--backend", "triton", "--device-chunk", "32", "--json", str(out)]
    assert cli_main(argv) == 0
    assert json.loads(out.read_text()) == evaluate_ref(img, txt, lab)
    m, _ = rank_metrics(tmp_path / "txt.npy", img, [[int(j)] for j in lab], backend="triton", device_chunk=32)
    assert m == evaluate_ref(img, txt, lab)["text_to_image"]


@pytest.mark.parametrize("k", [7, 300])  # fused kernel; k past its register budget (device matmul tiles)
def test_topk_triton_chunked_equals_reference(k, tmp_path, capsys):
    # One block of queries: the interpreter's tl.sort is slow (each gallery tile of the fused kernel sorts twice).
    img, txt, _ = _data()
    txt = txt[:30]
    if k > len(img):  # a gallery past k (k is clamped to the gallery size); repeated rows: exact ties
        img = torch.cat([img] * -(-k // len(img)))[: k + 13]
    ex = [[int(j) % 45, (int(j) * 7) % 45] for j in range(30)]
    rv, ri = topk_ref(txt, img, k, Positives.from_lists(ex, len(img), queries=[]))
    v, i = topk(txt, img, k, exclude=ex, backend="triton", device_chunk=32)  # gallery chunks of 32 and 13 rows
    assert torch.equal(i, ri) and torch.equal(v.double(), rv)
    np.save(tmp_path / "img.npy", img.half().numpy())
    v, i = topk(txt.half(), tmp_path / "img.npy", k, backend="triton", device_chunk=32, progress=True)
    rv, ri = topk_ref(txt, img, k)
    assert torch.equal(i, ri) and torch.equal(v.double(), rv)
    assert "top-k" in capsys.readouterr().err


def test_device_chunk_and_device_rejected(monkeypatch):
    img, txt, lab = _data()
    calls = ((evaluate, (img, txt, lab)), (topk, (txt, img, 3)), (rank_metrics, (txt, img, [[int(j)] for j in lab])))
    for fn, args in calls:
        with pytest.raises(ValueError, match="device_chunk must be a positive integer"):
            fn(*args, backend="triton", device_chunk=0)
    # Host inputs, no interpreter and no CUDA device: nowhere to run the kernels.
    monkeypatch.setattr("vlkernels.retrieval.functional.interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for fn, args in calls:
        with pytest.raises(ValueError, match="needs a CUDA device"):
            fn(*args, backend="triton")


def _worker(rank: int, world: int, port: int, out_dir: str, txt_bounds, img_bounds) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        grp = dist.group.WORLD
        img, txt, lab = _data()
        t2i, i2t = _general_positives(len(txt), len(img))
        lo, hi = txt_bounds[rank], txt_bounds[rank + 1]
        out = {}
        # Three ranks (on two cores): the Triton run of the seed-style ground truth only.
        light = world > 2
        for backend in ("triton",) if light else ("triton", "cpu"):
            kw = dict(backend=backend, group=grp, chunk_rows=16, chunk_cols=8, device_chunk=32)
            res = evaluate(img, txt[lo:hi], lab, **kw)
            if light:
                out[backend] = (dict(res), res.ranks)
                continue
            gen = evaluate(img, txt[lo:hi], t2i=t2i, i2t=i2t, **kw)
            m, r = rank_metrics(txt[lo:hi], img, [[int(j)] for j in lab], **kw)
            out[backend] = (dict(res), res.ranks, dict(gen), gen.ranks, m, r)
        g_lo, g_hi = img_bounds[rank], img_bounds[rank + 1]
        ex = [[int(j)] for j in lab]
        out["topk"] = [
            topk(txt[:30], img[g_lo:g_hi], k, exclude=ex[:30], group=grp, backend="triton", device_chunk=32)
            for k in ((9,) if light else (9, 300))
        ]
        if light:
            torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
            return
        # Bad input on one rank only: every rank raises (none is left blocked in a collective).
        errors = []
        bad = (
            dict(text_emb=txt[lo:hi, :5] if rank == 1 else txt[lo:hi]),  # local D mismatch on rank 1
            dict(image_emb=img[:, : 8 + 4 * rank], text_emb=txt[lo:hi, : 8 + 4 * rank]),  # D differs by rank
            dict(text_emb=txt[lo:hi].clone().fill_(float("nan")) if rank == world - 1 else txt[lo:hi]),
            dict(text_emb=txt[lo:hi].half() if rank == 0 else txt[lo:hi]),  # dtypes differ by rank
        )
        for change in bad:
            kw = dict(image_emb=img, text_emb=txt[lo:hi], text_to_image=lab, backend="triton", group=grp)
            try:
                evaluate(**{**kw, **change})
                errors.append(None)
            except ValueError as e:
                errors.append(str(e))
        try:
            topk(txt[:30], img[g_lo:g_hi, : 3 + rank], 3, group=grp, backend="triton")
            errors.append(None)
        except ValueError as e:
            errors.append(str(e))
        out["errors"] = errors
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "txt_bounds,img_bounds",
    [
        ([0, 40, 150], [0, 13, 45]),  # 2 ranks, uneven, boundaries on the crafted ties (not tile-aligned)
        ([0, 100, 100, 150], [0, 13, 13, 45]),  # 3 ranks, one empty shard
    ],
)
def test_sharded_triton_equals_unsharded_gloo(tmp_path, txt_bounds, img_bounds):
    world = len(txt_bounds) - 1
    run_ranks(_worker, world, str(tmp_path), txt_bounds, img_bounds)
    img, txt, lab = _data()
    t2i, i2t = _general_positives(len(txt), len(img))
    want = evaluate_ref(img, txt, lab)
    cpu = evaluate(img, txt, lab, backend="cpu")
    cpu_gen = evaluate(img, txt, t2i=t2i, i2t=i2t, backend="cpu")
    s = (txt.double() @ img.double().T).numpy()
    ref_gen = {"text_to_image": ranks_ref(s, t2i), "image_to_text": ranks_ref(s.T, i2t)}
    ex = Positives.from_lists([[int(j)] for j in lab[:30]], len(img), queries=[])
    for r in range(world):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        for (v, i), k in zip(got["topk"], (9, 300)):
            rv, ri = topk_ref(txt[:30], img, min(k, len(img)), ex)  # k is clamped to the (global) gallery size
            assert torch.equal(i, ri) and torch.equal(v.double(), rv)
        if world > 2:
            res, ranks = got["triton"]
            assert res == dict(cpu) == want
            for d in want:
                np.testing.assert_array_equal(ranks[d].ranks, cpu.ranks[d].ranks)
            continue
        for backend in ("triton", "cpu"):
            res, ranks, gen, gen_ranks, m, m_ranks = got[backend]
            assert res == dict(cpu) == want
            assert gen == dict(cpu_gen)
            assert m == want["text_to_image"]
            for d in want:
                np.testing.assert_array_equal(ranks[d].ranks, cpu.ranks[d].ranks)
                np.testing.assert_array_equal(gen_ranks[d].ranks, ref_gen[d].ranks)
            np.testing.assert_array_equal(m_ranks.ranks, cpu.ranks["text_to_image"].ranks)
        e_local, e_dim, e_nan, e_dtype, e_topk = got["errors"]
        assert "embedding dims differ" in e_local and ("rank 1" in e_local) == (r != 1)
        assert "D must be the same on every rank" in e_dim
        assert "NaN/Inf" in e_nan
        assert "dtypes must be the same on every rank" in e_dtype
        assert "embedding dims differ" in e_topk
