"""Plain references for the core helpers (tests, benchmarks, CPU fallback)."""

import torch


def count_above_ref(scores: torch.Tensor, thresholds: torch.Tensor, inclusive: bool = False) -> torch.Tensor:
    """Row i: number of scores[i, j] > thresholds[i] (>= when inclusive); NaN never counts."""
    t = thresholds.unsqueeze(-1)
    hit = scores >= t if inclusive else scores > t
    return hit.sum(dim=-1, dtype=torch.int64)


def l2_normalize_ref(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """x / max(||x||_2, eps) row-wise, accumulated in fp32 (fp64 stays fp64), returned in x's dtype."""
    acc = x.double() if x.dtype == torch.float64 else x.float()
    return (acc / acc.norm(dim=-1, keepdim=True).clamp_min(eps)).to(x.dtype)
