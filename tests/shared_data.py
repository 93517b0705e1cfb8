"""Where the tests find the project's shared data folder (real COCO captions, golden pycocoevalcap scores): a test
helper only, so that the package itself never names a folder outside it."""

from __future__ import annotations

import os
from pathlib import Path


def shared_data_dir() -> Path | None:
    """``VLKERNELS_SHARED_DATA`` if set, else ``shared/data`` beside the source checkout (or inside a CI clone); None
    when absent (the tests that need it skip; every golden check also runs from the small set in tests/data)."""
    env = os.environ.get("VLKERNELS_SHARED_DATA")
    checkout = Path(__file__).resolve().parent.parent
    candidates = [Path(env)] if env else []
    candidates += [checkout.parent / "shared" / "data", checkout / "shared" / "data"]
    return next((c for c in candidates if c.is_dir()), None)
