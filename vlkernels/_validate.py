"""Input validation shared by every public function: checks run before any pointer reaches C++ or Triton."""

from __future__ import annotations

import operator
from collections.abc import Iterable

import numpy as np
import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def as_integer(v: object) -> int | None:
    """v as an int when it is one (numpy integers included) or an integral float (2.0), else None (2.5, bools,
    strings, None): for arguments and fields that hold counts or sizes, so a fraction is refused rather than
    truncated."""
    if isinstance(v, (str, bytes, bool, np.bool_)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        pass
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    return None


def check_tensor(
    x: object,
    name: str,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    ndim: int | Iterable[int] | None = None,
    min_ndim: int | None = None,
    last_dim: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Raise ValueError naming `name` unless x is a tensor of an accepted dtype, rank and device."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if x.dtype not in dtypes:
            raise ValueError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; expected one of {_names(dtypes)}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.dim() not in allowed:
            want = " or ".join(str(a) for a in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(x.shape)}")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {tuple(x.shape)}")
    if last_dim is not None and (x.dim() == 0 or x.shape[-1] != last_dim):
        raise ValueError(f"{name} must have last dimension {last_dim}, got shape {tuple(x.shape)}")
    if device is not None and x.device != torch.device(device):
        raise ValueError(f"{name} is on {x.device}, expected {torch.device(device)}")
    return x


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"inputs must be on one device, got {listing}")
    return first


def check_contiguous(x: torch.Tensor, name: str) -> torch.Tensor:
    """For pointer-taking kernels: a view with gaps would be read out of bounds, so refuse it."""
    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous (got strides {tuple(x.stride())}); call .contiguous() first")
    return x


def check_finite(x: torch.Tensor, name: str) -> torch.Tensor:
    """NaN/Inf policy for inputs where a non-finite value would silently corrupt a rank or a loss."""
    if x.numel() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} NaN/Inf value(s); inputs must be finite")
    return x
