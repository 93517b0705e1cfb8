"""Plain N×M references of the losses, written from the papers' formulas (fp64-capable; tests and benchmarks only).

They build the full logit matrix on purpose: an independent check of the streaming code, not a fallback.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _logits(image_features, text_features, logit_scale, logit_bias, image_groups, text_groups):
    """The full N×M logit matrix s·x·yᵀ (+ b) and its positives mask (the diagonal, or equal group ids)."""
    logits = logit_scale * image_features @ text_features.T
    if logit_bias is not None:
        logits = logits + logit_bias
    n, m = logits.shape
    if image_groups is None:
        return logits, torch.eye(n, m, dtype=torch.bool, device=logits.device)
    return logits, image_groups[:, None] == text_groups[None, :]


def info_nce_loss_ref(
    image_features, text_features, logit_scale, logit_bias=None, *, image_groups=None, text_groups=None,
    label_smoothing=0.0,
) -> torch.Tensor:  # fmt: skip
    """½·[mean_i CE(logits_i, q_i) + mean_j CE(logits_j, q'_j)], q uniform over positives mixed with ε/M uniform;
    rows/columns without a positive are skipped. Computed in the inputs' dtype."""
    logits, pos = _logits(image_features, text_features, logit_scale, logit_bias, image_groups, text_groups)
    pos = pos.to(logits.dtype)
    eps = label_smoothing

    def direction(lg, p):
        cnt = p.sum(1)
        keep = cnt > 0
        q = (1 - eps) * p / cnt.clamp_min(1)[:, None] + eps / lg.shape[1]
        ce = -(q * torch.log_softmax(lg, dim=1)).sum(1)
        return ce[keep].sum() / keep.sum().clamp_min(1)

    return 0.5 * (direction(logits, pos) + direction(logits.T, pos.T))


def siglip_loss_ref(
    image_features, text_features, logit_scale, logit_bias=None, *, image_groups=None, text_groups=None
):
    """(1/N)·Σ_ij -log σ(z_ij·(s⟨x_i, y_j⟩ + b)), z = +1 on positives, -1 elsewhere."""
    logits, pos = _logits(image_features, text_features, logit_scale, logit_bias, image_groups, text_groups)
    z = pos.to(logits.dtype) * 2 - 1
    return -F.logsigmoid(z * logits).sum() / logits.shape[0]
