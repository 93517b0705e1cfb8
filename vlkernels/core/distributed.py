"""Collectives on the device the process group's backend needs, for the stateful metrics' states.

NCCL exchanges only CUDA tensors (on the rank's current device), gloo only CPU tensors, while a metric's state lives
wherever its data does (often on the CPU, as C++ engines and JSON payloads want). Every metric's exchange goes
through :func:`comm_device`, so one code path serves gloo tests on CPU and NCCL jobs on GPUs.

Why not the library helpers: torchmetrics' ``gather_all_tensors`` gathers on the tensor's own device (CPU states
under NCCL fail) and ``torch.distributed.all_gather_object`` pickles (CIDEr's payload is plain UTF-8 JSON by design,
detection's tensors are large).
"""

from __future__ import annotations

import torch


def comm_device(group=None) -> torch.device:
    """The device the group's backend exchanges tensors on: the current CUDA device for NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_gather_rows(t: torch.Tensor, group=None) -> list[torch.Tensor]:
    """Every rank's ``t`` in rank order; the number of rows (dim 0) may differ between ranks, the other dims and the
    dtype may not. Sizes go first, then the rows padded to the longest; results come back on ``t``'s device."""
    import torch.distributed as dist

    dev = comm_device(group)
    world = dist.get_world_size(group)
    size = torch.tensor([t.shape[0]], dtype=torch.int64).to(dev)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    counts = [int(s.item()) for s in sizes]
    pad = t.new_zeros((max(counts), *t.shape[1:])).to(dev)
    pad[: t.shape[0]] = t.to(dev)
    parts = [torch.empty_like(pad) for _ in range(world)]
    dist.all_gather(parts, pad, group=group)
    return [p[:n].to(t.device) for p, n in zip(parts, counts)]
