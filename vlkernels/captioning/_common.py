"""Input validation shared by the caption metrics: pycocoevalcap's dict layout and its assertions, as ValueErrors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from vlkernels import _ext

_CAPTION_ERROR = "__vlk_caption__"


def load() -> Any:
    return _ext.load()


def image_item(names: Sequence[Any] | Callable[[], Sequence[Any]], what: str = "image") -> Callable[[int, int], str]:
    """Names item `item` of the C++ layer: pos -1 = its candidate, -2 = its reference list, >= 0 = reference.
    ``names`` may be a callable returning the names (evaluated only when an error is named)."""

    def name(item: int, pos: int) -> str:
        seq = names() if callable(names) else names
        where = f"{what} {seq[item]!r}"
        if pos == -1:
            where += " candidate"
        elif pos == -2:
            where += " references"
        elif pos >= 0:
            where += f" reference {pos}"
        return where

    return name


@contextlib.contextmanager
def caption_errors(name: Callable[[int, int], str]) -> Iterator[None]:
    """Turns the C++ layer's ValueError(("__vlk_caption__", item, pos, reason)) into a message naming the item."""
    try:
        yield
    except ValueError as e:
        # PyErr_SetObject(ValueError, tuple) makes the tuple the exception's args.
        if len(e.args) == 4 and e.args[0] == _CAPTION_ERROR:
            _, item, pos, reason = e.args
            raise ValueError(f"{name(item, pos)}: {reason}") from None
        raise


def check_dicts(gts: Any, res: Any) -> tuple[dict, dict]:
    """pycocoevalcap's key check, as a ValueError; returns both as plain dicts in their own key order."""
    if not isinstance(gts, Mapping) or not isinstance(res, Mapping):
        raise ValueError(
            f"gts and res must be dicts {{image_id: [captions]}}, got {type(gts).__name__} and {type(res).__name__}"
        )
    if gts.keys() != res.keys():
        missing = [k for k in gts if k not in res][:5]
        extra = [k for k in res if k not in gts][:5]
        raise ValueError(
            "gts and res must have the same image ids (pycocoevalcap asserts gts.keys() == res.keys()): "
            f"ids without a candidate {missing}, candidates without references {extra} (first 5 shown)"
        )
    return (gts if type(gts) is dict else dict(gts)), (res if type(res) is dict else dict(res))


def score_images(
    gts: dict,
    res: dict,
    metrics: int,
    *,
    tokenize: bool,
    n: int = 4,
    sigma: float = 6.0,
    cider_d: bool = True,
    stem: Callable[[list[str]], list[str]] | None = None,
) -> dict[str, Any]:
    """The pycocoevalcap layout (dicts from :func:`check_dicts`) read, checked, tokenized (``tokenize``: raw str or
    ``{"caption": str}`` captions through the PTB tokenizer), stemmed (``stem``: called back once with the distinct
    words, CIDEr and BLEU only) and scored in one C++ call. ``metrics`` is a mask of
    ``CAP_CIDER | CAP_BLEU | CAP_ROUGE``; returns the C++ layer's dict of per-image arrays (``"cider"``,
    ``"any_ref_words"``, ``"bleu_stats"``, ``"bleu"``, ``"rouge"``)."""
    m = len(gts)
    with caption_errors(image_item(lambda: list(gts))):
        return load().cap_score_images(
            gts, res, tokenize, metrics, n, sigma, cider_d, ref_len_of(max(m, 1)), log_table(m), stem
        )


def log_table(max_df: int) -> np.ndarray:
    """np.log(max(1.0, d)) for d = 0..max_df, computed by numpy exactly as the Python scorers compute it."""
    return np.log(np.maximum(1.0, np.arange(max_df + 1, dtype=np.float64)))


def ref_len_of(num_docs: int) -> float:
    return float(np.log(float(num_docs)))
