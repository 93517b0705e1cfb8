"""vlkernels: compiled kernels for vision-language training and evaluation."""

from importlib import metadata as _metadata

from vlkernels import boxes, captioning, contrastive, detection, metrics, ops, retrieval
from vlkernels._ext import ExtensionError
from vlkernels._triton import get_backend, set_backend
from vlkernels.contrastive import ClipLoss, SigLipLoss, info_nce_loss, siglip_loss

try:
    __version__ = _metadata.version("vlkernels")
except _metadata.PackageNotFoundError:
    __version__ = "0.1.0+src"
del _metadata


def set_num_threads(n: int) -> None:
    """The process default of threads for the C++ CPU kernels (0 = one per CPU this process may run on, its
    affinity mask as taskset sets it; initial value from VLKERNELS_NUM_THREADS, else that count). For one call or
    one Python thread use ``vlkernels.core.threads.limit(n)`` instead: it never changes what other threads get."""
    from vlkernels import _ext

    _ext.load().set_num_threads(int(n))


def get_num_threads() -> int:
    from vlkernels import _ext

    return int(_ext.load().get_num_threads())


__all__ = [
    "ClipLoss",
    "ExtensionError",
    "SigLipLoss",
    "__version__",
    "boxes",
    "captioning",
    "contrastive",
    "detection",
    "get_backend",
    "get_num_threads",
    "info_nce_loss",
    "metrics",
    "ops",
    "retrieval",
    "set_backend",
    "set_num_threads",
    "siglip_loss",
]


def __dir__() -> list[str]:
    # The public names only: not the private modules (_ext, _triton, ...) that importing the package also binds.
    return sorted(__all__)
