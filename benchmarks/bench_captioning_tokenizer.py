"""PTB tokenization of raw captions: vlkernels' C++ tokenizer against pycocoevalcap's Java PTBTokenizer."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

from vlkernels.captioning._text import tokenize_dicts
from vlkernels.captioning.tokenizer import PTBTokenizer, ptb_tokenize
from vlkernels.testing import shared_data_dir

from .harness import Bench, register

_GOLDEN = "coco_val2014_captions_reconstructed.json.gz"


def _shared(name: str) -> Path | None:
    root = shared_data_dir()
    path = None if root is None else root / "captions" / "golden" / name
    return path if path is not None and path.is_file() else None


def _captions(n: int) -> list[str]:
    """The first n COCO val2014 captions from the shared data (all 202,654 for n=-1), else synthetic ones."""
    path = _shared(_GOLDEN)
    if path is not None:
        caps = [c for v in json.load(gzip.open(path)).values() for c in v]
        return caps if n < 0 else caps[:n]
    rng = random.Random(0)
    words = (
        "a man woman dog on the of with in is red two people street sign Mr. U.S. isn't it's (left) \"stop\"".split()
    )
    return [" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) + "." for _ in range(n if n > 0 else 202654)]


def _java(caps: list[str]) -> list[str]:
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    out = PTBTokenizer().tokenize({i: [{"caption": c}] for i, c in enumerate(caps)})
    return [out[i][0] for i in range(len(caps))]


@register("captioning", "ptb_tokenize", quick={"n": 20000}, full={"n": -1}, devices=("cpu",))
def _ptb_tokenize(n: int, device: str) -> Bench:
    caps = _captions(n)
    providers = {"vlkernels": lambda: ptb_tokenize(caps)}
    if shutil.which("java"):
        # One JVM start plus the whole batch, as pycocoevalcap does per call; timed once (it takes seconds).
        providers["pycocoevalcap_java"] = lambda: _java(caps)

    def check(out):
        if "pycocoevalcap_java" in out and out["vlkernels"] != out["pycocoevalcap_java"]:
            bad = sum(a != b for a, b in zip(out["vlkernels"], out["pycocoevalcap_java"]))
            raise AssertionError(f"{bad} of {len(caps)} captions tokenized differently from pycocoevalcap")

    return Bench(
        providers=providers,
        baseline="pycocoevalcap_java" if "pycocoevalcap_java" in providers else None,
        check=check,
        bytes=sum(len(c.encode()) for c in caps),
        repeats=1,
        notes=f"{len(caps)} raw captions",
    )


@register("captioning", "ptb_tokenize_karpathy", quick={"images": 1000}, full={"images": 5000}, devices=("cpu",))
def _ptb_tokenize_karpathy(images: int, device: str) -> list[Bench]:
    """The tokenizer half of CIDEr-D from raw strings: Karpathy-test refs (5 per image) and one candidate per image,
    as {id: [{"caption": str}]} dicts, tokenized one dict at a time as pycocoevalcap's evaluation does."""
    refs_path, preds_path = _shared("karpathy_test_refs_raw.json"), _shared("karpathy_test__ersan_vis.json")
    if refs_path is None or preds_path is None:
        return []
    refs, preds = json.load(open(refs_path)), json.load(open(preds_path))
    ids = preds["image_ids_in_scorer_order"][:images]
    gts = {k: [{"caption": c} for c in refs[k]] for k in ids}
    res = {k: [{"caption": preds["candidates_raw"][k]}] for k in ids}
    providers = {
        "vlkernels": lambda: tokenize_dicts(gts, res),
        "vlkernels_PTBTokenizer": lambda: (PTBTokenizer().tokenize(gts), PTBTokenizer().tokenize(res)),
    }
    if shutil.which("java"):
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer as JavaPTBTokenizer

        # Two JVM runs per evaluation, as pycocoevalcap's scorers get them.
        providers["pycocoevalcap_java"] = lambda: (JavaPTBTokenizer().tokenize(gts), JavaPTBTokenizer().tokenize(res))

    def check(out):
        for name, got in out.items():
            if name != "vlkernels" and tuple(got) != tuple(out["vlkernels"]):
                raise AssertionError(f"{name} tokenized the Karpathy captions differently from vlkernels")

    n = sum(len(v) for v in gts.values()) + len(res)
    return [
        Bench(
            providers=providers,
            baseline="pycocoevalcap_java" if "pycocoevalcap_java" in providers else None,
            check=check,
            bytes=sum(len(c["caption"].encode()) for d in (gts, res) for v in d.values() for c in v),
            repeats=3,
            notes=f"{images} Karpathy-test images: {n} raw captions in two dicts (refs, candidates)",
        )
    ]
