"""Which path runs an op: the Triton kernel or the chunked torch path, and the safe fallback between them.

The backend is ``auto`` (default), ``triton`` or ``torch``: from ``VLKERNELS_BACKEND``, overridden by
:func:`set_backend`. Every family asks :func:`use_triton` (the one decision point) and launches through
:func:`run_triton` (the one fallback point):

- ``auto``: Triton on NVIDIA CUDA devices of compute capability 8.0+ (the architectures the tile tables are declared
  for and statically profiled at; bf16 ``tl.dot`` needs sm_80+ too) when triton imports, and on CPU tensors under
  ``TRITON_INTERPRET=1`` (how CI runs the kernels). Any other device (an older GPU, ROCm, MPS, XPU, a CUDA machine
  without triton) takes the torch path, with one warning per reason naming it. A Triton compile or launch error on an
  op's first use falls back to the torch path with a warning quoting the error; that op stays on torch afterwards.
- ``triton``: always Triton; anything that prevents it is an error, and kernel errors surface unchanged.
- ``torch``: always the torch path (runs on any torch device).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

BACKENDS = ("auto", "triton", "torch")
# Lowest CUDA compute capability auto runs Triton on: the tile tables exist for sm_80 and sm_90 only.
MIN_CAPABILITY = (8, 0)

T = TypeVar("T")

_lock = threading.Lock()
_override: str | None = None
_warned: set[str] = set()
# Under TRITON_INTERPRET=1 on CPU tensors (how tests run the kernels) kernel errors surface: a fallback there would let
# a broken kernel pass its tests on the torch path. Tests of the fallback itself switch this off.
STRICT_INTERPRETER = True
# Ops (keyed by name, device type, dtype) whose Triton kernel failed on first use (-> the error text), or ran once.
_failed: dict[tuple[str, str, str], str] = {}
_verified: set[tuple[str, str, str]] = set()


class BackendError(RuntimeError):
    """``VLKERNELS_BACKEND=triton`` (or ``set_backend("triton")``) was forced where Triton cannot run."""


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_version() -> str | None:
    if not triton_installed():
        return None
    import triton

    return triton.__version__


def _check_name(name: str, source: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{source} must be one of {', '.join(BACKENDS)}; got {name!r}")
    return name


def get_backend() -> str:
    """The backend in force: the :func:`set_backend` setting, else ``VLKERNELS_BACKEND``, else ``"auto"``."""
    if _override is not None:
        return _override
    return _check_name(os.environ.get("VLKERNELS_BACKEND", "auto").strip().lower() or "auto", "VLKERNELS_BACKEND")


# A function to callers; a class so that it also works as a context manager.
class set_backend:
    """Set the backend for the whole process: ``"auto"``, ``"triton"`` or ``"torch"`` (``None``: back to the
    ``VLKERNELS_BACKEND`` environment variable). Takes effect at once; as a context manager the previous setting is
    restored on exit::

        vlkernels.set_backend("torch")            # from now on
        with vlkernels.set_backend("triton"):     # for one block
            loss = vlkernels.siglip_loss(...)

    Raises:
        ValueError: an unknown backend name.
    """

    def __init__(self, backend: str | None) -> None:
        global _override
        new = None if backend is None else _check_name(str(backend).strip().lower(), "backend")
        with _lock:
            self._previous = _override
            _override = new

    def __enter__(self) -> set_backend:
        return self

    def __exit__(self, *exc: object) -> None:
        global _override
        with _lock:
            _override = self._previous


def _warn_once(message: str) -> None:
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def unsupported_reason(device: torch.device, dtype: torch.dtype | None = None) -> str | None:
    """Why Triton cannot run on ``device`` (for ``dtype``), or None when it can."""
    if not triton_installed():
        return "triton is not installed (pip install triton)"
    if device.type == "cpu":
        return None if interpreting() else "CPU tensors run Triton only under TRITON_INTERPRET=1"
    if device.type != "cuda":
        return f"Triton kernels run on NVIDIA CUDA devices; this tensor is on {device.type}"
    if torch.version.hip is not None:
        return "the Triton tile tables are declared for NVIDIA sm_80/sm_90, not ROCm"
    cap = tuple(torch.cuda.get_device_capability(device))
    if cap < MIN_CAPABILITY:
        why = f"this GPU is sm_{cap[0]}{cap[1]}; the Triton tile tables are declared for sm_80+"
        if dtype == torch.bfloat16:
            why += " (and bf16 tl.dot needs sm_80+)"
        return why
    return None


def use_triton(*tensors: torch.Tensor) -> bool:
    """True when the Triton kernel should run for these (already device-checked) tensors.

    Raises:
        BackendError: the ``triton`` backend is forced but cannot run here.
    """
    if not tensors:
        return False
    backend = get_backend()
    if backend == "torch":
        return False
    device, dtype = tensors[0].device, tensors[0].dtype
    why = unsupported_reason(device, dtype)
    if why is None:
        return True
    if backend == "triton":
        raise BackendError(f"VLKERNELS_BACKEND/set_backend forces 'triton', but {why}")
    # CPU without the interpreter is the ordinary CPU path, not a downgrade: no warning.
    if device.type != "cpu":
        _warn_once(f"vlkernels: using the torch path instead of Triton: {why}")
    return False


def _key(op_name: str, args: tuple) -> tuple[str, str, str]:
    t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return (op_name, "" if t is None else t.device.type, "" if t is None else str(t.dtype))


def run_triton(op_name: str, triton_fn: Callable[..., T], torch_fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``triton_fn(*args, **kwargs)`` (call it only when :func:`use_triton` is True); on the first use of
    ``op_name`` for this device type and dtype, a failure (Triton compile error, out of resources, launch error)
    falls back to ``torch_fn(*args, **kwargs)`` with one warning quoting the error, and later calls go straight to
    ``torch_fn``. Once the kernel has run, errors surface (they are no longer "Triton cannot run here"). With the
    ``triton`` backend forced, every error surfaces; so it does on CPU tensors under the interpreter
    (``STRICT_INTERPRETER``).

    Note: a CUDA kernel fault is reported asynchronously and cannot be caught here; compile and launch-configuration
    errors (the ones a new GPU or Triton version produces) are raised synchronously and are caught.
    """
    key = _key(op_name, args)
    strict = get_backend() == "triton" or (key[1] == "cpu" and STRICT_INTERPRETER)
    if key in _verified or strict:
        return triton_fn(*args, **kwargs)
    if key not in _failed:
        try:
            out = triton_fn(*args, **kwargs)
        except Exception as e:
            _record_failure(key, e)
        else:
            with _lock:
                _verified.add(key)
            return out
    return torch_fn(*args, **kwargs)


def fell_back(op_name: str, tensor: torch.Tensor) -> bool:
    """True when ``op_name``'s Triton kernel failed on first use for this tensor's device type and dtype, so
    :func:`run_triton` sends it to the torch path (for callers that report which path runs, e.g. ``grad_path``)."""
    return (op_name, tensor.device.type, str(tensor.dtype)) in _failed


def _record_failure(key: tuple[str, str, str], e: BaseException) -> None:
    text = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:500]
    with _lock:
        _failed[key] = text
    _warn_once(
        f"vlkernels: the Triton kernel for {key[0]} ({key[1]}, {key[2]}) failed on first use and the torch path runs "
        f"instead (VLKERNELS_BACKEND=triton makes this an error): {text}"
    )


def reset_state() -> None:
    """Forget issued warnings and first-use results (tests; a process that changed GPUs or Triton)."""
    with _lock:
        _warned.clear()
        _failed.clear()
        _verified.clear()
