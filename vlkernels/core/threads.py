"""Per-call C++ thread counts: a limit for the calling Python thread, never a process-wide change."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from vlkernels import _ext


@contextlib.contextmanager
def limit(num_threads: int) -> Iterator[None]:
    """Run the C++ calls this Python thread makes inside the block on at most ``num_threads`` threads.

    Other Python threads, and calls after the block, are unaffected (the limit lives in the calling OS thread), so
    concurrent users cannot undo each other's setting as a save/set/restore of ``vlkernels.set_num_threads`` would.

    Raises:
        ValueError: ``num_threads`` is not a positive int.

    Example:
        >>> import torch
        >>> from vlkernels.ops import count_above
        >>> with limit(1):  # e.g. inside each worker of a thread pool that is itself the parallelism
        ...     count_above(torch.tensor([[0.1, 0.9]]), torch.tensor([0.5]))
        tensor([1])
    """
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
    C = _ext.load()
    prev = C.set_thread_budget(num_threads)
    try:
        yield
    finally:
        C.set_thread_budget(prev)
