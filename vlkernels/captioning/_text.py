"""Caption text helpers: PTB tokenization of raw caption dicts (the C++ tokenizer) and the optional Porter
stemmer the scorers call back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vlkernels import _ext


def _tokenize_dict(d: Mapping[Any, Any], name: str) -> dict:
    # One C++ call; it checks every value and caption and raises the ValueError naming the image and position.
    return _ext.load().ptb_tokenize_dict(
        d if isinstance(d, dict) else dict(d), allow_str=True, drop_empty=False, name=name
    )


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
