"""Launch configurations of the contrastive Triton kernels: the CUDA tile table per (arch, dtype) and the small
interpreter tiles, as data; ``kernel_specs()`` lists every compile the launchers can ask for on CUDA.

Kinds of launch (``ops.py`` picks one per call):

- ``fwd``: ``_lse_pair_fwd_kernel`` (row and column log-sum-exp, 1 GEMM unit);
- ``sweep``: ``_grad_sweep_kernel`` accumulating one operand's gradient (the deterministic path, the SigLIP loss
  without gradients), 1 + 1 units;
- ``dual``: ``_grad_sweep_kernel`` accumulating both operands' gradients, the second by fp32 atomics, 1 + 2 units;
- ``info_nce_sweep`` / ``info_nce_dual``: the same for InfoNCE's gradient tile, which leaves room for taller tiles.

The reasoning behind the CUDA tiles (arithmetic intensity against the H100's 989 TFLOP/s : 3.35 TB/s, shared memory,
tensor-core instruction classes) is in README.md; none has run on a GPU yet, and the static profile
(``vlkernels gpu-profile``) compiles every row of ``kernel_specs()`` offline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vlkernels._gpu_specs import ARCHS, KernelSpec, cuda_arch
from vlkernels._triton import interpreting


@dataclass(frozen=True)
class Tiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    # Column tiles whose G·B products are added before the fp32 accumulator rows are read and written back once
    # (the sweep kernel's GROUP_N: 1 or 2).
    group_n: int = 1

    def __post_init__(self):
        if self.group_n not in (1, 2):
            raise ValueError(f"group_n must be 1 or 2 (column tiles per accumulator round trip), got {self.group_n}")


DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}

# See README.md ("GPU tiles"). 16-bit operands: 8 warps (two warpgroups, so Hopper issues wgmma), BLOCK_K = 64 (one
# 128-byte swizzled row of bf16). The forward keeps the row and column online-softmax state beside its logit tile,
# so it takes the 64×128 tile (128×128 spills); the sweeps keep G and the accumulation tiles: 128×64 for InfoNCE,
# 64×64 for SigLIP and any other gradient tile (its softplus/sigmoid temporaries spill at 128×64). fp32 operands use
# exact IEEE FMA dots (no tensor-core instruction computes fp32 products exactly); their operand fragments live in
# registers, so the tiles are smaller (larger ones spilled). The 16-bit sweeps add two column tiles' G·B before one
# fp32 read-modify-write of their gradient rows (group_n = 2: half the L2 traffic of that round trip, docs/gpu.md).
_HALF = {
    "fwd": Tiles(64, 128, 64, 8, 3),
    "sweep": Tiles(64, 64, 64, 8, 2, group_n=2),
    "dual": Tiles(64, 64, 64, 8, 2, group_n=2),
    "info_nce_sweep": Tiles(128, 64, 64, 8, 2, group_n=2),
    "info_nce_dual": Tiles(128, 64, 64, 8, 2, group_n=2),
}
_FP32 = {
    "fwd": Tiles(64, 64, 32, 8, 2),
    "sweep": Tiles(32, 64, 16, 8, 2),
    "dual": Tiles(32, 64, 16, 8, 2),
    "info_nce_sweep": Tiles(32, 64, 16, 8, 2),
    "info_nce_dual": Tiles(32, 64, 16, 8, 2),
}
# sm_80's mma.sync keeps more operand fragments in registers than sm_90's wgmma: the InfoNCE one-sweep backward with
# two column tiles per round trip spilled 112 bytes there, so it keeps one.
_HALF_SM80 = {**_HALF, "info_nce_dual": Tiles(128, 64, 64, 8, 2)}
# On sm_90 the InfoNCE two-sweep (deterministic) backward spilled 24 bytes with two column tiles per round trip once
# its gradient tile also adds the positives' gradient: it keeps one there.
_HALF_SM90 = {**_HALF, "info_nce_sweep": Tiles(128, 64, 64, 8, 2)}
CUDA: dict[tuple[int, str], dict[str, Tiles]] = {
    (90, "bf16"): _HALF_SM90,
    (90, "fp16"): _HALF_SM90,
    (90, "fp32"): _FP32,
    (80, "bf16"): _HALF_SM80,
    (80, "fp16"): _HALF_SM80,
    (80, "fp32"): _FP32,
}

# The interpreter runs one numpy op per tile op, so fewer, larger tiles are faster there; tests shrink them to
# cross many tiles.
KINDS = ("fwd", "sweep", "dual", "info_nce_sweep", "info_nce_dual")
INTERPRETER: dict[str, Tiles] = {kind: Tiles(64, 64, 64, 4, 1, group_n=2) for kind in KINDS}


def tiles(kind: str, x: torch.Tensor) -> Tiles:
    """The tiles a launch of ``kind`` uses for features like ``x`` (CUDA table, or the interpreter's)."""
    if x.device.type != "cuda" or interpreting():
        return INTERPRETER[kind]
    return CUDA[(cuda_arch(x.device), DTYPES[x.dtype])][kind]


def _sweep_variants():
    """Every pointer pattern the launchers pass to the sweep kernel on CUDA: (label, tile kind, loss, pointers given).

    A pointer left out is passed as None, which Triton specializes as a constexpr (a separate compile)."""
    out = [
        ("info_nce dual", "info_nce_dual", "info_nce", {"acc", "accb", "dsum"}),
        ("info_nce sweep+ds", "info_nce_sweep", "info_nce", {"acc", "dsum"}),
        ("info_nce sweep", "info_nce_sweep", "info_nce", {"acc"}),
    ]
    for bias in (False, True):
        for groups in (False, True):
            extra = ({"bias"} if bias else set()) | ({"groups"} if groups else set())
            tag = "".join((" bias" if bias else "", " groups" if groups else ""))
            out += [
                (f"siglip dual{tag}", "dual", "siglip", {"acc", "accb", "dsum", "loss", "gsum"} | extra),
                (f"siglip sweep+loss{tag}", "sweep", "siglip", {"acc", "dsum", "loss", "gsum"} | extra),
                (f"siglip sweep{tag}", "sweep", "siglip", {"acc"} | extra),
                (f"siglip loss only{tag}", "sweep", "siglip", {"loss"} | extra),
            ]
    return out


def _aligned(signature: dict[str, str]) -> tuple[str, ...]:
    """The arguments Triton's launch-time specialization marks as divisible by 16 for the usual shapes: every
    pointer (torch allocations are 16-byte aligned) and D with the row strides (D a multiple of 16, as 512, 768,
    1024). A launch with another D compiles a variant without these hints."""
    return tuple(n for n, t in signature.items() if t.startswith("*") or n in ("n_dims", "stride_am", "stride_bn"))


def kernel_specs() -> list[KernelSpec]:
    """Every (kernel, arch, dtype, config, pointer pattern) the contrastive launchers can launch on CUDA."""
    from vlkernels.contrastive import kernels as K

    fwd_kernel, sweep_kernel = K._lse_pair_fwd_kernel.fn, K._grad_sweep_kernel.fn
    tile_fns = {"info_nce": K._info_nce_grad_tile, "siglip": K._siglip_grad_tile}
    specs = []
    for arch in ARCHS:
        for dtype in ("bf16", "fp16", "fp32"):
            table = CUDA[(arch, dtype)]
            precision = "ieee" if dtype == "fp32" else "tf32"
            # fp32 runs exact IEEE FMA dots: no tensor-core instruction is expected (or possible) there.
            gemm = dtype != "fp32"
            t = table["fwd"]
            consts = dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, PRECISION=precision, UPCAST=False)
            sig = {n: "*fp32" for n in ("scale_ptr", "row_lse_ptr", "diag_ptr", "col_max_ptr", "col_sum_ptr")}
            sig.update({"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}"})
            # Sizes, strides and offsets below 2³¹ arrive as i32 (Triton's specialization); the kernels index in int64.
            ints = ("n_rows", "n_cols", "n_dims", "num_programs", "stride_am", "stride_bn")
            sig.update({n: "i32" for n in (*ints, "diag_offset")})
            specs.append(KernelSpec("contrastive", fwd_kernel, arch, dtype, sig, consts, t.num_warps, t.num_stages,
                                    gemm, label="lse_pair fwd", extra={"divisible_by_16": _aligned(sig)}))  # fmt: skip
            for label, kind, loss, given in _sweep_variants():
                t = table[kind]
                sig = {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "scale_ptr": "*fp32"}
                consts = dict(
                    GRAD_TILE=tile_fns[loss], BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k,
                    GROUP_N=t.group_n, PRECISION=precision, UPCAST=False,
                )  # fmt: skip
                if loss == "info_nce":
                    # bias_ptr: the positive logits' gradient (a row vector of A).
                    sig.update({n: "*fp32" for n in ("row0_ptr", "row1_ptr", "col0_ptr", "col1_ptr", "bias_ptr")})
                else:
                    for n in ("row0_ptr", "col0_ptr"):
                        if "groups" in given:
                            sig[n] = "*i64"
                        else:
                            consts[n] = None
                    consts.update(row1_ptr=None, col1_ptr=None)
                    if "bias" in given:
                        sig["bias_ptr"] = "*fp32"
                    else:
                        consts["bias_ptr"] = None
                for ptr, flag in (("acc", "ACC_A"), ("accb", "ACC_B"), ("dsum", "WRITE_DS"), ("loss", "WRITE_LOSS"),
                                  ("gsum", "WRITE_GSUM")):  # fmt: skip
                    consts[flag] = ptr in given
                    if ptr in given:
                        sig[f"{ptr}_ptr"] = "*fp32"
                    else:
                        consts[f"{ptr}_ptr"] = None
                sig.update({n: "i32" for n in (*ints[:3], *ints[4:], "offset_a", "offset_b")})
                sig["inv_norm"] = "fp32"
                specs.append(KernelSpec("contrastive", sweep_kernel, arch, dtype, sig, consts, t.num_warps,
                                        t.num_stages, gemm, label=label,
                                        extra={"kind": kind, "divisible_by_16": _aligned(sig)}))  # fmt: skip
    return specs
