"""Launchers for the Triton retrieval kernels (CUDA, or CPU tensors under TRITON_INTERPRET=1)."""

from __future__ import annotations

import numpy as np
import torch

from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.positives import Positives

BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32
MAX_SLOTS = 8
EMPTY = torch.iinfo(torch.int64).min


def _prep(x: torch.Tensor) -> torch.Tensor:
    # fp16/bf16 go to tl.dot as they are (fp32 accumulation); fp64 is narrowed (Triton dots are fp32 at most).
    x = x.to(torch.float32) if x.dtype == torch.float64 else x
    return x.contiguous()


def _splits(n_g: int, n_q: int, block_n: int) -> tuple[int, int]:
    """Gallery splits so the grid fills the device; cols_per_split stays a multiple of block_n (tile alignment)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 1
    m_blocks = max(1, -(-n_q // BLOCK_M))
    splits = max(1, min(-(-n_g // block_n), -(-2 * sms // m_blocks)))
    per = -(-n_g // splits)
    per = -(-per // block_n) * block_n
    return -(-n_g // per), per


def gt_scores_fwd(q: torch.Tensor, g: torch.Tensor, pair_q: np.ndarray, pair_g: np.ndarray) -> np.ndarray:
    """Scores of (query, gallery) pairs read from the same score tiles the counting kernel computes."""
    from vlkernels.retrieval.kernels import _gt_score_fwd_kernel

    out = np.zeros(len(pair_q), dtype=np.float32)
    if len(pair_q) == 0:
        return out
    tm, tn = pair_q // BLOCK_M, pair_g // BLOCK_N
    key = tm * (-(-g.shape[0] // BLOCK_N)) + tn
    order = np.argsort(key, kind="stable")
    key_s = key[order]
    tiles, starts = np.unique(key_s, return_index=True)
    tile_ptr = np.append(starts, len(key_s)).astype(np.int64)
    dev = q.device
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)
    res = torch.empty(len(pair_q), dtype=torch.float32, device=dev)
    n_tiles_n = -(-g.shape[0] // BLOCK_N)
    _gt_score_fwd_kernel[(len(tiles),)](
        q, g, t(tiles // n_tiles_n), t(tiles % n_tiles_n), t(tile_ptr), t(pair_q[order]), t(pair_g[order]), res,
        q.shape[0], g.shape[0], q.shape[1], q.stride(0), g.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )  # fmt: skip
    out[order] = res.cpu().numpy()
    return out


def count_direction(queries: torch.Tensor, gallery: torch.Tensor, pos: Positives) -> np.ndarray:
    """Candidates ranked above each (query, positive) pair of the evaluated queries, in ``pos`` pair order."""
    from vlkernels.retrieval.kernels import _rank_count_fwd_kernel

    q, g = _prep(queries), _prep(gallery)
    n_q, n_g = q.shape[0], g.shape[0]
    active = np.zeros(pos.num_queries, dtype=bool)
    active[pos.queries] = True
    pq = pos.pair_queries()
    sel = np.flatnonzero(active[pq])
    thr = gt_scores_fwd(q, g, pq[sel], pos.indices[sel])
    counts = np.where(active, pos.counts, 0)
    n_slots = max(1, int(counts.max()) if len(counts) else 1)
    slot = sel - pos.indptr[pq[sel]]
    thr_plane = np.full((n_q, n_slots), np.inf, dtype=np.float32)
    pos_plane = np.full((n_q, n_slots), -1, dtype=np.int64)
    thr_plane[pq[sel], slot] = thr
    pos_plane[pq[sel], slot] = pos.indices[sel]
    dev = q.device
    thr_t, pos_t = torch.from_numpy(thr_plane).to(dev), torch.from_numpy(pos_plane).to(dev)
    out = torch.zeros((n_q, n_slots), dtype=torch.int64, device=dev)
    n_split, per = _splits(n_g, n_q, BLOCK_N)
    # Slots go in launches of at most MAX_SLOTS (registers); every launch computes the same tiles.
    for s0 in range(0, n_slots, MAX_SLOTS):
        width = min(MAX_SLOTS, n_slots - s0)
        slots_c = 1 << (width - 1).bit_length()
        if slots_c != width:  # pad the plane so the constexpr slot count stays in bounds
            pad = s0 + slots_c - n_slots
            if pad > 0:
                thr_t = torch.cat([thr_t, torch.full((n_q, pad), float("inf"), device=dev)], 1)
                pos_t = torch.cat([pos_t, torch.full((n_q, pad), -1, dtype=torch.int64, device=dev)], 1)
                out = torch.cat([out, torch.zeros((n_q, pad), dtype=torch.int64, device=dev)], 1)
                n_slots += pad
        _rank_count_fwd_kernel[(-(-n_q // BLOCK_M), n_split)](
            q, g, thr_t.contiguous(), pos_t.contiguous(), out,
            n_q, n_g, q.shape[1], q.stride(0), g.stride(0), per, thr_t.shape[1], s0,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SLOTS=slots_c,
        )  # fmt: skip
    above = np.zeros(len(pq), dtype=np.int64)
    above[sel] = out.cpu().numpy()[pq[sel], slot]
    return above


def encode_keys(scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The kernel's packing in torch: int64 keys ordered as (fp32 score descending, index ascending)."""
    bits = scores.float().contiguous().view(torch.int32)
    order = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)
    return (order << 32) | (4294967295 - index)


def _topk_large(q: torch.Tensor, gallery: Embeddings, k: int, exclude, offset: int, dtype, chunk: int = 8192):
    """k past the fused kernel's register budget: tile matmuls on the device, merged as unique int64 keys, so
    torch.topk's order is fully determined (score descending, then index ascending)."""
    n_q = q.shape[0]
    best = torch.full((n_q, 0), EMPTY, dtype=torch.int64, device=q.device)
    if exclude is not None and len(exclude.indices):
        eq = torch.from_numpy(exclude.pair_queries()).to(q.device)
        eg = torch.from_numpy(exclude.indices).to(q.device)
    for g0 in range(0, len(gallery), chunk):
        g = _prep(gallery.chunk(g0, min(len(gallery), g0 + chunk), dtype).to(q.device))
        s = (q @ g.T).float() if q.dtype in (torch.float16, torch.bfloat16) else q @ g.T
        keys = encode_keys(s, torch.arange(g0, g0 + g.shape[0], device=q.device) + offset)
        if exclude is not None and len(exclude.indices):
            m = (eg >= g0) & (eg < g0 + g.shape[0])
            keys[eq[m], eg[m] - g0] = EMPTY
        keys = torch.cat([best, keys], 1)
        best = torch.topk(keys, min(k, keys.shape[1]), dim=1).values
    vals, idx = decode_keys(best)
    if vals.shape[1] < k:
        vals = torch.cat([vals, vals.new_full((n_q, k - vals.shape[1]), float("-inf"))], 1)
        idx = torch.cat([idx, idx.new_full((n_q, k - idx.shape[1]), -1)], 1)
    return vals, idx


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of the kernel's key packing: (fp32 scores, int64 indices); empty keys give (-inf, -1)."""
    empty = keys == EMPTY
    order = (keys >> 32).to(torch.int32)
    bits = torch.where(order < 0, order ^ 0x7FFFFFFF, order)
    vals = bits.view(torch.float32).masked_fill(empty, float("-inf"))
    idx = (4294967295 - (keys & 4294967295)).masked_fill(empty, -1)
    return vals, idx


def topk_triton(
    queries: torch.Tensor,
    gallery: Embeddings,
    k: int,
    exclude: Positives | None,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused GEMM + top-k (k + the most exclusions of any query, padded to a power of two, at most 256)."""
    from vlkernels.retrieval import engine
    from vlkernels.retrieval.kernels import _topk_fwd_kernel

    q = _prep(queries)
    n_q = q.shape[0]
    extra = int(exclude.counts.max()) if exclude is not None and exclude.num_queries else 0
    kk = k + extra
    if kk > 256 or n_q == 0 or k == 0:
        return _topk_large(q, gallery, k, exclude, offset, dtype)
    g = _prep(gallery.full(dtype))
    n_g = g.shape[0]
    block_n = max(16, 1 << (kk - 1).bit_length())
    n_split, per = _splits(n_g, n_q, block_n) if n_g else (1, block_n)
    keys = torch.empty((n_split, n_q, block_n), dtype=torch.int64, device=q.device)
    _topk_fwd_kernel[(-(-n_q // BLOCK_M), n_split)](
        q, g, keys, n_q, n_g, q.shape[1], q.stride(0), g.stride(0), per, offset,
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=BLOCK_K,
    )  # fmt: skip
    # Keys are unique (one index each): the best kk over the splits, then exclusions removed.
    keys = keys.permute(1, 0, 2).reshape(n_q, -1)
    keys = torch.topk(keys, min(kk, keys.shape[1]), dim=1).values
    vals, idx = decode_keys(keys)
    if exclude is not None and len(exclude.indices):
        ex = torch.zeros_like(idx, dtype=torch.bool)
        eq = torch.from_numpy(exclude.pair_queries()).to(q.device)
        eg = torch.from_numpy(exclude.indices + offset).to(q.device)
        # Mark a candidate excluded when (query, index) is listed: match by a per-row membership test.
        hit = idx[eq] == eg[:, None]
        ex.index_put_((eq,), hit, accumulate=True)
        vals = vals.masked_fill(ex, float("-inf"))
        idx = idx.masked_fill(ex, -1)
        vals, idx = engine.sort_topk(vals, idx)
    vals, idx = vals[:, :k], idx[:, :k]
    if vals.shape[1] < k:
        vals = torch.cat([vals, vals.new_full((n_q, k - vals.shape[1]), float("-inf"))], 1)
        idx = torch.cat([idx, idx.new_full((n_q, k - idx.shape[1]), -1)], 1)
    return vals, idx
