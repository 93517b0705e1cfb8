"""COCO-format caption evaluation (the pycocoevalcap COCOEvalCap flow without METEOR/SPICE)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vlkernels.captioning._common import load, score_images
from vlkernels.captioning.cider import _NO_REFERENCE_WORDS, _read_json
from vlkernels.captioning.metrics import bleu_totals


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
    C = load()
    # One C++ call: read, PTB-tokenize (each dict as one batch, as COCOEvalCap), BLEU + ROUGE-L + CIDEr-D.
    scores = score_images(gts, res, C.CAP_CIDER | C.CAP_BLEU | C.CAP_ROUGE, tokenize=tokenize)
    if not scores["any_ref_words"]:
        raise ValueError(_NO_REFERENCE_WORDS)
    bleu, bleu_img = bleu_totals(scores["bleu_stats"], scores["bleu"], 4)
    out: dict[str, Any] = {f"Bleu_{k + 1}": float(bleu[k]) for k in range(4)}
    out["ROUGE_L"] = float(np.mean(scores["rouge"]))
    out["CIDEr"] = float(np.mean(scores["cider"]))
    columns = [(f"Bleu_{k + 1}", bleu_img[k]) for k in range(4)]
    columns += [("ROUGE_L", scores["rouge"].tolist()), ("CIDEr", scores["cider"].tolist())]
    out["per_image"] = {img: {name: float(col[i]) for name, col in columns} for i, img in enumerate(gts)}
    return out
