"""Plain references (full score matrix, numpy stable sort): used by tests and benchmarks, never by the library."""

from __future__ import annotations

import numpy as np
import torch

from vlkernels.retrieval.metrics import Ranks, metrics_from_ranks
from vlkernels.retrieval.positives import Positives

LANES = 8


def _float64(x) -> np.ndarray:
    """Every element widened to float64 exactly (fp16, bf16, fp32 and fp64 all embed in float64)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def exact_scores_ref(q, g, pairs=None) -> np.ndarray:
    """The exact score s(q, g) of the retrieval definition (README "Exact scores"), by the obvious loop.

    float64 products of the inputs as given, summed in 8 lanes (lane l: d = l, l+8, ... in increasing d, each
    addition rounded to float64), then ``((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))``.

    Args:
        q: ``(Q, D)`` array or tensor (fp16, bf16, fp32 or fp64).
        g: ``(G, D)`` array or tensor.
        pairs: None for the full ``(Q, G)`` matrix, else ``(qi, gi)`` integer arrays of equal length: ``(P,)``.
    """
    q, g = _float64(q), _float64(g)
    if pairs is None:
        # The same loop on the (Q, G) matrix, one lane at a time (no (Q * G, D) gather).
        lanes = []
        for lane in range(LANES):
            acc = np.zeros((q.shape[0], g.shape[0]))
            for d in range(lane, q.shape[1], LANES):
                acc += q[:, d, None] * g[None, :, d]
            lanes.append(acc)
        a = lanes
        return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
    qi, gi = (np.asarray(a, dtype=np.int64).reshape(-1) for a in pairs)
    a, b = q[qi], g[gi]
    acc = np.zeros((len(qi), LANES))
    for d in range(q.shape[1]):
        acc[:, d % LANES] += a[:, d] * b[:, d]
    return ((acc[:, 0] + acc[:, 1]) + (acc[:, 2] + acc[:, 3])) + ((acc[:, 4] + acc[:, 5]) + (acc[:, 6] + acc[:, 7]))


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
    """Both directions from the full (texts x images) matrix of exact scores."""
    img, txt = _float64(image_emb), _float64(text_emb)
    s = exact_scores_ref(txt, img)
    t2i = Positives.from_labels(text_to_image, img.shape[0])
    i2t = t2i.transpose()
    return {
        "text_to_image": metrics_from_ranks(ranks_ref(s, t2i), ks, top_k),
        "image_to_text": metrics_from_ranks(ranks_ref(s.T, i2t), ks, top_k),
    }


def topk_ref(queries, gallery, k: int, exclude: Positives | None = None):
    """(values, indices) from the full matrix of exact scores, order (score desc, index asc), padded with (-inf, -1)."""
    s = torch.from_numpy(exact_scores_ref(queries, gallery))
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
