"""COCO-format caption evaluation (the pycocoevalcap COCOEvalCap flow without METEOR/SPICE)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vlkernels.captioning._common import image_scores, load, log_table, ref_len_of, score_images
from vlkernels.captioning.cider import _NO_REFERENCE_WORDS, _read_json
from vlkernels.captioning.metrics import bleu_totals

# Captions PTB-tokenized per call on the file path: bounded scratch.
_BLOCK_CAPTIONS = 8192


def _loaded(obj: Any, name: str) -> tuple[Any, str]:
    """(the JSON of a path, or obj itself; the name errors use)."""
    if isinstance(obj, (str, os.PathLike)):
        return _read_json(obj), str(obj)
    return obj, name


def _image_id(x: Any, where: str) -> Any:
    # COCO ids are ints; strs are accepted (e.g. file names). Anything else is not a usable dict key or id.
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        raise ValueError(f"{where}: image_id must be an int or str, got {type(x).__name__} {x!r:.40}")
    return x


def _records(obj: Any, name: str) -> Sequence:
    if not isinstance(obj, Sequence) or isinstance(obj, (str, bytes)):
        raise ValueError(f"{name}: expected a list of {{'image_id', 'caption'}} records, got {type(obj).__name__}")
    return obj


def _record(a: Any, name: str, i: int) -> tuple[Any, str]:
    if not isinstance(a, Mapping) or "image_id" not in a or "caption" not in a:
        raise ValueError(f"{name}[{i}]: record must be a dict with 'image_id' and 'caption'")
    img = _image_id(a["image_id"], f"{name}[{i}]")
    if not isinstance(a["caption"], str):
        raise ValueError(f"{name}[{i}] (image {img!r}): caption must be str, got {type(a['caption']).__name__}")
    return img, a["caption"]


def _references(obj: Any, name: str) -> dict[Any, list[str]]:
    """{image_id: [captions]} from a COCO captions file (its dict), a list of records, or that dict itself."""
    if isinstance(obj, Mapping) and "annotations" not in obj and ("images" in obj or "info" in obj):
        raise ValueError(f"{name}: a COCO annotation file needs an 'annotations' list")
    if isinstance(obj, Mapping) and "annotations" not in obj:
        # pycocoevalcap's gts layout {image_id: [caption, ...]} (e.g. Karpathy-split reference files).
        out = {}
        for k, v in obj.items():
            if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
                raise ValueError(
                    f"{name}[{k!r}]: a {{image_id: [captions]}} reference file needs a list of str per image, "
                    f"got {type(v).__name__} (or a COCO annotation file with an 'annotations' list)"
                )
            out[k] = v
        return out
    if isinstance(obj, Mapping):
        obj = obj["annotations"]
    gts: dict[Any, list[str]] = {}
    for i, a in enumerate(_records(obj, name)):
        img, cap = _record(a, name, i)
        gts.setdefault(img, []).append(cap)
    return gts


def _listed(obj: Any) -> list:
    """The ids of a COCO annotation file's "images" list, in order (entries without an int or str "id" left out);
    empty for the other layouts."""
    if not isinstance(obj, Mapping) or "annotations" not in obj or not isinstance(obj.get("images"), list):
        return []
    ids = (im.get("id") for im in obj["images"] if isinstance(im, Mapping))
    return [i for i in ids if isinstance(i, (int, str)) and not isinstance(i, bool)]


def _results(obj: Any, name: str) -> list[tuple[Any, str]]:
    if isinstance(obj, Mapping):
        hint = " (this looks like an annotation file: pass it first)" if "annotations" in obj else ""
        raise ValueError(
            f"{name}: a results file is a list of {{'image_id', 'caption'}} records, one per image, got a dict{hint}"
        )
    return [_record(r, name, i) for i, r in enumerate(_records(obj, name))]


def evaluate_captions(
    annotations: str | os.PathLike | Mapping | Sequence,
    results: str | os.PathLike | Sequence,
    *,
    tokenize: bool = True,
    per_image: bool = True,
) -> dict[str, Any]:
    """BLEU-1..4, ROUGE-L and CIDEr-D of COCO-format results, as pycocoevalcap's ``COCOEvalCap``.

    The images scored are those of ``results`` (as ``coco_eval.params['image_id'] = coco_result.getImgIds()`` in
    pycocoevalcap's example); their references are every annotation with that ``image_id``. They are taken in
    COCOEvalCap's order, which the PTB tokenizer's cross-caption context and the means' summation see: that of the
    annotation file's ``images`` list (``loadRes`` keeps it), else the order the images' captions first appear in.

    Args:
        annotations: a COCO captions file (path, or its dict with ``"annotations"``), a list of
            ``{"image_id", "caption"}`` records, or a ``{image_id: [caption, ...]}`` dict (or a JSON file of one).
        results: a results file (path) or list of ``{"image_id", "caption"}``, one per image.
        tokenize: PTB-tokenize both sides first (default True, as COCOEvalCap).
        per_image: include ``"per_image"`` (default True).

    Returns:
        ``{"Bleu_1".."Bleu_4", "ROUGE_L", "CIDEr": float, "images": int, "per_image": {image_id: {metric: float}}}``.

    Note:
        Two file paths are read by C++ into compact buffers (no Python object per caption; words and n-grams interned
        compactly, CIDEr-D one n-gram length at a time): peak memory stays under 3x the files' size (about 2x
        measured), on distinct-heavy text too.
        ``1`` and ``"1"`` are distinct image ids on both paths.

    Raises:
        ValueError: unreadable / malformed / too deeply nested JSON or invalid UTF-8 (naming the file), records
            without ``image_id``/``caption``, an ``image_id`` that is not an int or str, non-str captions, a
            results dict instead of a list, two results for one image, a result whose image has no annotation.

    Example:
        >>> evaluate_captions([{"image_id": 1, "caption": "a dog"}], [{"image_id": 1, "caption": "a dog"}],
        ...                   tokenize=False)["ROUGE_L"]
        1.0
    """
    paths = (annotations, results)
    if all(isinstance(p, (str, os.PathLike)) and _mappable(p) for p in paths):
        # Two phases: the number of images (the outputs' size) is known once the files are read.
        files = load().cap_files_prepare(str(annotations), str(results), tokenize, _BLOCK_CAPTIONS)
        m = files.num_images
        scores = image_scores(m)
        scores["any_ref_words"], keys = files.score(log_table(m), ref_len_of(max(m, 1)), *scores.values())
        del files  # its token arrays: the report needs only the scores
        return _report(scores, [_key_image_id(k) for k in keys], per_image)
    annotations, name = _loaded(annotations, "annotations")
    gts_all = _references(annotations, name)
    ress = _results(*_loaded(results, "results"))
    res: dict[Any, list[str]] = {}
    for img, cap in ress:
        if img in res:
            raise ValueError(f"results: image {img!r} has more than one caption")
        if img not in gts_all:
            other = str(img) if isinstance(img, int) else (int(img) if img.isdigit() else None)
            hint = f" (the annotations have {other!r}: ids must have one type)" if other in gts_all else ""
            raise ValueError(f"results: image {img!r} has no reference caption in the annotations{hint}")
        res[img] = [cap]
    del ress
    if not res:
        raise ValueError("results is empty: no image to evaluate")
    order = dict.fromkeys(k for k in [*_listed(annotations), *gts_all] if k in res)
    gts = {k: gts_all[k] for k in order}
    res = {k: res[k] for k in order}
    C = load()
    # One C++ call: read, PTB-tokenize (each dict as one batch, as COCOEvalCap), BLEU + ROUGE-L + CIDEr-D.
    scores = score_images(gts, res, C.CAP_CIDER | C.CAP_BLEU | C.CAP_ROUGE, tokenize=tokenize)
    return _report(scores, list(gts), per_image)


def _mappable(path: str | os.PathLike) -> bool:
    """A regular file with a size, which the C++ reader memory-maps; pipes, process substitutions and the like (size
    0 to stat) are read by json.load on the objects path."""
    try:
        st = os.stat(path)
    except OSError:
        return True  # the C++ reader names the missing file
    return stat.S_ISREG(st.st_mode) and st.st_size > 0


def _key_image_id(key: bytes) -> int | str:
    """An image id from the files reader's key: b"i<digits>" for an int id, b"s<text>" for a str id (UTF-8, with a
    lone surrogate kept in its 3-byte form, as json.load keeps it in the str)."""
    return int(key[1:]) if key[:1] == b"i" else key[1:].decode("utf-8", "surrogatepass")


def _report(scores: dict[str, Any], images: list, per_image: bool) -> dict[str, Any]:
    if not scores["any_ref_words"]:
        raise ValueError(_NO_REFERENCE_WORDS)
    bleu, bleu_img = bleu_totals(scores["bleu_stats"], scores["bleu"], 4)
    out: dict[str, Any] = {f"Bleu_{k + 1}": float(bleu[k]) for k in range(4)}
    out["ROUGE_L"] = float(np.mean(scores["rouge"]))
    out["CIDEr"] = float(np.mean(scores["cider"]))
    out["images"] = len(images)
    if per_image:
        columns = [(f"Bleu_{k + 1}", bleu_img[k]) for k in range(4)]
        columns += [("ROUGE_L", scores["rouge"].tolist()), ("CIDEr", scores["cider"].tolist())]
        out["per_image"] = {img: {name: float(col[i]) for name, col in columns} for i, img in enumerate(images)}
    return out
