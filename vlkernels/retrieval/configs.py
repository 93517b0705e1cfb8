"""Tile configurations of the retrieval Triton kernels: small tiles for the interpreter, GPU tiles per (arch, dtype).

The launchers in ``ops.py`` read their tiles here and nowhere else; ``kernel_specs()`` lists every
(kernel, arch, dtype, config) they can launch on CUDA, for the offline compile check (``vlkernels/_gpu_specs.py``).
Reasoning (no GPU to tune on; see README.md, "GPU tiles"): tensor-core tiles for fp16/bf16 (warpgroup MMA on sm_90
needs BLOCK_M >= 64 per warpgroup), BLOCK_K = 64 on sm_90 / 32 on sm_80 so a 3-stage pipeline fits shared memory,
and the largest tile that compiles without register spills next to the rank-counting epilogue (up to 8 positive
slots compared against every score of the tile). fp32 runs IEEE fp32 FMA (``input_precision="ieee"``, no TF32:
ranks must equal the CPU path's), so its tiles are not tensor-core tiles.
"""

from __future__ import annotations

import dataclasses

import torch

from vlkernels._gpu_specs import ARCHS, KernelSpec, cuda_arch


@dataclasses.dataclass(frozen=True)
class Tile:
    """One launch configuration. ``max_slots``: positive slots counted per launch of the rank-counting kernel."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    max_slots: int = 8


# Interpreter (CPU tensors under TRITON_INTERPRET=1): small tiles keep the tests fast; the top-K kernel is fused up
# to 256 keys so the tests reach every branch.
INTERPRETER = Tile(32, 32, 32, 4, 1)
INTERPRETER_MAX_FUSED_K = 256

# Score tiles of the ground-truth and rank-counting kernels (one tile for both: a ground-truth score must come from
# the same tile computation as the scores it is compared with).
SCORE_TILES: dict[tuple[int, str], Tile] = {
    (90, "fp16"): Tile(64, 64, 64, 4, 3, max_slots=4),
    (90, "bf16"): Tile(64, 64, 64, 4, 3, max_slots=4),
    (90, "fp32"): Tile(32, 32, 32, 4, 2),
    (80, "fp16"): Tile(64, 64, 32, 4, 3),
    (80, "bf16"): Tile(64, 64, 32, 4, 3),
    (80, "fp32"): Tile(32, 32, 32, 4, 2),
}
# Fused top-K: BLOCK_N is the power of two >= k + exclusions (16..MAX_FUSED_K); block_n below is that maximum.
# Larger k goes through cuBLAS matmul tiles and torch.topk (a 256-wide sorted int64 state spills on every arch).
MAX_FUSED_K = 64
TOPK_TILES: dict[tuple[int, str], Tile] = {
    (90, "fp16"): Tile(64, MAX_FUSED_K, 64, 4, 3),
    (90, "bf16"): Tile(64, MAX_FUSED_K, 64, 4, 3),
    (90, "fp32"): Tile(32, MAX_FUSED_K, 32, 4, 1),
    (80, "fp16"): Tile(64, MAX_FUSED_K, 32, 4, 3),
    (80, "bf16"): Tile(64, MAX_FUSED_K, 32, 4, 3),
    (80, "fp32"): Tile(32, MAX_FUSED_K, 32, 4, 1),
}
# Smallest fused BLOCK_N per dtype on CUDA: fp32 (FMA, no tensor cores) spills a few bytes at 16 and 32 wide on
# sm_80, so it always keeps 64 keys (more sorting for small k, never a spill).
TOPK_MIN_BLOCK_N = {"fp16": 16, "bf16": 16, "fp32": MAX_FUSED_K}
# CUDA device chunks are rounded to a multiple of this, a multiple of every BLOCK_M / BLOCK_N above, so a tile never
# straddles two chunks (the interpreter rounds to its own tile).
CHUNK_ALIGN = 128

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def _key(device: torch.device, dtype: torch.dtype) -> tuple[int, str] | None:
    return None if device.type != "cuda" else (cuda_arch(device), _DTYPES[dtype])


def score_tile(device: torch.device, dtype: torch.dtype) -> Tile:
    key = _key(device, dtype)
    return INTERPRETER if key is None else SCORE_TILES[key]


def topk_tile(device: torch.device, dtype: torch.dtype, block_n: int) -> Tile:
    key = _key(device, dtype)
    t = INTERPRETER if key is None else TOPK_TILES[key]
    return dataclasses.replace(t, block_n=block_n)


def chunk_align(device: torch.device) -> int:
    return CHUNK_ALIGN if device.type == "cuda" else max(INTERPRETER.block_m, INTERPRETER.block_n)


def topk_block_n(device: torch.device, dtype: torch.dtype, kk: int) -> int:
    """BLOCK_N of the fused top-K kernel for k + exclusions = kk (a power of two >= kk)."""
    key = _key(device, dtype)
    smallest = 16 if key is None else TOPK_MIN_BLOCK_N[key[1]]
    return max(smallest, 1 << (kk - 1).bit_length())


def max_fused_k(device: torch.device) -> int:
    return INTERPRETER_MAX_FUSED_K if device.type != "cuda" else MAX_FUSED_K


def _slot_counts(max_slots: int) -> list[int]:
    """SLOTS constexprs a launcher can use: powers of two up to max_slots."""
    return [1 << i for i in range(max_slots.bit_length()) if 1 << i <= max_slots]


def kernel_specs() -> list[KernelSpec]:
    """Every (kernel, arch, dtype, constexprs, warps, stages) the launchers can use on CUDA."""
    from vlkernels.retrieval.kernels import _gt_score_fwd_kernel, _rank_count_fwd_kernel, _topk_fwd_kernel

    ints = ("n_q", "n_g", "dim", "stride_q", "stride_g")
    # What Triton's launch-time specialization marks 16-divisible for embedding tables (base pointers, row strides,
    # the dim); the static profile compiles with the same hints (KernelSpec.extra["divisible_by_16"]).
    aligned = {"divisible_by_16": ["q_ptr", "g_ptr", "stride_q", "stride_g", "dim"]}
    specs = []
    for arch in ARCHS:
        for dt in ("fp16", "bf16", "fp32"):
            gemm = dt != "fp32"  # fp32 is IEEE FMA by design (no TF32)
            t = SCORE_TILES[(arch, dt)]
            blocks = dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k)
            common = dict(family="retrieval", arch=arch, dtype=dt, num_warps=t.num_warps, num_stages=t.num_stages)
            common["extra"] = aligned
            sig = {"q_ptr": f"*{dt}", "g_ptr": f"*{dt}"}
            gt_sig = dict(sig, **{n: "*i64" for n in ("tile_m_ptr", "tile_n_ptr", "tile_ptr_ptr", "pair_q_ptr")})
            gt_sig.update(pair_g_ptr="*i64", out_ptr="*fp32", **dict.fromkeys(ints, "i32"))
            gt = KernelSpec(kernel=_gt_score_fwd_kernel, signature=gt_sig, constexprs=blocks, gemm=gemm, **common)
            specs.append(gt)
            rc_sig = dict(sig, thr_ptr="*fp32", pos_ptr="*i64", out_ptr="*i64", **dict.fromkeys(ints, "i32"))
            rc_sig.update(cols_per_split="i32", n_slots_total="i32", slot0="i32")
            for slots in _slot_counts(t.max_slots):
                specs.append(
                    KernelSpec(
                        kernel=_rank_count_fwd_kernel,
                        signature=rc_sig,
                        constexprs=dict(blocks, SLOTS=slots),
                        gemm=gemm,
                        label=f"SLOTS={slots}",
                        **common,
                    )
                )
            tk = TOPK_TILES[(arch, dt)]
            tk_sig = dict(sig, out_ptr="*i64", **dict.fromkeys(ints, "i32"), cols_per_split="i32", index_offset="i64")
            for block_n in (16, 32, 64):
                if not TOPK_MIN_BLOCK_N[dt] <= block_n <= tk.block_n:
                    continue
                specs.append(
                    KernelSpec(
                        kernel=_topk_fwd_kernel,
                        signature=tk_sig,
                        constexprs=dict(BLOCK_M=tk.block_m, BLOCK_N=block_n, BLOCK_K=tk.block_k),
                        gemm=gemm,
                        label=f"k<={block_n}",
                        family="retrieval",
                        arch=arch,
                        dtype=dt,
                        num_warps=tk.num_warps,
                        num_stages=tk.num_stages,
                        extra=aligned,
                    )
                )
    return specs
