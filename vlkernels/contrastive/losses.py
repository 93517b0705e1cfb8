"""Public functional losses: InfoNCE (CLIP) and sigmoid (SigLIP), built on the streaming primitives of ops.py."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import numpy as np
import torch

from vlkernels._validate import check_finite, check_same_device, check_tensor
from vlkernels.contrastive.cpu import acc_dtype
from vlkernels.contrastive.ops import lse_pair, siglip_fused

FEATURE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def loss_dtype(features: torch.Tensor, logit_scale) -> torch.dtype:
    """The dtype open_clip's losses return: that of its logits ``logit_scale * features @ features.T`` under torch's
    promotion rules (a Python number or a 0-dim tensor does not promote a 2-D tensor of its category, so fp16/bf16
    features with a 0-dim fp32 scale give an fp16/bf16 loss; a ``(1,)``-shaped fp32 scale gives fp32). The bias is
    added in place there (``logits += logit_bias``), so it never changes the dtype."""
    logits = torch.empty((1, 1), dtype=features.dtype, device="meta")
    if isinstance(logit_scale, torch.Tensor):
        logits = logits * torch.empty(logit_scale.shape, dtype=logit_scale.dtype, device="meta")
    return logits.dtype


def _scalar(value, name: str, like: torch.Tensor) -> torch.Tensor:
    """A differentiable 0-dim view of a scalar parameter in the features' accumulation dtype (fp32, or float64 for
    float64 features); logit_scale arrives exp'd, logit_bias as is."""
    acc = acc_dtype(like.dtype)
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):  # numpy scalars too
        return torch.tensor(float(value), dtype=acc, device=like.device)
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a float or a one-element tensor, got {type(value).__name__}")
    if value.numel() != 1:
        raise ValueError(f"{name} must hold exactly one value, got shape {tuple(value.shape)}")
    if not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {str(value.dtype).replace('torch.', '')}")
    check_same_device(features=like, **{name: value})
    return value.reshape(()).to(acc)


def _check_groups(groups, name: str, n: int, like: torch.Tensor) -> torch.Tensor | None:
    if groups is None:
        return None
    check_tensor(groups, name, dtypes=(torch.int64, torch.int32), ndim=1)
    check_same_device(features=like, **{name: groups})
    if groups.shape[0] != n:
        raise ValueError(f"{name} has {groups.shape[0]} entries but the features have {n} rows")
    return groups.to(torch.int64).contiguous()


def validate_pair(image_features, text_features, logit_scale, logit_bias, image_groups, text_groups, check):
    """Shared checks of both losses; returns (x, y, s, b, gx, gy)."""
    x = check_tensor(image_features, "image_features", dtypes=FEATURE_DTYPES, ndim=2)
    y = check_tensor(text_features, "text_features", dtypes=FEATURE_DTYPES, ndim=2)
    check_same_device(image_features=x, text_features=y)
    if x.dtype != y.dtype:
        raise ValueError(
            f"image_features ({str(x.dtype).replace('torch.', '')}) and text_features "
            f"({str(y.dtype).replace('torch.', '')}) must have the same dtype"
        )
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"feature dimensions differ: image_features D={x.shape[1]}, text_features D={y.shape[1]}")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"empty batch: image_features has {x.shape[0]} rows, text_features has {y.shape[0]}")
    if x.shape[1] == 0:
        raise ValueError("features have D=0; expected at least one feature dimension")
    if (image_groups is None) != (text_groups is None):
        raise ValueError("image_groups and text_groups must be given together (or neither)")
    if image_groups is None and x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{x.shape[0]} images but {y.shape[0]} texts: without image_groups/text_groups the positives are the "
            "diagonal, which needs as many texts as images"
        )
    gx = _check_groups(image_groups, "image_groups", x.shape[0], x)
    gy = _check_groups(text_groups, "text_groups", y.shape[0], x)
    s = _scalar(logit_scale, "logit_scale", x)
    b = None if logit_bias is None else _scalar(logit_bias, "logit_bias", x)
    if check:
        check_finite(x, "image_features")
        check_finite(y, "text_features")
        check_finite(s.detach(), "logit_scale")
        if b is not None:
            check_finite(b.detach(), "logit_bias")
    return x, y, s, b, gx, gy


def group_sums(query_groups: torch.Tensor, key_groups: torch.Tensor, keys: torch.Tensor):
    """For each query q: Σ of the keys whose group equals q's group, and their count. O((N + M)·D)."""
    ids, inverse = torch.unique(torch.cat([key_groups, query_groups]), return_inverse=True)
    inv_k, inv_q = inverse[: key_groups.shape[0]], inverse[key_groups.shape[0] :]
    sums = keys.new_zeros(ids.shape[0], keys.shape[1]).index_add(0, inv_k, keys)
    counts = torch.bincount(inv_k, minlength=ids.shape[0])
    return sums[inv_q], counts[inv_q]


def info_nce_shard(
    x: torch.Tensor,
    y: torch.Tensor,
    gx: torch.Tensor | None,
    gy: torch.Tensor | None,
    s: torch.Tensor,
    b: torch.Tensor | None,
    smoothing: float,
    *,
    everyone: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None = None,
    offsets: tuple[int, int] = (0, 0),
    combine_cols: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """This process's share L_r of the global InfoNCE loss (Σ over processes of L_r = L; one process: L).

    x/y are the local rows and gx/gy their group ids (or None). In a process group, ``everyone`` holds every
    process's (x, y, gx, gy) (features gathered differentiably), ``offsets`` the global index of the first local row
    of x and of y, and combine_cols merges the per-process partial column log-sum-exps (all_y's length) into global
    ones; without it this process holds the whole batch.
    """
    all_x, all_y, all_gx, all_gy = (x, y, gx, gy) if everyone is None else everyone
    row_offset, col_offset = offsets
    n, m = x.shape[0], y.shape[0]
    big_n, big_m = all_x.shape[0], all_y.shape[0]
    # One fp32 copy of each feature matrix, used by every term: a feature's gradient parts (log-sum-exps and linear
    # terms, which nearly cancel in a confident batch) then add up in fp32 and are rounded to its dtype once.
    # Copies made twice would each round their share to fp16/bf16 first, leaving rounding noise hundreds of times
    # the true gradient. The kernels still read x's dtype (lse_pair's compute_dtype).
    # In a process group the gathered matrices take this process's rows from the same copies, so the gather's
    # backward carries only the other processes' terms.
    acc = acc_dtype(x.dtype)
    xf, yf = x.to(acc), y.to(acc)
    if everyone is None:
        all_xf, all_yf = xf, yf
    else:
        all_xf, all_yf = _with_local(all_x, xf, row_offset), _with_local(all_y, yf, col_offset)
    row_lse, col_part, diag = lse_pair(xf, all_yf, s, row_offset, x.dtype)
    col_all = col_part if combine_cols is None else combine_cols(col_part)
    col_lse = col_all[col_offset : col_offset + m]
    if gx is None:
        # One positive per row and column: the same global index.
        t_row, w_row, n_valid = _rows(all_yf, row_offset, n), None, big_n
        t_col, w_col, m_valid = _rows(all_xf, col_offset, m), None, big_m
    else:
        sum_y, cnt_row = group_sums(gx, all_gy, all_yf)
        sum_x, cnt_col = group_sums(gy, all_gx, all_xf)
        t_row = sum_y / cnt_row.clamp_min(1)[:, None]
        t_col = sum_x / cnt_col.clamp_min(1)[:, None]
        # Rows (columns) with no positive are left out of the mean, like an ignored label.
        w_row, w_col = (cnt_row > 0).to(acc), (cnt_col > 0).to(acc)
        _, all_cnt_row = group_sums(all_gx, all_gy, all_yf[:, :0])
        _, all_cnt_col = group_sums(all_gy, all_gx, all_xf[:, :0])
        n_valid, m_valid = (all_cnt_row > 0).sum(), (all_cnt_col > 0).sum()
        # Group ids already cost a host sync (torch.unique); a batch without any positive pair has no loss to give.
        if int(n_valid) == 0:
            raise ValueError(
                "no image and text share a group id (image_groups and text_groups have no common value): "
                "InfoNCE needs at least one positive pair"
            )
    if gx is None and row_offset == col_offset:
        # The positive logits from the same products as the log-sum-exps (which are >= them exactly: a confident
        # pair's cross-entropy is 0, not a rounding difference of two dot products), differentiable through lse_pair:
        # their gradient joins the softmax's in its backward's tile, before any rounding to fp16/bf16.
        pos_row = pos_col = diag
    else:
        # Σ_j q_ij·logit_ij is linear in x_i: its gradient comes from these dot products with the targets t.
        pos_row, pos_col = s * torch.linalg.vecdot(xf, t_row), s * torch.linalg.vecdot(yf, t_col)
    if smoothing > 0:
        # Target q = (1-ε)·uniform over the positives + ε/M over all columns.
        pos_row = (1 - smoothing) * pos_row + smoothing * s * torch.linalg.vecdot(xf, all_yf.mean(0))
        pos_col = (1 - smoothing) * pos_col + smoothing * s * torch.linalg.vecdot(yf, all_xf.mean(0))
    row_ce, col_ce = row_lse - pos_row, col_lse - pos_col
    if b is not None:
        # The bias enters both sides of the cross-entropy and cancels. (b - b)·b keeps it in the graph: exactly 0
        # with a gradient of exactly 0 for a finite bias (open_clip's is rounding noise around 0), NaN for a NaN/inf
        # one, which the factor 1 + bad passes on to every gradient (as open_clip's NaN logits do).
        bad = (b - b) * b
        row_ce, col_ce = row_ce * (1 + bad) + bad, col_ce * (1 + bad) + bad
    row_loss, col_loss = _non_negative(row_ce), _non_negative(col_ce)
    if w_row is not None:
        row_loss, col_loss = row_loss * w_row, col_loss * w_col
    return 0.5 * (row_loss.sum() / n_valid + col_loss.sum() / m_valid)


def _with_local(gathered: torch.Tensor, local: torch.Tensor, start: int) -> torch.Tensor:
    """``gathered`` in ``local``'s dtype, with rows start.. taken from ``local`` itself (this process's rows)."""
    end = start + local.shape[0]
    return torch.cat([gathered[:start].to(local.dtype), local, gathered[end:].to(local.dtype)])


def _rows(t: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """Rows start..start+count of t; t itself when that is all of it (a slice would cost its backward a zero-filled
    copy of the gradient: two more passes over (N, D))."""
    return t if start == 0 and count == t.shape[0] else t[start : start + count]


def _non_negative(ce: torch.Tensor) -> torch.Tensor:
    """A cross-entropy's value clamped at 0 (it is >= 0; only rounding can push it below), gradient unchanged."""
    return ce + (ce.clamp_min(0) - ce).detach()


def info_nce_loss(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale: torch.Tensor | float,
    logit_bias: torch.Tensor | float | None = None,
    *,
    image_groups: torch.Tensor | None = None,
    text_groups: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
    check_finite: bool = False,
) -> torch.Tensor:
    """Symmetric InfoNCE (CLIP) loss without the N×M logit matrix; equals open_clip's ``ClipLoss``.

    .. math::
        \\ell_{ij} = s\\langle x_i, y_j\\rangle + b,\\quad
        L = \\tfrac12\\Big[\\tfrac1{N}\\sum_i \\big(\\operatorname{lse}_j \\ell_{ij} - \\sum_j q_{ij}\\ell_{ij}\\big)
          + \\tfrac1{M}\\sum_j \\big(\\operatorname{lse}_i \\ell_{ij} - \\sum_i q'_{ij}\\ell_{ij}\\big)\\Big]

    (Radford et al. 2021, CLIP). Targets: ``q_ij = (1-ε)·[g_i = h_j]/|P_i| + ε/M`` with ``P_i`` the texts sharing
    image i's group (the diagonal when no groups are given), and symmetrically ``q'`` with ``ε/N``. Rows or
    columns without any positive are left out of their mean (N, M then count only the others).

    Args:
        image_features: ``(N, D)`` fp32/fp16/bf16/float64, any strides, need not be unit-norm.
        text_features: ``(M, D)`` same dtype and device. ``M == N`` unless groups are given.
        logit_scale: the *exp'd* temperature ``s`` (0-dim or one-element tensor, differentiable, or a Python or
            numpy number).
        logit_bias: optional ``b``; the loss does not depend on it (its gradient is exactly 0), accepted for parity;
            a NaN/inf bias makes the loss and every gradient NaN, as open_clip's NaN logits do.
        image_groups: optional ``(N,)`` int64 group ids; image i and text j are positives when the ids are equal
            (e.g. 5 captions of one image).
        text_groups: ``(M,)`` int64, given together with ``image_groups``.
        label_smoothing: ``ε`` in ``[0, 1)``, as ``torch.nn.functional.cross_entropy(label_smoothing=ε)``.
        check_finite: raise ValueError on NaN/Inf inputs (a host sync) instead of returning NaN.

    Returns:
        0-dim loss in open_clip's dtype: that of ``logit_scale * features (+ logit_bias)`` under torch's promotion
        (fp16/bf16 features with a float or 0-dim fp32 scale give an fp16/bf16 loss). Computed in fp32 (float64 for
        float64 features); each direction's cross-entropy is >= 0 (the positive logit's value comes from the same
        products as the log-sum-exp).

    Raises:
        ValueError: wrong types or dtypes, mixed feature dtypes, mismatched D, an empty batch, N != M without groups,
            a scale/bias with more than one value, bad groups or ε, groups without any positive pair (no image
            and text share an id), non-finite inputs with ``check_finite``.

    Note:
        Memory O((N + M)·D); the N×M logits are never stored. Devices: Triton kernels on CUDA (``auto`` backend,
        see :func:`vlkernels.set_backend`), the chunked torch path elsewhere and for float64; fp32 accumulation.
        Determinism: the CPU path and the Triton path under ``torch.use_deterministic_algorithms(True)`` are
        bitwise reproducible; the default Triton backward sums dy with atomics (last-bit run-to-run variation).
        Non-finite inputs give a NaN loss and NaN gradients, as open_clip (AMP loss scalers skip such steps).
        Differentiable in both features, ``logit_scale`` and ``logit_bias``; not twice differentiable.
        GEMM-unit costs of each path: ``vlkernels/contrastive/README.md``.

    Example:
        >>> x, y = torch.randn(8, 32), torch.randn(8, 32)
        >>> loss = info_nce_loss(x, y, torch.tensor(10.0))
    """
    x, y, s, b, gx, gy = validate_pair(
        image_features, text_features, logit_scale, logit_bias, image_groups, text_groups, check_finite
    )
    if not 0.0 <= float(label_smoothing) < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    loss = info_nce_shard(x, y, gx, gy, s, b, float(label_smoothing))
    return loss.to(loss_dtype(x, logit_scale))


def siglip_loss(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale: torch.Tensor | float,
    logit_bias: torch.Tensor | float | None = None,
    *,
    check_finite: bool = False,
    image_groups: torch.Tensor | None = None,
    text_groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sigmoid (SigLIP) loss and its gradients in one streaming pass; equals open_clip's ``SigLipLoss``.

    .. math:: L = \\frac1N \\sum_{i,j} \\operatorname{softplus}\\big(-z_{ij}\\,(s\\langle x_i, y_j\\rangle + b)\\big)

    (Zhai et al. 2023, SigLIP), ``z_ij = +1`` for positives (the diagonal, or equal group ids) and ``-1`` otherwise.

    Args:
        image_features: ``(N, D)`` fp32/fp16/bf16/float64, any strides.
        text_features: ``(M, D)`` same dtype and device; ``M == N`` unless groups are given.
        logit_scale: the exp'd scale ``s`` (tensor or float). logit_bias: ``b`` (tensor, float or None).
        image_groups, text_groups: optional ``(N,)``/``(M,)`` int64 ids defining several positives per row.
        check_finite: raise on NaN/Inf inputs instead of returning NaN.

    Returns:
        0-dim loss (normalized by N, the number of images, as open_clip) in open_clip's dtype, as
        :func:`info_nce_loss`.

    Raises:
        ValueError: as :func:`info_nce_loss`, except that groups without any positive pair are accepted: every pair
            is then a negative, a defined loss (open_clip's negative-only chunks are that).

    Note:
        With gradients enabled the forward also forms the gradients (one streaming pass) and keeps them
        (O((N + M)·D)) for backward; under ``no_grad`` only the loss. Devices, determinism, non-finite inputs and
        differentiability as :func:`info_nce_loss`; GEMM-unit costs in ``vlkernels/contrastive/README.md``.

    Example:
        >>> loss = siglip_loss(torch.randn(8, 32), torch.randn(8, 32), torch.tensor(10.0), torch.tensor(-10.0))
    """
    x, y, s, b, gx, gy = validate_pair(
        image_features, text_features, logit_scale, logit_bias, image_groups, text_groups, check_finite
    )
    loss = siglip_fused(x, y, s, b, gx, gy, 0, 0, 1.0 / x.shape[0], needs_grad(x, y, s, b))
    return loss.to(loss_dtype(x, logit_scale))


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
