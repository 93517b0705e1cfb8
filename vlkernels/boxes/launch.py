"""The boxes family's launch helpers. The C++ bindings take the tensors themselves (checked and dispatched on
device and dtype in C++, ``csrc/boxes/launch_args.h``); on CUDA they run on the caller's current stream. numpy arrays
become tensors over the same buffer (no copy), so the kernels read them in place with their strides."""

from __future__ import annotations

import warnings

import numpy as np
import torch


def stream(t: torch.Tensor) -> int:
    """The CUDA stream handle the kernels on ``t``'s device run on (0 on CPU, where it is ignored)."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def as_tensor_view(x: object) -> object:
    """A numpy array as a CPU tensor sharing its buffer and strides (anything else is returned unchanged).

    Read-only arrays are shared too (the ops only read their inputs; torch's warning about writes through the view
    is silenced). Negative strides, which torch tensors cannot hold, are the one case that copies."""
    if not isinstance(x, np.ndarray):
        return x
    if any(s < 0 for s in x.strides):
        # A copy even where numpy calls the array contiguous (a reversed length-1 axis keeps its negative stride
        # through np.ascontiguousarray, and torch.from_numpy refuses it).
        x = x.copy(order="C")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(x)
