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


def image_item(names: Sequence[Any], what: str = "image") -> Callable[[int, int], str]:
    """Names item `item` of the C++ layer: pos -1 = its candidate, -2 = its reference list, >= 0 = reference."""

    def name(item: int, pos: int) -> str:
        where = f"{what} {names[item]!r}"
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


def split_dicts(gts: Mapping[Any, Any], res: Mapping[Any, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """(image ids in gts order, candidate lists, reference lists) after pycocoevalcap's key check."""
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
    keys = list(gts.keys())
    return keys, [res[k] for k in keys], [gts[k] for k in keys]


def log_table(max_df: int) -> np.ndarray:
    """np.log(max(1.0, d)) for d = 0..max_df, computed by numpy exactly as the Python scorers compute it."""
    return np.log(np.maximum(1.0, np.arange(max_df + 1, dtype=np.float64)))


def ref_len_of(num_docs: int) -> float:
    return float(np.log(float(num_docs)))
