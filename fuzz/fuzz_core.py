"""Fuzz target: the count_above binding and the DLPack checks of csrc/core/tensor_arg.h.

Builds torch/numpy arguments of fuzzed dtype, rank, shape, strides (slices, transposes, negative steps, broadcast
rows), read-only flags and length mismatches, and calls vlkernels._C.count_above directly (no Python validation in
front). Accepted inputs must give numpy's counts; refused ones a ValueError/TypeError. Anything else (another
exception, a sanitizer report, a crash) is a finding.
"""

import warnings

import atheris
import numpy as np
import torch

from vlkernels import _ext

C = _ext.load()
warnings.simplefilter("ignore")  # numpy casts of NaN, torch's read-only-array note: expected here
DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.bool_]


def _array(fdp: atheris.FuzzedDataProvider, ndim: int, dtype) -> np.ndarray:
    shape = [fdp.ConsumeIntInRange(0, 9) for _ in range(ndim)]
    base = np.asarray(fdp.ConsumeFloatListInRange(int(np.prod(shape)) * 2 + 4, -4.0, 4.0))
    # Quantized so ties (> vs >=) are frequent; NaN sometimes.
    base = np.round(base * 2) / 2
    if fdp.ConsumeBool() and base.size:
        base[fdp.ConsumeIntInRange(0, base.size - 1)] = np.nan
    a = base[: int(np.prod(shape))].reshape(shape).astype(dtype) if ndim else np.asarray(base[0], dtype=dtype)
    for _ in range(fdp.ConsumeIntInRange(0, 2)):
        if a.ndim == 0:
            break
        op = fdp.ConsumeIntInRange(0, 4)
        ax = fdp.ConsumeIntInRange(0, a.ndim - 1)
        if op == 0:
            a = np.swapaxes(a, 0, ax)
        elif op == 1:
            a = np.flip(a, ax)
        elif op == 2:
            a = a[(slice(None),) * ax + (slice(None, None, fdp.ConsumeIntInRange(1, 3)),)]
        elif op == 3 and a.shape[0] >= 1:
            a = np.broadcast_to(a[:1], (fdp.ConsumeIntInRange(0, 6), *a.shape[1:]))
        else:
            a = a.copy()
    return a


def _as_arg(fdp: atheris.FuzzedDataProvider, a: np.ndarray):
    choice = fdp.ConsumeIntInRange(0, 3)
    if choice == 0:
        return a
    if choice == 1:
        ro = np.array(a)
        ro.flags.writeable = False
        return ro
    if choice == 2 and a.dtype != np.float16 and a.strides and min(a.strides) >= 0:
        try:
            return torch.from_numpy(np.ascontiguousarray(a)) if fdp.ConsumeBool() else torch.as_tensor(a)
        except (ValueError, TypeError, RuntimeError):
            return a
    return a.tolist() if choice == 3 and fdp.ConsumeBool() else a


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    scores = _array(fdp, fdp.ConsumeIntInRange(0, 3), DTYPES[fdp.ConsumeIntInRange(0, 5)])
    n = scores.shape[0] if scores.ndim else 0
    thr = _array(fdp, 1, scores.dtype if fdp.ConsumeProbability() < 0.8 else DTYPES[fdp.ConsumeIntInRange(0, 5)])
    if fdp.ConsumeProbability() < 0.7 and thr.shape[0] != n:
        thr = np.resize(thr, n).astype(thr.dtype) if n else thr[:0]
    out_len = n if fdp.ConsumeProbability() < 0.8 else fdp.ConsumeIntInRange(0, 10)
    out = np.zeros(out_len, dtype=np.int64 if fdp.ConsumeProbability() < 0.9 else np.int32)
    args = [_as_arg(fdp, scores), _as_arg(fdp, thr), out if fdp.ConsumeProbability() < 0.9 else _as_arg(fdp, out)]
    inclusive = fdp.ConsumeBool()
    num_threads = fdp.ConsumeIntInRange(0, 4)
    try:
        C.count_above(*args, inclusive, num_threads)
    except (ValueError, TypeError):
        return
    # Accepted: it must be a valid call, and the counts numpy's.
    s, t = np.asarray(args[0]), np.asarray(args[1])
    assert s.ndim == 2 and s.dtype in (np.float32, np.float64) and t.shape == (s.shape[0],) and t.dtype == s.dtype
    o = args[2] if isinstance(args[2], np.ndarray) else np.asarray(args[2])
    if isinstance(args[2], torch.Tensor):
        o = args[2].numpy()
    want = (s >= t[:, None]).sum(1) if inclusive else (s > t[:, None]).sum(1)
    assert np.array_equal(o, want), (o, want)
