"""CPU streaming engine: screened score tiles (a fast GEMM with a per-pair error bound) and exact re-checks in C++.

Every ground-truth (threshold) score is the exact score of the retrieval definition (csrc/retrieval/exact.h),
computed from the two vectors of the pair. evaluate visits S = rows @ cols^T (texts x images) once, in
(chunk_rows x chunk_cols) tiles of screened scores s_hat (``screen.Screen``), and counts both directions from each
tile: a candidate whose s_hat - B lies above the threshold counts, one whose s_hat + B lies below does not, and the
few in between are re-checked with their exact score (same tie rule: lower index first). The counts therefore do
not depend on the screen, the BLAS, the tiling, the thread count or the sharding.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import os
import threading

import numpy as np
import torch

from vlkernels import _ext
from vlkernels.core.threads import limit
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.plan import SlotPlan
from vlkernels.retrieval.positives import Positives
from vlkernels.retrieval.screen import Screen, Side, choose, dense_topk, fits_fp32
from vlkernels.retrieval.threads import single_threaded

# Query rows per dense tile: DENSE_ROWS x chunk_gallery float64 scores per worker (8 MiB at the default chunk).
DENSE_ROWS = 256
# Largest gallery chunk of the dense path: 16 MiB of float64 scores a worker, 32 MiB of widened gallery at D = 512.
DENSE_MAX_CHUNK = 8192


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="tile")


def _pair_screen(scr: Screen, a: Side, b: Side, a_x: torch.Tensor, b_x: torch.Tensor):
    """The screen and sides a tile runs with: ``scr`` unless its GEMM could overflow there, then fp64."""
    if scr.name == "fp64" or fits_fp32(a.max_norm, b.max_norm):
        return scr, a, b
    f = Screen("fp64", scr.dim)
    return f, f.side(a_x, True), f.side(b_x, False)


def exact_pairs(q: torch.Tensor, g: torch.Tensor, qi: np.ndarray, gi: np.ndarray) -> np.ndarray:
    """Exact scores of pairs (q[qi], g[gi]) (fp32/fp64 tensors, C++, multithreaded)."""
    out = torch.empty(len(qi), dtype=torch.float64)
    if len(qi):
        _ext.load().exact_pairs(
            q,
            g,
            torch.from_numpy(np.ascontiguousarray(qi, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(gi, dtype=np.int64)),
            out,
        )
    return out.numpy()


def exact_tile(q: torch.Tensor, g_wide: torch.Tensor, products_exact: bool, out: torch.Tensor) -> torch.Tensor:
    """Exact scores of every (q row, g row) pair into ``out`` (C++, blocked): q in its compute dtype, g already
    widened to float64; ``products_exact`` when the compute dtype is fp32 (every product exact in float64)."""
    _ext.load().exact_tile(q.double(), g_wide, out, products_exact)
    return out


def _row_pair_scores(rows: Embeddings, cols: torch.Tensor, r: np.ndarray, c: np.ndarray, dtype, chunk: int = 1 << 16):
    """Exact scores of (rows[r], cols[c]) for local row indices r, reading the rows chunk by chunk."""
    out = np.empty(len(r))
    if len(r) == 0:
        return out
    order = np.argsort(r, kind="stable")
    rs = r[order]
    for a in range(0, len(rows), chunk):
        lo, hi = np.searchsorted(rs, [a, a + chunk])
        if lo == hi:
            continue
        sel = order[lo:hi]
        x = rows.chunk(a, min(len(rows), a + chunk), dtype)
        out[sel] = exact_pairs(x, cols, r[sel] - a, c[sel])
    return out


def _meta(names: set[str], rechecked: int, decisions: int) -> dict:
    """What a call reports: the screen(s) its tiles ran, the exact re-checks, and the decisions (candidate against
    threshold comparisons) they are a fraction of."""
    return {
        "screen": "+".join(sorted(names)) if names else None,
        "rechecked_pairs": int(rechecked),
        "decisions": int(decisions),
        "rechecked_fraction": rechecked / decisions if decisions else 0.0,
    }


@single_threaded()
def count_both(
    rows: Embeddings,
    cols: torch.Tensor,
    row_pos: Positives,
    col_pos: Positives,
    row_offset: int = 0,
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    progress: bool = False,
    group=None,
    screen: str | None = None,
    *,
    col_offset: int = 0,
    thresholds: tuple[np.ndarray, np.ndarray] | None = None,
    on_tile=None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Candidates ranked above each pair, for row queries (``row_pos``: rows -> columns) and column queries
    (``col_pos``: columns -> rows), in the pair order of each Positives, and the call's metadata (screen, re-checked
    pairs). ``rows`` may be this process's shard of the global rows (starting at ``row_offset``); with ``group`` the
    counts are summed over the group.

    Column blocks (``stream.evaluate_stream``): ``cols`` are the global columns ``col_offset..`` only; row counts are
    then over these columns, and only the column pairs of these columns are counted. ``thresholds``: the exact
    scores of every row pair and column pair, computed by the caller (a positive may lie outside the block).
    ``on_tile(screen, row_side, col_side, s, row0, col0)`` is called after each tile is counted (global offsets)."""
    C = _ext.load()
    n_local, n_cols = len(rows), cols.shape[0]
    chunk_rows = balanced_chunk(n_local, chunk_rows)
    n_rc, n_cc = -(-n_local // chunk_rows), -(-n_cols // chunk_cols)
    inf = float("inf")
    scr = Screen(choose(screen, cols.dtype), cols.shape[1])

    # Thresholds: the exact scores of the evaluated pairs whose row is local.
    rq = row_pos.pair_queries()
    r_local = _active(row_pos) & (rq >= row_offset) & (rq < row_offset + n_local)
    r_thr = np.full(len(rq), inf)
    sel = np.flatnonzero(r_local)
    if thresholds is None:
        r_thr[sel] = _row_pair_scores(rows, cols, rq[sel] - row_offset, row_pos.indices[sel], cols.dtype)
    else:
        r_thr[sel] = thresholds[0][sel]
    cq = col_pos.pair_queries()
    c_rows = col_pos.indices
    c_active = _active(col_pos) & (cq >= col_offset) & (cq < col_offset + n_cols)
    c_local = c_active & (c_rows >= row_offset) & (c_rows < row_offset + n_local)
    c_thr = np.full(len(cq), -inf)
    sel = np.flatnonzero(c_local)
    if thresholds is None:
        c_thr[sel] = _row_pair_scores(rows, cols, c_rows[sel] - row_offset, cq[sel], cols.dtype)
    else:
        c_thr[sel] = thresholds[1][sel]
    if group is not None:
        from vlkernels.retrieval.distributed import all_reduce

        c_thr = all_reduce(torch.from_numpy(c_thr), "max", group).numpy()

    # Column pairs per column chunk: one _ColumnBlock each, dense slot planes or sparse CSR (see the class).
    c_active_q = np.zeros(col_pos.num_queries, dtype=bool)
    c_active_q[col_pos.queries] = True
    blocks: list[_ColumnBlock] = []
    for cc in range(n_cc):
        a, b = cc * chunk_cols, min(n_cols, (cc + 1) * chunk_cols)
        data = cols[a:b]
        side = scr.side(data, is_row=False)
        a, b = a + col_offset, b + col_offset  # global columns from here on
        plan = SlotPlan.build(col_pos, a, b, c_active)
        if plan is None:
            blocks.append(_ColumnBlock(side, data))
        elif plan.width * plan.n <= 2 * len(plan.pairs):
            thr = plan.planes(c_thr, inf, slot_major=True)
            pos = plan.planes(c_rows, -1, slot_major=True)
            blocks.append(_ColumnBlock(side, data, plan, pos, thr, torch.zeros_like(pos)))
        else:
            act = np.flatnonzero(c_active_q[a:b])
            ptr = np.zeros(len(act) + 1, dtype=np.int64)
            np.cumsum(col_pos.counts[a + act], out=ptr[1:])
            sel = plan.pairs
            pos, thr = torch.from_numpy(c_rows[sel].copy()), torch.from_numpy(c_thr[sel].copy())
            cnt = torch.zeros(len(sel), dtype=torch.int64)
            blocks.append(_ColumnBlock(side, data, plan, pos, thr, cnt, torch.from_numpy(act), torch.from_numpy(ptr)))

    r_above = np.zeros(len(rq), dtype=np.int64)
    r_ptr_t = torch.from_numpy(row_pos.indptr[row_offset : row_offset + n_local + 1].copy())
    r_pos_t, r_thr_t, r_out_t = torch.from_numpy(row_pos.indices), torch.from_numpy(r_thr), torch.from_numpy(r_above)
    bar = _progress(n_rc * n_cc, progress, "retrieval")
    n_workers = max(1, min(num_threads(), n_rc))
    # Column counts are per worker (every worker walks every column chunk), summed after.
    worker_cnt = [
        [b.cnt if w == 0 or b.cnt is None else torch.zeros_like(b.cnt) for b in blocks] for w in range(n_workers)
    ]
    rechecked = [0] * n_workers
    names = [set() for _ in range(n_workers)]

    claim = _claims(n_rc)

    def work(w: int, stop: threading.Event) -> None:
        buffers: dict[tuple, torch.Tensor] = {}
        while (rc := claim()) is not None:
            r0 = rc * chunk_rows
            x = rows.chunk(r0, min(n_local, r0 + chunk_rows), cols.dtype)
            rside = scr.side(x, is_row=True)
            ptr = r_ptr_t[r0 : r0 + x.shape[0] + 1]
            for cc, blk in enumerate(blocks):
                if stop.is_set():
                    return
                c0 = col_offset + cc * chunk_cols
                sc, rs, cs = _pair_screen(scr, rside, blk.side, x, blk.data)
                key = (sc.name, x.shape[0], blk.data.shape[0])
                if key not in buffers:
                    buffers[key] = torch.empty(key[1:], dtype=sc.dtype)
                s = sc.matmul(rs, cs, out=buffers[key])
                names[w].add(sc.name)
                cnt = worker_cnt[w][cc]
                dense = blk.plan is not None and blk.act is None
                rechecked[w] += C.certified_tile(
                    s,
                    rs.data,
                    cs.data,
                    rs.terms,
                    cs.terms,
                    sc.rel,
                    ptr,
                    r_pos_t,
                    r_thr_t,
                    r_out_t,
                    c0,
                    blk.pos if dense else None,
                    blk.thr if dense else None,
                    cnt if dense else None,
                    row_offset + r0,
                )
                if blk.plan is not None and blk.act is not None:
                    # Sparse columns: the evaluated columns as rows of a transposed tile, counted as CSR pairs.
                    sub = s[:, blk.act].T.contiguous()
                    rechecked[w] += C.certified_tile(
                        sub,
                        cs.data[blk.act].contiguous(),
                        rs.data,
                        cs.terms[:, blk.act].contiguous(),
                        rs.terms,
                        sc.rel,
                        blk.ptr,
                        blk.pos,
                        blk.thr,
                        cnt,
                        row_offset + r0,
                        None,
                        None,
                        None,
                        0,
                    )
                if on_tile is not None:
                    on_tile(sc, rs, cs, s, row_offset + r0, c0)
                if bar is not None:
                    bar.update(1)

    _run(work, n_workers)
    if bar is not None:
        bar.close()
    for w in range(1, n_workers):
        for cc, blk in enumerate(blocks):
            if blk.cnt is not None:
                blk.cnt.add_(worker_cnt[w][cc])

    c_above = np.zeros(len(cq), dtype=np.int64)
    for blk in blocks:
        if blk.plan is not None:
            c_above[blk.plan.pairs] = (blk.plan.take(blk.cnt, slot_major=True) if blk.act is None else blk.cnt).numpy()
    r_above = np.where(r_local, r_above, 0)
    n_re = sum(rechecked)
    # Each local row pair is decided against every column, each column pair against every local row.
    n_dec = int(r_local.sum()) * n_cols + int(c_active.sum()) * n_local
    if group is not None:
        from vlkernels.retrieval.distributed import all_reduce

        both = all_reduce(torch.from_numpy(np.concatenate([r_above, c_above, [n_re, n_dec]])), "sum", group)
        r_above, c_above = both[: len(rq)].numpy(), both[len(rq) : -2].numpy()
        n_re, n_dec = int(both[-2]), int(both[-1])
    return r_above, c_above, _meta(set().union(*names), n_re, n_dec)


@dataclasses.dataclass
class _ColumnBlock:
    """One column chunk: its screen side and data, and its column queries. Dense (``act`` None: about as many
    positives per column, e.g. 5 captions per image): ``(width, cols)`` slot planes counted down the tile's columns
    in place. Sparse (few evaluated columns or uneven counts): the evaluated columns gathered into a transposed copy
    (``act``) and counted along its rows as CSR (``ptr``), so the work follows the pairs rather than max positives x
    chunk width. ``plan`` None: no evaluated column here."""

    side: Side
    data: torch.Tensor
    plan: SlotPlan | None = None
    pos: torch.Tensor | None = None
    thr: torch.Tensor | None = None
    cnt: torch.Tensor | None = None
    act: torch.Tensor | None = None
    ptr: torch.Tensor | None = None


def balanced_chunk(n: int, chunk: int) -> int:
    """At most ``chunk`` rows per chunk, as many chunks as the fewest whole rounds of the workers need (5,000 rows
    in 1,024-row chunks on 2 workers: 6 chunks of 834, not 3 + 2 chunks with one worker idle at the end)."""
    w = num_threads()
    rounds = max(1, -(-n // (chunk * w)))
    return max(1, min(chunk, -(-n // (rounds * w))))


def num_threads() -> int:
    return int(_ext.load().get_num_threads()) or (os.cpu_count() or 1)


# How often the calling thread wakes while its workers run: a signal may be delivered to any thread, and only the
# main thread runs Python's handlers, so a blocking wait could sleep through Ctrl-C until the whole call ends.
POLL_SECONDS = 0.05


def _run(fn, n_workers: int) -> None:
    """Runs ``fn(w, stop)`` for w < n_workers on worker threads; ``fn`` returns early once ``stop`` is set, checked
    between tiles. The calling thread polls every POLL_SECONDS, so a KeyboardInterrupt (or a worker's error) stops
    every worker at its next tile and is raised here once they have all returned."""
    stop, go = threading.Event(), threading.Event()

    def work(w: int) -> None:
        # Every worker waits until all are started: a running worker holds the GIL in bursts, and starting the next
        # thread needs it (up to a switch interval, 5 ms, per thread).
        go.wait()
        # torch's thread count (OpenMP, hence MKL's GEMM) is per thread, and a new thread starts at the machine's
        # default: without this every worker's GEMM would run a team of its own and oversubscribe the cores.
        torch.set_num_threads(1)
        # One C++ thread per worker, as a per-thread limit (vlkernels.core.threads), not a process-wide setting.
        with limit(1):
            fn(w, stop)

    if n_workers == 1:
        go.set()
        work(0)
        return
    pool = concurrent.futures.ThreadPoolExecutor(n_workers)
    try:
        pending = {pool.submit(work, w) for w in range(n_workers)}
        go.set()
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
        go.set()  # a worker never left waiting (an error or Ctrl-C while submitting)
        pool.shutdown(wait=True)


def _claims(n: int):
    """``claim()`` hands out 0..n-1, then None, to whichever worker asks first (next() of itertools.count is atomic
    under the GIL): a worker the machine deschedules holds up only the tile it has, not a fixed share of them."""
    counter = itertools.count()

    def claim() -> int | None:
        i = next(counter)
        return i if i < n else None

    return claim


def _active(pos: Positives) -> np.ndarray:
    flag = np.zeros(pos.num_queries, dtype=bool)
    flag[pos.queries] = True
    return np.repeat(flag, pos.counts)


def _group(keys: np.ndarray, values: np.ndarray) -> dict[int, np.ndarray]:
    if len(keys) == 0:
        return {}
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
    uniq = k[starts]
    ends = np.append(starts[1:], len(k))
    return {int(u): v[a:b] for u, a, b in zip(uniq.tolist(), starts.tolist(), ends.tolist())}


@single_threaded()
def topk_stream(
    queries: torch.Tensor,
    gallery: Embeddings,
    k: int,
    exclude: Positives | None,
    gallery_offset: int = 0,
    chunk_queries: int = 1024,
    chunk_gallery: int = 4096,
    progress: bool = False,
    screen: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Certified top-k of queries @ gallery^T streamed over gallery chunks: (exact float64 values, global indices)
    unsorted, and the call's metadata. Per query a floor (k-th best lower bound so far) rises tile by tile; only
    candidates whose upper bound reaches it get their exact score (csrc/retrieval/exact.h). Where
    ``screen.dense_topk`` says so (k a large share of the gallery), every pair gets its exact score instead (dense
    blocked tiles, no screen; meta ``screen`` "exact")."""
    nq, ng = queries.shape[0], len(gallery)
    top = TopKState(nq, k)
    if nq == 0 or k == 0:
        return top.vals, top.idx, _meta(set(), 0, 0)
    dense = dense_topk(screen, k, ng)
    if dense:
        # The widest gallery chunk: each chunk's selection cuts its candidates to about k and sorts those, whatever
        # the chunk's width, so fewer chunks sort less.
        chunk_gallery = max(chunk_gallery, DENSE_MAX_CHUNK)
    scr = Screen(choose(screen, queries.dtype), queries.shape[1])
    n_gc = -(-ng // chunk_gallery)
    if exclude is not None:
        eq = exclude.pair_queries()
        e_by_chunk = _group(exclude.indices // chunk_gallery, np.arange(len(eq)))

    def _exclude(s: torch.Tensor, ex, q0: int, g0: int) -> None:
        """Excluded pairs of the tile (rows q0.., gallery chunk g0..) set to NaN, which the selection skips."""
        if ex is None:
            return
        m = ex[(eq[ex] >= q0) & (eq[ex] < q0 + s.shape[0])]
        if len(m):
            s[torch.from_numpy(eq[m] - q0), torch.from_numpy(exclude.indices[m] - g0)] = float("nan")

    bar = _progress(n_gc, progress, "top-k")
    # Workers take query chunks (disjoint rows of the running selection); each gallery chunk is read once.
    chunk_queries = balanced_chunk(nq, chunk_queries)
    q_starts = list(range(0, nq, chunk_queries))
    q_sides = [None if dense else scr.side(queries[q0 : q0 + chunk_queries], is_row=True) for q0 in q_starts]
    n_workers = max(1, min(num_threads(), len(q_starts)))
    buffers: list[dict[tuple, torch.Tensor]] = [{} for _ in range(n_workers)]
    names = [set() for _ in range(n_workers)]
    for gc in range(n_gc):
        g0 = gc * chunk_gallery
        g = gallery.chunk(g0, min(ng, g0 + chunk_gallery), queries.dtype)
        gside = g.double() if dense else scr.side(g, is_row=False)
        ex = e_by_chunk.get(gc) if exclude is not None else None

        claim = _claims(len(q_starts))

        def work(w: int, stop: threading.Event, g=g, g0=g0, gside=gside, ex=ex, claim=claim) -> None:
            while (qc := claim()) is not None:
                if stop.is_set():
                    return
                q0 = q_starts[qc]
                q = queries[q0 : q0 + chunk_queries]
                if dense:
                    for a in range(0, q.shape[0], DENSE_ROWS):
                        if stop.is_set():  # a query chunk holds several slices of seconds-long work at large k
                            return
                        qd = q[a : a + DENSE_ROWS]
                        key = ("exact", qd.shape[0], g.shape[0])
                        if key not in buffers[w]:
                            buffers[w][key] = torch.empty(key[1:], dtype=torch.float64)
                        s = exact_tile(qd, gside, queries.dtype != torch.float64, buffers[w][key])
                        _exclude(s, ex, q0 + a, g0)
                        top.update_exact(s, q0 + a, gallery_offset + g0)
                    names[w].add("exact")
                    continue
                sc, qs, gs = _pair_screen(scr, q_sides[qc], gside, q, g)
                key = (sc.name, q.shape[0], g.shape[0])
                if key not in buffers[w]:
                    buffers[w][key] = torch.empty(key[1:], dtype=sc.dtype)
                s = sc.matmul(qs, gs, out=buffers[w][key])
                names[w].add(sc.name)
                _exclude(s, ex, q0, g0)
                top.update(sc, qs, gs, s, q0, gallery_offset + g0)

        _run(work, n_workers)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return top.vals, top.idx, _meta(set().union(*names), top.rechecked, nq * ng)


class TopKState:
    """Running certified top-k of n query rows (exact float64 values, global indices, unsorted) and each row's floor
    (the k-th best lower bound so far), updated tile by tile. Workers own disjoint rows, so only the re-check count
    is shared."""

    def __init__(self, n: int, k: int):
        self.vals = torch.full((n, k), float("-inf"), dtype=torch.float64)
        self.idx = torch.full((n, k), -1, dtype=torch.int64)
        self.floor = torch.full((n,), float("-inf"), dtype=torch.float64)
        self.rechecked = 0
        self._lock = threading.Lock()

    def update(self, sc, rs, cs, s: torch.Tensor, r0: int, c0: int) -> None:
        """Fold screened tile ``s`` (rows ``r0..``, global columns ``c0..``; NaN: excluded) into the selection."""
        r1 = r0 + s.shape[0]
        n = _ext.load().certified_topk_update(
            s, rs.data, cs.data, rs.terms, cs.terms, sc.rel, c0, self.vals[r0:r1], self.idx[r0:r1], self.floor[r0:r1]
        )
        with self._lock:
            self.rechecked += int(n)

    def update_exact(self, s: torch.Tensor, r0: int, c0: int) -> None:
        """Fold a tile of exact scores ``s`` (float64; NaN: excluded) into the selection: every pair of it counts as
        re-checked. The floor is not used on this path."""
        r1 = r0 + s.shape[0]
        _ext.load().topk_update(s, c0, None, self.vals[r0:r1], self.idx[r0:r1])
        with self._lock:
            self.rechecked += s.numel()


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


def sort_topk(
    vals: torch.Tensor, idx: torch.Tensor, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by score descending, then index ascending; empty slots (index -1) go last. Contiguous fp32/fp64
    CPU rows are sorted in place (the callers pass their own buffers: a copy of a top-4096 result is 128 MB).
    ``dtype``: the values cast to it after the sort, on one thread (``threads.single_threaded``)."""
    if vals.device.type != "cpu" or vals.dtype not in (torch.float32, torch.float64):
        key_idx = torch.where(idx < 0, torch.iinfo(torch.int64).max, idx)
        o1 = torch.argsort(key_idx, dim=1, stable=True)
        v1, i1 = vals.gather(1, o1), idx.gather(1, o1)
        o2 = torch.argsort(v1, dim=1, descending=True, stable=True)
        vals, idx = v1.gather(1, o2), i1.gather(1, o2)
    else:
        vals, idx = vals.contiguous(), idx.contiguous()
        if vals.numel():
            _ext.load().topk_sort(vals, idx)  # C++ threads of its own, no OpenMP region
    if dtype is not None:
        with single_threaded():
            vals = vals.to(dtype)
    return vals, idx
