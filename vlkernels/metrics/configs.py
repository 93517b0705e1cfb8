"""Launch configurations of the metrics Triton kernel (paired cosine for SigLIP/CLIP scores), as data;
``kernel_specs()`` lists every compile its launcher can ask for on CUDA.

``_pair_cosine_fwd_kernel`` reads each (x row, y row) pair once and writes one fp32 cosine: three dot products per
pair in fp32 FMAs, no ``tl.dot`` (a pair's rows meet only each other, there is no matrix product to put on tensor
cores). It is bound by memory bandwidth (~0.75 flop per byte at fp16), so the tile is chosen for wide, coalesced
loads: BLOCK_D elements of a row per step (128 fp16 = 256 bytes), and a register footprint small enough for
half the SM's warps to be resident (many loads in flight hide DRAM latency).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from vlkernels._gpu_specs import ARCHS, KernelSpec
from vlkernels._triton import interpreting


class PairTile(NamedTuple):
    block_p: int
    block_d: int
    num_warps: int
    num_stages: int


# 8 elements of each operand per thread and step (one 128-bit load at fp16): 8 pairs x 128 columns over 4 warps, or
# 8 x 64 over 2 warps for narrow embeddings. Wider tiles (32x128 or 64x64 over 4 warps, 2 stages) spilled in the
# static profile: every element carries a 64-bit address. Same on sm_80 and sm_90 (no arch-specific instruction);
# one stage, since a bandwidth-bound loop without tl.dot gains nothing from shared-memory pipelining.
CUDA_TILES = (PairTile(8, 64, 2, 1), PairTile(8, 128, 4, 1))
DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}


def pair_cosine_tile(x: torch.Tensor) -> PairTile:
    """The tile a launch uses for ``x`` of shape ``(N, D)``: the CUDA table, or the interpreter's."""
    d = x.shape[1]
    if x.device.type != "cuda" or interpreting():
        return PairTile(32, min(128, max(16, 1 << (max(d, 1) - 1).bit_length())), 4, 1)
    return CUDA_TILES[0] if d <= CUDA_TILES[0].block_d else CUDA_TILES[1]


def kernel_specs() -> list[KernelSpec]:
    """Every (kernel, arch, dtype, tile, index mode) the metrics launchers can launch on CUDA. Both operands share
    one dtype: the launcher promotes a mixed pair to the wider dtype first (exact)."""
    from vlkernels.metrics.kernels import _pair_cosine_fwd_kernel

    specs = []
    for arch in ARCHS:
        for dtype in DTYPES.values():
            for has_idx in (False, True):
                sig = {"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "idx_ptr": "*i64" if has_idx else "*fp32"}
                sig.update(out_ptr="*fp32", n_pairs="i32", d="i32", stride_x="i32", stride_y="i32", eps="fp32")
                for t in CUDA_TILES:
                    consts = {"HAS_IDX": has_idx, "BLOCK_P": t.block_p, "BLOCK_D": t.block_d}
                    label = f"pair_cosine {'idx ' if has_idx else ''}D<={t.block_d}" if t is CUDA_TILES[0] else (
                        f"pair_cosine {'idx ' if has_idx else ''}D>{CUDA_TILES[0].block_d}")  # fmt: skip
                    specs.append(
                        KernelSpec("metrics", _pair_cosine_fwd_kernel, arch, dtype, sig, consts, t.num_warps,
                                   t.num_stages, gemm=False, label=label)
                    )  # fmt: skip
    return specs
