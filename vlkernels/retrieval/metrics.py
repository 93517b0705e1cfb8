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
        first: ``(Q,)`` 1-indexed rank of each query's best-ranked positive (the rank of the usual evaluation scripts).
        indptr: ``(Q + 1,)`` CSR offsets into ``positives`` / ``ranks`` for the evaluated queries.
        positives: ``(P,)`` gallery index of each positive.
        ranks: ``(P,)`` 1-indexed rank of each positive (distinct within a query; candidates ordered by score
            descending, then gallery index ascending).
        num_relevant: ``(Q,)`` relevant count of each query (listed positives plus out-of-gallery ones).
        gains: ``(P,)`` graded relevance of each positive (NDCG's gain), or None for binary relevance.
    """

    queries: np.ndarray
    first: np.ndarray
    indptr: np.ndarray
    positives: np.ndarray
    ranks: np.ndarray
    num_relevant: np.ndarray
    gains: np.ndarray | None = None


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
    gains = None if pos.relevance is None else pos.relevance[sel].copy()
    return Ranks(q.copy(), first, indptr, pos.indices[sel].copy(), ranks, pos.num_relevant[q].copy(), gains)


def metrics_from_ranks(
    r: Ranks, ks=(1, 5, 10), top_k: int | None = None, num_empty: int = 0, empty_value: float = 0.0
) -> dict[str, float]:
    """R@K (percent), MeanR, MedianR, MRR, mAP, mAP@R, R-Precision, NDCG (fractions) over the evaluated queries.

    ``top_k`` cuts MRR, mAP, R-Precision and NDCG at rank k (keys ``MRR@k``, ``mAP@k``, ``R-Precision@k``,
    ``NDCG@k``; formulas in README.md). ``num_empty`` more queries without any positive score ``empty_value`` (0 or
    1; R@K as a percent) in every metric but MeanR / MedianR, which are over the queries with a positive (NaN when
    there are none).
    """
    nq = len(r.queries)
    total = nq + num_empty
    if total == 0:
        raise ValueError("no evaluated queries: metrics are undefined")
    fill = num_empty * float(empty_value)

    def mean(per_query: np.ndarray) -> float:
        return float((np.sum(per_query) + fill) / total)

    first = r.first.astype(np.float64)
    cut = "" if top_k is None else f"@{top_k}"
    kk = np.inf if top_k is None else float(top_k)
    out: dict[str, float] = {f"R@{k}": 100.0 * mean(r.first <= k) for k in ks}
    out["MeanR"] = float(np.mean(first)) if nq else float("nan")
    out["MedianR"] = float(np.median(first)) if nq else float("nan")
    out[f"MRR{cut}"] = mean(np.where(first <= kk, 1.0 / np.maximum(first, 1.0), 0.0))
    # Position of each positive among its query's positives, in rank order (ranks are distinct within a query).
    counts = np.diff(r.indptr)
    qid = np.repeat(np.arange(nq), counts)
    order = np.lexsort((r.ranks, qid))
    rk = r.ranks[order].astype(np.float64)
    pos_in_q = np.arange(len(rk)) - np.repeat(r.indptr[:-1], counts) + 1.0
    big_r = r.num_relevant.astype(np.float64)
    rel_r = np.repeat(big_r, counts)
    prec = pos_in_q / rk
    if top_k is None:
        out["mAP"] = mean(np.bincount(qid, prec, minlength=nq) / big_r)
    else:
        # torchmetrics' AP@k: the mean precision at the positives retrieved in the top k (0 when none is).
        hit = rk <= kk
        n_hit = np.bincount(qid, hit, minlength=nq)
        ap = np.bincount(qid, np.where(hit, prec, 0.0), minlength=nq)
        out[f"mAP{cut}"] = mean(np.divide(ap, n_hit, out=np.zeros(nq), where=n_hit > 0))
    within = rk <= rel_r
    out["mAP@R"] = mean(np.bincount(qid, np.where(within, prec, 0.0), minlength=nq) / big_r)
    # R-Precision@k: precision at min(R, k) (plain R-Precision without top_k).
    cutoff = np.minimum(big_r, kk)
    out[f"R-Precision{cut}"] = mean(np.bincount(qid, rk <= np.repeat(cutoff, counts), minlength=nq) / cutoff)
    out[f"NDCG{cut}"] = mean(_ndcg(r, qid, order, rk, kk))
    return out


def _ndcg(r: Ranks, qid: np.ndarray, order: np.ndarray, rk: np.ndarray, kk: float) -> np.ndarray:
    """Per-query NDCG with linear gains (1, or the graded relevance), both sums cut at rank ``kk``."""
    nq = len(r.queries)
    gains = np.ones(len(rk)) if r.gains is None else r.gains[order].astype(np.float64)
    dcg = np.bincount(qid, np.where(rk <= kk, gains / np.log2(rk + 1.0), 0.0), minlength=nq)
    if r.gains is None:
        # Ideal: R unit gains at ranks 1..R (out-of-gallery relevant items included), cut at k.
        n_ideal = np.minimum(r.num_relevant, kk).astype(np.int64)
        ideal_cum = np.cumsum(1.0 / np.log2(np.arange(2, int(n_ideal.max(initial=1)) + 2, dtype=np.float64)))
        return dcg / ideal_cum[n_ideal - 1]
    # Graded: the query's gains sorted descending at ranks 1, 2, ...
    desc = np.lexsort((-gains, qid))
    g_sorted = gains[desc]
    pos = np.arange(len(g_sorted)) - np.repeat(r.indptr[:-1], np.diff(r.indptr)) + 1.0
    ideal = np.bincount(qid, np.where(pos <= kk, g_sorted / np.log2(pos + 1.0), 0.0), minlength=nq)
    return dcg / ideal
