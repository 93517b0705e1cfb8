"""RetrievalMetric (update / compute / reset) against evaluate on the concatenated batches, with the memory-mapped
spill, and under a real 2-process gloo group."""

import os

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks

from vlkernels.retrieval import RetrievalMetric, evaluate
from vlkernels.retrieval.reference import evaluate_ref


def _batches(seed: int, n: int = 4, dtype=torch.float32):
    """Batches of 5 images with 2 captions each; labels local to the batch."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        img = torch.randn(5, 8, generator=g)
        txt = img.repeat_interleave(2, 0) + 0.6 * torch.randn(10, 8, generator=g)
        out.append((img.to(dtype), txt.to(dtype), torch.arange(5).repeat_interleave(2)))
    return out


def _union(batches):
    imgs = torch.cat([b[0] for b in batches])
    txts = torch.cat([b[1] for b in batches])
    labs = np.concatenate([b[2].numpy() + 5 * i for i, b in enumerate(batches)])
    return imgs, txts, labs


@pytest.mark.parametrize("budget", [None, 0, 300])  # in memory; always spilled; spilled after some batches
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_metric_equals_evaluate_on_union(budget, dtype, tmp_path):
    batches = _batches(0, dtype=dtype)
    m = RetrievalMetric(ks=(1, 5), memory_budget=budget, spill_dir=str(tmp_path))
    for b in batches:
        m.update(*b)
    spilled = list(tmp_path.iterdir())
    assert bool(spilled) == (budget is not None)
    imgs, txts, labs = _union(batches)
    want = evaluate_ref(imgs.float(), txts.float(), labs, ks=(1, 5))
    got = m.compute()
    assert got == want and m.compute() is got  # cached until the next update
    m.reset()
    assert not list(tmp_path.iterdir())  # spill files removed
    m.update(*batches[0])
    assert m.compute() == evaluate_ref(*(t.float() for t in batches[0][:2]), batches[0][2].numpy(), ks=(1, 5))


def test_metric_paired_default_top_k_and_errors():
    g = torch.Generator().manual_seed(1)
    img = torch.randn(6, 4, generator=g)
    txt = img + 0.5 * torch.randn(6, 4, generator=g)
    m = RetrievalMetric(ks=1, top_k=3)
    m.update(img[:3], txt[:3])
    m.update(img[3:], txt[3:])
    assert m.compute() == evaluate_ref(img, txt, np.arange(6), ks=(1,), top_k=3)
    cases = [
        (lambda: m.update(img, txt[:4]), "pair 1:1"),
        (lambda: m.update(img[:, :3], txt[:, :3]), "D=3"),
        (lambda: m.update(img.double(), txt.double()), "float64"),
        (lambda: m.update(img, txt, torch.tensor([0, 1, 2, 3, 4, 6])), "outside this batch"),
        (lambda: m.update(img, txt, torch.zeros(5, dtype=torch.long)), "one per text"),
        (lambda: m.update(img.numpy(), txt), "2-D float tensor"),
        (lambda: RetrievalMetric(memory_budget=-1), "memory_budget"),
        (lambda: RetrievalMetric(empty="neg"), "empty must be"),
        (lambda: RetrievalMetric().compute(), "empty input"),
        (lambda: m.update(img, txt[:, :3]), "text_emb has D=3"),
        (lambda: RetrievalMetric(scren="fp32"), "unknown option"),
        (lambda: RetrievalMetric(screen="fp16"), "screen must be"),
        (lambda: RetrievalMetric(chunk_rows=0), "chunk_rows"),
        (lambda: RetrievalMetric(backend="gpu"), "backend must be"),
    ]
    for fn, match in cases:
        with pytest.raises(ValueError, match=match):
            fn()
    assert m.compute() == evaluate_ref(img, txt, np.arange(6), ks=(1,), top_k=3)  # the refused batches added nothing


def test_refused_batch_adds_nothing():
    """A batch whose texts are refused must not leave its images behind (caption-less gallery items)."""
    batches = _batches(3, n=2)
    m = RetrievalMetric(ks=(1, 5))
    m.update(*batches[0])
    with pytest.raises(ValueError, match="earlier batches"):
        m.update(batches[1][0], batches[1][1].half(), batches[1][2])
    m.update(*batches[1])
    assert m.compute() == evaluate_ref(*_union(batches), ks=(1, 5))
    # Images alone (a batch without texts, labels as an empty list): caption-less gallery items, scored 0.
    m = RetrievalMetric(ks=1, empty="zero")
    m.update(batches[0][0], batches[0][1][:0], [])
    m.update(*batches[0])
    imgs = torch.cat([batches[0][0], batches[0][0]])
    assert m.compute() == evaluate(imgs, batches[0][1], batches[0][2] + 5, ks=1, empty="zero")


def test_copy_has_its_own_spill_file(tmp_path):
    import copy
    import pickle

    batches = _batches(4, n=3)
    m = RetrievalMetric(ks=(1, 5), memory_budget=0, spill_dir=str(tmp_path))
    for b in batches:
        m.update(*b)
    want = evaluate_ref(*_union(batches), ks=(1, 5))
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert c._images.path != m._images.path and c._texts.path != m._texts.path
        assert c.compute() == want
        c.reset()
        del c
    assert m.compute() == want  # the original's files survive the copies' reset


def _worker(rank: int, world: int, port: int, out_dir: str, counts, dtype) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        batches = _batches(10 + rank, n=counts[rank], dtype=dtype)
        # Rank 1 spills (bf16 rows come back as fp32 there), rank 0 holds its rows in memory.
        m = RetrievalMetric(ks=(1, 5), memory_budget=0 if rank else None, group=dist.group.WORLD)
        for b in batches:
            m.update(*b)
        first = m.compute()
        if rank == 0:  # uneven last batches: only rank 0 adds one more before the next compute
            m.update(*_batches(12, n=1, dtype=dtype)[0])
        second = m.compute()
        torch.save({"first": dict(first), "second": dict(second)}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "counts, dtype",
    [((2, 3), torch.float32), ((0, 2), torch.float32), ((2, 3), torch.bfloat16), ((0, 2), torch.bfloat16)],
)  # batches per rank: uneven; a rank without any batch
def test_metric_distributed_gloo(tmp_path, counts, dtype):
    run_ranks(_worker, 2, str(tmp_path), counts, dtype)
    b0, b1 = _batches(10, n=counts[0], dtype=dtype), _batches(11, n=counts[1], dtype=dtype)
    extra = _batches(12, n=1, dtype=dtype)
    want = [evaluate_ref(*(_float(_union(b))), ks=(1, 5)) for b in (b0 + b1, b0 + extra + b1)]
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        assert got["first"] == want[0] and got["second"] == want[1]


def _float(union):
    imgs, txts, labs = union
    return imgs.float(), txts.float(), labs
