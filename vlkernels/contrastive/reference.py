"""Plain N×M references of the losses, written from the papers' formulas (fp64-capable; tests and benchmarks only).

They build the full logit matrix on purpose: an independent check of the streaming code, not a fallback.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _positives(n: int, m: int, image_groups, text_groups, device) -> torch.Tensor:
    if image_groups is None:
        return torch.eye(n, m, dtype=torch.bool, device=device)
    return image_groups[:, None] == text_groups[None, :]


def info_nce_loss_ref(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale,
    logit_bias=None,
    *,
    image_groups=None,
    text_groups=None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """½·[mean_i CE(logits_i, q_i) + mean_j CE(logits_j, q'_j)], q uniform over positives mixed with ε/M uniform;
    rows/columns without a positive are skipped. Computed in the inputs' dtype."""
    logits = logit_scale * image_features @ text_features.T
    if logit_bias is not None:
        logits = logits + logit_bias
    n, m = logits.shape
    pos = _positives(n, m, image_groups, text_groups, logits.device).to(logits.dtype)
    eps = label_smoothing

    def direction(lg, p):
        cnt = p.sum(1)
        keep = cnt > 0
        q = (1 - eps) * p / cnt.clamp_min(1)[:, None] + eps / lg.shape[1]
        ce = -(q * torch.log_softmax(lg, dim=1)).sum(1)
        return ce[keep].sum() / keep.sum().clamp_min(1)

    return 0.5 * (direction(logits, pos) + direction(logits.T, pos.T))


def siglip_loss_ref(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale,
    logit_bias=None,
    *,
    image_groups=None,
    text_groups=None,
) -> torch.Tensor:
    """(1/N)·Σ_ij -log σ(z_ij·(s⟨x_i, y_j⟩ + b)), z = +1 on positives, -1 elsewhere."""
    logits = logit_scale * image_features @ text_features.T
    if logit_bias is not None:
        logits = logits + logit_bias
    n, m = logits.shape
    z = _positives(n, m, image_groups, text_groups, logits.device).to(logits.dtype) * 2 - 1
    return -F.logsigmoid(z * logits).sum() / n
