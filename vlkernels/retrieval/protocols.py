"""Evaluation protocols on the COCO Karpathy 5K test split: COCO 5K, COCO 1K (mean over 5 folds) and ECCV Caption.

The ground truth comes from the data files of the ``eccv-caption`` package (Chun et al., ECCV 2022): the 25,000
Karpathy test caption ids in their canonical order (5 per image) and the original / ECCV Caption positives.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from vlkernels.retrieval.functional import RetrievalResult, evaluate
from vlkernels.retrieval.positives import Positives


def eccv_data_dir() -> Path:
    """Folder of the eccv-caption package data (raises ValueError when the package is not installed)."""
    spec = importlib.util.find_spec("eccv_caption")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the eccv-caption package is needed for the Karpathy 5K ground truth: pip install eccv-caption"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _load_json(name: str) -> dict[int, list[int]]:
    with (eccv_data_dir() / name).open() as f:
        return {int(k): [int(v) for v in vs] for k, vs in json.load(f).items()}


@dataclasses.dataclass(frozen=True)
class KarpathyTest:
    """The Karpathy 5K test split: text i is caption ``caption_ids[i]`` of image ``image_ids[text_to_image[i]]``."""

    caption_ids: np.ndarray
    image_ids: np.ndarray
    text_to_image: np.ndarray


@functools.cache
def karpathy_5k() -> KarpathyTest:
    """Captions in eccv-caption's canonical order; images in order of first appearance."""
    caption_ids = np.load(eccv_data_dir() / "coco_test_ids.npy", allow_pickle=False).astype(np.int64)
    c2i = _load_json("original_caption_to_image.json")
    cap_img = np.array([c2i[int(c)][0] for c in caption_ids], dtype=np.int64)
    image_ids, first = np.unique(cap_img, return_index=True)
    image_ids = image_ids[np.argsort(first)]
    lookup = {int(i): n for n, i in enumerate(image_ids)}
    return KarpathyTest(caption_ids, image_ids, np.array([lookup[int(i)] for i in cap_img], dtype=np.int64))


def coco_5k(image_emb, text_emb, text_to_image, ks: Sequence[int] = (1, 5, 10), **kwargs) -> RetrievalResult:
    """COCO 5K: every caption against every image (the standard protocol); same as :func:`evaluate`."""
    return evaluate(image_emb, text_emb, text_to_image, ks, **kwargs)


def coco_1k(
    image_emb, text_emb, text_to_image, ks: Sequence[int] = (1, 5, 10), folds: int = 5, **kwargs
) -> dict[str, dict[str, float]]:
    """COCO 1K: the texts split into ``folds`` contiguous folds (5 x 5,000 captions of 1,000 images on Karpathy 5K),
    each evaluated against its own images; returns the mean of each metric over the folds (as eccv_caption does)."""
    labels = np.asarray(torch.as_tensor(text_to_image).cpu())
    img = torch.as_tensor(image_emb)
    txt = torch.as_tensor(text_emb)
    if len(labels) % folds:
        raise ValueError(f"{len(labels)} texts do not split into {folds} equal folds")
    size = len(labels) // folds
    per_fold = []
    seen: set[int] = set()
    for f in range(folds):
        lab = labels[f * size : (f + 1) * size]
        imgs = np.unique(lab)
        if seen & set(imgs.tolist()):
            raise ValueError(f"fold {f} shares images with an earlier fold; captions must be grouped by fold")
        seen |= set(imgs.tolist())
        local = np.searchsorted(imgs, lab)
        per_fold.append(evaluate(img[torch.from_numpy(imgs)], txt[f * size : (f + 1) * size], local, ks, **kwargs))
    return {d: {k: float(np.mean([r[d][k] for r in per_fold])) for k in per_fold[0][d]} for d in per_fold[0]}


def eccv_positives() -> tuple[Positives, Positives]:
    """ECCV Caption's extended positives on Karpathy 5K, as (t2i, i2t) Positives over the :func:`karpathy_5k` order.

    Only the queries ECCV Caption annotates are evaluated (1,332 captions, 1,261 images). Positives outside the
    test split (two captions) count in each query's relevant total but are never retrieved, as in eccv_caption.
    """
    kt = karpathy_5k()
    cap_pos = {int(c): n for n, c in enumerate(kt.caption_ids)}
    img_pos = {int(i): n for n, i in enumerate(kt.image_ids)}
    t2i = _load_json("eccv_caption_to_image.json")
    i2t = _load_json("eccv_image_to_caption.json")

    def build(gt, q_map, g_map, nq, ng):
        qs, gs = [], []
        rel = np.zeros(nq, dtype=np.int64)
        for q, items in gt.items():
            items = set(items)
            rel[q_map[q]] = len(items)
            for g in items:
                if g in g_map:
                    qs.append(q_map[q])
                    gs.append(g_map[g])
        queries = np.sort(np.array([q_map[q] for q in gt], dtype=np.int64))
        p = Positives.from_pairs(np.array(qs), np.array(gs), nq, ng, queries=queries)
        return Positives.from_pairs(
            np.array(qs), np.array(gs), nq, ng, queries=queries, num_relevant=np.maximum(rel, p.counts)
        )

    return (
        build(t2i, cap_pos, img_pos, len(kt.caption_ids), len(kt.image_ids)),
        build(i2t, img_pos, cap_pos, len(kt.image_ids), len(kt.caption_ids)),
    )


def eccv_caption(image_emb, text_emb, ks: Sequence[int] = (1, 5, 10), **kwargs) -> RetrievalResult:
    """ECCV Caption protocol: embeddings in :func:`karpathy_5k` order (5,000 images, 25,000 captions); metrics on
    ECCV Caption's queries and extended positives (its headline numbers are ``mAP@R``, ``R-Precision``, ``R@1``)."""
    t2i, i2t = eccv_positives()
    return evaluate(image_emb, text_emb, None, ks, t2i=t2i, i2t=i2t, **kwargs)
