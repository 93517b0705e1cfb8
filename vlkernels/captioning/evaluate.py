"""COCO-format caption evaluation (the pycocoevalcap COCOEvalCap flow without METEOR/SPICE)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from vlkernels.captioning._text import tokenize_dicts
from vlkernels.captioning.cider import Cider, _read_json
from vlkernels.captioning.metrics import Bleu, Rouge


def _annotations(obj: Any, name: str) -> list:
    if isinstance(obj, (str, os.PathLike)):
        obj = _read_json(obj)
    if isinstance(obj, Mapping):
        if "annotations" not in obj:
            raise ValueError(f"{name}: a COCO annotation file needs an 'annotations' list")
        obj = obj["annotations"]
    if not isinstance(obj, Sequence) or isinstance(obj, (str, bytes)):
        raise ValueError(f"{name}: expected a list of {{'image_id', 'caption'}} records, got {type(obj).__name__}")
    for i, a in enumerate(obj):
        if not isinstance(a, Mapping) or "image_id" not in a or "caption" not in a:
            raise ValueError(f"{name}[{i}]: record must be a dict with 'image_id' and 'caption'")
        if not isinstance(a["caption"], str):
            raise ValueError(
                f"{name}[{i}] (image {a['image_id']!r}): caption must be str, got {type(a['caption']).__name__}"
            )
    return list(obj)


def evaluate_captions(
    annotations: str | os.PathLike | Mapping | Sequence,
    results: str | os.PathLike | Sequence,
    *,
    tokenize: bool = True,
) -> dict[str, Any]:
    """BLEU-1..4, ROUGE-L and CIDEr-D of COCO-format results, as pycocoevalcap's ``COCOEvalCap``.

    The images scored are those of ``results`` (as ``coco_eval.params['image_id'] = coco_result.getImgIds()`` in
    pycocoevalcap's example); their references are every annotation with that ``image_id``.

    Args:
        annotations: a COCO captions file (path, or its dict with ``"annotations"``), or a list of
            ``{"image_id", "caption"}`` records.
        results: a results file (path) or list of ``{"image_id", "caption"}``, one per image.
        tokenize: PTB-tokenize both sides first (default True, as COCOEvalCap).

    Returns:
        ``{"Bleu_1".."Bleu_4", "ROUGE_L", "CIDEr": float, "per_image": {image_id: {metric: float}}}``.

    Raises:
        ValueError: unreadable / malformed JSON or invalid UTF-8 (naming the file), records without
            ``image_id``/``caption``, non-str captions, two results for one image, a result whose image has no
            annotation.

    Example:
        >>> evaluate_captions([{"image_id": 1, "caption": "a dog"}], [{"image_id": 1, "caption": "a dog"}],
        ...                   tokenize=False)["ROUGE_L"]
        1.0
    """
    anns = _annotations(annotations, str(annotations) if isinstance(annotations, (str, os.PathLike)) else "annotations")
    ress = _annotations(results, str(results) if isinstance(results, (str, os.PathLike)) else "results")
    gts_all: dict[Any, list[str]] = {}
    for a in anns:
        gts_all.setdefault(a["image_id"], []).append(a["caption"])
    res: dict[Any, list[str]] = {}
    for r in ress:
        if r["image_id"] in res:
            raise ValueError(f"results: image {r['image_id']!r} has more than one caption")
        if r["image_id"] not in gts_all:
            raise ValueError(f"results: image {r['image_id']!r} has no reference caption in the annotations")
        res[r["image_id"]] = [r["caption"]]
    if not res:
        raise ValueError("results is empty: no image to evaluate")
    gts = {k: gts_all[k] for k in res}
    if tokenize:
        gts, res = tokenize_dicts(gts, res)
    out: dict[str, Any] = {}
    per: dict[Any, dict[str, float]] = {k: {} for k in gts}
    bleu, bleu_img = Bleu(4).compute_score(gts, res, verbose=0)
    for k in range(4):
        out[f"Bleu_{k + 1}"] = float(bleu[k])
        for img, v in zip(gts, bleu_img[k]):
            per[img][f"Bleu_{k + 1}"] = float(v)
    for name, scorer in (("ROUGE_L", Rouge()), ("CIDEr", Cider())):
        mean, scores = scorer.compute_score(gts, res)
        out[name] = float(mean)
        for img, v in zip(gts, scores):
            per[img][name] = float(v)
    out["per_image"] = per
    return out
