"""Core helpers shared by the kernel families: rank counting (C++/CUDA) and row L2 normalization (Triton)."""

from vlkernels.core.ops import count_above, l2_normalize

__all__ = ["count_above", "l2_normalize"]
