import os
from pathlib import Path

import pytest
import torch

# Triton reads TRITON_INTERPRET when it is imported: set it before any test module pulls triton in, so the
# kernels run on CPU tensors where no GPU exists (CI).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu marker); none is present")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def _shared_data() -> Path | None:
    env = os.environ.get("VLKERNELS_SHARED_DATA")
    candidates = [Path(env)] if env else []
    # The checkout sits beside shared/ (../shared/data), or a CI clone may carry shared/ inside.
    candidates += [REPO.parent / "shared" / "data", REPO / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's shared data folder (real COCO captions and golden scores); skips when absent."""
    path = _shared_data()
    if path is None:
        pytest.skip("shared data not found: expected ../shared/data beside the checkout or VLKERNELS_SHARED_DATA")
    return path


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
