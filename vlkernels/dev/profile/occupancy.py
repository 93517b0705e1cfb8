"""Theoretical occupancy: blocks and warps per SM from registers, shared memory and warps (the CUDA occupancy
calculator's rules for compute capability 8.0 and 9.0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits (CUDA occupancy calculator, compute capability 8.0 and 9.0)."""

    regs_per_sm: int
    max_regs_per_thread: int
    smem_per_sm: int
    smem_optin_per_block: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    reg_alloc_unit: int  # registers, allocated per warp
    smem_alloc_unit: int  # bytes
    smem_reserved_per_block: int  # bytes the runtime keeps per block


ARCH_LIMITS = {
    80: ArchLimits(65536, 255, 164 * 1024, 163 * 1024, 64, 32, 256, 128, 1024),
    90: ArchLimits(65536, 255, 228 * 1024, 227 * 1024, 64, 32, 256, 128, 1024),
}


def occupancy(arch: int, registers: int, smem_bytes: int, warps: int) -> dict[str, Any]:
    """Theoretical blocks and warps per SM for one block of ``warps`` warps, and the resource that limits them."""
    lim = ARCH_LIMITS[arch]
    regs_per_warp = -(-max(registers, 1) * 32 // lim.reg_alloc_unit) * lim.reg_alloc_unit
    by = {
        "warps": lim.max_warps_per_sm // warps,
        "blocks": lim.max_blocks_per_sm,
        "registers": (lim.regs_per_sm // regs_per_warp) // warps,
    }
    # sm_90 cubins already list the runtime's 1 KiB as static shared memory; sm_80 cubins do not.
    reserved = 0 if arch >= 90 else lim.smem_reserved_per_block
    per_block = -(-(smem_bytes + reserved) // lim.smem_alloc_unit) * lim.smem_alloc_unit
    by["shared_memory"] = lim.smem_per_sm // per_block if per_block else lim.max_blocks_per_sm
    blocks = min(by.values())
    limiter = min(by, key=lambda k: by[k])
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "occupancy": blocks * warps / lim.max_warps_per_sm,
        "limiter": limiter,
    }
