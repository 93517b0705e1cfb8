"""Tile configurations of the retrieval Triton kernels: small tiles for the interpreter, GPU tiles per (arch, kind).

The launchers in ``screen.py`` read their tiles here and nowhere else; ``kernel_specs()`` lists every
(kernel, arch, kind, config) they can launch on CUDA, for the offline compile check (``vlkernels/_gpu_specs.py``).
A screen kernel's kind is its operands': "fp16" / "bf16" inputs go to ``tl.dot`` as they are, "fp32" (fp32 and fp64
inputs) as two bf16 halves with three dots (SPLIT); all of them run on tensor cores with fp32 accumulation, the
exactness coming from the bound and the float64 re-check (README.md, "GPU screen"). Reasoning (no GPU to tune on;
README.md, "GPU tiles"): warpgroup MMA on sm_90 needs BLOCK_M >= 64 per warpgroup, BLOCK_K = 64 on sm_90 / 32 on
sm_80 so a 3-stage pipeline fits shared memory, and the largest tile that compiles without register spills next to
the screening epilogue (bound, interval, up to 8 positive slots compared against every score of the tile).
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

# Screen tiles of the rank-counting, candidate-collecting and bound-tile kernels.
SCREEN_TILES: dict[tuple[int, str], Tile] = {
    (90, "fp16"): Tile(64, 32, 64, 4, 3, max_slots=4),
    (90, "bf16"): Tile(64, 32, 64, 4, 3, max_slots=4),
    (90, "fp32"): Tile(64, 32, 64, 4, 3, max_slots=4),
    (80, "fp16"): Tile(64, 32, 32, 4, 3, max_slots=4),
    (80, "bf16"): Tile(64, 32, 32, 4, 3, max_slots=4),
    (80, "fp32"): Tile(64, 32, 32, 4, 3),
}
# The exact-score kernel: BLOCK_P pairs per program (block_m), 8 float64 lanes each; not a GEMM.
EXACT_TILE = Tile(128, 8, 8, 4, 1)
# The interpreter runs a program as numpy arrays: few large programs are fast.
INTERPRETER_EXACT = Tile(1024, 8, 8, 4, 1)
EXACT_DTYPES = ("fp16", "bf16", "fp32", "fp64")
# Fused top-K: BLOCK_N is the power of two >= k + exclusions (16..MAX_FUSED_K); block_n below is that maximum.
# Larger k goes through cuBLAS matmul tiles and torch.topk (a 256-wide sorted int64 state spills on every arch).
MAX_FUSED_K = 64
TOPK_TILES: dict[tuple[int, str], Tile] = {
    (90, "fp16"): Tile(64, MAX_FUSED_K, 64, 4, 3),
    (90, "bf16"): Tile(64, MAX_FUSED_K, 64, 4, 3),
    (90, "fp32"): Tile(64, MAX_FUSED_K, 64, 4, 3),
    (80, "fp16"): Tile(64, MAX_FUSED_K, 32, 4, 3),
    (80, "bf16"): Tile(64, MAX_FUSED_K, 32, 4, 3),
    # Two stages, not three: at three, k <= 16 (four bf16-half operand tiles per K step beside the sorted key state)
    # spills 8 bytes at 128 registers; at two neither fused width spills. Pipeline depth changes no arithmetic.
    (80, "fp32"): Tile(64, MAX_FUSED_K, 32, 4, 2),
}
# Fused BLOCK_N values per kind on CUDA (the smallest >= k + exclusions is taken): fp32 (bf16 halves, three operand
# tiles) spills 24 bytes at 32 keys on sm_80, so it goes from 16 keys straight to 64.
TOPK_BLOCK_NS = {"fp16": (16, 32, 64), "bf16": (16, 32, 64), "fp32": (16, 64)}
# CUDA device chunks are rounded to a multiple of this, a multiple of every BLOCK_M / BLOCK_N above, so a tile never
# straddles two chunks (the interpreter rounds to its own tile).
CHUNK_ALIGN = 128

_KINDS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp32"}


def kind(dtype) -> str:
    """The screen kind of an exact dtype (a torch dtype or a kind string already)."""
    return dtype if isinstance(dtype, str) else _KINDS[dtype]


def _key(device: torch.device, dtype) -> tuple[int, str] | None:
    return None if device.type != "cuda" else (cuda_arch(device), kind(dtype))


def screen_tile(device: torch.device, dtype) -> Tile:
    key = _key(device, dtype)
    return INTERPRETER if key is None else SCREEN_TILES[key]


def exact_tile(device: torch.device) -> Tile:
    return EXACT_TILE if device.type == "cuda" else INTERPRETER_EXACT


def topk_tile(device: torch.device, dtype, block_n: int) -> Tile:
    key = _key(device, dtype)
    t = INTERPRETER if key is None else TOPK_TILES[key]
    return dataclasses.replace(t, block_n=block_n)


def chunk_align(device: torch.device) -> int:
    return CHUNK_ALIGN if device.type == "cuda" else max(INTERPRETER.block_m, INTERPRETER.block_n)


def topk_block_n(device: torch.device, dtype, kk: int) -> int:
    """BLOCK_N of the fused top-K kernel for k + exclusions = kk (kk <= max_fused_k): a power of two >= kk, at
    least 16, one of TOPK_BLOCK_NS on CUDA."""
    key = _key(device, dtype)
    pow2 = max(16, 1 << (kk - 1).bit_length())
    return pow2 if key is None else min(b for b in TOPK_BLOCK_NS[key[1]] if b >= pow2)


def max_fused_k(device: torch.device) -> int:
    return INTERPRETER_MAX_FUSED_K if device.type != "cuda" else MAX_FUSED_K


def _slot_counts(max_slots: int) -> list[int]:
    """SLOTS constexprs a launcher can use: powers of two up to max_slots."""
    return [1 << i for i in range(max_slots.bit_length()) if 1 << i <= max_slots]


def kernel_specs() -> list[KernelSpec]:
    """Every (kernel, arch, kind, constexprs, warps, stages) the launchers can use on CUDA."""
    from vlkernels.retrieval import kernels as K

    ints = ("n_q", "n_g", "dim", "stride_q", "stride_g")
    # What Triton's launch-time specialization marks 16-divisible for embedding tables (base pointers, row strides,
    # the dim); the static profile compiles with the same hints (KernelSpec.extra["divisible_by_16"]).
    ops = ("qh_ptr", "qm_ptr", "gh_ptr", "gm_ptr")
    aligned = {"divisible_by_16": [*ops, "stride_q", "stride_g", "dim"]}
    specs = []

    def add(kernel, arch, dt, sig, constexprs, t, gemm=True, label="", extra=aligned):
        specs.append(KernelSpec(kernel=kernel, signature=sig, constexprs=constexprs, gemm=gemm, label=label,
                                family="retrieval", arch=arch, dtype=dt, num_warps=t.num_warps,
                                num_stages=t.num_stages, extra=extra))  # fmt: skip

    for arch in ARCHS:
        for dt in EXACT_DTYPES:
            sig = {"q_ptr": f"*{dt}", "g_ptr": f"*{dt}", "rows_ptr": "*i64", "cols_ptr": "*i64", "out_ptr": "*fp64"}
            sig.update(n_pairs="i32", dim="i32", stride_q="i32", stride_g="i32")
            extra = {"divisible_by_16": ["q_ptr", "g_ptr", "stride_q", "stride_g", "dim"],
                     "options": {"enable_fp_fusion": False}}  # fmt: skip
            add(K._exact_score_kernel.fn, arch, dt, sig, dict(BLOCK_P=EXACT_TILE.block_m, UPCAST=False), EXACT_TILE,
                False, "", extra)  # fmt: skip
        for dt in ("fp16", "bf16", "fp32"):
            split = dt == "fp32"
            op = "*bf16" if split else f"*{dt}"  # fp32 inputs reach tl.dot as bf16 halves: tensor cores
            base = {n: op for n in ops}
            base.update(qst_ptr="*fp32", gst_ptr="*fp32")
            t = SCREEN_TILES[(arch, dt)]
            # The tile flags a CUDA launch derives (vlkernels/core/tiles.py): bf16/fp16 operands, no interpreter.
            flags = dict(PRECISION="tf32", UPCAST=False)
            blocks = dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, SPLIT=split, **flags)
            rc = dict(base, tup_ptr="*fp32", tdn_ptr="*fp32", pos_ptr="*i64", cnt_ptr="*i64", und_ptr="*i64")
            rc.update(
                und_mask_ptr="*i8",
                und_n_ptr="*i64",
                **dict.fromkeys(ints, "i32"),
                cols_per_split="i32",
                n_slots_total="i32",
            )
            rc.update(slot0="i32", abs_err="fp32", capacity="i64")
            for slots in _slot_counts(t.max_slots):
                add(K._rank_screen_kernel.fn, arch, dt, rc, dict(blocks, SLOTS=slots), t, label=f"SLOTS={slots}")
            co = dict(base, lim_ptr="*fp32", out_ptr="*i64", out_mask_ptr="*i8", out_n_ptr="*i64")
            co.update(dict.fromkeys(ints, "i32"))
            co.update(cols_per_split="i32", abs_err="fp32", capacity="i64")
            add(K._topk_collect_kernel.fn, arch, dt, co, blocks, t)
            bt = dict(base, out_ptr="*fp32", **dict.fromkeys(ints, "i32"), abs_err="fp32")
            add(K._bound_tile_kernel.fn, arch, dt, bt, blocks, t)
            tk = TOPK_TILES[(arch, dt)]
            tb = dict(base, out_ptr="*i64", **dict.fromkeys(ints, "i32"), cols_per_split="i32", index_offset="i64")
            tb.update(abs_err="fp32")
            for block_n in TOPK_BLOCK_NS[dt]:
                cx = dict(BLOCK_M=tk.block_m, BLOCK_N=block_n, BLOCK_K=tk.block_k, SPLIT=split, **flags)
                add(K._topk_bound_kernel.fn, arch, dt, tb, cx, tk, label=f"k<={block_n}")
    return specs
