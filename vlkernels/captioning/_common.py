"""Input validation shared by the caption metrics: pycocoevalcap's dict layout and its assertions, as ValueErrors."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vlkernels import _ext


def load() -> Any:
    return _ext.load()


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
    ``CAP_CIDER | CAP_BLEU | CAP_ROUGE``; returns the per-image arrays (``"cider"``, ``"bleu_stats"``,
    ``"bleu"``, ``"rouge"``: those of the metrics asked) and ``"any_ref_words"``."""
    m = len(gts)
    out = image_scores(m, n)
    any_ref_words = load().cap_score_images(
        gts, res, tokenize, metrics, n, sigma, cider_d, ref_len_of(max(m, 1)), log_table(m), stem, *out.values()
    )
    return dict(out, any_ref_words=any_ref_words)


def image_scores(m: int, n: int = 4) -> dict[str, np.ndarray]:
    """The per-image outputs the C++ scorers fill, in the order they take them: CIDEr (m,), BLEU's clipped counts
    and lengths (m, 2 + 2n) int64, BLEU-1..n (m, n), ROUGE-L (m,)."""
    return {
        "cider": np.zeros(m, np.float64),
        "bleu_stats": np.zeros((m, 2 + 2 * n), np.int64),
        "bleu": np.zeros((m, n), np.float64),
        "rouge": np.zeros(m, np.float64),
    }


def log_table(max_df: int) -> np.ndarray:
    """np.log(max(1.0, d)) for d = 0..max_df, computed by numpy exactly as the Python scorers compute it."""
    return np.log(np.maximum(1.0, np.arange(max_df + 1, dtype=np.float64)))


def ref_len_of(num_docs: int) -> float:
    return float(np.log(float(num_docs)))
