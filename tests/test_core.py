"""Core helpers: count_above (C++/CUDA through torch.library) and l2_normalize (Triton), plus the extension path."""

import numpy as np
import pytest
import torch

from vlkernels import _ext
from vlkernels.ops import count_above, l2_normalize
from vlkernels.testing import FP32_TOL, assert_close_lowp


def _np_count(scores: np.ndarray, thr: np.ndarray, inclusive: bool) -> np.ndarray:
    cmp = np.greater_equal if inclusive else np.greater
    return np.array([int(cmp(row, t).sum()) for row, t in zip(scores, thr)], dtype=np.int64)


@pytest.mark.parametrize("n,m", [(1, 1), (37, 1000), (257, 37), (1000, 257), (0, 5), (5, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("inclusive", [False, True])
def test_count_above_matches_numpy(n, m, dtype, inclusive):
    # Quantized scores so ties are frequent and the > / >= distinction is exercised.
    scores = (torch.randn(n, m) * 4).round().to(dtype) / 4
    thr = (torch.randn(n) * 4).round().to(dtype) / 4
    got = count_above(scores, thr, inclusive=inclusive)
    assert got.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), _np_count(scores.numpy(), thr.numpy(), inclusive))


def test_count_above_strided_rows_and_nan():
    big = torch.randn(50, 300)
    big[3, 10] = float("nan")
    view = big[:, 20:220]  # row stride 300, unit column stride: read in place, no copy
    thr = torch.zeros(50)
    np.testing.assert_array_equal(count_above(view, thr).numpy(), _np_count(view.numpy(), thr.numpy(), False))


def test_count_above_threads_agree():
    scores, thr = torch.randn(3000, 700), torch.randn(3000)
    one = count_above(scores, thr, num_threads=1)
    two = count_above(scores, thr, num_threads=2)
    assert torch.equal(one, two)


def test_count_above_torch_library_registration():
    scores, thr = torch.randn(20, 30), torch.randn(20)
    torch.library.opcheck(torch.ops.vlkernels.count_above.default, (scores, thr, False))
    compiled = torch.compile(lambda s, t: count_above(s, t) + 1, fullgraph=True, backend="eager")
    assert torch.equal(compiled(scores, thr), count_above(scores, thr) + 1)


@pytest.mark.parametrize(
    "scores,thr,match",
    [
        (torch.randn(4, 5).half(), torch.randn(4).half(), "dtype"),
        (torch.randn(4, 5), torch.randn(4).double(), "thresholds has dtype"),
        (torch.randn(4, 5, 2), torch.randn(4), "2 dimensions"),
        (torch.randn(4, 5), torch.randn(3), "3 entries"),
        (torch.randn(5, 4).t(), torch.randn(4), "unit column stride"),
        (torch.randn(4, 5), torch.randn(8)[::2], "contiguous"),
        (torch.randn(4, 5), torch.randn(4, device="meta"), "one device"),
        ([[1.0]], torch.randn(1), "torch.Tensor"),
    ],
)
def test_count_above_rejects_bad_input(scores, thr, match):
    with pytest.raises(ValueError, match=match):
        count_above(scores, thr)


def _bad_direct_cases():
    s, t = torch.randn(4, 5), torch.randn(4)
    out = torch.zeros(4, dtype=torch.int64)
    ro = np.zeros(4, dtype=np.int64)
    ro.flags.writeable = False
    return [
        ((s.half(), t.half(), out), ValueError, "scores has dtype float16"),
        ((s, t.double(), out), ValueError, "thresholds has dtype float64"),
        ((s[0], t, out), ValueError, "scores must have 2 dimensions"),
        ((s, t[:2], out), ValueError, "thresholds must have size 4"),  # would read past the end
        ((s, t, out[:3]), ValueError, "out must have size 4"),
        ((s, t, out.int()), ValueError, "out has dtype int32"),
        ((torch.randn(5, 4).t(), t, out), ValueError, "scores must be contiguous in its last 1"),
        ((s[:, ::2], t, out), ValueError, "scores must be contiguous"),
        ((s, torch.randn(8)[::2], out), ValueError, "thresholds must be contiguous"),
        ((s, t, torch.zeros(8, dtype=torch.int64)[::2]), ValueError, "out must be contiguous"),
        ((s.numpy()[::-1], t.numpy(), out.numpy()), ValueError, "negative stride"),
        ((s, t, ro), ValueError, "out is read-only"),
        ((s.to("meta"), t, out), ValueError, "scores"),
        ((s.clone().requires_grad_(), t, out), ValueError, "scores cannot be exported.*detach"),
        # DLPack cannot carry torch's negative bit: exported as is, the values would come out with the wrong sign.
        ((torch.randn(4, 5, dtype=torch.complex64).conj().imag, t, out), ValueError, "scores .*negative bit"),
        (([[1.0]], t, out), TypeError, "scores must be a tensor or array supporting DLPack"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_direct_cases())))
def test_count_above_binding_rejects_bad_tensors(case):
    # The C++ binding checks what it receives itself: a wrong tensor is an exception, never an out-of-bounds read
    # (this file runs under ASan in tests/test_build.py).
    args, exc, match = _bad_direct_cases()[case]
    with pytest.raises(exc, match=match):
        _ext.load().count_above(*args, False)


def test_count_above_registered_op_validates_itself():
    # torch.ops.vlkernels.count_above skips the Python checks of count_above(): C++ still refuses short thresholds.
    with pytest.raises(ValueError, match="thresholds must have size 5"):
        torch.ops.vlkernels.count_above(torch.randn(5, 4), torch.randn(2), False)
    with pytest.raises(ValueError, match="scores must be contiguous"):
        torch.ops.vlkernels.count_above(torch.randn(3, 8)[:, ::2], torch.randn(3), False)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_count_above_binding_accepts_numpy_and_strided_rows(kind):
    # numpy arrays arrive through __dlpack__, torch tensors through DLPack's C exchange API (torch >= 2.9): both
    # must give the kernel the view's own offset and row stride.
    scores = np.random.default_rng(0).standard_normal((30, 50))
    view, thr = scores[::3, 5:45], np.zeros(10)
    out = np.zeros(10, dtype=np.int64)
    as_kind = (lambda a: a) if kind == "numpy" else torch.from_numpy
    _ext.load().count_above(as_kind(view), as_kind(thr), as_kind(out), False)
    np.testing.assert_array_equal(out, _np_count(view, thr, False))


def test_extension_stale_and_missing_errors(monkeypatch):
    assert _ext.available()
    mod = _ext.load()
    _ext.load.cache_clear()
    try:
        monkeypatch.setattr(_ext, "source_hash", lambda root: "0" * 16)
        with pytest.raises(_ext.ExtensionError, match="stale.*pip install -e"):
            _ext.load()
        _ext.load.cache_clear()
        monkeypatch.setenv("VLKERNELS_C_PATH", "/nonexistent/_C.so")
        with pytest.raises(_ext.ExtensionError, match="could not be loaded.*rebuild"):
            _ext.load()
    finally:
        monkeypatch.undo()
        _ext.load.cache_clear()
        assert _ext.load() is mod


@pytest.mark.parametrize("n,d", [(1, 1), (37, 96), (257, 1000), (3, 5000)])
def test_l2_normalize_triton_fp32(n, d):
    x = torch.randn(n, d) * 3
    ref = torch.nn.functional.normalize(x.double(), dim=-1)
    torch.testing.assert_close(l2_normalize(x).double(), ref, **FP32_TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_l2_normalize_triton_lowp(dtype):
    x = (torch.randn(64, 300) * 10).to(dtype)
    ref = torch.nn.functional.normalize(x.double(), dim=-1)
    baseline = torch.nn.functional.normalize(x, dim=-1)
    out = l2_normalize(x)
    assert out.dtype == dtype
    assert_close_lowp(out, ref, baseline)


def test_l2_normalize_float64_and_tiny_eps_follow_torch():
    """float64 rows are normalized in float64 (the fp32 kernel lost digits and gave NaN at a norm of 5e50); an eps
    below fp32's normal range gives torch's result (the kernel's 1 / eps overflowed: a zero row became NaN)."""
    x = torch.tensor([[1.0, 1e-9, 3.0], [3e50, 4e50, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(l2_normalize(x), torch.nn.functional.normalize(x, dim=-1), rtol=1e-15, atol=0)
    y = torch.tensor([[0.0, 0.0], [3e-25, 4e-25], [3.0, 4.0]])
    # fp32 as torch's: the squares of 3e-25 underflow, so that row divides by eps (3e15, 4e15).
    want = torch.nn.functional.normalize(y, dim=-1, eps=1e-40)
    assert torch.isfinite(want).all() and want[0].eq(0).all()
    torch.testing.assert_close(l2_normalize(y, eps=1e-40), want, **FP32_TOL)


def test_l2_normalize_nan_row_stays_nan():
    """A row holding NaN is NaN throughout, as F.normalize gives (the kernel's max(norm, eps) dropped the NaN norm
    and divided the row by eps)."""
    x = torch.tensor([[float("nan"), 1.0, 2.0], [3.0, 4.0, 0.0]])
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        out = l2_normalize(x.to(dtype))
        assert out[0].isnan().all() and torch.isfinite(out[1]).all(), dtype


def test_l2_normalize_grad_and_zero_row():
    x = torch.randn(9, 33, dtype=torch.float64)
    x[4] = 0
    x.requires_grad_(True)
    dy = torch.randn(9, 33, dtype=torch.float64)
    (gx,) = torch.autograd.grad(l2_normalize(x), x, dy)
    xr = x.detach().clone().requires_grad_(True)
    (gr,) = torch.autograd.grad(torch.nn.functional.normalize(xr, dim=-1), xr, dy)
    torch.testing.assert_close(gx, gr)


@pytest.mark.parametrize(
    "x,eps,match",
    [
        (torch.randn(3, 4, 5), 1e-12, "2 dimensions"),
        (torch.ones(3, 4, dtype=torch.int32), 1e-12, "dtype"),
        (torch.randn(4, 3).t(), 1e-12, "unit column stride"),
        (torch.randn(3, 4), 0.0, "eps"),
    ],
)
def test_l2_normalize_rejects_bad_input(x, eps, match):
    with pytest.raises(ValueError, match=match):
        l2_normalize(x, eps=eps)


class _Producer:
    """A DLPack producer whose ``__dlpack_device__`` answers ``device``; its data is a real numpy array."""

    def __init__(self, array, device):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


@pytest.mark.parametrize("device", [("cpu",), ("cpu", 0), (1,), "cpu", (1.0, 0), (2**40, 0), (2**70, 0), None])
def test_binding_names_a_producer_with_a_malformed_dlpack_device(device):
    scores, thr, out = np.zeros((3, 4)), np.zeros(3), np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^scores cannot be exported through DLPack"):
        _ext.load().count_above(_Producer(scores, device), thr, out, False)


class _Interrupted(_Producer):
    """A producer whose export is where a pending Ctrl-C surfaces (``where``: the method that raises)."""

    def __init__(self, array, where):
        super().__init__(array, (1, 0))
        self.where = where

    def __dlpack__(self, **kwargs):
        if self.where == "__dlpack__":
            raise KeyboardInterrupt
        return super().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        if self.where == "__dlpack_device__":
            raise KeyboardInterrupt
        return super().__dlpack_device__()


@pytest.mark.parametrize("where", ["__dlpack__", "__dlpack_device__"])
def test_ctrl_c_during_an_export_stays_a_keyboard_interrupt(where):
    # Not turned into "cannot be exported" (a ValueError about the argument): Ctrl-C must reach the caller as itself.
    scores, thr, out = np.zeros((3, 4)), np.zeros(3), np.zeros(3, dtype=np.int64)
    with pytest.raises(KeyboardInterrupt):
        _ext.load().count_above(_Interrupted(scores, where), thr, out, False)


def test_binding_accepts_a_well_formed_producer():
    scores, thr, out = np.arange(12.0).reshape(3, 4), np.full(3, 5.0), np.zeros(3, dtype=np.int64)
    _ext.load().count_above(_Producer(scores, (1, 0)), thr, out, False)
    np.testing.assert_array_equal(out, _np_count(scores, thr, False))
