"""Plain references (full score matrix, numpy stable sort): used by tests and benchmarks, never by the library."""

from __future__ import annotations

import numpy as np
import torch

from vlkernels.retrieval.metrics import Ranks, metrics_from_ranks
from vlkernels.retrieval.positives import Positives


def ranks_ref(scores: np.ndarray, pos: Positives) -> Ranks:
    """Ranks from a full (Q, M) score matrix: candidates ordered by score descending, then index ascending."""
    q = pos.queries
    firsts, ranks, positives, indptr = [], [], [], [0]
    for qi in q.tolist():
        order = np.argsort(-scores[qi], kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(1, len(order) + 1)
        g = pos.indices[pos.indptr[qi] : pos.indptr[qi + 1]]
        rk = position[g]
        ranks.append(rk)
        positives.append(g)
        firsts.append(rk.min())
        indptr.append(indptr[-1] + len(g))
    cat = np.concatenate(ranks) if ranks else np.zeros(0, dtype=np.int64)
    pcat = np.concatenate(positives) if positives else np.zeros(0, dtype=np.int64)
    return Ranks(
        q.copy(), np.array(firsts, dtype=np.int64), np.array(indptr, dtype=np.int64), pcat, cat, pos.num_relevant[q]
    )


def evaluate_ref(image_emb, text_emb, text_to_image, ks=(1, 5, 10), top_k=None) -> dict:
    """Both directions from the full (texts x images) matrix in fp64."""
    img = torch.as_tensor(image_emb).double().numpy()
    txt = torch.as_tensor(text_emb).double().numpy()
    s = txt @ img.T
    t2i = Positives.from_labels(text_to_image, img.shape[0])
    i2t = t2i.transpose()
    return {
        "text_to_image": metrics_from_ranks(ranks_ref(s, t2i), ks, top_k),
        "image_to_text": metrics_from_ranks(ranks_ref(s.T, i2t), ks, top_k),
    }


def topk_ref(queries, gallery, k: int, exclude: Positives | None = None):
    """(values, indices) from the full fp64 score matrix, order (score desc, index asc), padded with (-inf, -1)."""
    s = torch.as_tensor(queries).double() @ torch.as_tensor(gallery).double().T
    if exclude is not None:
        s[torch.from_numpy(exclude.pair_queries()), torch.from_numpy(exclude.indices)] = float("-inf")
    n = s.shape[0]
    vals = torch.full((n, k), float("-inf"), dtype=torch.float64)
    idx = torch.full((n, k), -1, dtype=torch.int64)
    for i in range(n):
        order = torch.from_numpy(np.argsort(-s[i].numpy(), kind="stable"))
        order = order[torch.isfinite(s[i][order])][:k]
        vals[i, : len(order)] = s[i][order]
        idx[i, : len(order)] = order
    return vals, idx
