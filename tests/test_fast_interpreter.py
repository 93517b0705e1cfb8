"""tests/fast_interpreter.py (installed for the whole test run): interpreted tl.sort and XOR reductions give the
answers of torch and numpy, and those of the interpreter without it."""

import os

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1", allow_module_level=True)

import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402


@triton.jit
def _sort_rows(x_ptr, out_ptr, xor_ptr, M: tl.constexpr, N: tl.constexpr, DESC: tl.constexpr):
    rows = tl.arange(0, M)[:, None]
    cols = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rows * N + cols)
    tl.store(out_ptr + rows * N + cols, tl.sort(x, dim=1, descending=DESC))
    tl.store(xor_ptr + tl.arange(0, M), tl.xor_sum(x.to(tl.int32, bitcast=True), axis=1))
    tl.store(xor_ptr + M, tl.xor_sum(tl.xor_sum(x.to(tl.int32, bitcast=True), axis=1), axis=0))


def _run(x, desc):
    m, n = x.shape
    out, xor = torch.empty_like(x), torch.empty(m + 1, dtype=torch.int32)
    _sort_rows[(1,)](x, out, xor, m, n, desc)
    return out, xor


@pytest.mark.parametrize("desc", [False, True])
def test_interpreted_sort_and_xor_equal_the_loop_and_torch(desc):
    x = torch.randn(8, 64)
    x[0, :32] = x[0, 32:]  # ties
    x[1] = 0.0
    bits = x.view(torch.int32).numpy()
    want_xor = np.bitwise_xor.reduce(bits, axis=1)
    fast, fast_xor = _run(x, desc)
    assert torch.equal(fast, torch.sort(x, dim=1, descending=desc).values)
    np.testing.assert_array_equal(fast_xor[:-1].numpy(), want_xor)
    assert int(fast_xor[-1]) == int(np.bitwise_xor.reduce(want_xor))
    reduce_ops = getattr(interpreter, "ReduceOps", None)
    installed = getattr(reduce_ops, "apply_impl", None), getattr(interpreter, "_patch_builtin", None)
    if not all(hasattr(f, "__wrapped__") for f in installed):
        # Another Triton's interpreter: tests/fast_interpreter.py leaves it as it is (the kernels run unpatched).
        pytest.skip(f"Triton {triton.__version__}: the interpreter is not patched here")
    installed = interpreter.ReduceOps.apply_impl, interpreter._patch_builtin
    mp = pytest.MonkeyPatch()
    mp.setattr(interpreter.ReduceOps, "apply_impl", installed[0].__wrapped__)
    mp.setattr(interpreter, "_patch_builtin", installed[1].__wrapped__)
    try:
        loop, loop_xor = _run(x, desc)
    finally:
        mp.undo()
    assert torch.equal(fast, loop) and torch.equal(fast_xor, loop_xor)
