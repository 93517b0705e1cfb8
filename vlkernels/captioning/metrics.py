"""BLEU-1..4 and ROUGE-L with pycocoevalcap's interface and numbers, on the shared C++ n-gram machinery."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from vlkernels.captioning._common import check_dicts, load, score_images


class Bleu:
    r"""BLEU-1..n exactly as pycocoevalcap's ``Bleu`` (BleuScorer, effective reference length "closest").

    .. math::
        \mathrm{BLEU}_N = \mathrm{BP}\cdot\Big(\prod_{n=1}^{N}\frac{\sum\mathrm{correct}_n + 10^{-15}}
        {\sum\mathrm{guess}_n + 10^{-9}}\Big)^{1/N},\quad \mathrm{BP} = \min(1, e^{1 - r/c})

    (Papineni et al., ACL 2002) with clipped counts against the maximum count over an image's references and,
    per image, the reference length closest to the candidate's (the shorter one on ties).

    Args:
        n: largest n-gram length (1..4), default 4.
        tokenize: run the PTB tokenizer on raw captions first (default False).

    Note:
        float64, deterministic, equal to pycocoevalcap bit for bit. ``verbose=1`` prints the same totals line as
        pycocoevalcap.

    Example:
        >>> score, per_image = Bleu().compute_score({1: ["a b c d"]}, {1: ["a b c d"]}, verbose=0)
        >>> len(score), len(per_image[3])
        (4, 1)
    """

    def __init__(self, n: int = 4, *, tokenize: bool = False) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4:
            raise ValueError(f"n must be an int in [1, 4], got {n!r}")
        self._n = n
        self._tokenize = tokenize

    def compute_score(
        self, gts: Mapping[Any, list], res: Mapping[Any, list], verbose: int = 1
    ) -> tuple[list[float], list[list[float]]]:
        """Corpus BLEU-1..n and per-image BLEU lists.

        Args:
            gts: ``{image_id: [reference, ...]}``; res: ``{image_id: [candidate]}`` with the same ids.
            verbose: 1 prints pycocoevalcap's totals and ratio lines (its default), 0 is silent.

        Returns:
            ``(scores, per_image)``: ``scores[k]`` is corpus BLEU-(k+1); ``per_image[k]`` the list of per-image
            BLEU-(k+1) in ``gts`` key order.

        Raises:
            ValueError: as :meth:`vlkernels.captioning.Cider.compute_score`.
        """
        gts, res = check_dicts(gts, res)
        out = score_images(gts, res, load().CAP_BLEU, tokenize=self._tokenize, n=self._n)
        return bleu_totals(out["bleu_stats"], out["bleu"], self._n, verbose)

    def method(self) -> str:
        return "Bleu"


def bleu_totals(stats: np.ndarray, per: np.ndarray, n: int, verbose: int = 0) -> tuple[list[float], list[list[float]]]:
    """pycocoevalcap's corpus BLEU from the per-image counts (C++), in its operation order."""
    small, tiny = 1e-9, 1e-15
    testlen, reflen = int(stats[:, 0].sum()), int(stats[:, 1].sum())
    guess = [int(v) for v in stats[:, 2 : 2 + n].sum(axis=0)] if len(stats) else [0] * n
    correct = [int(v) for v in stats[:, 2 + n :].sum(axis=0)] if len(stats) else [0] * n
    # pycocoevalcap's corpus formula, in its operation order.
    bleus, bleu = [], 1.0
    for k in range(n):
        bleu *= float(correct[k] + tiny) / (guess[k] + small)
        bleus.append(bleu ** (1.0 / (k + 1)))
    ratio = (testlen + tiny) / (reflen + small)
    if ratio < 1:
        for k in range(n):
            bleus[k] *= math.exp(1 - 1 / ratio)
    if verbose > 0:
        print({"testlen": testlen, "reflen": reflen, "guess": guess, "correct": correct})
        print("ratio:", ratio)
    return bleus, [per[:, k].tolist() for k in range(n)]


class Rouge:
    r"""ROUGE-L exactly as pycocoevalcap's ``Rouge`` (Lin, 2004; beta = 1.2).

    .. math::
        \mathrm{ROUGE\text{-}L} = \frac{(1+\beta^2)\,P\,R}{R + \beta^2 P},\quad
        P = \max_s \frac{\mathrm{LCS}(c, s)}{|c|},\ R = \max_s \frac{\mathrm{LCS}(c, s)}{|s|}

    Tokens are ``caption.split(" ")`` as in pycocoevalcap (single spaces; "" is one empty token).

    Args:
        tokenize: run the PTB tokenizer on raw captions first (default False).

    Note:
        float64, deterministic, equal to pycocoevalcap bit for bit.

    Example:
        >>> float(Rouge().compute_score({1: ["a b c"]}, {1: ["a b c"]})[0])
        1.0
    """

    def __init__(self, *, tokenize: bool = False) -> None:
        self.beta = 1.2
        self._tokenize = tokenize

    def compute_score(self, gts: Mapping[Any, list], res: Mapping[Any, list]) -> tuple[np.float64, np.ndarray]:
        """Mean ROUGE-L and the per-image array (``gts`` key order). Raises ValueError as ``Cider``."""
        gts, res = check_dicts(gts, res)
        scores = score_images(gts, res, load().CAP_ROUGE, tokenize=self._tokenize)["rouge"]
        return np.mean(scores), scores

    def method(self) -> str:
        return "Rouge"
