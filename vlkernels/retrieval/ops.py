"""Public retrieval functions: evaluate (rank metrics, both directions) and topk (with exclusions)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from vlkernels._triton import interpreting, triton_installed
from vlkernels.retrieval import engine
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.metrics import Ranks, metrics_from_ranks, ranks_from_counts
from vlkernels.retrieval.positives import Positives

DIRECTIONS = ("text_to_image", "image_to_text")


class RetrievalResult(dict):
    """``{"text_to_image": {metric: value}, "image_to_text": {...}}`` (the seed task's layout) with the per-query
    ranks of each direction in ``.ranks[direction]`` (a :class:`~vlkernels.retrieval.metrics.Ranks`)."""

    def __init__(self, metrics: dict, ranks: dict[str, Ranks]):
        super().__init__(metrics)
        self.ranks = ranks

    def table(self) -> str:
        """A readable table, one row per direction."""
        keys = list(next(iter(self.values())).keys()) if self else []
        head = f"{'direction':<15}" + "".join(f"{k:>12}" for k in keys)
        lines = [head, "-" * len(head)]
        for d, m in self.items():
            lines.append(f"{d:<15}" + "".join(f"{m[k]:>12.4f}" for k in keys))
        return "\n".join(lines)


def as_positives(gt, num_queries: int, num_gallery: int, name: str, every_query: bool = True) -> Positives:
    """Positives from a Positives, a CSR tuple ``(indptr, indices)``, an ``(P, 2)`` pair array, or lists.

    ``every_query``: every query is evaluated and needs a positive; False for exclusion lists (no query evaluated).
    """
    queries = None if every_query else np.zeros(0, dtype=np.int64)
    if isinstance(gt, Positives):
        if gt.num_queries != num_queries or gt.num_gallery != num_gallery:
            raise ValueError(
                f"{name} covers {gt.num_queries} queries x {gt.num_gallery} gallery items; "
                f"expected {num_queries} x {num_gallery}"
            )
        return gt
    if isinstance(gt, tuple) and len(gt) == 2:
        return Positives.from_csr(gt[0], gt[1], num_gallery, queries=queries)
    if isinstance(gt, (np.ndarray, torch.Tensor)):
        a = gt.detach().cpu().numpy() if isinstance(gt, torch.Tensor) else gt
        if a.ndim != 2 or a.shape[1] != 2:
            raise ValueError(f"{name} as an array must hold (query, gallery) pairs with shape (P, 2), got {a.shape}")
        return Positives.from_pairs(a[:, 0], a[:, 1], num_queries, num_gallery, queries=queries)
    if isinstance(gt, Sequence):
        if len(gt) != num_queries:
            raise ValueError(f"{name} has {len(gt)} lists; expected one per query ({num_queries})")
        return Positives.from_lists(gt, num_gallery, queries=queries)
    raise ValueError(f"{name} must be Positives, (indptr, indices), a (P, 2) pair array or a list of lists")


def _backend(backend: str, device: torch.device) -> str:
    if backend not in ("auto", "cpu", "triton"):
        raise ValueError(f"backend must be 'auto', 'cpu' or 'triton', got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "cpu"
    if backend == "triton":
        if not triton_installed():
            raise ValueError("backend='triton' needs triton installed")
        if device.type != "cuda" and not interpreting():
            raise ValueError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors)")
    if backend == "cpu" and device.type != "cpu":
        raise ValueError(f"backend='cpu' needs CPU tensors, got {device}")
    return backend


def _labels(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _check_chunks(**sizes: int) -> None:
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _shard_offset(n_local: int, group) -> tuple[int, int]:
    if group is None:
        return 0, n_local
    import torch.distributed as dist

    sizes = [None] * dist.get_world_size(group)
    dist.all_gather_object(sizes, n_local, group=group)
    rank = dist.get_rank(group)
    return int(sum(sizes[:rank])), int(sum(sizes))


def evaluate(
    image_emb,
    text_emb,
    text_to_image=None,
    ks: Sequence[int] = (1, 5, 10),
    *,
    t2i=None,
    i2t=None,
    backend: str = "auto",
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    cache_bytes: int = 256 << 20,
    progress: bool = False,
    group=None,
) -> RetrievalResult:
    """Exact image-text retrieval metrics in both directions, streamed: the score matrix is never materialized.

    For query q with positives P_q, candidates are ordered by score ``s = <q, g>`` descending, then gallery index
    ascending, and each positive p gets the 1-indexed rank

    .. math:: \\mathrm{rank}_q(p) = 1 + |\\{ j : s_{qj} > s_{qp} \\}| + |\\{ j < p : s_{qj} = s_{qp} \\}|

    counted tile by tile (counts add over tiles, chunks and processes). From the ranks r_1 < ... < r_m of a query's
    positives and its relevant count R (= m unless out-of-gallery positives are declared):
    R@K = 100·[r_1 ≤ K], MeanR / MedianR of r_1, MRR = 1/r_1, AP = (1/R) Σ_i i/r_i,
    mAP@R = (1/R) Σ_{r_i ≤ R} i/r_i and R-Precision = |{i : r_i ≤ R}|/R (eccv_caption, Chun et al. 2022),
    NDCG = Σ_i 1/log2(1+r_i) / Σ_{i≤R} 1/log2(1+i), each averaged over queries.

    Args:
        image_emb: ``(N_img, D)`` image embeddings: tensor, numpy array, or a .npy/.safetensors path (memory-mapped).
        text_emb: ``(N_txt, D)`` text embeddings, same forms; with ``group``, this process's contiguous shard.
        text_to_image: ``(N_txt,)`` int image index of each caption (the seed task's ground truth). Image-to-text
            positives are an image's captions. Leave None when giving ``t2i`` / ``i2t``.
        ks: the K of R@K.
        t2i: general text-to-image positives (Positives, CSR ``(indptr, indices)``, ``(P, 2)`` pairs or lists).
        i2t: general image-to-text positives; when only one of t2i / i2t is given the other is its transpose.
        backend: "auto" (Triton on CUDA, C++ on CPU), "cpu", or "triton" (CUDA, or CPU under TRITON_INTERPRET=1).
        chunk_rows, chunk_cols: tile of the streamed (texts x images) score matrix on CPU.
        cache_bytes: tiles kept between the two CPU passes (tiles holding ground-truth pairs).
        progress: show a tqdm bar.
        group: torch.distributed process group; texts are sharded over it, counts are summed by all_reduce.

    Returns:
        RetrievalResult: ``{"text_to_image": {...}, "image_to_text": {...}}`` with ``R@K`` (percent), ``MeanR``,
        ``MedianR``, ``MRR``, ``mAP``, ``mAP@R``, ``R-Precision``, ``NDCG`` (fractions), and ``.ranks``.

    Raises:
        ValueError: mismatched D, non-finite embeddings, ground truth out of range, a query without positives,
            unreadable files (wrong dtype, shape or format), empty inputs, bad ks or backend.

    Note:
        Ties: lower gallery index first, on every backend; equal to ranking with ``np.argsort(-s, kind="stable")``
        (the seed's default quicksort leaves tie order unspecified; without ties the results are identical).
        Scores accumulate in fp32 (fp64 for fp64 input on CPU); fp16/bf16 are widened per chunk. Each ground-truth
        score is read from the same tile computation as the scores it is compared with. Extra memory:
        O(N_img·D + pairs + tiles), not N_img·N_txt: on CPU the images are held in memory and the texts stream in
        ``chunk_rows`` chunks (memory-mapped files are read chunk by chunk); the Triton path holds both on the
        device. Sharding (``group``) is implemented on the CPU path. Deterministic. Not differentiable.

    Example:
        >>> img = torch.eye(3); txt = torch.eye(3)[[0, 0, 1, 2]]
        >>> evaluate(img, txt, [0, 0, 1, 2])["text_to_image"]["R@1"]
        100.0
    """
    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks}")
    _check_chunks(chunk_rows=chunk_rows, chunk_cols=chunk_cols)
    if cache_bytes < 0:
        raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
    images = Embeddings(image_emb, "image_emb")
    texts = Embeddings(text_emb, "text_emb")
    if images.shape[1] != texts.shape[1]:
        raise ValueError(f"embedding dims differ: image_emb has D={images.shape[1]}, text_emb has D={texts.shape[1]}")
    if images.device != texts.device:
        raise ValueError(f"inputs must be on one device, got image_emb on {images.device}, text_emb on {texts.device}")
    backend = _backend(backend, images.device)
    row_offset, n_txt = _shard_offset(len(texts), group)
    n_img = len(images)
    if n_img == 0 or n_txt == 0:
        raise ValueError(f"empty input: {n_img} images and {n_txt} texts; both must be non-empty")
    if text_to_image is not None:
        if t2i is not None or i2t is not None:
            raise ValueError("give either text_to_image or t2i/i2t, not both")
        labels = _labels(text_to_image)
        if labels.shape != (n_txt,):
            raise ValueError(f"text_to_image has shape {labels.shape}; expected ({n_txt},), one image per text")
        t2i_pos = Positives.from_labels(labels, n_img)
        i2t_pos = t2i_pos.transpose()
    elif t2i is None and i2t is None:
        raise ValueError("ground truth missing: give text_to_image, or t2i and/or i2t positives")
    else:
        t2i_pos = as_positives(t2i, n_txt, n_img, "t2i") if t2i is not None else None
        i2t_pos = as_positives(i2t, n_img, n_txt, "i2t") if i2t is not None else None
        t2i_pos = t2i_pos if t2i_pos is not None else i2t_pos.transpose()
        i2t_pos = i2t_pos if i2t_pos is not None else t2i_pos.transpose()
    images.check_finite()
    texts.check_finite()

    if backend == "cpu":
        cols = images.full()
        r_above, c_above = engine.count_both(
            texts,
            cols,
            t2i_pos,
            i2t_pos,
            row_offset,
            int(chunk_rows),
            int(chunk_cols),
            int(cache_bytes),
            progress,
            group,
        )
    else:
        from vlkernels.retrieval.triton_ops import count_direction

        if group is not None:
            raise ValueError(
                "group (sharding) is supported by the CPU backend here; shard the Triton path by calling "
                "it per process and summing counts"
            )
        # One operand dtype for tl.dot: fp16/bf16 stay as they are when both sides agree, anything else runs in fp32.
        same_lowp = images.dtype == texts.dtype and images.dtype in (torch.float16, torch.bfloat16)
        dt = images.dtype if same_lowp else torch.float32
        img_t, txt_t = images.full(dt), texts.full(dt)
        r_above = count_direction(txt_t, img_t, t2i_pos)
        c_above = count_direction(img_t, txt_t, i2t_pos)
    ranks = {"text_to_image": ranks_from_counts(t2i_pos, r_above), "image_to_text": ranks_from_counts(i2t_pos, c_above)}
    return RetrievalResult({d: metrics_from_ranks(ranks[d], ks) for d in DIRECTIONS}, ranks)


def rank_metrics(
    queries,
    gallery,
    positives,
    ks: Sequence[int] = (1, 5, 10),
    *,
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    progress: bool = False,
) -> tuple[dict[str, float], Ranks]:
    """One direction of :func:`evaluate` for any query/gallery pair and any positives (CPU streaming path).

    Args:
        queries: ``(Q, D)`` embeddings (tensor, array or file path).
        gallery: ``(M, D)`` embeddings.
        positives: Positives, CSR ``(indptr, indices)``, ``(P, 2)`` pairs or one list per query.
        ks, chunk_rows, chunk_cols, progress: as in :func:`evaluate`.

    Returns:
        ``(metrics, ranks)``: the metric dict of :func:`evaluate` and the per-query :class:`Ranks`.

    Raises:
        ValueError: as :func:`evaluate`.

    Note:
        Same tie policy (score descending, then gallery index ascending) and exactness as :func:`evaluate`.

    Example:
        >>> m, r = rank_metrics(torch.tensor([[0.1, 0.8, 0.9, 0.7]]), torch.eye(4), [[1, 3]])
        >>> round(m["mAP"], 4)  # positives at ranks 2 and 3: (1/2 + 2/3) / 2 = 7/12
        0.5833
    """
    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks}")
    q = Embeddings(queries, "queries")
    g = Embeddings(gallery, "gallery")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"embedding dims differ: queries have D={q.shape[1]}, gallery has D={g.shape[1]}")
    if len(q) == 0 or len(g) == 0:
        raise ValueError(f"empty input: {len(q)} queries and {len(g)} gallery items; both must be non-empty")
    pos = as_positives(positives, len(q), len(g), "positives")
    q.check_finite()
    g.check_finite()
    none = Positives.from_pairs([], [], len(g), len(q), queries=[])
    above, _ = engine.count_both(q, g.full(), pos, none, 0, int(chunk_rows), int(chunk_cols), 0, progress)
    ranks = ranks_from_counts(pos, above)
    return metrics_from_ranks(ranks, ks), ranks


def topk(
    queries,
    gallery,
    k: int,
    exclude=None,
    *,
    backend: str = "auto",
    chunk_queries: int = 1024,
    chunk_gallery: int = 4096,
    progress: bool = False,
    group=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k gallery items of each query by inner product, streamed over gallery chunks (no (Q, M) matrix).

    .. math:: \\mathrm{topk}_q = \\text{the first } k \\text{ of } g \\text{ ordered by } (\\langle q, g\\rangle
        \\downarrow, \\; g \\uparrow), \\; g \\notin \\mathrm{exclude}_q

    Args:
        queries: ``(Q, D)`` tensor or array (fp16/bf16/fp32/fp64).
        gallery: ``(M, D)`` tensor, array or .npy/.safetensors path (memory-mapped and read in chunks); with
            ``group``, this process's contiguous shard (indices are global).
        k: results per query, any size (no 2048 cap).
        exclude: positives to leave out (hard-negative mining): Positives, CSR, ``(P, 2)`` pairs or lists.
        backend: "auto", "cpu" or "triton" (as in :func:`evaluate`).
        chunk_queries, chunk_gallery: CPU tile.
        progress: tqdm bar over gallery chunks.
        group: torch.distributed group sharding the gallery; shard results are merged by all_gather.

    Returns:
        ``(values, indices)``: ``(Q, k)`` scores (fp32, fp64 for fp64 input) and int64 gallery indices, best first;
        when fewer than k candidates remain a row is padded with ``-inf`` / ``-1`` (faiss's convention).

    Raises:
        ValueError: mismatched D, non-finite embeddings, k < 0, exclusions out of range, bad files or backend.

    Note:
        Ties: lower gallery index first (deterministic, identical on CPU, Triton and sharded runs). Not
        differentiable.

    Example:
        >>> topk(torch.eye(2), torch.eye(2), 1)
        (tensor([[1.], [1.]]), tensor([[0], [1]]))
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    k = int(k)
    _check_chunks(chunk_queries=chunk_queries, chunk_gallery=chunk_gallery)
    q = Embeddings(queries, "queries")
    g = Embeddings(gallery, "gallery")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"embedding dims differ: queries have D={q.shape[1]}, gallery has D={g.shape[1]}")
    if q.device != g.device:
        raise ValueError(f"inputs must be on one device, got queries on {q.device}, gallery on {g.device}")
    backend = _backend(backend, q.device)
    offset, n_gal = _shard_offset(len(g), group)
    ex = as_positives(exclude, len(q), n_gal, "exclude", every_query=False) if exclude is not None else None
    q.check_finite()
    g.check_finite()
    if ex is not None and group is not None:
        # Each shard only masks its own gallery items, with local indices.
        keep = (ex.indices >= offset) & (ex.indices < offset + len(g))
        ex = Positives.from_pairs(ex.pair_queries()[keep], ex.indices[keep] - offset, len(q), len(g), queries=[])
    if backend == "cpu":
        qt = q.full()
        vals, idx = engine.topk_stream(qt, g, k, ex, offset, int(chunk_queries), int(chunk_gallery), progress)
    else:
        from vlkernels.retrieval.triton_ops import topk_triton

        same_lowp = q.dtype == g.dtype and q.dtype in (torch.float16, torch.bfloat16)
        dt = q.dtype if same_lowp else torch.float32
        vals, idx = topk_triton(q.full(dt), g, k, ex, offset, dt)
    if group is not None:
        import torch.distributed as dist

        world = dist.get_world_size(group)
        gv = [torch.empty_like(vals) for _ in range(world)]
        gi = [torch.empty_like(idx) for _ in range(world)]
        dist.all_gather(gv, vals.contiguous(), group=group)
        dist.all_gather(gi, idx.contiguous(), group=group)
        vals, idx = engine.merge_topk(torch.cat(gv, 1).cpu(), torch.cat(gi, 1).cpu(), k)
        vals, idx = vals.to(q.device), idx.to(q.device)
    return engine.sort_topk(vals, idx)
