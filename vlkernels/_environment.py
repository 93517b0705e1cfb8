"""The one reader of the environment a result or a self-test ran in (``vlkernels bench``, ``vlkernels selftest``)."""

from __future__ import annotations

import datetime
import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{cpu_info()['model'] or 'cpu'} ({torch.get_num_threads()} threads)"


_ISA = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "bmi2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vpopcntdq",
    "avx512vbmi",
    "avx512_bf16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "asimd",
    "sve",
)


# The libraries a row may be measured against (and numpy): the name recorded, the distributions that provide it.
# Read from the installed metadata, not by importing (open_clip's package needs torchvision; its loss.py is loaded
# by path), so a row names the version of every anchor that is installed.
ANCHORS = {
    "numpy": ("numpy",),
    "torchvision": ("torchvision",),
    "pycocotools": ("pycocotools",),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss"),
    "open_clip": ("open_clip_torch",),
    "pycocoevalcap": ("pycocoevalcap",),
    "torchmetrics": ("torchmetrics",),
    "faster_coco_eval": ("faster-coco-eval",),
    "lvis": ("lvis",),
    "nltk": ("nltk",),
    "matplotlib": ("matplotlib",),
}


def _dist_version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_info() -> dict[str, Any]:
    """The host CPU: model name, vendor, family / model number / stepping, logical cores and the SIMD flags the C++
    kernels and the retrieval screen
    may dispatch on. Recorded with every result, because CPU figures do not carry across CPU families. Read once a
    process (the retrieval screen asks on every call)."""
    info = _read_cpu_info()
    return dict(info, isa=list(info["isa"]))


@functools.cache
def _read_cpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {"model": platform.processor() or platform.machine(), "vendor": None, "isa": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if key == "model name" and info["model"] in ("", platform.machine(), platform.processor()):
            info["model"] = val
        elif key == "vendor_id":
            info["vendor"] = val
        elif key in ("cpu family", "model", "stepping") and val.isdigit():
            # Family and model name the microarchitecture (AMD family 23 model 49: Zen 2) where the model name
            # of a cloud VM does not ("AMD EPYC").
            info[{"cpu family": "family", "model": "model_number", "stepping": "stepping"}[key]] = int(val)
        elif key in ("flags", "Features"):
            flags = set(val.split())
            info["isa"] = [f for f in _ISA if f in flags]
            break
    info["logical_cpus"] = os.cpu_count()
    return info


def environment(device: str) -> dict[str, Any]:
    """What a result was measured on: the device (GPU name, compute capability and driver on CUDA; the CPU's model and
    SIMD flags always), library versions, the kernel backend in use, the git commit of the checkout and the date."""
    import torch

    import vlkernels
    from vlkernels._triton import get_backend, interpreting, triton_version

    versions = {
        "vlkernels": vlkernels.__version__,
        "torch": torch.__version__,
        "triton": triton_version(),
        "python": platform.python_version(),
    }
    for name, dists in ANCHORS.items():
        versions[name] = next(filter(None, map(_dist_version, dists)), None)
    cuda = device == "cuda"
    return {
        "device": device,
        "device_name": device_name(device),
        "capability": list(torch.cuda.get_device_capability()) if cuda else None,
        "driver": _nvidia_driver() if cuda else None,
        "cuda": torch.version.cuda if cuda else None,
        "cpu": cpu_info(),
        "versions": versions,
        "backend": get_backend(),
        "triton_interpret": interpreting(),
        "git_sha": _git_sha(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _nvidia_driver() -> str | None:
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None


def _git_sha() -> str | None:
    """The commit of the source checkout vlkernels runs from (None when installed from a wheel)."""
    import vlkernels

    try:
        root = Path(vlkernels.__file__).resolve().parent.parent
        cmd = ["git", "rev-parse", "--short", "HEAD"]
        return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
