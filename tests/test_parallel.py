"""vlk::parallel_for: per-call thread counts (no global mutation), and no abort when threads cannot be created."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from forked import run_forked

import vlkernels
from vlkernels import _ext
from vlkernels.core import threads
from vlkernels.ops import count_above

HEAVY = 10**8  # items of parallel_sum: long enough (~20 ms) that every worker gets blocks


def _np_count(scores: np.ndarray, thr: np.ndarray) -> np.ndarray:
    return (scores > thr[:, None]).sum(axis=1).astype(np.int64)


def test_parallel_for_covers_range_with_at_most_budget_threads():
    C = _ext.load()
    for budget in (1, 2, 3, 7):
        for n, grain in [(1, 1), (37, 5), (1000, 1), (HEAVY, 1000)]:
            total, used = C._test_parallel_sum(n, grain, budget)
            assert total == n * (n - 1) // 2
            assert 1 <= used <= budget


def test_thread_budget_is_per_call_and_per_thread():
    before = vlkernels.get_num_threads()
    C = _ext.load()
    with threads.limit(1):
        assert vlkernels.get_num_threads() == 1
        assert C._test_parallel_sum(HEAVY, 1000, 0)[1] == 1
        seen = []
        t = threading.Thread(target=lambda: seen.append(vlkernels.get_num_threads()))
        t.start()
        t.join()
        assert seen == [before]  # another Python thread is not limited
    assert vlkernels.get_num_threads() == before


def test_concurrent_calls_leave_the_thread_count_alone():
    # Concurrent calls with their own thread counts, and a set_num_threads made meanwhile.
    before = vlkernels.get_num_threads()
    scores, thr = torch.randn(2000, 500), torch.randn(2000)
    want = _np_count(scores.numpy(), thr.numpy())
    errors = []

    def work(k):
        try:
            for _ in range(5):
                got = count_above(scores, thr, num_threads=1 + k % 3)
                np.testing.assert_array_equal(got.numpy(), want)
                with threads.limit(1):
                    np.testing.assert_array_equal(count_above(scores, thr).numpy(), want)
        except Exception as e:
            errors.append(e)

    try:
        pool = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in pool:
            t.start()
        vlkernels.set_num_threads(5)
        for t in pool:
            t.join()
        assert not errors, errors
        assert vlkernels.get_num_threads() == 5
    finally:
        vlkernels.set_num_threads(before)
    assert vlkernels.get_num_threads() == before


def test_limit_rejects_bad_counts():
    with pytest.raises(ValueError, match="positive int"):
        with threads.limit(0):
            pass
    with pytest.raises(ValueError, match="num_threads"):
        count_above(torch.randn(2, 3), torch.randn(2), num_threads=-1)


_CHECK = """
    import numpy as np, numpy.testing, torch
    from vlkernels import _ext
    from vlkernels.ops import count_above
    C = _ext.load()
    torch.manual_seed(0)
    s, t = torch.randn(3000, 700), torch.randn(3000)
    {setup}
    got = count_above(s, t, num_threads=8).numpy()
    np.testing.assert_array_equal(got, (s.numpy() > t.numpy()[:, None]).sum(1))
    total, used = C._test_parallel_sum(10**8, 1000, 8)
    assert total == 10**8 * (10**8 - 1) // 2, total
    assert used == 1, f"{{used}} threads took blocks where only the calling one can run"
"""


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_thread_creation_failure_falls_back(limit):
    # std::thread throwing EAGAIN used to terminate the process; now the threads that exist take
    # every block. The test hook fails each call's worker creation after `limit` workers.
    C = _ext.load()
    scores, thr = torch.randn(3000, 700), torch.randn(3000)
    prev = C._test_set_spawn_limit(limit)
    try:
        got = count_above(scores, thr, num_threads=8)
        total, used = C._test_parallel_sum(HEAVY, 1000, 8)
    finally:
        C._test_set_spawn_limit(prev)
    np.testing.assert_array_equal(got.numpy(), _np_count(scores.numpy(), thr.numpy()))
    assert total == HEAVY * (HEAVY - 1) // 2
    assert 1 <= used <= limit + 1


def test_thread_creation_failure_under_rlimit_nproc():
    # The real thing: RLIMIT_NPROC=1 makes clone() fail with EAGAIN. Root ignores the limit, so a root run drops to
    # nobody first (after the imports: the interpreter under /root is not readable by nobody).
    setup = """
    import os, resource
    count_above(s[:2], t[:2])  # lazy imports done while the interpreter's files are still readable
    if os.geteuid() == 0:
        os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    import threading
    try:
        threading.Thread(target=lambda: None).start()
        raise SystemExit("thread creation still works under RLIMIT_NPROC=1")
    except RuntimeError:
        pass
    """
    # A fork server's child (tests/forked.py): a process of its own for the limit and the user, without a fresh
    # interpreter's torch import.
    err = run_forked(textwrap.dedent(_CHECK.format(setup=textwrap.indent(textwrap.dedent(setup), "    ").strip())))
    if err is not None and "still works" in err:
        pytest.skip("RLIMIT_NPROC is not enforced here")
    assert err is None, err[-3000:]


def test_concurrent_retrieval_calls_leave_thread_counts_alone():
    """Concurrent retrieval.evaluate / topk calls leave get_num_threads() alone (workers that set a process-wide
    count and restore it without a lock would leave it at 1); results stay those of a lone call."""
    from vlkernels import retrieval

    g = torch.Generator().manual_seed(1)
    img, txt = torch.randn(300, 32, generator=g), torch.randn(900, 32, generator=g)
    t2i = torch.arange(900) // 3
    want = retrieval.evaluate(img, txt, t2i, ks=(1, 5))
    want_top = retrieval.topk(txt, img, 7)
    before, torch_before = vlkernels.get_num_threads(), torch.get_num_threads()
    errors = []

    def work(k):
        try:
            # Each thread's own torch count (OpenMP's is per thread) comes back as it was, whichever call ends first.
            # torch sets a thread's count from the last one set anywhere at its first read: read first, then set.
            torch.get_num_threads()
            torch.set_num_threads(2)
            for _ in range(3):
                if k % 2:
                    assert retrieval.evaluate(img, txt, t2i, ks=(1, 5)) == want
                else:
                    v, i = retrieval.topk(txt, img, 7)
                    assert torch.equal(i, want_top[1]) and torch.equal(v, want_top[0])
                assert torch.get_num_threads() == 2, f"thread {k} left at {torch.get_num_threads()}"
        except Exception as e:
            errors.append(e)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert vlkernels.get_num_threads() == before
    assert torch.get_num_threads() == torch_before


def test_cpu_retrieval_runs_the_calling_threads_torch_work_on_one_thread(monkeypatch):
    """The calling thread's own torch work in a CPU retrieval call (finiteness sums, screen norms) runs on one thread
    for the whole call: a parallel torch op there leaves OpenMP's threads spinning on the cores the workers use
    next. torch's count is given back afterwards."""
    from vlkernels import retrieval
    from vlkernels.retrieval import screen

    main = threading.current_thread()
    seen = []
    sum_, norms = torch.Tensor.sum, screen.norms

    def record():
        if threading.current_thread() is main:
            seen.append(torch.get_num_threads())

    def sum_spy(self, *a, **k):
        record()
        return sum_(self, *a, **k)

    def norms_spy(x):
        record()
        return norms(x)

    g = torch.Generator().manual_seed(2)
    img, txt = torch.randn(300, 32, generator=g), torch.randn(900, 32, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # so that a missed scope shows on a 1-core machine too
    try:
        monkeypatch.setattr(torch.Tensor, "sum", sum_spy)
        monkeypatch.setattr(screen, "norms", norms_spy)
        retrieval.evaluate(img, txt, torch.arange(900) // 3, backend="cpu")
        retrieval.topk(txt, img, 7, backend="cpu")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}, seen


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_default_threads_follow_the_affinity_mask():
    """A process pinned to one CPU (taskset) runs one C++ worker by default, as torch counts it; a bad
    VLKERNELS_NUM_THREADS warns instead of being ignored without a word."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); import warnings;"
        "warnings.simplefilter('error');"
        "import vlkernels, torch; print(vlkernels.get_num_threads(), torch.get_num_threads())"
    )
    env = {k: v for k, v in os.environ.items() if k != "VLKERNELS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]
    bad = subprocess.run(
        [sys.executable, "-c", "import vlkernels; vlkernels.get_num_threads()"],
        env={**env, "VLKERNELS_NUM_THREADS": "abc"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "VLKERNELS_NUM_THREADS='abc' is not a positive integer" in bad.stderr
