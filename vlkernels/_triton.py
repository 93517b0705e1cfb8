"""When Triton kernels run: on CUDA tensors when triton imports, and on CPU tensors under TRITON_INTERPRET=1
(how CI checks the kernels without a GPU). Everything else takes the family's CPU path."""

from __future__ import annotations

import functools
import importlib.util
import os

import torch


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(*tensors: torch.Tensor) -> bool:
    """True when the Triton kernel should run for these (already device-checked) tensors."""
    if not triton_installed() or not tensors:
        return False
    device = tensors[0].device
    if device.type == "cuda":
        return True
    return device.type == "cpu" and interpreting()


def triton_version() -> str | None:
    if not triton_installed():
        return None
    import triton

    return triton.__version__
