"""A stateful retrieval metric for training and evaluation loops (torchmetrics' ``Metric`` conventions, without it).

Embeddings accumulate batch by batch in memory, or past ``memory_budget`` bytes in a memory-mapped spill file;
``compute()`` evaluates them with :func:`~vlkernels.retrieval.functional.evaluate` (exact, streamed), gathering
across the ranks of a torch.distributed group first.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence

import numpy as np
import torch

from vlkernels.core.distributed import all_gather_rows
from vlkernels.retrieval.functional import (
    RetrievalResult,
    _check_ks,
    _check_options,
    _check_policy,
    check_backend,
    evaluate,
)


class _RowStore:
    """Rows of one (N, D) matrix appended batch by batch: torch tensors in memory until ``budget`` bytes, then every
    row in a raw file read back as a read-only ``np.memmap`` (bf16 is widened to fp32 there: numpy has no bf16)."""

    def __init__(self, name: str, budget: int | None, spill_dir: str | None):
        self.name, self.budget, self.spill_dir = name, budget, spill_dir
        self.parts: list[torch.Tensor] = []
        self.rows, self.dim, self.dtype = 0, None, None
        self.path: str | None = None

    def check(self, x: torch.Tensor) -> None:
        """Refuse a batch unlike the earlier ones (before anything of its batch is stored)."""
        if self.dim is not None and (x.shape[1] != self.dim or x.dtype != self.dtype):
            raise ValueError(
                f"{self.name} batch has D={x.shape[1]}, {x.dtype}; earlier batches had D={self.dim}, {self.dtype}"
            )

    @property
    def held_dtype(self) -> torch.dtype | None:
        """The dtype ``data()`` returns: fp32 for spilled bf16 rows."""
        return torch.float32 if self.path is not None and self.dtype == torch.bfloat16 else self.dtype

    def append(self, x: torch.Tensor) -> None:
        self.check(x)
        if self.dim is None:
            self.dim, self.dtype = x.shape[1], x.dtype
        x = x.detach().cpu().contiguous()
        self.rows += x.shape[0]
        if self.path is None:
            self.parts.append(x.clone())
            held = sum(p.numel() * p.element_size() for p in self.parts)
            if self.budget is not None and held > self.budget:
                self._spill()
        else:
            self._write(x)

    def _spill(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix=f"vlk-{self.name}-", suffix=".bin", dir=self.spill_dir)
        os.close(fd)
        parts, self.parts = self.parts, []
        for p in parts:
            self._write(p)

    def _write(self, x: torch.Tensor) -> None:
        a = (x.float() if x.dtype == torch.bfloat16 else x).numpy()
        with open(self.path, "ab") as f:
            f.write(a.tobytes())

    def data(self):
        """The rows so far: a tensor, or a memory-mapped array (file-backed past the budget)."""
        if self.path is not None:
            np_dtype = np.float32 if self.dtype == torch.bfloat16 else torch.empty(0, dtype=self.dtype).numpy().dtype
            return np.memmap(self.path, dtype=np_dtype, mode="r", shape=(self.rows, self.dim))
        if not self.parts:
            return torch.zeros(0, self.dim or 1)
        return torch.cat(self.parts)

    def reset(self) -> None:
        if self.path is not None and os.path.exists(self.path):
            os.remove(self.path)
        self.__init__(self.name, self.budget, self.spill_dir)

    def __setstate__(self, state: dict) -> None:
        """A copy (copy.deepcopy, pickle) gets a spill file of its own, copied from the original's: two stores
        sharing one file would delete it under each other on reset() or garbage collection."""
        self.__dict__.update(state)
        if self.path is not None:
            src = self.path
            fd, self.path = tempfile.mkstemp(prefix=f"vlk-{self.name}-", suffix=".bin", dir=self.spill_dir)
            os.close(fd)
            try:
                shutil.copyfile(src, self.path)
            except OSError as e:
                os.remove(self.path)
                self.path = None
                raise ValueError(f"cannot copy the {self.name} spill file {src} for the copy: {e}") from e


# evaluate's options a RetrievalMetric passes on (the others it sets itself).
_PASSED_ON = ("backend", "screen", "chunk_rows", "chunk_cols", "device_chunk", "progress")


def _check_evaluate_kwargs(kwargs: dict) -> None:
    """The options for evaluate checked at construction, not at the first compute() after an epoch of updates."""
    unknown = sorted(set(kwargs) - set(_PASSED_ON))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; evaluate options taken: {', '.join(_PASSED_ON)}")
    check_backend(kwargs.get("backend", "auto"))
    chunks = {k: kwargs[k] for k in ("chunk_rows", "chunk_cols", "device_chunk") if k in kwargs}
    _check_options(kwargs.get("screen"), **chunks)


class RetrievalMetric:
    """Image-text retrieval metrics accumulated over batches: ``update`` per batch, ``compute``, ``reset``.

    Each ``update(image_emb, text_emb, text_to_image)`` adds a batch's images and texts; ``text_to_image[i]`` is the
    index, within this batch's images, of text i's image (default: texts paired 1:1 with images, as in a CLIP batch).
    An image is added once, with all its texts in the same batch. ``compute()`` returns :func:`evaluate`'s result
    over everything added since the last ``reset()`` (cached until the next update).

    Args:
        ks, top_k, empty: as in :func:`~vlkernels.retrieval.functional.evaluate`.
        memory_budget: bytes of embeddings held in memory per rank before every row moves to a memory-mapped spill
            file (None: no limit; 0: always spill). The files are deleted by ``reset()`` and on garbage collection;
            a copy (``copy.deepcopy``, pickle) gets copies of them.
        spill_dir: folder of the spill files (default: the system temporary folder).
        group: torch.distributed process group; ``compute()`` then evaluates the union of every rank's batches
            (images and labels gathered to every rank, texts kept sharded), and every rank returns the same result.
            Ranks must call ``compute()`` together (it runs collectives); the cache holds only while no rank has
            added a batch since.
        **evaluate_kwargs: passed to :func:`evaluate`: backend, screen, chunk_rows, chunk_cols, device_chunk,
            progress.

    Raises:
        ValueError: bad ks / top_k / empty, or an option evaluate does not take (at construction); a batch whose
            images and texts differ in D, or with a D or dtype unlike earlier batches; labels out of the batch's
            range or of the wrong length (a refused batch adds nothing); ``compute()`` before any update (as
            :func:`evaluate` on empty input).

    Note:
        Order of the union: rank 0's batches in update order, then rank 1's, ... (image and text indices of the
        result's ``.ranks`` follow it). Ties, exactness, dtypes as :func:`evaluate`. Not differentiable.

    Example:
        >>> m = RetrievalMetric(ks=(1,))
        >>> m.update(torch.eye(2), torch.eye(2))
        >>> m.compute()["text_to_image"]["R@1"]
        100.0
    """

    def __init__(
        self,
        ks: Sequence[int] | int = (1, 5, 10),
        *,
        top_k: int | None = None,
        empty: str = "error",
        memory_budget: int | None = 1 << 30,
        spill_dir: str | None = None,
        group=None,
        **evaluate_kwargs,
    ):
        self.ks = _check_ks(ks)
        _check_policy(top_k, empty)
        if memory_budget is not None and (isinstance(memory_budget, bool) or memory_budget < 0):
            raise ValueError(f"memory_budget must be None or a non-negative number of bytes, got {memory_budget!r}")
        _check_evaluate_kwargs(evaluate_kwargs)
        self.top_k, self.empty, self.group, self.evaluate_kwargs = top_k, empty, group, evaluate_kwargs
        self._images = _RowStore("images", memory_budget, spill_dir)
        self._texts = _RowStore("texts", memory_budget, spill_dir)
        self._labels: list[np.ndarray] = []
        self._computed: RetrievalResult | None = None
        self._updated = False

    def update(self, image_emb: torch.Tensor, text_emb: torch.Tensor, text_to_image=None) -> None:
        """Add one batch: ``(B_img, D)`` images, ``(B_txt, D)`` texts, ``(B_txt,)`` batch-local image indices."""
        # Everything is checked before anything is stored: a refused batch leaves the state as it was.
        for name, x in (("image_emb", image_emb), ("text_emb", text_emb)):
            if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
                raise ValueError(f"{name} must be a 2-D float tensor (B, D), got {getattr(x, 'shape', type(x))}")
        if image_emb.shape[1] != text_emb.shape[1]:
            raise ValueError(f"image_emb has D={image_emb.shape[1]} but text_emb has D={text_emb.shape[1]}")
        self._images.check(image_emb)
        self._texts.check(text_emb)
        n_img, n_txt = image_emb.shape[0], text_emb.shape[0]
        if text_to_image is None:
            if n_img != n_txt:
                raise ValueError(f"without text_to_image, images and texts pair 1:1; got {n_img} and {n_txt}")
            lab = np.arange(n_txt, dtype=np.int64)
        else:
            t = text_to_image.detach().cpu().numpy() if isinstance(text_to_image, torch.Tensor) else text_to_image
            lab = np.asarray(t)
            if lab.size == 0 and lab.shape == (n_txt,):  # [] for a batch without texts
                lab = lab.astype(np.int64)
            if lab.shape != (n_txt,) or lab.dtype.kind not in "iu":
                raise ValueError(f"text_to_image must hold {n_txt} integers, one per text; got {lab.shape} {lab.dtype}")
            if n_txt and (lab.min() < 0 or lab.max() >= n_img):
                raise ValueError(f"text_to_image holds an index outside this batch's {n_img} images")
        self._images.append(image_emb)
        self._texts.append(text_emb)
        self._labels.append(lab.astype(np.int64) + (self._images.rows - n_img))
        self._computed = None
        self._updated = True

    def compute(self) -> RetrievalResult:
        """:func:`evaluate` over every batch added (on every rank of ``group``)."""
        if self._cache_valid():
            return self._computed
        self._updated = False
        images, texts = self._images.data(), self._texts.data()
        labels = np.concatenate(self._labels) if self._labels else np.zeros(0, dtype=np.int64)
        if self.group is not None:
            images, texts, labels = self._gather(images, texts, labels)
        self._computed = evaluate(
            images,
            texts,
            labels,
            self.ks,
            top_k=self.top_k,
            empty=self.empty,
            group=self.group,
            **self.evaluate_kwargs,
        )
        return self._computed

    def _cache_valid(self) -> bool:
        """Whether the last result still holds: no update since, on this rank or (with a group) on any rank. With a
        group every rank asks (one collective), so all of them either return the cache or evaluate together."""
        stale = self._computed is None or self._updated
        if self.group is not None:
            from vlkernels.retrieval.distributed import all_reduce

            stale = bool(all_reduce(torch.tensor([int(stale)]), "max", self.group)[0])
        return not stale

    def _gather(self, images, texts, labels: np.ndarray):
        """Every rank's images (concatenated in rank order), labels shifted to global image indices, and this rank's
        texts (a rank without batches takes the others' D and dtypes, so the collectives agree)."""
        import torch.distributed as dist

        # A spill file is read-only, and the collective needs the rows in memory anyway: a copy.
        local = images if isinstance(images, torch.Tensor) else torch.from_numpy(np.array(images))
        held = (self._images.held_dtype, self._texts.held_dtype)
        mine = (local.shape[0], len(labels), self._images.dtype, self._texts.dtype, self._images.dim, held)
        meta: list = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(meta, mine, group=self.group)
        kinds = {m[2:5] for m in meta if m[4] is not None}
        if len(kinds) > 1:
            raise ValueError(f"ranks hold embeddings of different dtypes or D: {sorted(map(str, kinds))}")
        if not kinds:
            raise ValueError("empty input: no rank has added a batch")
        img_dtype, txt_dtype, dim = kinds.pop()
        # bf16 rows spilled on some rank come back as fp32 there (exactly): every rank then sends and evaluates
        # fp32, so the collectives agree on the dtype (the scores are the same either way).
        if any(m[5][0] != m[2] for m in meta if m[4] is not None):
            img_dtype = torch.float32
        if any(m[5][1] != m[3] for m in meta if m[4] is not None):
            txt_dtype = torch.float32
        if self._images.dim is None:
            local = torch.zeros(0, dim, dtype=img_dtype)
            texts = torch.zeros(0, dim, dtype=txt_dtype)
        local = local.to(img_dtype)
        if isinstance(texts, torch.Tensor):
            texts = texts.to(txt_dtype)
        rank = dist.get_rank(self.group)
        img_off = sum(m[0] for m in meta[:rank])
        imgs = torch.cat(all_gather_rows(local.cpu(), self.group))
        labs = torch.cat(all_gather_rows(torch.from_numpy(labels + img_off), self.group))
        return imgs, texts, labs.numpy()

    def reset(self) -> None:
        """Drop every batch (and the spill files)."""
        self._images.reset()
        self._texts.reset()
        self._labels = []
        self._computed = None
        self._updated = False

    def __del__(self):
        try:
            self.reset()
        except Exception:  # interpreter shutdown: the files may already be gone
            pass
