"""Top-k candidates as unique int64 keys: order-preserving fp32 bits << 32 | (2^32 - 1 - index), so sorting keys
orders by score descending then index ascending (the kernels pack the same way); and the device paths' selection of
the best k among exactly scored candidates."""

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


def keep_best(rows: torch.Tensor, vals: torch.Tensor, cols: torch.Tensor, k: int):
    """The best k (exact score desc, index asc) of each row among (row, score, index) candidates, grouped by row."""
    o = torch.argsort(cols, stable=True)
    rows, vals, cols = rows[o], vals[o], cols[o]
    o = torch.argsort(vals, descending=True, stable=True)
    rows, vals, cols = rows[o], vals[o], cols[o]
    o = torch.argsort(rows, stable=True)
    rows, vals, cols = rows[o], vals[o], cols[o]
    keep = _rank_in_row(rows) < k
    return rows[keep], vals[keep], cols[keep]


def _rank_in_row(rows: torch.Tensor) -> torch.Tensor:
    """Position of each entry within its run of equal (sorted) rows."""
    if rows.numel() == 0:
        return torch.zeros_like(rows)
    start = torch.ones_like(rows, dtype=torch.bool)
    start[1:] = rows[1:] != rows[:-1]
    at = torch.arange(rows.numel(), device=rows.device)
    return at - torch.cummax(torch.where(start, at, 0), 0).values


def place_best(rows, sc, cols, vals: torch.Tensor, idx: torch.Tensor, q0: int, offset: int) -> None:
    """keep_best's selection written into rows ``q0 + rows`` of (vals, idx), indices shifted by ``offset``."""
    slot = _rank_in_row(rows)
    vals[q0 + rows, slot] = sc
    idx[q0 + rows, slot] = cols + offset


def chunk_exclusions(exclude, q0: int, q1: int, device: torch.device):
    """The excluded pairs of queries q0..q1 as (query in chunk, gallery index) device tensors; None without any."""
    if exclude is None or len(exclude.indices) == 0:
        return None
    lo, hi = exclude.indptr[q0], exclude.indptr[q1]
    eq = torch.from_numpy(exclude.pair_queries()[lo:hi] - q0).to(device)
    return eq, torch.from_numpy(exclude.indices[lo:hi]).to(device)
