"""CPU streaming engine: score tiles from chunked BLAS matmuls, rank counting and top-K in C++ (csrc/retrieval).

evaluate: S = rows @ cols^T (texts x images) is visited in (chunk_rows x chunk_cols) tiles, each computed once per
pass by the same call (same shapes, same buffers), so a ground-truth score is bit-identical to the value it is
compared against. Pass 1 computes the tiles that hold a ground-truth pair ("band" tiles), reads the thresholds, and
keeps those tiles (within `cache_bytes`); pass 2 visits every tile once and counts, for both directions at once:
row queries (text-to-image) in the tile's rows, column queries (image-to-text) down the tile's columns.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import threading

import numpy as np
import torch

from vlkernels import _ext
from vlkernels.core.threads import limit
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.plan import SlotPlan
from vlkernels.retrieval.positives import Positives


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="tile")


class _Tiles:
    """Computes score tiles rows[r0:r1] @ cols[c0:c1]^T through one code path, reusing one buffer per tile shape."""

    def __init__(self, rows: Embeddings, cols: torch.Tensor, row_offset: int, br: int, bc: int):
        self.rows, self.cols, self.row_offset, self.br, self.bc = rows, cols, row_offset, br, bc
        self.n_rows, self.n_cols = len(rows), cols.shape[0]
        self.buffers: dict[tuple[int, int], torch.Tensor] = {}
        self._a_key, self._a = None, None

    def row_chunk(self, rc: int) -> torch.Tensor:
        if self._a_key != rc:
            r0 = rc * self.br
            self._a, self._a_key = self.rows.chunk(r0, min(self.n_rows, r0 + self.br), self.cols.dtype), rc
        return self._a

    def compute(self, rc: int, cc: int) -> torch.Tensor:
        a = self.row_chunk(rc)
        c0 = cc * self.bc
        b = self.cols[c0 : min(self.n_cols, c0 + self.bc)]
        shape = (a.shape[0], b.shape[0])
        out = self.buffers.get(shape)
        if out is None:
            out = self.buffers[shape] = torch.empty(shape, dtype=self.cols.dtype)
        torch.matmul(a, b.T, out=out)
        return out


def count_both(
    rows: Embeddings,
    cols: torch.Tensor,
    row_pos: Positives,
    col_pos: Positives,
    row_offset: int = 0,
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    cache_bytes: int = 256 << 20,
    progress: bool = False,
    group=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates ranked above each pair, for row queries (``row_pos``: rows -> columns) and column queries
    (``col_pos``: columns -> rows), in the pair order of each Positives. ``rows`` may be this process's shard of the
    global rows (starting at ``row_offset``); with ``group`` the counts are summed over the group."""
    C = _ext.load()
    n_local, n_cols = len(rows), cols.shape[0]
    n_rc, n_cc = -(-n_local // chunk_rows), -(-n_cols // chunk_cols)
    inf = float("inf")

    # Row queries: only the local rows' pairs are counted here (each row is complete in this process).
    rq = row_pos.pair_queries()
    r_active = _active(row_pos)
    r_local = r_active & (rq >= row_offset) & (rq < row_offset + n_local)
    r_thr = np.full(len(rq), np.nan)
    # Column queries: the pairs whose positive row is local supply a threshold; every column is counted.
    cq = col_pos.pair_queries()
    c_rows = col_pos.indices
    c_active = _active(col_pos)
    c_local = c_active & (c_rows >= row_offset) & (c_rows < row_offset + n_local)
    c_thr = np.full(len(cq), -inf)

    # Pass 1: band tiles, in (row chunk, column chunk) order, each computed once.
    r_tile = ((rq - row_offset) // chunk_rows) * n_cc + row_pos.indices // chunk_cols
    c_tile = ((c_rows - row_offset) // chunk_rows) * n_cc + cq // chunk_cols
    r_sel, c_sel = np.flatnonzero(r_local), np.flatnonzero(c_local)
    band = np.unique(np.concatenate([r_tile[r_sel], c_tile[c_sel]]))
    r_by_tile = _group(r_tile[r_sel], r_sel)
    c_by_tile = _group(c_tile[c_sel], c_sel)
    # Workers own row chunks (rc % n_workers) in both passes, each with its own tile buffers and single-threaded
    # BLAS: a tile is computed by the same worker, through the same call, whichever pass computes it, and no
    # per-tile fork-join barrier is paid (they dominate on a busy machine).
    n_workers = max(1, min(num_threads(), n_rc))
    tiles = [_Tiles(rows, cols, row_offset, chunk_rows, chunk_cols) for _ in range(n_workers)]
    cache: dict[int, torch.Tensor] = {}
    budget = [cache_bytes]
    lock = threading.Lock()
    band_rc = band // n_cc

    def pass1(w: int, stop: threading.Event) -> None:
        for t in band[band_rc % n_workers == w].tolist():
            if stop.is_set():
                return
            rc, cc = divmod(t, n_cc)
            s = tiles[w].compute(rc, cc)
            r0, c0 = row_offset + rc * chunk_rows, cc * chunk_cols
            for sel, src_r, src_c, dst in (
                (r_by_tile.get(t), rq, row_pos.indices, r_thr),
                (c_by_tile.get(t), c_rows, cq, c_thr),
            ):
                if sel is not None:
                    dst[sel] = s[torch.from_numpy(src_r[sel] - r0), torch.from_numpy(src_c[sel] - c0)].double().numpy()
            nbytes = s.numel() * s.element_size()
            with lock:
                keep = budget[0] >= nbytes
                budget[0] -= nbytes if keep else 0
            if keep:
                cache[t] = s.clone()

    with _single_threaded():
        _run(pass1, n_workers)
    if group is not None:
        from vlkernels.retrieval.distributed import all_reduce

        c_thr = all_reduce(torch.from_numpy(c_thr), "max", group).numpy()

    np_dtype = np.float64 if cols.dtype == torch.float64 else np.float32
    # Row pairs as CSR over local rows (global pair offsets), thresholds in the compute dtype.
    r_above = np.zeros(len(rq), dtype=np.int64)
    r_ptr_local = row_pos.indptr[row_offset : row_offset + n_local + 1].copy()
    # Pairs of queries that are not evaluated are skipped by giving them an empty range: count them, discard later.
    r_thr_c = np.where(r_local, r_thr, inf).astype(np_dtype)
    # Column pairs per column chunk: one _ColumnBlock each, dense slot planes or sparse CSR (see the class).
    c_active_q = np.zeros(n_cols, dtype=bool)
    c_active_q[col_pos.queries] = True
    blocks: list[_ColumnBlock | None] = []
    for cc in range(n_cc):
        a, b = cc * chunk_cols, min(n_cols, (cc + 1) * chunk_cols)
        plan = SlotPlan.build(col_pos, a, b, c_active)
        if plan is None:
            blocks.append(None)
        elif plan.width * plan.n <= 2 * len(plan.pairs):
            thr = plan.planes(c_thr.astype(np_dtype), inf, slot_major=True)
            pos = plan.planes(c_rows, -1, slot_major=True)
            blocks.append(_ColumnBlock(plan, pos, thr, torch.zeros_like(pos)))
        else:
            act = np.flatnonzero(c_active_q[a:b])
            ptr = np.zeros(len(act) + 1, dtype=np.int64)
            np.cumsum(col_pos.counts[a + act], out=ptr[1:])
            sel = plan.pairs
            pos, thr = torch.from_numpy(c_rows[sel].copy()), torch.from_numpy(c_thr[sel].astype(np_dtype))
            cnt = torch.zeros(len(sel), dtype=torch.int64)
            blocks.append(_ColumnBlock(plan, pos, thr, cnt, torch.from_numpy(act), torch.from_numpy(ptr)))

    # Pass 2: every tile once, both directions.
    r_ptr_t = torch.from_numpy(r_ptr_local)
    r_pos_t, r_thr_t, r_out_t = torch.from_numpy(row_pos.indices), torch.from_numpy(r_thr_c), torch.from_numpy(r_above)
    bar = _progress(n_rc * n_cc, progress, "retrieval")
    # Column counts are per worker (every worker walks every column chunk), summed after.
    worker_cnt = [
        [None if b is None else b.cnt if w == 0 else torch.zeros_like(b.cnt) for b in blocks] for w in range(n_workers)
    ]

    def pass2(w: int, stop: threading.Event) -> None:
        for rc in range(w, n_rc, n_workers):
            for cc in range(n_cc):
                if stop.is_set():
                    return
                t = rc * n_cc + cc
                s = cache.pop(t, None)
                if s is None:
                    s = tiles[w].compute(rc, cc)
                nr = s.shape[0]
                r0, c0 = rc * chunk_rows, cc * chunk_cols
                # Row queries: core's counting primitive in its CSR form (pairs of row i: ptr[i]..ptr[i+1]).
                ptr = r_ptr_t[r0 : r0 + nr + 1]
                C.count_above(s, r_thr_t, r_out_t, False, row_ptr=ptr, limit=r_pos_t, col0=c0)
                blk = blocks[cc]
                if blk is not None and blk.act is None:
                    C.rank_count_cols(s, row_offset + r0, blk.pos, blk.thr, worker_cnt[w][cc])
                elif blk is not None:
                    sub = s[:, blk.act].T.contiguous()
                    C.count_above(
                        sub, blk.thr, worker_cnt[w][cc], False, row_ptr=blk.ptr, limit=blk.pos, col0=row_offset + r0
                    )
                if bar is not None:
                    bar.update(1)

    with _single_threaded():
        _run(pass2, n_workers)
    if bar is not None:
        bar.close()
    for w in range(1, n_workers):
        for cc, blk in enumerate(blocks):
            if blk is not None:
                blk.cnt.add_(worker_cnt[w][cc])

    c_above = np.zeros(len(cq), dtype=np.int64)
    for blk in blocks:
        if blk is not None:
            c_above[blk.plan.pairs] = (blk.plan.take(blk.cnt, slot_major=True) if blk.act is None else blk.cnt).numpy()
    r_above = np.where(r_local, r_above, 0)
    if group is not None:
        from vlkernels.retrieval.distributed import all_reduce

        both = all_reduce(torch.from_numpy(np.concatenate([r_above, c_above])), "sum", group)
        r_above, c_above = both[: len(rq)].numpy(), both[len(rq) :].numpy()
    return r_above, c_above


@dataclasses.dataclass
class _ColumnBlock:
    """Column queries of one column chunk. Dense (``act`` None: about as many positives per column, e.g. 5 captions
    per image): ``(width, cols)`` slot planes counted down the tile's columns in place. Sparse (few evaluated columns
    or uneven counts): the evaluated columns gathered into a transposed copy (``act``) and counted along its rows
    as CSR (``ptr``), so the work follows the pairs rather than max positives x chunk width."""

    plan: SlotPlan
    pos: torch.Tensor
    thr: torch.Tensor
    cnt: torch.Tensor
    act: torch.Tensor | None = None
    ptr: torch.Tensor | None = None


def num_threads() -> int:
    return int(_ext.load().get_num_threads()) or (os.cpu_count() or 1)


_torch_threads_lock = threading.Lock()
_torch_threads_users = 0
_torch_threads_saved = 1


@contextlib.contextmanager
def _single_threaded():
    """torch's intra-op pool single-threaded while any call runs its workers (the workers are the threads).

    torch's thread count is process-wide: calls in flight share one save and restore, counted under a lock, so
    concurrent calls give back the caller's count, never each other's 1. The C++ kernels are limited per worker
    thread (``_run``), which leaves ``vlkernels.get_num_threads()`` untouched.
    """
    global _torch_threads_users, _torch_threads_saved
    with _torch_threads_lock:
        if _torch_threads_users == 0:
            _torch_threads_saved = torch.get_num_threads()
            torch.set_num_threads(1)
        _torch_threads_users += 1
    try:
        yield
    finally:
        with _torch_threads_lock:
            _torch_threads_users -= 1
            if _torch_threads_users == 0:
                torch.set_num_threads(_torch_threads_saved)


# How often the calling thread wakes while its workers run: a signal may be delivered to any thread, and only the
# main thread runs Python's handlers, so a blocking wait could sleep through Ctrl-C until the whole call ends.
POLL_SECONDS = 0.05


def _run(fn, n_workers: int) -> None:
    """Runs ``fn(w, stop)`` for w < n_workers on worker threads; ``fn`` returns early once ``stop`` is set, checked
    between tiles. The calling thread polls every POLL_SECONDS, so a KeyboardInterrupt (or a worker's error) stops
    every worker at its next tile and is raised here once they have all returned."""
    stop = threading.Event()

    def work(w: int) -> None:
        # One C++ thread per worker, as a per-thread limit (vlkernels.core.threads), not a process-wide setting.
        with limit(1):
            fn(w, stop)

    if n_workers == 1:
        work(0)
        return
    pool = concurrent.futures.ThreadPoolExecutor(n_workers)
    try:
        pending = {pool.submit(work, w) for w in range(n_workers)}
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=POLL_SECONDS, return_when=concurrent.futures.FIRST_EXCEPTION
            )
            for f in done:
                f.result()  # a worker's exception: raised (after the others stop, below)
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True)


def _active(pos: Positives) -> np.ndarray:
    flag = np.zeros(pos.num_queries, dtype=bool)
    flag[pos.queries] = True
    return np.repeat(flag, pos.counts)


def _group(keys: np.ndarray, values: np.ndarray) -> dict[int, np.ndarray]:
    if len(keys) == 0:
        return {}
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    uniq, starts = np.unique(k, return_index=True)
    ends = np.append(starts[1:], len(k))
    return {int(u): v[a:b] for u, a, b in zip(uniq.tolist(), starts.tolist(), ends.tolist())}


def topk_stream(
    queries: torch.Tensor,
    gallery: Embeddings,
    k: int,
    exclude: Positives | None,
    gallery_offset: int = 0,
    chunk_queries: int = 1024,
    chunk_gallery: int = 4096,
    progress: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of queries @ gallery^T streamed over gallery chunks; returns unsorted (values, global indices)."""
    C = _ext.load()
    dtype = queries.dtype
    nq, ng = queries.shape[0], len(gallery)
    vals = torch.full((nq, k), float("-inf"), dtype=dtype)
    idx = torch.full((nq, k), -1, dtype=torch.int64)
    if nq == 0 or k == 0:
        return vals, idx
    n_gc = -(-ng // chunk_gallery)
    if exclude is not None:
        eq = exclude.pair_queries()
        e_by_chunk = _group(exclude.indices // chunk_gallery, np.arange(len(eq)))
    bar = _progress(n_gc, progress, "top-k")
    # Workers take query chunks (disjoint rows of the running selection); each gallery chunk is read once.
    q_starts = list(range(0, nq, chunk_queries))
    n_workers = max(1, min(num_threads(), len(q_starts)))
    buffers: list[dict[tuple[int, int], torch.Tensor]] = [{} for _ in range(n_workers)]
    for gc in range(n_gc):
        g0 = gc * chunk_gallery
        g = gallery.chunk(g0, min(ng, g0 + chunk_gallery), dtype)
        ex = e_by_chunk.get(gc) if exclude is not None else None

        def work(w: int, stop: threading.Event, g=g, g0=g0, ex=ex) -> None:
            for q0 in q_starts[w::n_workers]:
                if stop.is_set():
                    return
                q = queries[q0 : q0 + chunk_queries]
                shape = (q.shape[0], g.shape[0])
                if shape not in buffers[w]:
                    buffers[w][shape] = torch.empty(shape, dtype=dtype)
                s = torch.matmul(q, g.T, out=buffers[w][shape])
                if ex is not None:
                    m = ex[(eq[ex] >= q0) & (eq[ex] < q0 + q.shape[0])]
                    if len(m):
                        s[torch.from_numpy(eq[m] - q0), torch.from_numpy(exclude.indices[m] - g0)] = float("nan")
                v, i = vals[q0 : q0 + q.shape[0]], idx[q0 : q0 + q.shape[0]]
                C.topk_update(s, gallery_offset + g0, None, v, i)

        with _single_threaded():
            _run(work, n_workers)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return vals, idx


def merge_topk(vals: torch.Tensor, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Best k of (rows, m) candidates with explicit indices (shard results side by side), unsorted."""
    C = _ext.load()
    vals, idx = vals.contiguous(), idx.contiguous()
    out_v = torch.full((vals.shape[0], k), float("-inf"), dtype=vals.dtype)
    out_i = torch.full((vals.shape[0], k), -1, dtype=torch.int64)
    # Empty slots (index -1) carry NaN so they are skipped like exclusions.
    v = vals.masked_fill(idx < 0, float("nan"))
    C.topk_update(v, 0, idx, out_v, out_i)
    return out_v, out_i


def sort_topk(vals: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by score descending, then index ascending; empty slots (index -1) go last."""
    if vals.device.type != "cpu" or vals.dtype not in (torch.float32, torch.float64):
        key_idx = torch.where(idx < 0, torch.iinfo(torch.int64).max, idx)
        o1 = torch.argsort(key_idx, dim=1, stable=True)
        v1, i1 = vals.gather(1, o1), idx.gather(1, o1)
        o2 = torch.argsort(v1, dim=1, descending=True, stable=True)
        return v1.gather(1, o2), i1.gather(1, o2)
    vals, idx = vals.contiguous().clone(), idx.contiguous().clone()
    if vals.numel():
        _ext.load().topk_sort(vals, idx)
    return vals, idx
