"""The GPU launch configurations of every Triton kernel, as data.

Each family with Triton kernels keeps its CUDA tile table in ``vlkernels/<family>/configs.py``; its launchers read
the table, and the same module lists every (kernel, arch, dtype, config) its launchers can use as ``KernelSpec``
rows through ``kernel_specs()``. The static GPU profile (``vlkernels gpu-profile``) compiles exactly those rows
offline, so a config a launcher can pick is never left uncompiled. There is no GPU here to autotune on: the tables
are declared, and the reasoning behind them is in the family READMEs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# CUDA compute capabilities the tables are declared for (A100, H100).
ARCHS = (80, 90)


@dataclass(frozen=True)
class KernelSpec:
    """One compile of one ``@triton.jit`` kernel, exactly as a launcher would launch it on CUDA.

    ``signature`` maps every non-constexpr argument name to a Triton type string (``"*bf16"``, ``"*fp32"``,
    ``"i32"``, ``"i64"``, ``"fp32"``); ``constexprs`` gives every ``tl.constexpr`` argument's value. ``gemm`` marks a
    kernel whose inner loop is a ``tl.dot``: its SASS must hold tensor-core instructions.
    """

    family: str
    kernel: Any
    arch: int
    dtype: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    gemm: bool
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        tag = f" {self.label}" if self.label else ""
        return f"{self.family}.{self.kernel.__name__}{tag} sm_{self.arch} {self.dtype}"


def cuda_arch(device) -> int:
    """The table key for a CUDA device: 90 on Hopper and newer, 80 below (the sm_80 tiles are the portable ones)."""
    import torch

    major, _ = torch.cuda.get_device_capability(device)
    return 90 if major >= 9 else 80
