"""Plain-Python references: ruotianluo-style CiderD with fixed document frequencies, on pycocoevalcap's scorer.

Used by tests (as an independent check of the SCST path) and by the benchmarks (as the Python baseline).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np


def document_frequency_ref(refs: Sequence[Sequence[str]], n: int = 4) -> dict[tuple[str, ...], float]:
    """ruotianluo prepro_ngrams / pycocoevalcap compute_doc_freq: images whose references contain each n-gram."""
    from pycocoevalcap.cider.cider_scorer import precook

    df: dict[tuple[str, ...], float] = defaultdict(float)
    for group in refs:
        for ngram in {g for r in group for g in precook(r, n)}:
            df[ngram] += 1
    return df


def ciderd_ref(
    candidates: Sequence[str],
    refs: Sequence[Sequence[str]],
    document_frequency: Mapping,
    num_docs: int,
    n: int = 4,
    sigma: float = 6.0,
) -> np.ndarray:
    """CIDEr-D of candidates[i] against refs[i] with fixed df and ref_len = log(num_docs) (ruotianluo CiderD)."""
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    scorer = CiderScorer(n=n, sigma=sigma)
    for c, r in zip(candidates, refs):
        scorer += (c, list(r))
    scorer.document_frequency = defaultdict(float, document_frequency)
    # compute_cider sets ref_len = log(len(crefs)); fixed-df scoring needs log(num_docs) instead.
    scorer.crefs = _LenProxy(scorer.crefs, num_docs)
    return np.asarray(scorer.compute_cider(), dtype=np.float64)


class _LenProxy(list):
    """A list whose len() is the corpus size, so compute_cider's ref_len = log(len(crefs)) = log(num_docs)."""

    def __init__(self, items: list, fake_len: int) -> None:
        super().__init__(items)
        self._fake_len = fake_len

    def __len__(self) -> int:
        return self._fake_len
