"""Differentiable torch.distributed exchanges for the sharded losses (any backend: NCCL on GPU, gloo on CPU).

Every helper is an autograd.Function whose backward sends the gradient back the way the data came, so a rank's
loss propagates into the features of the rank that owns them (what open_clip calls ``gather_with_grad``). They run
on the features' own device, which under NCCL is the rank's GPU (tests/test_metrics_dist_device.py checks it).

Why not ``torch.distributed.nn.functional``: torch 2.13 deprecates its ``all_gather``/``all_reduce`` (a FutureWarning
on every call, pointing at the private ``_functional_collectives``), its gloo backward of ``all_gather`` emulates a
reduce-scatter with one ``scatter`` per rank where ``_AllGather`` here needs one ``all_reduce``, and it has no
point-to-point exchange for the SigLIP ring (``shift``, ``bidir_shift``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def check_process_group(rank: int, world_size: int) -> None:
    """The losses use the default process group; its size and this process's rank must match the constructor's."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"world_size={world_size} needs an initialized torch.distributed process group")
    if dist.get_world_size() != world_size or dist.get_rank() != rank:
        raise ValueError(
            f"rank={rank}, world_size={world_size} do not match the process group "
            f"(rank {dist.get_rank()} of {dist.get_world_size()})"
        )


class _AllGather(torch.autograd.Function):
    """Concatenate every rank's (equal-shaped) tensor along dim 0; backward sums the gradients and keeps our slice."""

    @staticmethod
    def forward(ctx, t: torch.Tensor) -> torch.Tensor:
        ctx.rows = t.shape[0]
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        rank = dist.get_rank()
        if dist.get_backend() == "nccl":
            out = grad.new_empty(ctx.rows, *grad.shape[1:])
            dist.reduce_scatter_tensor(out, grad)
            return out
        total = grad.clone()
        dist.all_reduce(total)
        return total[rank * ctx.rows : (rank + 1) * ctx.rows]


def all_gather(t: torch.Tensor | None) -> torch.Tensor | None:
    """Differentiable all-gather for float tensors; a plain one for integer tensors (group ids)."""
    if t is None:
        return None
    if t.is_floating_point():
        return _AllGather.apply(t)
    t = t.contiguous()
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return torch.cat(parts)


class _GlobalLogSumExp(torch.autograd.Function):
    """Element-wise log-sum-exp across ranks of a per-rank partial log-sum-exp vector, in O(len) memory."""

    @staticmethod
    def forward(ctx, part: torch.Tensor) -> torch.Tensor:
        top = part.detach().clone()
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        total = torch.exp(part.detach() - top)
        dist.all_reduce(total)
        out = top + torch.log(total)
        ctx.save_for_backward(part, out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        part, out = ctx.saved_tensors
        # Every rank's objective reads the global value, so the upstream gradients add up before the chain rule.
        total = grad.contiguous().clone()
        dist.all_reduce(total)
        return total * torch.exp(part - out)


def global_logsumexp(part: torch.Tensor) -> torch.Tensor:
    return _GlobalLogSumExp.apply(part)


def _p2p(sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
    """Post all sends and receives together (no ordering deadlock) and wait; recvs give (like, source rank)."""
    # Receive buffers in the default layout: gloo receives only into contiguous tensors, and plain empty_like copies a
    # transposed input's strides (the send had then been posted, leaving the ring out of step for the next call).
    out = [torch.empty_like(like, memory_format=torch.contiguous_format) for like, _ in recvs]
    ops = [dist.P2POp(dist.isend, t.contiguous(), peer) for t, peer in sends]
    ops += [dist.P2POp(dist.irecv, buf, peer) for buf, (_, peer) in zip(out, recvs)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return out


class _Shift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t: torch.Tensor, to_rank: int, from_rank: int) -> torch.Tensor:
        ctx.to_rank, ctx.from_rank = to_rank, from_rank
        return _p2p([(t, to_rank)], [(t, from_rank)])[0]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _p2p([(grad, ctx.from_rank)], [(grad, ctx.to_rank)])[0], None, None


def shift(t: torch.Tensor | None, to_rank: int, from_rank: int) -> torch.Tensor | None:
    """Send t to to_rank and return what from_rank sent; differentiable for float tensors."""
    if t is None:
        return None
    if t.is_floating_point():
        return _Shift.apply(t, to_rank, from_rank)
    return _p2p([(t, to_rank)], [(t, from_rank)])[0]


class _BidirShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, to_left: torch.Tensor, to_right: torch.Tensor, left: int, right: int):
        ctx.left, ctx.right = left, right
        from_right, from_left = _p2p([(to_left, left), (to_right, right)], [(to_left, right), (to_right, left)])
        return from_right, from_left

    @staticmethod
    def backward(ctx, g_from_right: torch.Tensor, g_from_left: torch.Tensor):
        # What came from the right goes back to the right; the right rank returns the gradient of our to_right.
        g_to_right, g_to_left = _p2p(
            [(g_from_right, ctx.right), (g_from_left, ctx.left)], [(g_from_right, ctx.right), (g_from_left, ctx.left)]
        )
        return g_to_left, g_to_right, None, None


def bidir_shift(to_left, to_right, left: int, right: int):
    """Send to_left to the left rank and to_right to the right one; returns (from_right, from_left)."""
    if to_left is None:
        return None, None
    if to_left.is_floating_point():
        return _BidirShift.apply(to_left, to_right, left, right)
    return tuple(_p2p([(to_left, left), (to_right, right)], [(to_left, right), (to_right, left)]))
