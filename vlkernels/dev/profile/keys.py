"""What names a profile row and what it depends on: the committed profile, row identity, the measured fields, and
the key of the CUDA rows (nvcc's build line, its flags and csrc/)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from vlkernels.dev.profile.cuda_compile import CSRC, NVCC_FLAGS, nvcc_version

PACKAGE = Path(__file__).resolve().parents[2]  # vlkernels/
# The committed profile (in a checkout) and what a compile measures in a row (the rest names the spec or kernel).
COMMITTED = PACKAGE.parent / "benchmarks" / "results" / "gpu_static.jsonl"
MEASURED = ("registers", "spill_stores", "spill_loads", "stack_bytes", "smem_static", "smem_dynamic", "smem_bytes",
            "tensor_core", "blocks_per_sm", "ptx_fma", "ptx_contractible")  # fmt: skip


def read_rows(path: Path) -> list[dict]:
    """A profile's JSON lines."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measured(row: dict) -> dict:
    """The measured part of a row, to compare a fresh compile with a committed row."""
    return {k: row.get(k) for k in MEASURED}


def identity(row: dict) -> tuple:
    """What names one row of the profile: a Triton spec, or one kernel of one .cu file, at one arch."""
    if row["source"] == "triton":
        return ("triton", row["family"], row["kernel"], row["label"], row["arch"], row["dtype"])
    return ("cuda", row["file"], row.get("kernel", ""), row["arch"])


def cuda_key(nvcc: str) -> str:
    """What the CUDA rows depend on: nvcc's version, the flags, and every source and header under csrc/ (launch
    sites in any of them give a kernel's block size)."""
    h = hashlib.sha256(nvcc_version(nvcc).encode())
    h.update(" ".join(NVCC_FLAGS).encode())
    for path in sorted(p for p in CSRC.rglob("*") if p.suffix in (".cu", ".cuh", ".h")):
        h.update(str(path.relative_to(CSRC)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
