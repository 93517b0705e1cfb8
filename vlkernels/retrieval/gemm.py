"""The CPU screen's tile GEMM: torch's BLAS (MKL) or numpy's (OpenBLAS in numpy's wheels), chosen per machine.

The screen's bound holds for any fp32 GEMM (any summation order, fused or not, denormals flushed or not), so the
library is a matter of speed only: ranks and top-k are the same either way. On AMD CPUs OpenBLAS's single-threaded
sgemm is the faster one (2-core AMD EPYC, AVX2, two workers at the retrieval tile shapes: 130-138 GFLOP/s against
MKL's 103-120); on Intel CPUs MKL is Intel's own, and torch's matmul is kept. ``VLKERNELS_RETRIEVAL_GEMM`` forces
one ("torch" or "numpy").
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch

ENV = "VLKERNELS_RETRIEVAL_GEMM"
CHOICES = ("auto", "torch", "numpy")


@functools.cache
def _numpy_has_openblas() -> bool:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except (KeyError, TypeError, ValueError):
        return False
    return "openblas" in str(blas).lower()


@functools.cache
def _cpu_vendor() -> str | None:
    from vlkernels._environment import cpu_info

    return cpu_info()["vendor"]


def _requested() -> str:
    s = os.environ.get(ENV, "auto") or "auto"
    if s not in CHOICES:
        raise ValueError(f"{ENV} must be one of {', '.join(map(repr, CHOICES))}, got {s!r}")
    return s


def library() -> str:
    """The library's name, "numpy" or "torch": VLKERNELS_RETRIEVAL_GEMM when set, else numpy's on AMD CPUs where
    numpy's BLAS is OpenBLAS, else torch's."""
    s = _requested()
    if s != "auto":
        return s
    return "numpy" if _cpu_vendor() == "AuthenticAMD" and _numpy_has_openblas() else "torch"


def describe() -> str:
    """The library and why (``vlkernels info``)."""
    name = library()
    if _requested() != "auto":
        return f"{name} (forced by {ENV})"
    if name == "numpy":
        return "numpy's OpenBLAS (AMD CPU: faster than torch's MKL at the tile shapes)"
    return "torch's BLAS"


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b.T of CPU tensors, into ``out`` (C-contiguous) when given."""
    if library() == "torch":
        return torch.matmul(a, b.T, out=out)
    res = np.matmul(a.detach().numpy(), b.detach().numpy().T, out=None if out is None else out.numpy())
    return out if out is not None else torch.from_numpy(res)


@functools.cache
def _blas_controller():
    import threadpoolctl

    return threadpoolctl.ThreadpoolController().select(user_api="blas")


def limit_numpy_blas():
    """numpy's BLAS at one thread, process-wide, when the screen uses it (each worker is one of the threads):
    a restorer to call afterwards, or None."""
    if library() != "numpy":
        return None
    return _blas_controller().limit(limits=1)
