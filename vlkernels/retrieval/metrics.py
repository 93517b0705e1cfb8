"""Rank metrics from the 1-indexed rank of every (query, positive) pair. See README.md for the formulas."""

from __future__ import annotations

import dataclasses

import numpy as np

from vlkernels.retrieval.positives import Positives


@dataclasses.dataclass
class Ranks:
    """Per-query ranks of one direction.

    Attributes:
        queries: ``(Q,)`` evaluated query indices.
        first: ``(Q,)`` 1-indexed rank of each query's best-ranked positive (the seed task's rank).
        indptr: ``(Q + 1,)`` CSR offsets into ``positives`` / ``ranks`` for the evaluated queries.
        positives: ``(P,)`` gallery index of each positive.
        ranks: ``(P,)`` 1-indexed rank of each positive (distinct within a query; candidates ordered by score
            descending, then gallery index ascending).
        num_relevant: ``(Q,)`` relevant count of each query (listed positives plus out-of-gallery ones).
    """

    queries: np.ndarray
    first: np.ndarray
    indptr: np.ndarray
    positives: np.ndarray
    ranks: np.ndarray
    num_relevant: np.ndarray


def ranks_from_counts(pos: Positives, above: np.ndarray) -> Ranks:
    """``above[e]``: candidates ranked above pair e (all queries' pairs, in ``pos`` order) -> the evaluated queries."""
    q = pos.queries
    counts = pos.counts[q]
    indptr = np.zeros(len(q) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    # Gather the evaluated queries' pair ranges: a ramp inside each range, shifted to the range start.
    starts = np.repeat(pos.indptr[q] - indptr[:-1], counts)
    sel = np.arange(int(indptr[-1]), dtype=np.int64) + starts
    ranks = above[sel].astype(np.int64) + 1
    first = np.minimum.reduceat(ranks, indptr[:-1]) if len(q) else np.zeros(0, dtype=np.int64)
    return Ranks(q.copy(), first, indptr, pos.indices[sel].copy(), ranks, pos.num_relevant[q].copy())


def metrics_from_ranks(r: Ranks, ks=(1, 5, 10)) -> dict[str, float]:
    """R@K (percent), MeanR, MedianR, MRR, mAP, mAP@R, R-Precision, NDCG (fractions) over the evaluated queries."""
    nq = len(r.queries)
    if nq == 0:
        raise ValueError("no evaluated queries: metrics are undefined")
    first = r.first.astype(np.float64)
    out: dict[str, float] = {f"R@{k}": float(100.0 * np.mean(r.first <= k)) for k in ks}
    out["MeanR"] = float(np.mean(first))
    out["MedianR"] = float(np.median(first))
    out["MRR"] = float(np.mean(1.0 / first))
    # Position of each positive among its query's positives, in rank order (ranks are distinct within a query).
    qid = np.repeat(np.arange(nq), np.diff(r.indptr))
    order = np.lexsort((r.ranks, qid))
    rk = r.ranks[order].astype(np.float64)
    pos_in_q = np.arange(len(rk)) - np.repeat(r.indptr[:-1], np.diff(r.indptr)) + 1.0
    big_r = r.num_relevant.astype(np.float64)
    rel_r = np.repeat(big_r, np.diff(r.indptr))
    prec = pos_in_q / rk
    out["mAP"] = float(np.mean(np.bincount(qid, prec, minlength=nq) / big_r))
    within = rk <= rel_r
    out["mAP@R"] = float(np.mean(np.bincount(qid, np.where(within, prec, 0.0), minlength=nq) / big_r))
    out["R-Precision"] = float(np.mean(np.bincount(qid, within.astype(np.float64), minlength=nq) / big_r))
    dcg = np.bincount(qid, 1.0 / np.log2(rk + 1.0), minlength=nq)
    ideal_cum = np.cumsum(1.0 / np.log2(np.arange(2, int(big_r.max()) + 2, dtype=np.float64)))
    out["NDCG"] = float(np.mean(dcg / ideal_cum[r.num_relevant - 1]))
    return out
