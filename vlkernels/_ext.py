"""Loads the compiled extension vlkernels._C with errors that name the fix."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

from vlkernels._srchash import source_hash

_ROOT = Path(__file__).resolve().parent.parent
REBUILD_HINT = (
    "rebuild it from the source checkout with `pip install -e .` (or `python setup.py build_ext --inplace`); "
    "set VLKERNELS_NO_CUDA=1 for a CPU-only build"
)


class ExtensionError(ImportError):
    """vlkernels._C is missing, fails to load, or was built from other sources than the ones beside it."""


@functools.cache
def load() -> ModuleType:
    """Return vlkernels._C, checking that it matches the sources it sits beside (in a source checkout)."""
    override = os.environ.get("VLKERNELS_C_PATH")
    try:
        if override:
            # A separately built variant (the sanitizer build in tests) replaces the installed module.
            spec = importlib.util.spec_from_file_location("vlkernels._C", override)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules["vlkernels._C"] = mod
        else:
            mod = importlib.import_module("vlkernels._C")
    except ImportError as e:
        raise ExtensionError(f"vlkernels._C could not be loaded ({e}); {REBUILD_HINT}") from e
    if (_ROOT / "csrc").is_dir() and (_ROOT / "python").is_dir():
        want = source_hash(_ROOT)
        if mod.source_hash != want:
            raise ExtensionError(
                f"vlkernels._C is stale: built from sources {mod.source_hash}, but csrc/ and python/ are now {want}; "
                f"{REBUILD_HINT}"
            )
    _check_threads_env()
    return mod


def _check_threads_env() -> None:
    """The C++ kernels read VLKERNELS_NUM_THREADS (a positive integer) and fall back to every core otherwise: say so
    rather than ignore a typo."""
    v = os.environ.get("VLKERNELS_NUM_THREADS")
    if v is not None and not (v.strip().isdigit() and int(v) > 0):
        warnings.warn(
            f"VLKERNELS_NUM_THREADS={v!r} is not a positive integer; the C++ kernels use every core",
            RuntimeWarning,
            stacklevel=3,
        )


def available() -> bool:
    try:
        load()
        return True
    except ExtensionError:
        return False
