"""Launch configurations of the core Triton kernel (row L2 normalization), as data; ``kernel_specs()`` lists every
compile its launcher can ask for on CUDA.

``_l2_normalize_fwd_kernel`` is a row-streaming kernel with no ``tl.dot``: it reads a row twice (the second read
usually hits L1/L2) and writes it once, so it is bound by memory bandwidth (about 3 bytes moved per flop), far below
any tensor-core limit. The CUDA table therefore picks the row tile by ``D`` only: one tile covers the usual
embedding sizes (256..4096) in a single pass, with enough warps that each thread loads 8-16 bytes per load
(vectorized 128-bit accesses) and a per-thread register footprint well below the spill line.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from vlkernels._gpu_specs import ARCHS, KernelSpec
from vlkernels._triton import interpreting


class RowTile(NamedTuple):
    block_d: int
    num_warps: int
    num_stages: int


# Smallest tile with BLOCK_D >= D is used; wider rows loop over the largest. Same tiles on sm_80 and sm_90: the kernel
# is bandwidth-bound and uses no arch-specific instruction.
CUDA_TILES = (RowTile(256, 2, 2), RowTile(1024, 4, 2), RowTile(4096, 8, 2))
DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}


def l2_normalize_tile(x: torch.Tensor) -> RowTile:
    """The tile a launch uses for ``x`` of shape ``(N, D)``: the CUDA table, or the interpreter's one-row power of 2."""
    d = x.shape[1]
    if x.device.type != "cuda" or interpreting():
        return RowTile(min(4096, max(16, 1 << (max(d, 1) - 1).bit_length())), 4, 1)
    return next((t for t in CUDA_TILES if t.block_d >= d), CUDA_TILES[-1])


def kernel_specs() -> list[KernelSpec]:
    """Every (kernel, arch, dtype, tile) the core launchers can launch on CUDA."""
    from vlkernels.core.kernels import _l2_normalize_fwd_kernel

    specs = []
    for arch in ARCHS:
        for dtype in DTYPES.values():
            sig = {"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "n_cols": "i32", "stride_x": "i32", "stride_y": "i32"}
            sig["eps"] = "fp32"
            for t in CUDA_TILES:
                specs.append(
                    KernelSpec("core", _l2_normalize_fwd_kernel, arch, dtype, sig, {"BLOCK_D": t.block_d},
                               t.num_warps, t.num_stages, gemm=False, label=f"l2_normalize D<={t.block_d}")
                )  # fmt: skip
    return specs
