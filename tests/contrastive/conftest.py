"""Fixtures shared by the contrastive tests: the two backends, open_clip's loss module, the interpreter's BLAS dot."""

from __future__ import annotations

import os

import pytest
import torch

from vlkernels._triton import triton_installed
from vlkernels.testing import interpreter_blas_dot, open_clip_loss_module

if triton_installed():
    # Triton decides interpreted vs compiled when a kernel module is imported: do it now, while TRITON_INTERPRET
    # still has the root conftest's value (the CPU-backend tests switch it off for their duration).
    import vlkernels.contrastive.kernels  # noqa: F401


@pytest.fixture(autouse=True)
def _fast_interpreter_dot():
    with interpreter_blas_dot():
        yield


@pytest.fixture(params=["triton", "cpu"])
def backend(request, monkeypatch):
    """``triton``: the Triton kernels (CUDA, or CPU under TRITON_INTERPRET=1); ``cpu``: the chunked torch CPU path."""
    if request.param == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "0")
    elif not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    return request.param


@pytest.fixture
def device(backend):
    return "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def oc():
    mod = open_clip_loss_module()
    if mod is None:
        pytest.skip("open-clip-torch is not installed (its loss.py is the reference)")
    return mod
