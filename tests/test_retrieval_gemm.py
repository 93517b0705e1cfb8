"""The CPU screen's GEMM library (vlkernels/retrieval/gemm.py): the automatic choice, the switch, and numpy's BLAS
held at one thread while the workers run (then given back)."""

import numpy as np
import pytest
import threadpoolctl
import torch

from vlkernels.retrieval import evaluate, gemm, topk
from vlkernels.retrieval import screen as scr


def test_choice_by_cpu_vendor_and_numpy_blas(monkeypatch):
    monkeypatch.delenv(gemm.ENV, raising=False)
    for vendor, openblas, want in [
        ("AuthenticAMD", True, "numpy"),
        ("AuthenticAMD", False, "torch"),
        ("GenuineIntel", True, "torch"),
        (None, True, "torch"),
    ]:
        monkeypatch.setattr(gemm, "_cpu_vendor", lambda v=vendor: v)
        monkeypatch.setattr(gemm, "_numpy_has_openblas", lambda o=openblas: o)
        assert gemm.library() == want
        assert ("OpenBLAS" in gemm.describe()) == (want == "numpy")
    monkeypatch.setenv(gemm.ENV, "numpy")
    assert gemm.library() == "numpy" and "forced by" in gemm.describe() and "GEMM: numpy" in scr.describe()
    monkeypatch.setenv(gemm.ENV, "mkl")
    with pytest.raises(ValueError, match="VLKERNELS_RETRIEVAL_GEMM must be one of 'auto', 'torch', 'numpy'"):
        evaluate(torch.eye(3), torch.eye(3), [0, 1, 2])


@pytest.mark.parametrize("blas", ["torch", "numpy"])
def test_matmul_equals_torch_and_fills_out(blas, monkeypatch):
    monkeypatch.setenv(gemm.ENV, blas)
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        a, b = torch.randn(37, 19, dtype=dtype, generator=g), torch.randn(23, 19, dtype=dtype, generator=g)
        want = a.double() @ b.double().T
        out = torch.empty(37, 23, dtype=dtype)
        assert gemm.matmul(a, b, out=out) is out
        tol = 19 * 2 * torch.finfo(dtype).eps * (a.abs().double() @ b.abs().double().T)
        assert ((out.double() - want).abs() <= tol).all()
        assert ((gemm.matmul(a, b).double() - want).abs() <= tol).all()


def _blas_threads() -> list[int]:
    """Thread counts of numpy's own BLAS (numpy's wheels ship it in numpy.libs; else every BLAS): other BLAS copies
    loaded later in the process (scipy's, faiss's) are not the screen's."""
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    own = [i for i in blas if "numpy" in i["filepath"]]
    return [i["num_threads"] for i in own or blas]


def test_numpy_blas_one_thread_during_a_call_and_restored_after(monkeypatch):
    monkeypatch.setenv(gemm.ENV, "numpy")
    before = _blas_threads()
    assert before, "threadpoolctl finds no BLAS in this process: nothing to check the limit on"
    seen = []
    real = gemm.matmul

    def spy(a, b, out=None):
        seen.append(_blas_threads())
        return real(a, b, out=out)

    monkeypatch.setattr(gemm, "matmul", spy)
    x = torch.nn.functional.normalize(torch.randn(300, 16, generator=torch.Generator().manual_seed(1)), dim=1)
    topk(x, x, 5, chunk_queries=64, chunk_gallery=64, screen="fp32")
    evaluate(x, x, np.arange(300), chunk_rows=64, chunk_cols=64, screen="fp32")
    assert seen and all(t and t == [1] * len(t) for t in seen)
    assert _blas_threads() == before
