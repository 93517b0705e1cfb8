"""Plain references for the metrics family, written from the papers and official scripts (tests and benchmarks).

Deliberately naive: fp64, Python loops, explicit leave-one-out subsets and full sorts, no chunking.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vlkernels.metrics.vqa import ARTICLES, CONTRACTIONS, NUMBER_WORDS, PUNCTUATION


def pair_cosine_ref(image_emb: torch.Tensor, text_emb: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Row-wise cosine in fp64 through F.normalize (the open_clip / HF evaluation path)."""
    return (F.normalize(image_emb.double(), dim=-1, eps=eps) * F.normalize(text_emb.double(), dim=-1, eps=eps)).sum(-1)


def siglip_score_ref(image_emb, text_emb, logit_scale, logit_bias, frames=None) -> torch.Tensor:
    """The seed's evaluator, caption by caption: sigmoid(logits) of every frame of the caption, then the mean."""
    m = text_emb.shape[0]
    if frames is None:
        owner = torch.arange(m)
    elif isinstance(frames, int):
        owner = torch.arange(image_emb.shape[0]) // frames
    else:
        owner = frames.cpu().long()
    out = torch.empty(m, dtype=torch.float64)
    for c in range(m):
        rows = image_emb[(owner == c).to(image_emb.device)]
        logits = pair_cosine_ref(rows, text_emb[c].expand_as(rows)) * float(logit_scale) + float(logit_bias)
        out[c] = torch.sigmoid(logits).mean()
    return out


def clip_score_ref(image_emb, text_emb, weight: float = 100.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pair w * max(cos, 0); corpus value max(w * mean cos, 0) (torchmetrics' aggregation)."""
    cos = pair_cosine_ref(image_emb, text_emb)
    return (weight * cos).clamp_min(0), (weight * cos.mean()).clamp_min(0)


def _punctuation_ref(text: str) -> str:
    has_digit_comma = any(
        text[i] == "," and text[i - 1].isdigit() and text[i + 1].isdigit() for i in range(1, len(text) - 1)
    )
    out = text
    for p in PUNCTUATION:
        near_space = (p + " ") in text or (" " + p) in text
        out = out.replace(p, "" if (near_space or has_digit_comma) else " ")
    chars, removed = [], 0
    for i, ch in enumerate(out):
        nxt = out[i + 1] if i + 1 < len(out) else ""
        if ch == "." and not ("0" <= nxt <= "9") and removed < 32:
            removed += 1
            continue
        chars.append(ch)
    return "".join(chars)


def _digit_article_ref(text: str) -> str:
    words = []
    for w in text.lower().split():
        w = NUMBER_WORDS.get(w, w)
        if w in ARTICLES:
            continue
        words.append(CONTRACTIONS.get(w, w))
    return " ".join(words)


def vqa_accuracy_ref(predictions, answers) -> list[float]:
    """Per-question accuracy by the explicit loop over the n leave-one-out subsets of the human answers."""
    acc = []
    for pred, gts in zip(predictions, answers):
        pred = _digit_article_ref(_punctuation_ref(pred.replace("\n", " ").replace("\t", " ").strip()))
        gts = list(gts)
        if len(set(gts)) > 1:
            gts = [_punctuation_ref(g) for g in gts]
        subsets = []
        for i in range(len(gts)):
            others = gts[:i] + gts[i + 1 :]
            subsets.append(min(1.0, sum(g == pred for g in others) / 3))
        acc.append(sum(subsets) / len(subsets))
    return acc


def group_accuracy_ref(scores: torch.Tensor) -> tuple[list[bool], list[bool], list[bool]]:
    """Winoground definitions with s(c, i) = scores[b, i, c], one block at a time."""
    text, image, group = [], [], []
    for blk in scores.double().tolist():

        def s(c, i, blk=blk):
            return blk[i][c]

        t = s(0, 0) > s(1, 0) and s(1, 1) > s(0, 1)
        im = s(0, 0) > s(0, 1) and s(1, 1) > s(1, 0)
        text.append(t)
        image.append(im)
        group.append(t and im)
    return text, image, group


def visdial_ref(scores: torch.Tensor, gt_index: torch.Tensor, relevance=None, pessimistic: bool = True) -> dict:
    """Rank by a full sort of each round (ties placed per the convention), NDCG as the VisDial v1.0 starter code."""
    ranks, ndcgs = [], []
    s_rows, g_rows = scores.reshape(-1, scores.shape[-1]).double().tolist(), gt_index.reshape(-1).tolist()
    rel_rows = None if relevance is None else relevance.reshape(-1, scores.shape[-1]).double().tolist()
    for b, (row, g) in enumerate(zip(s_rows, g_rows)):
        # Sort key: score descending; among ties the ground truth goes last (pessimistic) or first (optimistic).
        order = sorted(range(len(row)), key=lambda j: (-row[j], (j == g) == pessimistic))
        ranks.append(order.index(g) + 1)
        if rel_rows is not None:
            rel = rel_rows[b]
            k = sum(r != 0 for r in rel)
            if k == 0:
                ndcgs.append(float("nan"))
                continue
            by_score = sorted(range(len(row)), key=lambda j: (-row[j], j))
            dcg = sum(rel[j] / math.log2(pos + 2) for pos, j in enumerate(by_score[:k]))
            best = sum(r / math.log2(pos + 2) for pos, r in enumerate(sorted(rel, reverse=True)[:k]))
            ndcgs.append(dcg / best)
    n = len(ranks)
    valid = [x for x in ndcgs if not math.isnan(x)]
    return {
        "ranks": ranks,
        "r1": sum(r <= 1 for r in ranks) / n,
        "r5": sum(r <= 5 for r in ranks) / n,
        "r10": sum(r <= 10 for r in ranks) / n,
        "mrr": sum(1 / r for r in ranks) / n,
        "mean_rank": sum(ranks) / n,
        "ndcg": sum(valid) / len(valid) if valid else float("nan"),
        "ndcg_per_round": ndcgs,
    }
