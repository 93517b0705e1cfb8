import multiprocessing
import os
from pathlib import Path

import pytest
import torch

# Triton reads TRITON_INTERPRET when it is imported: set it before any test module pulls triton in, so the
# kernels run on CPU tensors where no GPU exists (CI).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# After TRITON_INTERPRET: importing vlkernels may import triton.
import fast_interpreter

from vlkernels.testing import shared_data_dir

fast_interpreter.install()

# Multi-process (gloo) tests start their ranks, and the tests that need a process vlkernels has not touched their
# children (tests/forked.py), from a fork server that has imported torch once, instead of fresh interpreters that
# import it again each (seconds a process on 2 cores). torch._dynamo too: the first call of any torch.library custom
# op imports it (~2 s). Not vlkernels: it reads environment variables at import (and its extension when it loads)
# that a child may set first. torch._dynamo imports triton: triton.language's own jit helpers take this process's
# TRITON_INTERPRET (set above), but vlkernels' kernels are defined when a child imports vlkernels, so the ranks that
# set TRITON_INTERPRET=0 first still get the CPU paths they ask for.
multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "torch._dynamo"])


def pytest_collection_modifyitems(config, items):
    # Long tests that run beside the rest start first: with xdist's load scheduling the first items go to the first
    # worker, so the run lasts about as long as the longer of them and the rest, not the two one after the other.
    items.sort(key=lambda item: item.get_closest_marker("early") is None)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu marker); none is present")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's shared data folder (real COCO captions and golden scores); skips when absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("shared data not found: set VLKERNELS_SHARED_DATA, or place shared/data beside the checkout")
    return path


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
