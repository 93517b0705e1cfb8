"""PTB tokenization of raw captions: vlkernels' C++ tokenizer against pycocoevalcap's Java PTBTokenizer."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
from pathlib import Path

from vlkernels.captioning.tokenizer import ptb_tokenize

from .harness import Bench, register

_GOLDEN = "captions/golden/coco_val2014_captions_reconstructed.json.gz"


def _captions(n: int) -> list[str]:
    """The first n COCO val2014 captions from the shared data (all 202,654 for n=-1), else synthetic ones."""
    roots = [os.environ.get("VLKERNELS_SHARED_DATA", ""), str(Path(__file__).resolve().parents[2] / "shared" / "data")]
    for root in roots:
        path = Path(root) / _GOLDEN
        if root and path.is_file():
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
