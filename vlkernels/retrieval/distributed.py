"""torch.distributed plumbing shared by the CPU and Triton paths: shard layout, agreed validation, collectives.

Collectives run on the device the group's backend wants (CUDA tensors for NCCL, CPU tensors for gloo), whatever
device the data lives on, so one code path serves gloo tests on CPU and NCCL runs on GPUs.
"""

from __future__ import annotations

import torch

from vlkernels.core.distributed import comm_device


def shard_layout(n_local: int, group, error: str | None = None, **meta) -> tuple[int, int]:
    """``(offset of this rank's shard, global size)`` for contiguous shards in rank order.

    Every rank calls it, also a rank whose local validation failed (``error``): all ranks then raise together
    instead of leaving the others blocked in a later collective. ``meta`` (embedding dim, dtypes, ...) must agree
    across ranks.
    """
    if group is None:
        if error is not None:
            raise ValueError(error)
        return 0, n_local
    import torch.distributed as dist

    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, (error, int(n_local), meta), group=group)
    if error is not None:
        raise ValueError(error)
    failed = [(r, e) for r, (e, _, _) in enumerate(gathered) if e is not None]
    if failed:
        r, e = failed[0]
        raise ValueError(f"rank {r} of the group rejected its input: {e}")
    for key, value in meta.items():
        values = [m.get(key) for _, _, m in gathered]
        if any(v != value for v in values):
            shown = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise ValueError(f"{key} must be the same on every rank of the group, got {shown}")
    sizes = [n for _, n, _ in gathered]
    return int(sum(sizes[:rank])), int(sum(sizes))


def all_reduce(t: torch.Tensor, op: str, group) -> torch.Tensor:
    """``op`` ("sum" or "max") over the group; returns a tensor on ``t``'s device."""
    import torch.distributed as dist

    x = t.to(comm_device(group)).contiguous()
    dist.all_reduce(x, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op], group=group)
    return x.to(t.device)


def all_gather_cat(t: torch.Tensor, group, dim: int = 1) -> torch.Tensor:
    """Every rank's ``t`` (same shape on all ranks) concatenated along ``dim`` in rank order, on ``t``'s device."""
    import torch.distributed as dist

    x = t.to(comm_device(group)).contiguous()
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim).to(t.device)
