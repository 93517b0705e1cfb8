"""The thread counts of torch and of numpy's BLAS while the CPU engine runs: its workers are the threads."""

from __future__ import annotations

import contextlib
import threading

import torch

from vlkernels.retrieval import gemm

_threads_lock = threading.Lock()
_threads_users = 0
_blas_restore = None


@contextlib.contextmanager
def single_threaded():
    """torch (and numpy's BLAS where the screen uses it, ``gemm``) single-threaded for the whole of any call (the
    workers are the threads; each worker sets torch's count for itself, ``cpu._run``). The calling thread's own torch
    work (norms, finiteness checks, the cast of top-k values) runs on one thread too: each parallel torch op there
    leaves OpenMP's threads spinning for milliseconds after it, on the cores the workers are about to use.

    torch's count is the calling thread's (OpenMP's is per thread): each call saves and restores its own, on its own
    thread, so one call ending while another runs leaves neither thread at 1. numpy's BLAS limit is process-wide:
    calls in flight share one save and restore, counted under a lock. The C++ kernels are limited per worker thread
    (``cpu._run``), which leaves ``vlkernels.get_num_threads()`` untouched.
    """
    global _threads_users, _blas_restore
    mine = torch.get_num_threads()
    torch.set_num_threads(1)
    with _threads_lock:
        if _threads_users == 0:
            _blas_restore = gemm.limit_numpy_blas()
        _threads_users += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_users -= 1
            if _threads_users == 0 and _blas_restore is not None:
                _blas_restore.restore_original_limits()
                _blas_restore = None
        torch.set_num_threads(mine)
