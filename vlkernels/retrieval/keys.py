"""Top-k candidates as unique int64 keys: order-preserving fp32 bits << 32 | (2^32 - 1 - index), so sorting keys
orders by score descending then index ascending (the kernels pack the same way)."""

from __future__ import annotations

import torch

EMPTY = torch.iinfo(torch.int64).min
# Keys per matmul tile of the large-k top-K paths (256 MiB of int64): bounds their device memory.
WORK_ELEMS = 1 << 25


def encode_keys(scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The kernel's packing in torch: int64 keys ordered as (fp32 score descending, index ascending)."""
    bits = scores.float().contiguous().view(torch.int32)
    order = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)
    return (order << 32) | (4294967295 - index)


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of the kernel's key packing: (fp32 scores, int64 indices); empty keys give (-inf, -1)."""
    empty = keys == EMPTY
    order = (keys >> 32).to(torch.int32)
    bits = torch.where(order < 0, order ^ 0x7FFFFFFF, order)
    vals = bits.view(torch.float32).masked_fill(empty, float("-inf"))
    idx = (4294967295 - (keys & 4294967295)).masked_fill(empty, -1)
    return vals, idx
