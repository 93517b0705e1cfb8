"""The benchmark harness, wherever it is installed (``vlkernels bench``, ``vlkernels selftest``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def harness():
    """The harness: installed as vlkernels.benchmarks, or benchmarks/ of a source checkout on PYTHONPATH."""
    try:
        return importlib.import_module("vlkernels.benchmarks.harness")
    except ModuleNotFoundError:
        root = Path(__file__).resolve().parent.parent
        if not (root / "benchmarks" / "harness.py").is_file():
            raise
        sys.path.insert(0, str(root))
        return importlib.import_module("benchmarks.harness")
