"""Exact retrieval metrics, and each text's top-k, for embedding sets larger than memory: the images in blocks.

``evaluate`` keeps the whole image set resident in the compute dtype (1,000,000 x 512 fp32 images are 2 GiB). Here
both sides stay on disk (memory-mapped .npy / .safetensors, or any source ``Embeddings`` reads): the images are read
one block at a time, and for each block every text is streamed past it in row chunks (the CPU engine's tiles,
``cpu.count_both``), so resident memory is one image block, the workers' text chunks and tiles, and O(pairs + texts
x k) of ground truth, counts and top-k state, whatever the sizes.

Counts add up over blocks: a text's count (images ranked above its positive) is the sum of its counts against each
block, an image's count is complete within its block. Every threshold is the exact score of its pair, computed once
before the first block (a text's positive may lie in any block), so the result equals ``evaluate``'s exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vlkernels.retrieval import cpu
from vlkernels.retrieval.functional import (
    DIRECTIONS,
    RetrievalResult,
    _check_ks,
    _check_options,
    _compute_dtype,
    _metrics,
    _open,
    ground_truth,
)
from vlkernels.retrieval.io import Embeddings

# Image block size when none is given: this many bytes of images in the compute dtype (512 rows of D = 512 fp32 are
# 1 MiB, so 131,072 images per block; 1,000,000 images take 8 blocks).
BLOCK_BYTES = 1 << 28
# Texts read at a time for the exact thresholds (16 MiB of D = 512 fp32 rows).
TEXT_CHUNK = 1 << 13


def evaluate_stream(
    image_emb,
    text_emb,
    text_to_image=None,
    ks: Sequence[int] | int = (1, 5, 10),
    *,
    t2i=None,
    i2t=None,
    top_k: int | None = None,
    empty: str = "error",
    text_topk: int = 0,
    screen: str | None = None,
    block_images: int | None = None,
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    progress: bool = False,
) -> RetrievalResult:
    """:func:`~vlkernels.retrieval.evaluate` (CPU engine) with neither side held whole: for files larger than memory.

    The same metrics, ranks and definition of exact as ``evaluate``, computed with the images read ``block_images``
    rows at a time and the texts streamed past each block in ``chunk_rows`` chunks; optionally the top-``text_topk``
    images of every text from the same score tiles (no second pass over the data).

    Args:
        image_emb: ``(N_img, D)`` images: a .npy / .safetensors path (memory-mapped), a numpy array or memmap, or a
            CPU tensor.
        text_emb: ``(N_txt, D)`` texts, same forms.
        text_to_image, ks, t2i, i2t, top_k, empty, screen, chunk_rows, chunk_cols: as in ``evaluate``.
        text_topk: also return the best ``text_topk`` images of every text (0: none); clamped to N_img.
        block_images: images per block (default: ``BLOCK_BYTES`` of them in the compute dtype, a multiple of
            ``chunk_cols``). Peak memory grows with it; the result does not depend on it.
        progress: a tqdm bar over all tiles of all blocks, with its rate and ETA.

    Returns:
        RetrievalResult as ``evaluate``'s. ``.meta`` adds ``blocks`` and ``block_images``; with ``text_topk``,
        ``.text_topk`` is ``(values, indices)`` as :func:`~vlkernels.retrieval.topk` returns them (``(N_txt, k)``,
        exact scores in the output dtype, best first, ties to the lower index) and ``.meta`` has
        ``topk_rechecked_pairs`` / ``topk_rechecked_fraction``.

    Raises:
        ValueError: as ``evaluate`` (bad files, shapes, dtypes, non-finite values, ground truth, ks, top_k, empty,
            chunk sizes), a device tensor (this path runs on the host), a bad ``block_images`` or ``text_topk``.

    Note:
        Each block re-reads every text (from the page cache when it fits there): the file traffic is
        N_txt x D x (number of blocks), the arithmetic N_txt x N_img x D as in ``evaluate``. Memory-mapped pages
        are released after each chunk is copied (``io._release_pages``), so reading a file does not grow the
        resident set. Ctrl-C stops the call between tiles. Deterministic; not differentiable.

    Example:
        >>> img = torch.eye(3); txt = torch.eye(3)[[0, 0, 1, 2]]
        >>> res = evaluate_stream(img, txt, [0, 0, 1, 2], text_topk=1, block_images=1, chunk_cols=1)
        >>> res["text_to_image"]["R@1"], res.text_topk[1].flatten().tolist()
        (100.0, [0, 0, 1, 2])
    """
    ks = _check_ks(ks)
    blocks = {} if block_images is None else {"block_images": block_images}
    _check_options(screen, top_k, empty, chunk_rows=chunk_rows, chunk_cols=chunk_cols, **blocks)
    if isinstance(text_topk, bool) or not isinstance(text_topk, (int, np.integer)) or text_topk < 0:
        raise ValueError(f"text_topk must be a non-negative integer, got {text_topk!r}")
    images, texts, _, _, _ = _open(image_emb, text_emb, "image_emb", "text_emb", "cpu")
    n_img, n_txt = len(images), len(texts)
    if n_img == 0 or n_txt == 0:
        raise ValueError(f"empty input: {n_img} images and {n_txt} texts; both must be non-empty")
    t2i_pos, i2t_pos, derived = ground_truth(text_to_image, t2i, i2t, n_txt, n_img)
    dtype = _compute_dtype(images, texts)
    chunk_rows, chunk_cols = int(chunk_rows), int(chunk_cols)
    if block_images is None:
        per_row = images.shape[1] * torch.finfo(dtype).bits // 8
        block_images = max(1, BLOCK_BYTES // max(per_row, 1) // chunk_cols) * chunk_cols
    block = min(int(block_images), n_img)
    starts = list(range(0, n_img, block))

    thresholds = _thresholds(texts, images, t2i_pos, i2t_pos, dtype, block)
    n_rc = -(-n_txt // cpu.balanced_chunk(n_txt, chunk_rows))
    tiles = n_rc * sum(-(-(min(n_img, b0 + block) - b0) // chunk_cols) for b0 in starts)
    bar = cpu._progress(tiles, progress, "retrieval")
    top = cpu.TopKState(n_txt, min(int(text_topk), n_img)) if text_topk else None

    def on_tile(sc, rs, cs, s, r0, c0) -> None:
        if top is not None:
            top.update(sc, rs, cs, s, r0, c0)
        if bar is not None:
            bar.update(1)

    r_above = np.zeros(len(t2i_pos.indices), dtype=np.int64)
    c_above = np.zeros(len(i2t_pos.indices), dtype=np.int64)
    rechecked = decisions = 0
    screens: set[str] = set()
    try:
        for b0 in starts:
            cols = images.chunk(b0, min(n_img, b0 + block), dtype)
            r, c, meta = cpu.count_both(
                texts,
                cols,
                t2i_pos,
                i2t_pos,
                0,
                chunk_rows,
                chunk_cols,
                False,
                None,
                screen,
                col_offset=b0,
                thresholds=thresholds,
                on_tile=on_tile,
            )
            del cols  # before the next block is read: one block resident at a time
            r_above += r
            c_above += c
            rechecked += meta["rechecked_pairs"]
            decisions += meta["decisions"]
            screens.update(filter(None, (meta["screen"] or "").split("+")))
    finally:
        if bar is not None:
            bar.close()

    both = {"text_to_image": (t2i_pos, r_above), "image_to_text": (i2t_pos, c_above)}
    out = {d: _metrics(p, a, ks, top_k, empty, d, derived.get(d, "")) for d, (p, a) in both.items()}
    meta = cpu._meta(screens, rechecked, decisions)
    meta.update(blocks=len(starts), block_images=block)
    res = RetrievalResult({d: out[d][0] for d in DIRECTIONS}, {d: out[d][1] for d in DIRECTIONS}, meta)
    if top is not None:
        res.text_topk = cpu.sort_topk(top.vals, top.idx, dtype)
        res.meta.update(
            topk_rechecked_pairs=top.rechecked,
            topk_rechecked_fraction=top.rechecked / (n_txt * n_img),
        )
    return res


def _thresholds(
    texts: Embeddings, images: Embeddings, t2i_pos, i2t_pos, dtype: torch.dtype, block: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact scores of every text-to-image pair and every image-to-text pair (``count_both``'s ``thresholds``), in
    one pass over the images in blocks; each block's pairs read their texts chunk by chunk."""
    t_of = np.concatenate([t2i_pos.pair_queries(), i2t_pos.indices])
    i_of = np.concatenate([t2i_pos.indices, i2t_pos.pair_queries()])
    scores = np.empty(len(t_of))
    order = np.argsort(i_of, kind="stable")
    bounds = np.searchsorted(i_of[order], np.arange(0, len(images) + block, block))
    for a, b0 in enumerate(range(0, len(images), block)):
        sel = order[bounds[a] : bounds[a + 1]]
        if len(sel) == 0:
            continue
        cols = images.chunk(b0, min(len(images), b0 + block), dtype)
        scores[sel] = cpu._row_pair_scores(texts, cols, t_of[sel], i_of[sel] - b0, dtype, TEXT_CHUNK)
        del cols
    n = len(t2i_pos.indices)
    return scores[:n], scores[n:]
