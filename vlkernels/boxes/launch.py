"""The boxes family's one launch helper. The C++ bindings take the tensors themselves (checked and dispatched on
device and dtype in C++, ``csrc/boxes/launch_args.h``); on CUDA they run on the caller's current stream."""

from __future__ import annotations

import torch


def stream(t: torch.Tensor) -> int:
    """The CUDA stream handle the kernels on ``t``'s device run on (0 on CPU, where it is ignored)."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0
