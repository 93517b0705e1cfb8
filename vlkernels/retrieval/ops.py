"""Device paths of retrieval: the Triton screen (CUDA, or CPU tensors under TRITON_INTERPRET=1;
``triton_screen.py``, tiles: configs.py) and the chunked torch twin (any torch device), behind one planner each for
counting and top-k.

Which path runs: :func:`launch` (the backend switch of ``vlkernels._triton``): a Triton compile or launch failure
on first use reruns the whole call on the torch path (never a mix: ground-truth scores and the scores they are
compared against must come from the same path).
"""

from __future__ import annotations

import numpy as np
import torch

from vlkernels._triton import run_triton
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.keys import WORK_ELEMS
from vlkernels.retrieval.plan import SlotPlan
from vlkernels.retrieval.positives import Positives


def launch(op: str, triton_fn, torch_fn, path: str, forced: bool, device: torch.device, dtype: torch.dtype, *args):
    """``triton_fn(*args)`` on the Triton path, ``torch_fn(*args)`` on the torch path. Triton chosen by ``auto``
    (``forced`` False) goes through ``run_triton``: a failure on first use for this device type and dtype warns and
    reruns the call on the torch path. A forced Triton path (``backend="triton"``) lets every error surface.

    Note: with a process group, a first-use failure after a collective reruns it; every rank compiles the same
    kernels for the same arch, so they fail (and rerun) together."""
    if path == "torch":
        return torch_fn(*args)
    if forced:
        return triton_fn(*args)
    # run_triton keys the first-use record on its first tensor argument: an empty probe with the device and dtype.
    probe = torch.empty(0, dtype=dtype, device=device)
    return run_triton(op, lambda _p, *a: triton_fn(*a), lambda _p, *a: torch_fn(*a), probe, *args)


def _blocks(n_q: int, n_g: int) -> tuple[int, int]:
    """Sub-tile (rows, cols) of a chunk pair on the torch path: at most WORK_ELEMS scores at a time."""
    cols = max(1, min(n_g, 8192))
    return max(1, WORK_ELEMS // cols), cols


def count_stream(
    queries: Embeddings,
    gallery: Embeddings,
    pos: Positives,
    q_offset: int,
    g_offset: int,
    dtype: torch.dtype,
    device: torch.device,
    chunk: int,
    group=None,
    bar=None,
    kernels: str = "triton",
) -> tuple[np.ndarray, dict]:
    """Candidates ranked above each evaluated pair of ``pos`` (global indices), in pair order; pairs whose query is
    not in this process's ``queries`` (global rows ``q_offset..``) get 0, to be summed over the group by the caller.
    Also what ran (``stats``: the path, and on the Triton path the pairs re-checked exactly and the decisions, each
    local evaluated pair against every local gallery item).

    ``gallery`` holds global gallery rows ``g_offset..``; with ``group`` the gallery is sharded and the thresholds
    of pairs whose positive lives on another rank arrive by all_reduce(MAX). Both sources stream in chunks of
    ``chunk`` rows (a multiple of the tile), so tiles, and therefore every score, are the same in the ground-truth
    pass and the counting pass. Ties compare global gallery indices: the positive plane is shifted by each
    gallery chunk's global start. ``kernels``: "triton" (the certified screen with exact float64 thresholds and
    re-checks, ``triton_screen.py``) or "torch" (the chunked torch twin, any device: the device's fp32 matmul
    certified the same way, ``torch_screen.py``).
    """
    if kernels == "triton":
        from vlkernels.retrieval.triton_screen import ScreenCount

        ker = ScreenCount(device, exact_dtype(queries, gallery, dtype))
    else:
        from vlkernels.retrieval.torch_screen import TorchScreenCount

        ker = TorchScreenCount(device, exact_dtype(queries, gallery, dtype), _blocks)
    n_q, n_g = len(queries), len(gallery)
    pq = pos.pair_queries()
    active = np.zeros(pos.num_queries, dtype=bool)
    active[pos.queries] = True
    mine = active[pq] & (pq >= q_offset) & (pq < q_offset + n_q)
    # Pass 1: thresholds of the pairs whose positive is local, chunk pair by chunk pair (query chunk held). The
    # thresholds and counts stay on the device until the end: no host sync per chunk.
    thr = torch.full((len(pq),), float("-inf"), dtype=ker.thr_dtype, device=device)
    sel = np.flatnonzero(mine & (pos.indices >= g_offset) & (pos.indices < g_offset + n_g))
    lq, lg = pq[sel] - q_offset, pos.indices[sel] - g_offset
    key = (lq // chunk) * max(1, -(-n_g // chunk)) + lg // chunk
    order = np.argsort(key, kind="stable")
    keys, starts = np.unique(key[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    q_cur, qc_cur = None, -1
    for kk, a, b in zip(keys.tolist(), starts.tolist(), ends.tolist()):
        qc, gc = divmod(kk, max(1, -(-n_g // chunk)))
        if qc != qc_cur:
            q_cur, qc_cur = ker.load_raw(queries, qc * chunk, min(n_q, (qc + 1) * chunk), device), qc
        g = ker.load_raw(gallery, gc * chunk, min(n_g, (gc + 1) * chunk), device)
        e = sel[order[a:b]]
        thr[torch.from_numpy(e).to(device)] = ker.gt_scores(
            q_cur, g, lq[order[a:b]] - qc * chunk, lg[order[a:b]] - gc * chunk
        )
    if group is not None:
        from vlkernels.retrieval.distributed import all_reduce

        thr = all_reduce(thr, "max", group)

    # Pass 2: per query chunk, planes of (threshold, global positive index) per slot; every gallery chunk counted.
    above = torch.zeros(len(pq), dtype=torch.int64, device=device)
    for q0 in range(0, n_q, chunk):
        q1 = min(n_q, q0 + chunk)
        plan = SlotPlan.build(pos, q_offset + q0, q_offset + q1, mine, ker.slot_width)
        if plan is None:
            if bar is not None:
                bar.update(-(-n_g // chunk))
            continue
        width = plan.width
        q = ker.load(queries, q0, q1, device)
        thr_t = plan.planes(thr, float("inf"), slot_major=False)
        # Padding slots: +inf thresholds and a positive index no shift brings near a column.
        pos_t = plan.planes(pos.indices, -(1 << 62), slot_major=False, device=device)
        out = torch.zeros((q1 - q0, width), dtype=torch.int64, device=device)
        for g0 in range(0, n_g, chunk):
            g = ker.load(gallery, g0, min(n_g, g0 + chunk), device)
            # Padding slots keep +inf thresholds (never counted) whatever their shifted index.
            pos_c = pos_t - (g_offset + g0)
            ker.count(q, g, thr_t, pos_c, out)
            if bar is not None:
                bar.update(1)
        above[torch.from_numpy(plan.pairs).to(device)] = plan.take(out, slot_major=False)
    return above.cpu().numpy(), stats(kernels, int(mine.sum()) * n_g, ker)


def stats(path: str, decisions: int, ker=None) -> dict:
    """What a device call ran: the path, the screen (``ScreenCount`` / ``TorchScreenCount``: its name and exact
    re-checks; none when the call had nothing to do) among its decisions."""
    return {
        "path": path,
        "screen": getattr(ker, "screen", None),
        "rechecked_pairs": getattr(ker, "rechecked", 0),
        "decisions": decisions,
    }


def exact_dtype(queries: Embeddings, gallery: Embeddings, dtype: torch.dtype) -> torch.dtype:
    """The dtype the exact scores read the inputs in: fp64 when either side is fp64, else the compute dtype
    (fp16/bf16 when both sides are, else fp32, which holds fp16 and bf16 values exactly)."""
    return torch.float64 if torch.float64 in (queries.dtype, gallery.dtype) else dtype


def topk_stream(
    queries: Embeddings,
    gallery: Embeddings,
    k: int,
    exclude: Positives | None,
    offset: int,
    dtype: torch.dtype,
    device: torch.device,
    chunk: int,
    progress: bool = False,
    kernels: str = "triton",
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Top-k over gallery chunks of ``chunk`` rows for query chunks of ``chunk`` rows, ordered by (score desc, index
    asc), global indices ``offset + j``. ``kernels="triton"``: the certified screen
    (``triton_screen.topk_stream``): exact float64 scores of the retrieval definition, two screening passes over the
    gallery. ``kernels="torch"`` (the torch twin, any device): the same two passes with the device's fp32 matmul as
    the screen (``torch_screen.topk_stream``). Also ``stats`` as ``count_stream``'s (decisions: every query against
    every gallery item)."""
    from vlkernels.retrieval import cpu

    n_q, n_g = len(queries), len(gallery)
    if n_q == 0 or k == 0:
        vals = torch.full((n_q, k), float("-inf"), dtype=torch.float64, device=device)
        return vals, torch.full((n_q, k), -1, dtype=torch.int64, device=device), stats(kernels, 0)
    ed = exact_dtype(queries, gallery, dtype)
    bar = cpu._progress(2 * -(-n_q // chunk) * -(-n_g // chunk), progress, "top-k")
    if kernels == "triton":
        from vlkernels.retrieval import triton_screen

        vals, idx, ker = triton_screen.topk_stream(queries, gallery, k, exclude, offset, ed, device, chunk, bar)
    else:
        from vlkernels.retrieval import torch_screen

        vals, idx, ker = torch_screen.topk_stream(queries, gallery, k, exclude, offset, ed, device, chunk, _blocks, bar)
    if bar is not None:
        bar.close()
    return vals, idx, stats(kernels, n_q * n_g, ker)
