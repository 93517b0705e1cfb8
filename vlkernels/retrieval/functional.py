"""Public retrieval functions: evaluate (rank metrics, both directions) and topk (with exclusions)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

from vlkernels._triton import interpreting, triton_installed, use_triton
from vlkernels.retrieval import cpu
from vlkernels.retrieval.distributed import all_gather_cat, all_reduce, shard_layout
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.metrics import Ranks, metrics_from_ranks, ranks_from_counts
from vlkernels.retrieval.positives import Positives
from vlkernels.retrieval.screen import requested as _requested_screen

DIRECTIONS = ("text_to_image", "image_to_text")
# The `empty` policies for evaluated queries without a positive, and the score each gives them (torchmetrics'
# empty_target_action "error", "skip", "neg", "pos").
EMPTY_VALUES = {"error": None, "skip": None, "zero": 0.0, "one": 1.0}


class RetrievalResult(dict):
    """``{"text_to_image": {metric: value}, "image_to_text": {...}}`` (the usual layout) with the per-query
    ranks of each direction in ``.ranks[direction]`` (a :class:`~vlkernels.retrieval.metrics.Ranks`) and the
    call's ``.meta`` (CPU: ``screen``, ``rechecked_pairs``, ``decisions``, ``rechecked_fraction``)."""

    def __init__(self, metrics: dict, ranks: dict[str, Ranks], meta: dict | None = None):
        super().__init__(metrics)
        self.ranks = ranks
        self.meta = meta or {}

    def table(self) -> str:
        """A readable table, one row per direction."""
        keys = list(next(iter(self.values())).keys()) if self else []
        head = f"{'direction':<15}" + "".join(f"{k:>12}" for k in keys)
        lines = [head, "-" * len(head)]
        for d, m in self.items():
            lines.append(f"{d:<15}" + "".join(f"{m[k]:>12.4f}" for k in keys))
        return "\n".join(lines)


class WithMeta(tuple):
    """A result tuple (``(metrics, ranks)`` of rank_metrics, ``(values, indices)`` of topk) carrying ``.meta``."""

    def __new__(cls, items, meta: dict):
        obj = super().__new__(cls, items)
        obj.meta = meta
        return obj

    def __reduce__(self):  # pickles (torch.save, multiprocessing) with its metadata
        return (WithMeta, (tuple(self), self.meta))


def _device_meta(runs: list[dict], group=None) -> dict:
    """A device call's ``meta`` from what its launches ran (``ops.stats``): the path (the torch path when a Triton
    failure reran a launch there), the screen and the re-checked fraction, summed over the launches and the group's
    ranks (the torch path is certified as the Triton path is)."""
    path = "torch" if any(r["path"] == "torch" for r in runs) else "triton"
    n_re, n_dec = sum(r["rechecked_pairs"] for r in runs), sum(r["decisions"] for r in runs)
    if group is not None:
        t = all_reduce(torch.tensor([n_re, n_dec], dtype=torch.int64), "sum", group)
        n_re, n_dec = int(t[0]), int(t[1])
    screen = "+".join(sorted({r["screen"] for r in runs if r["screen"]})) or None
    frac = n_re / n_dec if n_dec else 0.0
    return {"path": path, "screen": screen, "rechecked_pairs": n_re, "decisions": n_dec, "rechecked_fraction": frac}


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
        shape = tuple(np.shape(gt[0]))
        if shape != (num_queries + 1,):
            raise ValueError(
                f"{name} as CSR (indptr, indices) needs indptr of {num_queries + 1} entries (one row per query, "
                f"{num_queries} queries, and the end), got shape {shape}"
            )
        return Positives.from_csr(gt[0], gt[1], num_gallery, queries=queries, allow_empty=True)
    if isinstance(gt, (np.ndarray, torch.Tensor)):
        a = gt.detach().cpu().numpy() if isinstance(gt, torch.Tensor) else gt
        if a.ndim != 2 or a.shape[1] != 2:
            raise ValueError(f"{name} as an array must hold (query, gallery) pairs with shape (P, 2), got {a.shape}")
        return Positives.from_pairs(a[:, 0], a[:, 1], num_queries, num_gallery, queries=queries, allow_empty=True)
    if isinstance(gt, Sequence):
        if len(gt) != num_queries:
            raise ValueError(f"{name} has {len(gt)} lists; expected one per query ({num_queries})")
        return Positives.from_lists(gt, num_gallery, queries=queries, allow_empty=True)
    raise ValueError(f"{name} must be Positives, (indptr, indices), a (P, 2) pair array or a list of lists")


def _open(a, b, name_a: str, name_b: str, backend: str) -> tuple[Embeddings, Embeddings, str, torch.device, bool]:
    """Both embedding sources validated (dims, devices, finite values), the path ("cpu", "triton" or "torch"), the
    compute device, and whether Triton was forced (its errors then surface instead of falling back).

    The device paths compute on the accelerator of either input; host sources (CPU tensors, arrays, memory-mapped
    files) stream to it chunk by chunk, also when both are on the host and backend="triton" is asked for.
    """
    check_backend(backend)
    ea, eb = Embeddings(a, name_a), Embeddings(b, name_b)
    if ea.shape[1] != eb.shape[1]:
        raise ValueError(f"embedding dims differ: {name_a} has D={ea.shape[1]}, {name_b} has D={eb.shape[1]}")
    accel = {d for d in (ea.device, eb.device) if d.type != "cpu"}
    if len(accel) > 1 or (ea.device != eb.device and backend not in ("triton", "torch")):
        raise ValueError(f"inputs must be on one device, got {name_a} on {ea.device}, {name_b} on {eb.device}")
    device = next(iter(accel)) if accel else torch.device("cpu")
    forced = backend == "triton"
    if backend == "auto":
        # The process-wide switch (vlkernels.set_backend / VLKERNELS_BACKEND) decides between Triton and the torch
        # path on a device, warning once when a device Triton cannot run on takes the torch path.
        backend = _auto_path(device, ea.dtype)
    elif backend == "triton":
        if not triton_installed():
            raise ValueError("backend='triton' needs triton installed")
        if accel and device.type != "cuda":
            raise ValueError(f"backend='triton' needs a CUDA device, got {device} (backend='torch' runs on any device)")
        if not accel and not interpreting():
            if not torch.cuda.is_available():
                raise ValueError("backend='triton' needs a CUDA device (or TRITON_INTERPRET=1 for CPU tensors)")
            device = torch.device("cuda", torch.cuda.current_device())
    elif backend == "cpu" and accel:
        raise ValueError(f"backend='cpu' needs CPU tensors, got {next(iter(accel))}")
    ea.check_finite()
    eb.check_finite()
    if torch.float64 in (ea.dtype, eb.dtype):
        # Narrower inputs cannot get there: fp32's largest norms multiply to ~1e77 D.
        na, nb = ea.max_norm(), eb.max_norm()
        if na * nb >= SCORE_LIMIT:
            raise ValueError(
                f"float64 scores could overflow: the largest norms of {name_a} ({na:.3g}) and {name_b} ({nb:.3g}) "
                f"multiply past {SCORE_LIMIT:.3g}; scale the embeddings down"
            )
    return ea, eb, backend, device, forced


# Largest |a||b| taken with float64 inputs: every partial sum of an exact score, and the bound terms beside it,
# stay finite below it (float64's largest value is 2^1024 (1 - 2^-53)).
SCORE_LIMIT = 2.0**1020


# "auto": C++ engine for host inputs; on a device, Triton or the torch path as the backend switch decides.
# "cpu": the C++ engine. "triton": the Triton kernels, errors surfacing. "torch": the chunked torch path (any device).
BACKENDS = ("auto", "cpu", "triton", "torch")


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")


def _probe(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    # What use_triton reads (device and dtype), without touching the data.
    return torch.empty(0, dtype=dtype, device=device)


def _auto_path(device: torch.device, dtype: torch.dtype) -> str:
    """backend="auto": the C++ engine for host inputs; on a device, "triton" when the backend switch allows it
    there (raising BackendError when Triton is forced where it cannot run), else "torch" with one warning."""
    if device.type == "cpu":
        return "cpu"
    return "triton" if use_triton(_probe(device, dtype)) else "torch"


def _try_open(a, b, name_a: str, name_b: str, backend: str, group):
    """``_open``; with a group, a ValueError of this rank is first announced to the others (``shard_layout``), so
    every rank raises instead of some being left blocked in a later collective."""
    try:
        return _open(a, b, name_a, name_b, backend)
    except ValueError as e:
        if group is None:
            raise
        shard_layout(0, group, str(e))
        raise  # not reached: shard_layout raises on every rank


def _device_chunk(device_chunk: int, device: torch.device) -> int:
    """Rows per device chunk, rounded up to whole tiles so every tile sits where it sits unchunked."""
    from vlkernels.retrieval.configs import chunk_align

    tile = chunk_align(device)
    return -(-int(device_chunk) // tile) * tile


def _triton_dtype(a: Embeddings, b: Embeddings, device: torch.device) -> torch.dtype:
    """One operand dtype for tl.dot: fp16/bf16 stay as they are when both sides agree, anything else runs in fp32."""
    # bf16 under the interpreter too: the kernels widen it themselves (vlkernels/core/tiles.py, UPCAST).
    same_lowp = a.dtype == b.dtype and a.dtype in (torch.float16, torch.bfloat16)
    return a.dtype if same_lowp else torch.float32


def _count(backend, forced, device, dtype, chunk, queries, gallery, pos, q_offset, g_offset, group, bar):
    """ops.count_stream on the device path chosen by _open (Triton, or the chunked torch path)."""
    from vlkernels.retrieval.ops import count_stream, launch

    args = (queries, gallery, pos, q_offset, g_offset, dtype, device, chunk, group, bar)
    triton_fn = functools.partial(count_stream, kernels="triton")
    torch_fn = functools.partial(count_stream, kernels="torch")
    return launch("retrieval_count", triton_fn, torch_fn, backend, forced, device, dtype, *args)


def _labels(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _check_ks(ks) -> tuple[int, ...]:
    """``ks`` as a tuple of positive ints; one int is accepted as ``(ks,)``."""
    if isinstance(ks, (int, np.integer)) and not isinstance(ks, bool):
        ks = (ks,)
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence | np.ndarray):
        raise ValueError(f"ks must be a positive integer or a sequence of them, got {ks!r}")
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1]
    if not len(ks) or bad:
        raise ValueError(f"ks must be positive integers, got {tuple(ks)}")
    return tuple(int(k) for k in ks)


def _check_policy(top_k, empty: str) -> None:
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if empty not in EMPTY_VALUES:
        raise ValueError(f"empty must be one of {tuple(EMPTY_VALUES)}, got {empty!r}")


def _metrics(pos: Positives, above: np.ndarray, ks, top_k, empty: str, direction: str, derived: str = ""):
    """Ranks and metrics of one direction; evaluated queries without a positive handled by the ``empty`` policy."""
    kept, missing = pos.without_empty()
    if len(missing) and empty == "error":
        raise ValueError(
            f"{direction}: {len(missing)} evaluated queries have no positive (first: query {int(missing[0])}){derived}"
            "; pass empty='skip' to leave them out, or 'zero' / 'one' to score them 0 / 1 (CLI: --empty)"
        )
    ranks = ranks_from_counts(kept, above)
    num_empty = 0 if empty == "skip" else len(missing)
    return metrics_from_ranks(ranks, ks, top_k, num_empty, EMPTY_VALUES[empty] or 0.0), ranks


def _compute_dtype(a: Embeddings, b: Embeddings) -> torch.dtype:
    """CPU compute dtype of a pair: fp64 when either side is fp64 (both are promoted), else fp32."""
    return torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32


def _check_options(screen, top_k=None, empty: str = "error", **chunks: int) -> None:
    """The options the public functions share, checked before any data is read: the screen, the ``top_k`` /
    ``empty`` policy and the chunk sizes (positive integers)."""
    _check_policy(top_k, empty)
    for name, v in chunks.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    _requested_screen(screen)


def ground_truth(text_to_image, t2i, i2t, n_txt: int, n_img: int) -> tuple[Positives, Positives, dict[str, str]]:
    """Both directions' positives from ``text_to_image`` or ``t2i`` / ``i2t`` (as :func:`evaluate` takes them), and
    for each derived direction the phrase its "no positive" error adds."""
    if text_to_image is not None:
        if t2i is not None or i2t is not None:
            raise ValueError("give either text_to_image or t2i/i2t, not both")
        labels = _labels(text_to_image)
        if labels.shape != (n_txt,):
            raise ValueError(f"text_to_image has shape {labels.shape}; expected ({n_txt},), one image per text")
        t2i_pos = Positives.from_labels(labels, n_img)
        i2t_pos = t2i_pos.transpose(allow_empty=True)
        derived = {"image_to_text": " (images without a caption in text_to_image)"}
    elif t2i is None and i2t is None:
        raise ValueError("ground truth missing: give text_to_image, or t2i and/or i2t positives")
    else:
        t2i_pos = as_positives(t2i, n_txt, n_img, "t2i") if t2i is not None else None
        i2t_pos = as_positives(i2t, n_img, n_txt, "i2t") if i2t is not None else None
        derived = {}
        if t2i_pos is None:
            t2i_pos = i2t_pos.transpose(allow_empty=True)
            derived["text_to_image"] = " (derived as the transpose of i2t, which was given alone: give t2i too)"
        if i2t_pos is None:
            i2t_pos = t2i_pos.transpose(allow_empty=True)
            derived["image_to_text"] = " (derived as the transpose of t2i, which was given alone: give i2t too)"
    return t2i_pos, i2t_pos, derived


def evaluate(
    image_emb,
    text_emb,
    text_to_image=None,
    ks: Sequence[int] | int = (1, 5, 10),
    *,
    t2i=None,
    i2t=None,
    top_k: int | None = None,
    empty: str = "error",
    backend: str = "auto",
    screen: str | None = None,
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    device_chunk: int = 1 << 16,
    progress: bool = False,
    group=None,
) -> RetrievalResult:
    r"""Exact image-text retrieval metrics in both directions, streamed: the score matrix is never materialized.

    For query q with positives P_q, candidates are ordered by score ``s = <q, g>`` descending, then gallery index
    ascending; each positive p gets the 1-indexed rank

    .. math:: \mathrm{rank}_q(p) = 1 + |\{ j : s_{qj} > s_{qp} \}| + |\{ j < p : s_{qj} = s_{qp} \}|

    and R@K, MeanR, MedianR, MRR, mAP, mAP@R, R-Precision (eccv_caption, Chun et al. 2022) and NDCG follow from the
    positives' ranks (formulas and conventions: ``vlkernels/retrieval/README.md``), averaged over queries.

    Args:
        image_emb: ``(N_img, D)`` image embeddings: tensor, numpy array, or a .npy/.safetensors path (memory-mapped).
        text_emb: ``(N_txt, D)`` text embeddings, same forms; with ``group``, this process's contiguous shard.
        text_to_image: ``(N_txt,)`` int image index of each caption (the usual COCO 5K ground truth). Image-to-text
            positives are an image's captions. Leave None when giving ``t2i`` / ``i2t``.
        ks: the K of R@K (one int or a sequence).
        t2i: general text-to-image positives (Positives, CSR ``(indptr, indices)``, ``(P, 2)`` pairs or lists);
            a Positives may carry graded ``relevance`` (NDCG's gain).
        i2t: general image-to-text positives; when only one of t2i / i2t is given the other is its transpose
            (every query of the derived direction evaluated).
        top_k: cut MRR, mAP, R-Precision and NDCG at rank k (torchmetrics' ``top_k``); keys become ``MRR@k``, ...
        empty: evaluated queries without a positive: "error" (default), "skip" (left out), "zero" / "one" (score
            0 / 1 in every metric but MeanR / MedianR; torchmetrics' ``empty_target_action`` "neg" / "pos").
        backend: "auto" (C++ on CPU; on a device, Triton where ``vlkernels.set_backend`` allows and the device
            supports it, else the chunked torch path, with one warning), "cpu", "triton" (forced: errors surface;
            host inputs stream to the current CUDA device) or "torch" (chunked torch, any torch device).
        screen: CPU screen: "auto" (default; VLKERNELS_RETRIEVAL_SCREEN overrides None), "fp32" or "bf16". Any
            screen gives the same exact ranks; it only decides the speed (README "Exact scores").
        chunk_rows, chunk_cols: tile of the streamed (texts x images) score matrix on CPU.
        device_chunk: Triton path: rows of texts and of images held on the device at a time (rounded up to whole
            32-row tiles); both stream in such chunks from wherever they live (host, memory-mapped file, device).
        progress: show a tqdm bar (tiles on CPU, chunk pairs on Triton).
        group: torch.distributed process group (any backend: gloo, NCCL). ``text_emb`` is this rank's contiguous
            shard of the texts, in rank order; ``image_emb`` and the ground truth are the full, identical sets on
            every rank. Per-shard counts are summed by all_reduce; every rank returns the full result.

    Returns:
        RetrievalResult: ``{"text_to_image": {...}, "image_to_text": {...}}`` with ``R@K`` (percent), ``MeanR``,
        ``MedianR``, ``MRR``, ``mAP``, ``mAP@R``, ``R-Precision``, ``NDCG`` (fractions), ``.ranks`` and ``.meta``.

    Raises:
        ValueError: mismatched D, non-finite embeddings, ground truth out of range, a query without positives
            (``empty="error"``; the message names the direction, and whether it was derived), unreadable files
            (wrong dtype, shape or format), empty inputs, bad ks, top_k, empty, chunk sizes or backend; with a
            group, any rank's input error (raised on every rank) or D / image count / dtypes differing by rank.

    Note:
        Ties: lower gallery index first on every backend (``np.argsort(-s, kind="stable")``). CPU: ranks are those
        of the exact scores (float64 products summed in a fixed order), whatever the screen, BLAS, tiling,
        threads or sharding; a screen decides all but the candidates within its error bound of a threshold, which
        are re-checked exactly. Memory O(N_img·D + pairs + tiles), never N_img·N_txt (streaming layout:
        the README). Sharded runs equal unsharded ones exactly. Deterministic. Not differentiable.

    Example:
        >>> img = torch.eye(3); txt = torch.eye(3)[[0, 0, 1, 2]]
        >>> evaluate(img, txt, [0, 0, 1, 2])["text_to_image"]["R@1"]
        100.0
    """
    ks = _check_ks(ks)
    _check_options(screen, top_k, empty, chunk_rows=chunk_rows, chunk_cols=chunk_cols, device_chunk=device_chunk)
    images, texts, backend, device, forced = _try_open(image_emb, text_emb, "image_emb", "text_emb", backend, group)
    row_offset, n_txt = shard_layout(
        len(texts), group, D=images.shape[1], num_images=len(images), dtypes=(str(images.dtype), str(texts.dtype))
    )
    n_img = len(images)
    if n_img == 0 or n_txt == 0:
        raise ValueError(f"empty input: {n_img} images and {n_txt} texts; both must be non-empty")
    t2i_pos, i2t_pos, derived = ground_truth(text_to_image, t2i, i2t, n_txt, n_img)
    if backend == "cpu":
        cols = images.full(_compute_dtype(images, texts))
        r_above, c_above, meta = cpu.count_both(
            texts, cols, t2i_pos, i2t_pos, row_offset, int(chunk_rows), int(chunk_cols), progress, group, screen
        )
    else:
        dt = _triton_dtype(images, texts, device)
        chunk = _device_chunk(device_chunk, device)
        bar = cpu._progress(2 * -(-len(texts) // chunk) * -(-n_img // chunk), progress, "retrieval")
        # Texts are sharded: text-to-image queries are local rows; image-to-text queries see a sharded gallery.
        run = functools.partial(_count, backend, forced, device, dt, chunk)
        r_above, r_run = run(texts, images, t2i_pos, row_offset, 0, None, bar)
        c_above, c_run = run(images, texts, i2t_pos, 0, row_offset, group, bar)
        if bar is not None:
            bar.close()
        meta = _device_meta([r_run, c_run], group)
        if group is not None:
            both = all_reduce(torch.from_numpy(np.concatenate([r_above, c_above])), "sum", group).numpy()
            r_above, c_above = both[: len(r_above)], both[len(r_above) :]
    both = {"text_to_image": (t2i_pos, r_above), "image_to_text": (i2t_pos, c_above)}
    out = {d: _metrics(p, a, ks, top_k, empty, d, derived.get(d, "")) for d, (p, a) in both.items()}
    return RetrievalResult({d: out[d][0] for d in DIRECTIONS}, {d: out[d][1] for d in DIRECTIONS}, meta)


def rank_metrics(
    queries,
    gallery,
    positives,
    ks: Sequence[int] | int = (1, 5, 10),
    *,
    top_k: int | None = None,
    empty: str = "error",
    backend: str = "auto",
    screen: str | None = None,
    chunk_rows: int = 1024,
    chunk_cols: int = 512,
    device_chunk: int = 1 << 16,
    progress: bool = False,
    group=None,
) -> tuple[dict[str, float], Ranks]:
    """One direction of :func:`evaluate` for any query/gallery pair and any positives.

    Args:
        queries: ``(Q, D)`` embeddings (tensor, array or file path); with ``group``, this rank's contiguous shard
            of the queries, in rank order (as the texts of :func:`evaluate`).
        gallery: ``(M, D)`` embeddings, the full gallery on every rank.
        positives: Positives, CSR ``(indptr, indices)``, ``(P, 2)`` pairs or one list per query (global indices).
        ks, top_k, empty, backend, screen, chunk_rows, chunk_cols, device_chunk, progress, group: as in
            :func:`evaluate`.

    Returns:
        ``(metrics, ranks)``: the metric dict of :func:`evaluate` and the per-query :class:`Ranks`; the tuple's
        ``.meta`` as :attr:`RetrievalResult.meta`.

    Raises:
        ValueError: as :func:`evaluate`.

    Note:
        Same tie policy (score descending, then gallery index ascending), exactness and sharding as :func:`evaluate`.

    Example:
        >>> m, r = rank_metrics(torch.tensor([[0.1, 0.8, 0.9, 0.7]]), torch.eye(4), [[1, 3]])
        >>> round(m["mAP"], 4)  # positives at ranks 2 and 3: (1/2 + 2/3) / 2 = 7/12
        0.5833
    """
    ks = _check_ks(ks)
    _check_options(screen, top_k, empty, chunk_rows=chunk_rows, chunk_cols=chunk_cols, device_chunk=device_chunk)
    q, g, backend, device, forced = _try_open(queries, gallery, "queries", "gallery", backend, group)
    offset, n_q = shard_layout(len(q), group, D=q.shape[1], num_gallery=len(g), dtypes=(str(q.dtype), str(g.dtype)))
    if n_q == 0 or len(g) == 0:
        raise ValueError(f"empty input: {n_q} queries and {len(g)} gallery items; both must be non-empty")
    pos = as_positives(positives, n_q, len(g), "positives")
    if backend == "cpu":
        none = Positives.from_pairs([], [], len(g), n_q, queries=[])
        args = (offset, int(chunk_rows), int(chunk_cols), progress, group, screen)
        above, _, meta = cpu.count_both(q, g.full(_compute_dtype(q, g)), pos, none, *args)
    else:
        chunk = _device_chunk(device_chunk, device)
        bar = cpu._progress(-(-len(q) // chunk) * -(-len(g) // chunk), progress, "retrieval")
        above, run = _count(
            backend, forced, device, _triton_dtype(q, g, device), chunk, q, g, pos, offset, 0, None, bar
        )
        if bar is not None:
            bar.close()
        meta = _device_meta([run], group)
        if group is not None:
            above = all_reduce(torch.from_numpy(above), "sum", group).numpy()
    return WithMeta(_metrics(pos, above, ks, top_k, empty, "queries"), meta)


def topk(
    queries,
    gallery,
    k: int,
    exclude=None,
    *,
    backend: str = "auto",
    screen: str | None = None,
    chunk_queries: int = 512,
    chunk_gallery: int = 8192,
    device_chunk: int = 1 << 16,
    progress: bool = False,
    group=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k gallery items of each query by inner product, streamed over gallery chunks (no (Q, M) matrix).

    .. math:: \\mathrm{topk}_q = \\text{the first } k \\text{ of } g \\text{ ordered by } (\\langle q, g\\rangle
        \\downarrow, \\; g \\uparrow), \\; g \\notin \\mathrm{exclude}_q

    Args:
        queries: ``(Q, D)`` tensor, array or .npy/.safetensors path (fp16/bf16/fp32/fp64); the same on every rank.
        gallery: ``(M, D)`` tensor, array or .npy/.safetensors path (memory-mapped and read in chunks); with
            ``group``, this process's contiguous shard, in rank order (indices are global).
        k: results per query; clamped to the gallery size M (the global size with ``group``), so the result is
            ``(Q, min(k, M))`` and a huge k cannot allocate past the data.
        exclude: positives to leave out (hard-negative mining): Positives, CSR, ``(P, 2)`` pairs or lists.
        backend: "auto", "cpu", "triton" or "torch" (as in :func:`evaluate`).
        screen: CPU screen, as in :func:`evaluate`.
        chunk_queries, chunk_gallery: CPU tile (16 MiB of fp32 scores per worker at the defaults). A wide gallery
            chunk pays the per-query selection and the re-scoring of members displaced later once per 8,192 items,
            not per 4,096 (at k = 100 on 25,000 x 5,000 a single chunk measured ~8 % faster than 4,096 + 904).
        device_chunk: Triton path: rows of queries and of the gallery held on the device at a time.
        progress: tqdm bar over gallery chunks (CPU) or chunk pairs (Triton).
        group: torch.distributed group sharding the gallery; shard results are merged by all_gather.

    Returns:
        ``(values, indices)``: ``(Q, min(k, M))`` scores (CPU: fp32, fp64 when either input is fp64; the Triton
        and torch device paths: the float64 exact scores) and int64
        gallery indices, best first; when exclusions leave fewer candidates a row is padded with ``-inf`` / ``-1``
        (faiss's convention; faiss also pads k > M, where this clamps). CPU: the order is that of the exact scores
        and the values are the exact scores rounded to the output dtype. The tuple's ``.meta`` as in
        :attr:`RetrievalResult.meta`.

    Raises:
        ValueError: mismatched D, non-finite embeddings, k < 0, exclusions out of range, bad files or backend; with
            a group, any rank's input error (raised on every rank) or D / query count / dtypes differing by rank.

    Note:
        Ties: lower gallery index first (deterministic, identical on CPU, Triton and sharded runs, across chunk
        and shard boundaries). Device memory on Triton: two ``device_chunk``-row chunks, the running best of a
        query chunk, and (k > 256 - exclusions) matmul tiles of at most 2^25 scores. Not differentiable.

    Example:
        >>> topk(torch.eye(2), torch.eye(2), 1)
        (tensor([[1.], [1.]]), tensor([[0], [1]]))
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    k = int(k)
    _check_options(screen, chunk_queries=chunk_queries, chunk_gallery=chunk_gallery, device_chunk=device_chunk)
    q, g, backend, device, forced = _try_open(queries, gallery, "queries", "gallery", backend, group)
    offset, n_gal = shard_layout(len(g), group, D=q.shape[1], num_queries=len(q), dtypes=(str(q.dtype), str(g.dtype)))
    k = min(k, n_gal)
    ex = as_positives(exclude, len(q), n_gal, "exclude", every_query=False) if exclude is not None else None
    if ex is not None and group is not None:
        # Each shard only masks its own gallery items, with local indices.
        keep = (ex.indices >= offset) & (ex.indices < offset + len(g))
        ex = Positives.from_pairs(ex.pair_queries()[keep], ex.indices[keep] - offset, len(q), len(g), queries=[])
    out_dtype = _compute_dtype(q, g)
    if backend == "cpu":
        qt = q.full(out_dtype)
        args = (offset, int(chunk_queries), int(chunk_gallery), progress, screen)
        vals, idx, meta = cpu.topk_stream(qt, g, k, ex, *args)
    else:
        from vlkernels.retrieval.ops import launch, topk_stream

        dt = _triton_dtype(q, g, device)
        args = (q, g, k, ex, offset, dt, device, _device_chunk(device_chunk, device), progress)
        vals, idx, run = launch(
            "retrieval_topk",
            functools.partial(topk_stream, kernels="triton"),
            functools.partial(topk_stream, kernels="torch"),
            backend,
            forced,
            device,
            dt,
            *args,
        )
        meta = _device_meta([run], group)
    if group is not None:
        v, i = all_gather_cat(vals, group), all_gather_cat(idx, group)
        vals, idx = cpu.merge_topk(v.cpu(), i.cpu(), k)
        vals, idx = vals.to(device), idx.to(device)
    vals, idx = cpu.sort_topk(vals, idx, out_dtype if backend == "cpu" else None)
    if backend == "cpu":
        meta = _gather_meta(meta, group)
    return WithMeta((vals, idx), meta)


def _gather_meta(meta: dict, group) -> dict:
    """topk with a group: re-checked and scored pairs summed over the ranks."""
    if group is None:
        return meta
    t = all_reduce(torch.tensor([meta["rechecked_pairs"], meta["decisions"]], dtype=torch.int64), "sum", group)
    n_re, n_dec = int(t[0]), int(t[1])
    return {**meta, "rechecked_pairs": n_re, "decisions": n_dec, "rechecked_fraction": n_re / n_dec if n_dec else 0.0}
