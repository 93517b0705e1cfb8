"""Caption text helpers: PTB tokenization of raw caption dicts (the C++ tokenizer) and the optional Porter
stemmer the scorers call back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vlkernels import _ext
from vlkernels.captioning.tokenizer import ptb_tokenize


def _caption_text(c: Any, where: str) -> str:
    # pycocoevalcap's PTBTokenizer takes {"caption": str} dicts; plain strings are accepted too.
    if isinstance(c, Mapping):
        if "caption" not in c:
            raise ValueError(f"{where}: annotation dict has no 'caption' field")
        c = c["caption"]
    if not isinstance(c, str):
        raise ValueError(f"{where}: caption must be str, got {type(c).__name__}")
    return c


def _tokenize_dict(d: Mapping[Any, Any], name: str) -> dict:
    # One C++ call for a plain dict of lists of {"caption": str} dicts or str; None sends anything else (and every
    # error) down the general path below, which names the problem.
    out = _ext.load().ptb_tokenize_dict(d, allow_str=True, drop_empty=False)
    if out is not None:
        return out
    flat: list[str] = []
    shapes = []
    for k, caps in d.items():
        if not isinstance(caps, list):
            raise ValueError(f"{name}[{k!r}] must be a list of captions, got {type(caps).__name__}")
        shapes.append((k, len(caps)))
        flat.extend(_caption_text(c, f"{name}[{k!r}][{j}]") for j, c in enumerate(caps))
    toks = ptb_tokenize(flat)
    out, pos = {}, 0
    for k, n in shapes:
        out[k] = toks[pos : pos + n]
        pos += n
    return out


def tokenize_dicts(gts: Mapping[Any, Any], res: Mapping[Any, Any]) -> tuple[dict, dict]:
    """Raw {id: [captions]} dicts -> tokenized ones, exactly as pycocoevalcap's evaluation tokenizes them.

    One tokenizer call per dict, in key order: the PTB lexer reads a caption's end with the next caption as
    context (pycocoevalcap runs one Java PTBTokenizer per dict), so the grouping is part of the result.
    """
    return _tokenize_dict(gts, "gts"), _tokenize_dict(res, "res")


def porter_stemmer() -> Callable[[list[str]], list[str]]:
    """nltk's ``PorterStemmer().stem`` (default NLTK_EXTENSIONS mode) over a list of words, as the scorer's C++ layer
    calls it: once per call, with the distinct words of the tokenized captions."""
    try:
        from nltk.stem.porter import PorterStemmer
    except ImportError as e:
        raise ImportError("stem=True needs nltk (pip install nltk)") from e
    stem = PorterStemmer().stem
    return lambda words: [stem(w) for w in words]
