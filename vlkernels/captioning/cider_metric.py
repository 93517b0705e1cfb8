"""CiderMetric: corpus CIDEr-D accumulated over batches of a training or evaluation loop, synchronised across
torch.distributed ranks (torchmetrics' Metric conventions, without needing torchmetrics)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlkernels.captioning.cider import Cider, CiderOriginal
from vlkernels.core.distributed import all_gather_rows


class CiderMetric(torch.nn.Module):
    r"""Corpus CIDEr-D (pycocoevalcap 1.2) of every (prediction, references) pair seen since the last ``reset()``.

    Each ``update`` adds a batch of samples; a sample is one image: its predicted caption and its reference
    captions. ``compute()`` scores them all together, as ``Cider().compute_score`` on the same pairs would: the
    document frequencies and :math:`\log|I|` come from every sample of every rank, so the value is the corpus score,
    not a mean of per-batch scores.

    Args:
        n: largest n-gram length (1..4), default 4.
        sigma: length-penalty standard deviation, default 6.0.
        tokenize: PTB-tokenize raw captions at ``compute()`` (as ``Cider(tokenize=True)``); default False.
        original: original CIDEr (:class:`CiderOriginal`) instead of CIDEr-D.
        sync_on_compute: gather the samples of all ranks at ``compute()`` when torch.distributed is initialised
            (default True; every rank must call ``compute()``).
        process_group: the group to gather over (default: the world).

    Attributes:
        scores: float64 array of the per-sample scores of the last ``compute()`` (gathered order: rank 0's
            samples in update order, then rank 1's, ...).

    Note:
        Follows torchmetrics' ``Metric``: ``update``, ``compute``, ``reset``, ``forward`` (updates and returns the
        batch's own score), ``is_differentiable = False``, ``higher_is_better = True``. The state is the captions
        themselves (CIDEr's document frequencies need the whole corpus); it is gathered as UTF-8 JSON in uint8
        tensors (no pickle) on the device the group's backend needs (the current CUDA device under NCCL, the CPU
        under gloo; ``vlkernels.core.distributed``). Per-sample scores do not depend on the sharding; the mean may
        differ from a single-process run in the last bit (summation order). A ``DistributedSampler`` that pads
        ranks with repeated samples counts those twice, as in torchmetrics. With ``tokenize=True`` the PTB lexer
        reads each caption with the next one as context (pycocoevalcap's behaviour), so the gathered order can
        matter in rare cases.

    Example:
        >>> m = CiderMetric()
        >>> m.update(["a dog runs"], [["a dog runs", "a dog is running"]])
        >>> m.update(["a cat"], [["a cat sleeps"]])
        >>> round(float(m.compute()), 4) > 0
        True
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(
        self,
        n: int = 4,
        sigma: float = 6.0,
        *,
        tokenize: bool = False,
        original: bool = False,
        sync_on_compute: bool = True,
        process_group: Any = None,
    ) -> None:
        super().__init__()
        self._scorer = (CiderOriginal if original else Cider)(n, sigma, tokenize=tokenize)
        self._tokenize = tokenize
        self.sync_on_compute = sync_on_compute
        self.process_group = process_group
        self.scores: np.ndarray | None = None
        self.reset()

    def reset(self) -> None:
        """Forgets every sample."""
        self.preds: list[Any] = []
        self.target: list[list[Any]] = []

    def update(self, preds: Sequence[Any], target: Sequence[Sequence[Any]]) -> None:
        """Adds a batch: ``preds[i]`` (a caption) with its references ``target[i]`` (a non-empty list of captions;
        a single caption is taken as a list of one). Captions are str (or ``{"caption": str}`` with tokenize).

        Raises:
            ValueError: preds and target of different lengths, a sample without a reference, or a caption that is
                not a str (a dict with a str "caption" under tokenize) of valid UTF-8. Checked before anything is
                stored: a refused batch adds nothing, and no caption can fail a later ``compute()`` (or, across
                ranks, the gather).
        """
        if isinstance(preds, str):
            preds = [preds]
            target = [target] if target and isinstance(target[0], str) else target
        preds, target = list(preds), list(target)
        if len(preds) != len(target):
            raise ValueError(f"preds has {len(preds)} captions but target has {len(target)} reference lists")
        refs = [[t] if isinstance(t, (str, dict, bytes)) else list(t) for t in target]
        for i, (p, r) in enumerate(zip(preds, refs)):
            if not r:
                raise ValueError(f"target[{i}]: no reference captions")
            self._check_caption(p, f"preds[{i}]")
            for j, c in enumerate(r):
                self._check_caption(c, f"target[{i}][{j}]")
        self.preds.extend(preds)
        self.target.extend(refs)

    def _check_caption(self, c: Any, where: str) -> None:
        text = c.get("caption") if isinstance(c, dict) and self._tokenize else c
        if not isinstance(text, str):
            want = 'a str or {"caption": str}' if self._tokenize else "a str"
            raise ValueError(f"{where}: expected {want}, got {type(c).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where}: not valid UTF-8 (lone surrogate)") from None

    def compute(self) -> torch.Tensor:
        """Corpus CIDEr(-D) of all samples of all ranks, as a float64 scalar tensor (also stores ``scores``).

        Raises:
            ValueError: no sample on any rank, or a malformed caption (named by its gathered sample index).
        """
        preds, target = self._gathered()
        if not preds:
            raise ValueError("CiderMetric.compute() before any update(): no sample to score")
        mean, self.scores = self._scorer.compute_score(
            {i: t for i, t in enumerate(target)}, {i: [p] for i, p in enumerate(preds)}
        )
        return torch.tensor(float(mean), dtype=torch.float64)

    def forward(self, preds: Sequence[Any], target: Sequence[Sequence[Any]]) -> torch.Tensor:
        """Adds the batch and returns its own CIDEr(-D) (document frequencies of this batch alone, no gather)."""
        start = len(self.preds)
        self.update(preds, target)
        batch_p, batch_t = self.preds[start:], self.target[start:]
        mean, _ = self._scorer.compute_score(
            {i: t for i, t in enumerate(batch_t)}, {i: [p] for i, p in enumerate(batch_p)}
        )
        return torch.tensor(float(mean), dtype=torch.float64)

    def _gathered(self) -> tuple[list[Any], list[list[Any]]]:
        dist = torch.distributed
        if not (self.sync_on_compute and dist.is_available() and dist.is_initialized()):
            return self.preds, self.target
        world = dist.get_world_size(self.process_group)
        if world == 1:
            return self.preds, self.target
        payload = json.dumps([self.preds, self.target], ensure_ascii=False).encode("utf-8")
        parts = all_gather_rows(torch.frombuffer(bytearray(payload), dtype=torch.uint8), self.process_group)
        preds: list[Any] = []
        target: list[list[Any]] = []
        for part in parts:
            p, t = json.loads(part.numpy().tobytes().decode("utf-8"))
            preds.extend(p)
            target.extend(t)
        return preds, target
