"""Slot planes: the layout both counting paths (C++ on CPU, Triton on GPU) give a block of queries' positives.

A query with m positives occupies slots 0..m-1; plane k holds every query's k-th positive (its threshold score and
its index on the other side), padded with +inf thresholds that never count. One kernel pass over a score tile then
counts every slot of every query of the block at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from vlkernels.retrieval.positives import Positives


@dataclasses.dataclass(frozen=True)
class SlotPlan:
    """The evaluated pairs of queries ``q0..q0+n`` of a Positives, laid out in ``width`` slot planes.

    Attributes:
        pairs: ``(E,)`` pair ids (positions in the Positives' pair order).
        rows: ``(E,)`` query of each pair, relative to ``q0``.
        slots: ``(E,)`` slot of each pair (its position among its query's positives).
        n: queries in the block.
        width: number of planes (at least ``slots.max() + 1``).
    """

    pairs: np.ndarray
    rows: np.ndarray
    slots: np.ndarray
    n: int
    width: int

    @classmethod
    def build(cls, pos: Positives, q0: int, q1: int, evaluated: np.ndarray, width=None) -> SlotPlan | None:
        """Plan of queries ``q0..q1``; ``evaluated`` flags the pairs to count (all pairs' order). ``width`` maps the
        needed number of slots to the plane count (padding); None when no pair of the block is evaluated."""
        lo, hi = pos.indptr[q0], pos.indptr[q1]
        pairs = lo + np.flatnonzero(evaluated[lo:hi])
        if len(pairs) == 0:
            return None
        q = np.searchsorted(pos.indptr, pairs, side="right") - 1
        slots = pairs - pos.indptr[q]
        need = int(slots.max()) + 1
        return cls(pairs, q - q0, slots, q1 - q0, need if width is None else width(need))

    def _index(self, slot_major: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = (self.slots, self.rows) if slot_major else (self.rows, self.slots)
        return torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)

    def planes(self, values, fill, slot_major: bool, device=None) -> torch.Tensor:
        """``values[pairs]`` scattered into planes, ``(width, n)`` when ``slot_major`` else ``(n, width)``; ``values``
        is a numpy array or a tensor (kept on its device)."""
        v = torch.as_tensor(values)
        device = v.device if device is None else device
        shape = (self.width, self.n) if slot_major else (self.n, self.width)
        out = torch.full(shape, fill, dtype=v.dtype, device=device)
        out[self._index(slot_major, device)] = v[torch.from_numpy(self.pairs).to(v.device)].to(device)
        return out

    def take(self, planes: torch.Tensor, slot_major: bool) -> torch.Tensor:
        """The per-pair entries of ``planes`` (counts), in ``pairs`` order, on the planes' device."""
        return planes[self._index(slot_major, planes.device)]
