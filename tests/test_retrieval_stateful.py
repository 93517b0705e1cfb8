"""RetrievalMetric (update / compute / reset) against evaluate on the concatenated batches, with the memory-mapped
spill, and under a real 2-process gloo group."""

import os

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks

from vlkernels.retrieval import RetrievalMetric
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
    ]
    for fn, match in cases:
        with pytest.raises(ValueError, match=match):
            fn()


def _worker(rank: int, world: int, port: int, out_dir: str, counts) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        batches = _batches(10 + rank, n=counts[rank])
        m = RetrievalMetric(ks=(1, 5), memory_budget=0 if rank else None, group=dist.group.WORLD)
        for b in batches:
            m.update(*b)
        res = m.compute()
        torch.save({"res": dict(res)}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("counts", [(2, 3), (0, 2)])  # batches per rank: uneven; a rank without any batch
def test_metric_distributed_gloo(tmp_path, counts):
    run_ranks(_worker, 2, str(tmp_path), counts)
    imgs, txts, labs = _union(_batches(10, n=counts[0]) + _batches(11, n=counts[1]))
    want = evaluate_ref(imgs, txts, labs, ks=(1, 5))
    for r in range(2):
        assert torch.load(tmp_path / f"rank{r}.pt", weights_only=False)["res"] == want
