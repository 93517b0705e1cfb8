"""top_k cut-offs, graded NDCG and the empty-query policy against torchmetrics' retrieval metrics (1.9), in the
way torchmetrics' own tests check them (random queries with binary and graded targets, empty_target_action in
skip/neg/pos, k in None/1/4/10), plus the conventions where the two differ on purpose (ties, non-positive scores)."""

import numpy as np
import pytest
import torch

from vlkernels.retrieval import Positives, evaluate, rank_metrics

tm = pytest.importorskip("torchmetrics.retrieval")

POLICY = {"skip": "skip", "neg": "zero", "pos": "one"}


def _case(seed: int, graded: bool, q=23, m=41, d=8):
    """Non-negative fp64 embeddings: every score is > 0 (torchmetrics drops positives scored <= 0 in AP / MRR) and
    ties have probability 0. About a fifth of the queries have no relevant item."""
    g = torch.Generator().manual_seed(seed)
    queries = torch.rand(q, d, generator=g, dtype=torch.float64)
    gallery = torch.rand(m, d, generator=g, dtype=torch.float64)
    rel = torch.randint(0, 5 if graded else 2, (q, m), generator=g) * (torch.rand(q, m, generator=g) < 0.15)
    rel[torch.rand(q, generator=g) < 0.2] = 0
    qi, gi = torch.nonzero(rel, as_tuple=True)
    pos = Positives.from_pairs(qi, gi, q, m, allow_empty=True, relevance=rel[qi, gi].double() if graded else None)
    return queries, gallery, rel, pos


def _torchmetrics(cls, scores, rel, **kw):
    q, m = scores.shape
    metric = cls(**kw)
    metric.update(scores.reshape(-1).float(), rel.reshape(-1), indexes=torch.arange(q).repeat_interleave(m))
    return float(metric.compute())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("empty", ["skip", "neg", "pos"])
@pytest.mark.parametrize("k", [None, 1, 4, 10])
def test_metrics_equal_torchmetrics(seed, empty, k):
    queries, gallery, rel, pos = _case(seed, graded=False)
    scores = queries @ gallery.T
    got, _ = rank_metrics(queries, gallery, pos, ks=1, top_k=k, empty=POLICY[empty])
    cut = "" if k is None else f"@{k}"
    # torchmetrics works in fp32 on at most m terms per query: m fp32 roundings of values <= 1.
    tol = 4 * scores.shape[1] * float(np.finfo(np.float32).eps)  # pytest.approx takes Python numbers only
    kw = dict(empty_target_action=empty)
    want = {
        f"mAP{cut}": _torchmetrics(tm.RetrievalMAP, scores, rel, top_k=k, **kw),
        f"MRR{cut}": _torchmetrics(tm.RetrievalMRR, scores, rel, top_k=k, **kw),
        f"NDCG{cut}": _torchmetrics(tm.RetrievalNormalizedDCG, scores, rel, top_k=k, **kw),
    }
    if k is None:  # torchmetrics' R-Precision has no top_k
        want["R-Precision"] = _torchmetrics(tm.RetrievalRPrecision, scores, rel, **kw)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=tol), (key, got[key], value)
    assert 0.01 < got[f"mAP{cut}"] < 0.99  # a non-trivial ranking


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [None, 1, 4, 10])
def test_graded_ndcg_equals_torchmetrics(seed, k):
    queries, gallery, rel, pos = _case(seed, graded=True)
    scores = queries @ gallery.T
    got, _ = rank_metrics(queries, gallery, pos, ks=1, top_k=k, empty="skip")
    want = _torchmetrics(tm.RetrievalNormalizedDCG, scores, rel, top_k=k, empty_target_action="skip")
    key = "NDCG" if k is None else f"NDCG@{k}"
    assert got[key] == pytest.approx(want, abs=4 * scores.shape[1] * float(np.finfo(np.float32).eps))
    # The binary metrics count every graded pair as relevant (torchmetrics: target > 0).
    got_map = rank_metrics(queries, gallery, pos, top_k=k, empty="skip")[0]["mAP" if k is None else f"mAP@{k}"]
    want_map = _torchmetrics(tm.RetrievalMAP, scores, rel > 0, top_k=k, empty_target_action="skip")
    assert got_map == pytest.approx(want_map, abs=4 * scores.shape[1] * float(np.finfo(np.float32).eps))


@pytest.mark.parametrize("k", [1, 3, 100])
def test_r_precision_at_k_brute_force(k):
    """R-Precision@k (no torchmetrics counterpart): precision at min(R, k), from a full sort."""
    queries, gallery, rel, pos = _case(5, graded=False)
    got = rank_metrics(queries, gallery, pos, top_k=k, empty="zero")[0][f"R-Precision@{k}"]
    s = (queries @ gallery.T).numpy()
    per_query = []
    for qi in range(len(s)):
        r = int(rel[qi].sum())
        if r == 0:
            per_query.append(0.0)
            continue
        order = np.argsort(-s[qi], kind="stable")
        c = min(r, k)
        per_query.append(rel[qi].numpy()[order[:c]].sum() / c)
    assert got == pytest.approx(np.mean(per_query), rel=1e-12)


def test_empty_policies_and_errors():
    queries, gallery, rel, pos = _case(3, graded=False)
    n_empty = int((rel.sum(1) == 0).sum())
    assert n_empty > 0
    with pytest.raises(ValueError, match=rf"queries: {n_empty} evaluated queries have no positive"):
        rank_metrics(queries, gallery, pos)
    skip = rank_metrics(queries, gallery, pos, ks=(1, 5), empty="skip")[0]
    zero = rank_metrics(queries, gallery, pos, ks=(1, 5), empty="zero")[0]
    one = rank_metrics(queries, gallery, pos, ks=(1, 5), empty="one")[0]
    n, n_pos = len(rel), len(rel) - n_empty
    for key in ("R@1", "R@5", "MRR", "mAP", "mAP@R", "R-Precision", "NDCG"):
        scale = 100.0 if key.startswith("R@") else 1.0
        assert zero[key] == pytest.approx(skip[key] * n_pos / n, rel=1e-12)
        assert one[key] == pytest.approx((skip[key] * n_pos + scale * n_empty) / n, rel=1e-12)
    assert zero["MeanR"] == one["MeanR"] == skip["MeanR"]  # ranks exist only for queries with a positive
    none = Positives.from_pairs([], [], 3, 41, allow_empty=True)
    allzero = rank_metrics(queries[:3], gallery, none, empty="zero")[0]
    assert allzero["mAP"] == 0.0 and np.isnan(allzero["MeanR"])
    with pytest.raises(ValueError, match="no evaluated queries"):
        rank_metrics(queries[:3], gallery, none, empty="skip")
    for kwargs, match in [
        (dict(empty="neg"), "empty must be one of"),
        (dict(top_k=0), "top_k must be a positive integer"),
        (dict(top_k=2.0), "top_k must be a positive integer"),
    ]:
        with pytest.raises(ValueError, match=match):
            rank_metrics(queries, gallery, pos, **kwargs)
    for kwargs, match in [
        (dict(relevance=[0.0]), "finite and > 0"),
        (dict(relevance=[float("nan")]), "finite and > 0"),
        (dict(relevance=[1.0, 2.0]), "one per pair"),
        (dict(relevance=[1.0], num_relevant=[2, 0]), "graded relevance needs every relevant item"),
    ]:
        with pytest.raises(ValueError, match=match):
            Positives.from_pairs([0], [0], 2, 3, allow_empty=True, **kwargs)
    with pytest.raises(ValueError, match="listed twice"):
        Positives.from_pairs([0, 0], [1, 1], 1, 3, relevance=[1, 2])


def test_evaluate_top_k_and_empty_both_directions():
    queries, gallery, _, pos = _case(4, graded=False)
    both = evaluate(gallery, queries, t2i=pos, top_k=4, empty="zero")
    one_way = rank_metrics(queries, gallery, pos, top_k=4, empty="zero")[0]
    assert both["text_to_image"] == one_way
    back = rank_metrics(gallery, queries, pos.transpose(allow_empty=True), top_k=4, empty="zero")[0]
    assert both["image_to_text"] == back


def test_conventions_that_differ_from_torchmetrics():
    """Pinned differences (README): ties and non-positive scores."""
    # Ties: gallery items 0 and 1 are identical, the positive is item 1. vlkernels ranks the lower index first
    # (rank 2: NDCG = 1/log2(3)); torchmetrics' NDCG averages the gain over the tied group (sklearn's rule).
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    ours = rank_metrics(q, g, [[1]])[0]["NDCG"]
    assert ours == pytest.approx(1 / np.log2(3), rel=1e-15)
    rel = torch.tensor([[0, 1, 0]])
    theirs = _torchmetrics(tm.RetrievalNormalizedDCG, q @ g.T, rel)
    assert theirs == pytest.approx((1 + 1 / np.log2(3)) / 2, rel=1e-6)
    # Scores <= 0: torchmetrics' AP and MRR treat a positive scored <= 0 as not relevant; vlkernels ranks it.
    q = torch.tensor([[-1.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # scores -1 (positive) and 0
    assert rank_metrics(q, g, [[0]])[0]["MRR"] == 0.5
    assert _torchmetrics(tm.RetrievalMRR, q @ g.T, torch.tensor([[1, 0]])) == 0.0
