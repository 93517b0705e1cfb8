"""PTB tokenization of raw captions: vlkernels' C++ tokenizer against pycocoevalcap's Java PTBTokenizer, on the raw
COCO Karpathy-test captions shipped in the package (vlkernels.data)."""

from __future__ import annotations

import itertools

from vlkernels.captioning._text import tokenize_dicts
from vlkernels.captioning.tokenizer import PTBTokenizer, ptb_tokenize
from vlkernels.data import karpathy_test_captions, leave_one_out

from .harness import Bench, register, require_java

_VAL2014_CAPTIONS = 202654  # COCO val2014's caption count: the full case's size


def _captions(n: int) -> list[str]:
    """n raw COCO captions: the shipped 25,010 Karpathy-test captions, repeated in order to reach n."""
    caps = [c for v in karpathy_test_captions().values() for c in v]
    return list(itertools.islice(itertools.cycle(caps), n))


def _java(caps: list[str]) -> list[str]:
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    out = PTBTokenizer().tokenize({i: [{"caption": c}] for i, c in enumerate(caps)})
    return [out[i][0] for i in range(len(caps))]


@register("captioning", "ptb_tokenize", quick={"n": 20000}, full={"n": _VAL2014_CAPTIONS}, devices=("cpu",))
def _ptb_tokenize(n: int, device: str) -> Bench:
    require_java()
    caps = _captions(n)
    # One JVM start plus the whole batch, as pycocoevalcap does per call; timed once (it takes seconds).
    providers = {"vlkernels": lambda: ptb_tokenize(caps), "pycocoevalcap_java": lambda: _java(caps)}

    def check(out):
        if out["vlkernels"] != out["pycocoevalcap_java"]:
            bad = sum(a != b for a, b in zip(out["vlkernels"], out["pycocoevalcap_java"]))
            raise AssertionError(f"{bad} of {len(caps)} captions tokenized differently from pycocoevalcap")

    return Bench(
        providers=providers,
        baseline="pycocoevalcap_java",
        check=check,
        bytes=sum(len(c.encode()) for c in caps),
        repeats=1,
        notes=f"{len(caps)} raw COCO captions (the shipped Karpathy-test captions, repeated to this count)",
    )


@register("captioning", "ptb_tokenize_karpathy", quick={"images": 1000}, full={"images": 5000}, devices=("cpu",))
def _ptb_tokenize_karpathy(images: int, device: str) -> list[Bench]:
    """The tokenizer half of CIDEr-D from raw strings: Karpathy-test refs (4-5 per image, shipped) and one candidate
    per image (the held-out human caption), as {id: [{"caption": str}]} dicts, tokenized one dict at a time as
    pycocoevalcap's evaluation does."""
    require_java()
    caps = karpathy_test_captions()
    refs, cands = leave_one_out({k: caps[k] for k in list(caps)[:images]})
    gts = {k: [{"caption": c} for c in v] for k, v in refs.items()}
    res = {k: [{"caption": c} for c in v] for k, v in cands.items()}
    providers = {
        "vlkernels": lambda: tokenize_dicts(gts, res),
        "vlkernels_PTBTokenizer": lambda: (PTBTokenizer().tokenize(gts), PTBTokenizer().tokenize(res)),
    }
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
            baseline="pycocoevalcap_java",
            check=check,
            bytes=sum(len(c["caption"].encode()) for d in (gts, res) for v in d.values() for c in v),
            repeats=3,
            notes=f"{images} Karpathy-test images (shipped): {n} raw captions in two dicts (refs, held-out candidate)",
        )
    ]
