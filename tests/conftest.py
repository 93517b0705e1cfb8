import atexit
import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _share_bytecode() -> None:
    """Every Python process of a run (xdist workers, the CLI and Ctrl-C subprocesses, the sanitized run and its
    workers) imports torch and the test modules. Under PYTHONDONTWRITEBYTECODE each of them compiles all of it from
    source again: ~2.3 s a process for vlkernels and torch alone, ~8 s for a worker's collection. Such a run keeps
    its bytecode in a folder of its own outside the checkout instead, shared by its processes and removed at its end;
    without PYTHONDONTWRITEBYTECODE, Python's own __pycache__ folders do the same."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    prefix = tempfile.mkdtemp(prefix="vlkernels-test-bytecode-")
    atexit.register(shutil.rmtree, prefix, ignore_errors=True)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


# Before torch's import, so that this process compiles it once for all of the run's processes.
_share_bytecode()

import pytest  # noqa: E402
import torch  # noqa: E402

# Triton reads TRITON_INTERPRET when it is imported: set it before any test module pulls triton in, so the
# kernels run on CPU tensors where no GPU exists (CI).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# After TRITON_INTERPRET: importing vlkernels may import triton.
import fast_interpreter  # noqa: E402
from shared_data import shared_data_dir  # noqa: E402

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
