"""Ground truth for retrieval: the set of positives of each query, stored as CSR over gallery indices."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Positives:
    """Positives of each query as CSR: query ``q``'s gallery indices are ``indices[indptr[q]:indptr[q + 1]]``.

    Rows are sorted and free of duplicates (the ground truth is a set, as in COCO evaluation and eccv_caption).
    ``queries`` lists the queries that are evaluated (default: all); every one of them needs a positive unless built
    with ``allow_empty=True`` (``evaluate``'s ``empty`` policy then decides what such a query scores).
    ``relevance`` optionally grades each pair (aligned with ``indices``, all > 0): NDCG uses it as the gain, the
    binary metrics count every listed pair as relevant.
    ``num_relevant`` optionally raises a query's relevant count above its listed positives, for relevant items that
    are not in the gallery (ECCV Caption lists two captions outside the Karpathy 5K test set): they count in mAP,
    mAP@R, R-Precision and NDCG as never retrieved.

    Build with :meth:`from_pairs`, :meth:`from_lists`, :meth:`from_csr` or :meth:`from_labels`.
    """

    indptr: np.ndarray
    indices: np.ndarray
    num_gallery: int
    queries: np.ndarray
    num_relevant: np.ndarray
    relevance: np.ndarray | None = None

    @property
    def num_queries(self) -> int:
        return len(self.indptr) - 1

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    def pair_queries(self) -> np.ndarray:
        """Query index of each stored pair, aligned with ``indices``."""
        return np.repeat(np.arange(self.num_queries, dtype=np.int64), self.counts)

    @classmethod
    def from_csr(cls, indptr, indices, num_gallery: int, queries=None, num_relevant=None, **options) -> Positives:
        """CSR over all queries (``len(indptr) - 1`` of them); rows are sorted and de-duplicated here. ``options``
        (``relevance``, ``allow_empty``) as in :meth:`from_pairs`."""
        indptr = _int_array(indptr, "indptr")
        indices = _int_array(indices, "indices")
        if indptr.ndim != 1 or len(indptr) == 0 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must be a 1-D non-decreasing array starting at 0")
        if indptr[-1] != len(indices):
            raise ValueError(f"indptr ends at {indptr[-1]} but indices has {len(indices)} entries")
        qs = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
        return cls.from_pairs(qs, indices, len(indptr) - 1, num_gallery, queries, num_relevant, **options)

    @classmethod
    def from_pairs(
        cls,
        query_idx,
        gallery_idx,
        num_queries: int,
        num_gallery: int,
        queries=None,
        num_relevant=None,
        *,
        relevance=None,
        allow_empty: bool = False,
    ) -> Positives:
        """Pairs ``(query_idx[e], gallery_idx[e])``; duplicates collapse (graded pairs may not repeat).
        ``queries`` defaults to every query; ``relevance`` grades each pair (> 0, finite)."""
        q = _int_array(query_idx, "query_idx")
        g = _int_array(gallery_idx, "gallery_idx")
        if q.shape != g.shape or q.ndim != 1:
            raise ValueError(f"query_idx and gallery_idx must be 1-D of one length, got {q.shape} and {g.shape}")
        num_queries, num_gallery = int(num_queries), int(num_gallery)
        _check_range(q, num_queries, "positive query index")
        _check_range(g, num_gallery, "positive gallery index")
        key = q * max(num_gallery, 1) + g
        if relevance is not None:
            relevance = np.asarray(relevance.detach().cpu() if hasattr(relevance, "detach") else relevance)
            if relevance.shape != q.shape or relevance.dtype.kind not in "iuf":
                raise ValueError(f"relevance must be numbers, one per pair {q.shape}, got {relevance.shape}")
            relevance = relevance.astype(np.float64)
            if not np.all(np.isfinite(relevance) & (relevance > 0)):
                raise ValueError("relevance must be finite and > 0 (list only relevant pairs)")
            order = np.argsort(key, kind="stable")
            key, relevance = key[order], relevance[order]
            if np.any(key[1:] == key[:-1]):
                raise ValueError("a graded (query, gallery) pair is listed twice")
        else:
            key = sorted_unique(key)  # sorts by (query, gallery) and drops duplicate pairs
        q, g = key // max(num_gallery, 1), key % max(num_gallery, 1)
        indptr = np.zeros(num_queries + 1, dtype=np.int64)
        np.cumsum(np.bincount(q, minlength=num_queries), out=indptr[1:])
        counts = np.diff(indptr)
        if queries is None:
            queries = np.arange(num_queries, dtype=np.int64)
        else:
            queries = _int_array(queries, "queries")
            _check_range(queries, num_queries, "evaluated query index")
            if len(sorted_unique(queries)) != len(queries):
                raise ValueError("queries lists a query twice")
        empty = queries[counts[queries] == 0]
        if len(empty) and not allow_empty:
            raise ValueError(
                f"{len(empty)} evaluated queries have no positive (first: query {int(empty[0])}); "
                "every query needs at least one ground-truth item (or leave it out of `queries`)"
            )
        if num_relevant is None:
            num_relevant = counts.copy()
        else:
            num_relevant = _int_array(num_relevant, "num_relevant")
            if num_relevant.shape != (num_queries,):
                raise ValueError(f"num_relevant must have shape ({num_queries},), got {num_relevant.shape}")
            if np.any(num_relevant < counts):
                raise ValueError("num_relevant must be at least the number of listed positives of each query")
            if relevance is not None and np.any(num_relevant != counts):
                raise ValueError("graded relevance needs every relevant item listed (num_relevant = listed positives)")
        return cls(indptr, g.astype(np.int64), num_gallery, queries, num_relevant, relevance)

    @classmethod
    def from_lists(
        cls, lists: Sequence[Sequence[int]], num_gallery: int, queries=None, *, allow_empty: bool = False
    ) -> Positives:
        """One list of gallery indices per query (``ground_truth_indices`` of the usual evaluation scripts)."""
        for q, x in enumerate(lists):
            if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
                raise ValueError(
                    f"positives as lists need one list of gallery indices per query; entry {q} is {x!r} "
                    f"({type(x).__name__}); one positive per query is [[i0], [i1], ...] (or text_to_image=labels)"
                )
        counts = np.array([len(x) for x in lists], dtype=np.int64)
        flat = np.fromiter((_index(v) for x in lists for v in x), dtype=np.int64, count=int(counts.sum()))
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls.from_csr(indptr, flat, num_gallery, queries=queries, allow_empty=allow_empty)

    @classmethod
    def from_labels(cls, labels, num_gallery: int) -> Positives:
        """Query ``q``'s one positive is ``labels[q]`` (``text_to_image`` for text-to-image retrieval)."""
        labels = _int_array(labels, "labels")
        if labels.ndim != 1:
            raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
        return cls.from_pairs(np.arange(len(labels)), labels, len(labels), num_gallery)

    def transpose(self, queries=None, *, allow_empty: bool = False) -> Positives:
        """The same pairs (and grades) seen from the gallery side (image-to-text from text-to-image)."""
        return Positives.from_pairs(
            self.indices,
            self.pair_queries(),
            self.num_gallery,
            self.num_queries,
            queries=queries,
            relevance=self.relevance,
            allow_empty=allow_empty,
        )

    def without_empty(self) -> tuple[Positives, np.ndarray]:
        """``(self with only the evaluated queries that have a positive, the evaluated queries that have none)``."""
        has = self.counts[self.queries] > 0
        if has.all():
            return self, self.queries[:0]
        return dataclasses.replace(self, queries=self.queries[has]), self.queries[~has]


def _int_array(x, name: str) -> np.ndarray:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    a = np.asarray(x)
    if a.size == 0:
        return a.reshape(-1).astype(np.int64)
    if a.dtype.kind == "u" and a.max() > np.iinfo(np.int64).max:  # astype would wrap it to a negative index
        raise ValueError(f"{name} holds {int(a.max())}, past the int64 range of indices")
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    return a.astype(np.int64, copy=False)


def _index(v) -> int:
    """One index from a list: integers (Python or numpy) only, so 2.7 is refused instead of truncated to 2."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"positive indices must be integers, got {v!r} ({type(v).__name__})")
    return int(v)


def _check_range(a: np.ndarray, n: int, what: str) -> None:
    if a.size and (a.min() < 0 or a.max() >= n):
        bad = int(a[(a < 0) | (a >= n)][0])
        raise ValueError(f"{what} {bad} is out of range [0, {n})")


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` for 1-D integers by one sort (numpy 2.4's hash-based unique is ~50x slower at 400k pairs)."""
    s = np.sort(a)
    return s[np.concatenate([[True], s[1:] != s[:-1]])] if len(s) else s
