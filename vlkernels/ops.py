"""torchvision-style namespace of the low-level ops: ``vlkernels.ops.<op>``."""

from vlkernels.core.ops import count_above, l2_normalize

__all__ = ["count_above", "l2_normalize"]
