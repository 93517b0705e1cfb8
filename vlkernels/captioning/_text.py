"""Caption text helpers: PTB tokenization of raw captions (vlkernels C++ tokenizer, or pycocoevalcap's Java one
until it is available) and the optional Porter stemming."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _caption_text(c: Any, where: str) -> str:
    # pycocoevalcap's PTBTokenizer takes {"caption": str} dicts; plain strings are accepted too.
    if isinstance(c, Mapping):
        if "caption" not in c:
            raise ValueError(f"{where}: annotation dict has no 'caption' field")
        c = c["caption"]
    if not isinstance(c, str):
        raise ValueError(f"{where}: caption must be str, got {type(c).__name__}")
    return c


def ptb_tokenize_many(captions: Sequence[str]) -> list[str]:
    """PTB-tokenizes raw captions (lowercase, punctuation removed) exactly as pycocoevalcap's PTBTokenizer."""
    try:
        from vlkernels.captioning.tokenizer import ptb_tokenize
    except ImportError:
        ptb_tokenize = _java_ptb_tokenize
    return list(ptb_tokenize(list(captions)))


def _java_ptb_tokenize(captions: list[str]) -> list[str]:
    # Fallback while the C++ tokenizer is absent: pycocoevalcap's Stanford PTBTokenizer (needs Java).
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    out = PTBTokenizer().tokenize({i: [{"caption": c}] for i, c in enumerate(captions)})
    return [out[i][0] for i in range(len(captions))]


def tokenize_dicts(gts: Mapping[Any, Any], res: Mapping[Any, Any]) -> tuple[dict, dict]:
    """Raw {id: [captions]} dicts -> tokenized ones (one tokenizer call over every caption)."""
    flat: list[str] = []
    shapes = []
    for name, d in (("gts", gts), ("res", res)):
        for k, caps in d.items():
            if not isinstance(caps, list):
                raise ValueError(f"{name}[{k!r}] must be a list of captions, got {type(caps).__name__}")
            shapes.append((name, k, len(caps)))
            flat.extend(_caption_text(c, f"{name}[{k!r}][{j}]") for j, c in enumerate(caps))
    toks = ptb_tokenize_many(flat)
    out: dict[str, dict] = {"gts": {}, "res": {}}
    pos = 0
    for name, k, n in shapes:
        out[name][k] = toks[pos : pos + n]
        pos += n
    return out["gts"], out["res"]


def stem_dicts(*dicts: Mapping[Any, list[str]]) -> list[dict]:
    """Porter-stems every whitespace token with nltk's PorterStemmer (default NLTK_EXTENSIONS mode), cached."""
    try:
        from nltk.stem.porter import PorterStemmer
    except ImportError as e:
        raise ImportError("stem=True needs nltk (pip install nltk)") from e
    stemmer = PorterStemmer()
    cache: dict[str, str] = {}

    def stem_caption(c: Any) -> Any:
        if not isinstance(c, str):
            return c  # left for the scorer's validation to name
        words = c.split()
        out = []
        for w in words:
            s = cache.get(w)
            if s is None:
                s = cache[w] = stemmer.stem(w)
            out.append(s)
        return " ".join(out)

    return [{k: [stem_caption(c) for c in v] if isinstance(v, list) else v for k, v in d.items()} for d in dicts]
