"""Every stateful metric and the contrastive losses' exchanges under real gloo groups (2 and 3 ranks), then again
with the backend reported as NCCL: there every tensor handed to a collective must be on the rank's CUDA device.

No GPU: ``torch.distributed.get_backend`` answers "nccl", ``.to("cuda")`` gives a CPU tensor of the subclass
``OnGpu`` (tests/fake_cuda.py), and the collectives record whether each tensor they get is ``OnGpu`` before gloo
runs them (``reduce_scatter_tensor``, which gloo lacks, as an all_reduce and a slice). The metrics' results under
both must equal one process's on the whole data; the losses' results (NCCL's reduce-scatter backward included) the
gloo run's. One process group per world size (about a minute each on a loaded 2-core machine).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks

CAPTIONS = [
    "a dog runs on the grass", "two cats sleep", "a red car parked", "a man rides a bike", "the sky is blue",
    "a dog and a cat", "people walk in the park", "a bird on a wire", "a plate of food", "children play",
]  # fmt: skip
COLLECTIVES = ("all_gather", "all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")


def _retrieval_data():
    g = torch.Generator().manual_seed(0)
    img = torch.randint(-2, 3, (12, 8), generator=g).float()
    lab = np.sort(np.arange(30) % 12)  # sorted: contiguous image shards keep the texts in their global order
    txt = img[torch.from_numpy(lab)] + torch.randint(-2, 3, (30, 8), generator=g).float()
    return img, txt, lab


def _detection_data():
    g = torch.Generator().manual_seed(1)
    preds, target = [], []
    for _ in range(9):
        xy = torch.rand(4, 2, generator=g) * 50
        boxes = torch.cat([xy, xy + 5 + torch.rand(4, 2, generator=g) * 20], 1)
        labels = torch.randint(0, 3, (4,), generator=g)
        target.append({"boxes": boxes, "labels": labels})
        noisy = boxes + torch.randn(4, 4, generator=g)
        preds.append({"boxes": noisy, "scores": torch.rand(4, generator=g), "labels": labels})
    return preds, target


def _contrastive_data(world):
    g = torch.Generator().manual_seed(2)
    return torch.randn(4 * world, 16, generator=g), torch.randn(4 * world, 16, generator=g)


def _metrics(rank: int, world: int, gpu: bool) -> dict:
    """Every stateful metric on this rank's shard (rank r: items r, r + world, ...)."""
    import torch.distributed as dist

    from vlkernels.captioning.cider_metric import CiderMetric
    from vlkernels.detection import MeanAveragePrecision
    from vlkernels.retrieval import RetrievalMetric

    out = {}
    img, txt, lab = _retrieval_data()
    m = RetrievalMetric(group=dist.group.WORLD)
    # Contiguous image shards; each rank's texts are those of its images (batch-local labels).
    lo, hi = rank * len(img) // world, (rank + 1) * len(img) // world
    mine = (lab >= lo) & (lab < hi)
    m.update(img[lo:hi], txt[torch.from_numpy(mine)], lab[mine] - lo)
    out["retrieval"] = m.compute()
    cider = CiderMetric()
    idx = range(rank, len(CAPTIONS), world)
    cider.update([CAPTIONS[i] for i in idx], [[CAPTIONS[i], CAPTIONS[(i + 1) % len(CAPTIONS)]] for i in idx])
    out["cider"] = float(cider.compute())
    preds, target = _detection_data()
    det = MeanAveragePrecision()
    det.update(preds[rank::world], target[rank::world])
    out["detection"] = {k: float(v) for k, v in det.compute().items() if v.numel() == 1}
    return out


def _losses(rank: int, world: int, gpu: bool) -> dict:
    """The contrastive losses in every exchange mode, forward and backward, on this rank's rows."""
    from vlkernels.contrastive.modules import ClipLoss, SigLipLoss

    out = {}
    x, y = _contrastive_data(world)
    sl = slice(4 * rank, 4 * (rank + 1))
    scale, bias = torch.tensor(4.0), torch.tensor(-3.0)
    losses = [("clip", ClipLoss(rank=rank, world_size=world))]
    losses += [(f"siglip {impl}", SigLipLoss(rank=rank, world_size=world, dist_impl=impl))
               for impl in ("bidir", "shift", "gather", "reduce")]  # fmt: skip
    for name, fn in losses:
        leaves = [t.clone().to("cuda" if gpu else "cpu").requires_grad_() for t in (x[sl], y[sl], scale, bias)]
        loss = fn(*leaves)
        loss.backward()
        out[name] = [loss.detach().cpu()] + [t.grad.cpu() for t in leaves]
    return out


def _exchanges(rank: int, world: int, gpu: bool, phase: list[str]) -> None:
    """The losses' exchanges on tensors of the fake GPU, driven directly (the kernels between them allocate on their
    inputs' device, which a CPU stand-in cannot follow). Forward only is checked: autograd hands a backward its
    gradients on the forward outputs' device, which the stand-in cannot show (its engine passes plain tensors)."""
    from vlkernels.contrastive import distributed as vdist

    t = torch.randn(3, 5).to("cuda").requires_grad_()
    outs = [vdist.all_gather(t), vdist.global_logsumexp(t[:, 0])]
    outs += list(vdist.bidir_shift(t, t * 2, (rank - 1) % world, (rank + 1) % world))
    outs.append(vdist.shift(t, (rank + 1) % world, (rank - 1) % world))
    vdist.all_gather(torch.arange(3).to("cuda"))
    phase[0] = "backward"
    sum(o.sum() for o in outs).backward()


def _record_collectives(monkeypatch, seen: dict[str, list], phase: list[str]) -> None:
    """Report NCCL; each collective notes (its name, whether every tensor it got is on the fake GPU) under the
    current ``phase[0]``, then runs."""
    import torch.distributed as dist
    from fake_cuda import OnGpu, plain

    def tensors(args, kwargs):
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                yield a
            elif isinstance(a, (list, tuple)):
                yield from (t for t in a if isinstance(t, torch.Tensor))

    def recorder(name, real):
        def call(*args, **kwargs):
            seen.setdefault(phase[0], []).append((name, all(isinstance(t, OnGpu) for t in tensors(args, kwargs))))
            args = [[plain(t) for t in a] if isinstance(a, list) else plain(a) for a in args]
            return real(*args, **{k: plain(v) for k, v in kwargs.items()})

        return call

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        total = plain(input).clone()
        dist.all_reduce(total, op=op, group=group)
        rows = output.shape[0]
        plain(output).copy_(total[dist.get_rank(group) * rows : (dist.get_rank(group) + 1) * rows])

    def batch_isend_irecv(ops):
        seen.setdefault(phase[0], []).append(("batch_isend_irecv", all(isinstance(op.tensor, OnGpu) for op in ops)))
        return real_batch([dist.P2POp(op.op, plain(op.tensor), op.peer, op.group, op.tag) for op in ops])

    real_batch = dist.batch_isend_irecv
    for name in COLLECTIVES:
        real = reduce_scatter_tensor if name == "reduce_scatter_tensor" else getattr(dist, name)
        monkeypatch.setattr(dist, name, recorder(name, real))
    monkeypatch.setattr(dist, "batch_isend_irecv", batch_isend_irecv)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["TRITON_INTERPRET"] = "0"  # the exchanges sit above the kernels: the CPU paths suffice
    torch.set_num_threads(1)
    import fake_cuda
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {"gloo": {**_metrics(rank, world, gpu=False), **_losses(rank, world, gpu=False)}}
    seen: dict[str, list] = {}
    phase = ["metrics"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        fake_cuda.install(monkeypatch)
        _record_collectives(monkeypatch, seen, phase)
        out["nccl"] = {}
        for phase[0], run in (("metrics", _metrics), ("losses", _losses)):
            out["nccl"].update(run(rank, world, gpu=True))
        phase[0] = "exchanges"
        _exchanges(rank, world, True, phase)
        # The recorder does catch a CPU tensor handed to an NCCL collective.
        phase[0] = "control"
        dist.all_reduce(torch.zeros(1))
    out["seen"] = seen
    torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _single_process() -> dict:
    from vlkernels.captioning.cider_metric import CiderMetric
    from vlkernels.detection import mean_average_precision
    from vlkernels.retrieval import evaluate

    img, txt, lab = _retrieval_data()
    cider = CiderMetric()
    cider.update(CAPTIONS, [[c, CAPTIONS[(i + 1) % len(CAPTIONS)]] for i, c in enumerate(CAPTIONS)])
    preds, target = _detection_data()
    det = mean_average_precision(preds, target)
    return {
        "retrieval": evaluate(img, txt, lab),
        "cider": float(cider.compute()),
        "detection": {k: float(v) for k, v in det.items() if v.numel() == 1},
    }


@pytest.mark.parametrize("world", [2, 3])
def test_stateful_metrics_gather_on_the_backends_device(world, tmp_path):
    run_ranks(_worker, world, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]
    want = _single_process()
    for r, res in enumerate(ranks):
        for mode in ("gloo", "nccl"):
            got = res[mode]
            # Ranks are exact (integer embeddings); the metrics' float64 means may differ in summation order.
            for direction, metrics in want["retrieval"].items():
                assert got["retrieval"][direction] == pytest.approx(metrics, rel=1e-12), (r, mode, direction)
            # CIDEr's document frequencies come from the whole corpus; the mean's summation order may differ.
            assert got["cider"] == pytest.approx(want["cider"], rel=1e-12), (r, mode)
            assert got["detection"] == pytest.approx(want["detection"], abs=1e-12), (r, mode)
        for name in ("clip", "siglip bidir", "siglip shift", "siglip gather", "siglip reduce"):
            for a, b in zip(res["gloo"][name], res["nccl"][name]):
                torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"rank {r} {name}")
        seen = res["seen"]
        assert seen["control"] == [("all_reduce", False)], "the recorder missed a CPU tensor"
        for phase in ("metrics", "exchanges"):
            wrong = [name for name, ok in seen[phase] if not ok]
            assert not wrong, f"rank {r} {phase}: collectives given tensors off the CUDA device under NCCL: {wrong}"
        assert {name for name, _ in seen["metrics"]} >= {"all_gather", "all_reduce"}
        assert {name for name, _ in seen["exchanges"]} >= {"all_gather", "all_reduce", "batch_isend_irecv"}
        assert "reduce_scatter_tensor" in {name for name, _ in seen["backward"]}
