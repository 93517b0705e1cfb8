"""Launchers, torch.library ops and autograd for the two streaming primitives the losses are built from.

- ``lse_pair(x, y, s)``: the row log-sum-exp (over y) and column log-sum-exp (over x) of ``s·x·yᵀ`` in one pass;
  its backward recomputes the tiles. InfoNCE is these normalizers minus linear terms (see ``losses.py``).
- ``siglip_fused(...)``: the SigLIP loss and, in the same pass, its gradients (saved for backward).

Gradient paths (Triton; ``grad_path`` names the one in force, ``GEMM_UNITS`` their cost): by default one sweep over
the tiles gives both operands' gradients, the second by fp32 atomics; under
``torch.use_deterministic_algorithms(True)`` one sweep per operand, no atomics. See README.md.

Triton runs on CUDA (and on CPU under ``TRITON_INTERPRET=1``); elsewhere the chunked torch path of ``cpu.py``.
Both are registered with ``torch.library`` so ``torch.compile(fullgraph=True)`` treats them as opaque ops.
"""

from __future__ import annotations

import torch

from vlkernels._triton import interpreting, use_triton
from vlkernels.contrastive.cpu import lse_pair_bwd_cpu, lse_pair_fwd_cpu, siglip_fwd_cpu

# Tile shapes: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps) for the forward and gradient kernels. The interpreter runs
# one numpy op per tile op, so fewer, larger tiles are faster there; tests shrink them to cross many tiles.
BLOCKS = {
    "cuda_fwd": (128, 128, 64, 8),
    "cuda_grad": (64, 128, 64, 8),
    # One-sweep backward: a taller row block halves the atomic traffic into dy per GEMM flop. Not tuned on a GPU yet.
    "cuda_dual": (128, 128, 64, 8),
    # fp32 operands use IEEE FMA dots and twice the bytes per stage: 128×128×64 would need 224 KiB of shared memory.
    "cuda_dual_fp32": (64, 128, 32, 8),
    "interp_fwd": (64, 64, 64, 4),
    "interp_grad": (64, 64, 64, 4),
    "interp_dual": (64, 64, 64, 4),
}


def _blocks(x: torch.Tensor, kind: str) -> tuple[int, int, int, int]:
    prefix = "interp" if (x.device.type != "cuda" or interpreting()) else "cuda"
    if prefix == "cuda" and kind == "dual" and x.dtype == torch.float32:
        kind = "dual_fp32"
    return BLOCKS[f"{prefix}_{kind}"]


def _precision(x: torch.Tensor) -> str:
    # fp32 operands: IEEE products (TF32 would cost ~1e-3 relative error); fp16/bf16 ignore the setting.
    return "ieee" if x.dtype == torch.float32 else "tf32"


def _upcast(x: torch.Tensor) -> bool:
    # Triton 3.9's interpreter multiplies bf16 operands of tl.dot as raw uint16; compute their exact fp32 products.
    return x.dtype == torch.bfloat16 and x.device.type != "cuda"


def _num_programs(x: torch.Tensor, row_blocks: int) -> int:
    if x.device.type == "cuda":
        return max(1, min(row_blocks, torch.cuda.get_device_properties(x.device).multi_processor_count))
    return max(1, min(row_blocks, 4))


def _nonfinite_flag(*tensors: torch.Tensor | None) -> torch.Tensor:
    """0-dim fp32: NaN when any input holds NaN/Inf, else 0. Added to outputs so a bad step yields NaN, not garbage,
    without a host sync (AMP loss scalers then skip the step, as they do with open_clip)."""
    ok = None
    for t in tensors:
        if t is None:
            continue
        fin = torch.isfinite(t).all()
        ok = fin if ok is None else ok & fin
    zero = torch.zeros((), dtype=torch.float32, device=tensors[0].device)
    return torch.where(ok, zero, torch.full_like(zero, float("nan")))


def lse_pair_fwd(x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from vlkernels.contrastive.kernels import _lse_pair_fwd_kernel

    n, d = x.shape
    m = y.shape[0]
    block_m, block_n, block_k, warps = _blocks(x, "fwd")
    row_blocks = triton_cdiv(n, block_m)
    programs = _num_programs(x, row_blocks)
    row = torch.empty(n, dtype=torch.float32, device=x.device)
    col_max = torch.full((programs, m), float("-inf"), dtype=torch.float32, device=x.device)
    col_sum = torch.zeros((programs, m), dtype=torch.float32, device=x.device)
    _lse_pair_fwd_kernel[(programs,)](
        x, y, scale, row, col_max, col_sum, n, m, d, x.stride(0), x.stride(1), y.stride(0), y.stride(1), programs,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=_precision(x), UPCAST=_upcast(x), num_warps=warps,
    )  # fmt: skip
    # Merge the P per-program column partials: lse = M + log Σ_p l_p·exp(m_p - M).
    top = col_max.max(dim=0).values
    col = top + torch.log((col_sum * torch.exp(col_max - top)).sum(dim=0))
    return row, col


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def deterministic() -> bool:
    """True when the Triton backward must take the deterministic two-sweep path (no atomics)."""
    return torch.are_deterministic_algorithms_enabled()


def grad_path(x: torch.Tensor) -> str:
    """Which gradient path the losses take for features like ``x`` now: ``"atomic"`` (Triton, one sweep, the
    default), ``"deterministic"`` (Triton, one sweep per operand, under ``torch.use_deterministic_algorithms``) or
    ``"cpu"`` (the chunked torch path, deterministic)."""
    if not use_triton(x):
        return "cpu"
    return "deterministic" if deterministic() else "atomic"


# GEMM units (one unit: 2·N·M·D flops, the cost of s·x·yᵀ) of forward + backward per loss and path.
GEMM_UNITS = {
    ("info_nce", "atomic"): 4,
    ("info_nce", "deterministic"): 5,
    ("info_nce", "cpu"): 4,
    ("siglip", "atomic"): 3,
    ("siglip", "deterministic"): 4,
    ("siglip", "cpu"): 3,
}


def _grad_rows(
    a: torch.Tensor,
    b: torch.Tensor,
    scale: torch.Tensor,
    *,
    lse_a: torch.Tensor | None = None,
    lse_b: torch.Tensor | None = None,
    d_a: torch.Tensor | None = None,
    d_b: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    grp_a: torch.Tensor | None = None,
    grp_b: torch.Tensor | None = None,
    offset_a: int = 0,
    offset_b: int = 0,
    inv_norm: float = 1.0,
    siglip: bool = False,
    write_loss: bool = False,
    write_ds: bool = False,
    acc_a: bool = True,
    acc_b: bool = False,
) -> dict[str, torch.Tensor]:
    """One sweep over the tiles of s·A·Bᵀ (G = ∂L/∂logits). Returns fp32 tensors: ``ga = G·B`` (rows of A; with
    acc_a), ``gb = Gᵀ·A`` (rows of B, atomics; with acc_b), with write_loss the per-row SigLIP ``loss`` and
    ``gsum = Σ_j G``, with write_ds ``ds = Σ_j G_ij⟨a_i, b_j⟩`` per row."""
    from vlkernels.contrastive.kernels import _contrastive_grad_kernel

    n, d = a.shape
    m = b.shape[0]
    f32 = {"dtype": torch.float32, "device": a.device}
    out = {}
    if acc_a:
        out["ga"] = torch.zeros(n, d, **f32)
    if acc_b:
        # The atomic path's one extra buffer: B's gradient accumulated in fp32 (M×D×4 bytes), cast once at the end.
        out["gb"] = torch.zeros(m, d, **f32)
    if write_loss:
        out["loss"], out["gsum"] = torch.zeros(n, **f32), torch.zeros(n, **f32)
    if write_ds:
        out["ds"] = torch.zeros(n, **f32)
    if n == 0 or m == 0:
        return out
    block_m, block_n, block_k, warps = _blocks(a, "dual" if acc_b else "grad")
    dummy = torch.empty(1, **f32)
    inputs = [t if t is not None else dummy for t in (lse_a, lse_b, d_a, d_b, bias, grp_a, grp_b)]
    outputs = [out.get(k, dummy) for k in ("loss", "gsum", "ds")]
    _contrastive_grad_kernel[(triton_cdiv(n, block_m),)](
        a, b, scale, out.get("ga", dummy), out.get("gb", dummy), *inputs, *outputs,
        n, m, d, a.stride(0), a.stride(1), b.stride(0), b.stride(1), d, d, offset_a, offset_b, inv_norm,
        SIGLIP=siglip, HAS_BIAS=bias is not None, HAS_GROUPS=grp_a is not None, WRITE_LOSS=write_loss,
        WRITE_DS=write_ds, ACC_A=acc_a, ACC_B=acc_b, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        PRECISION=_precision(a), UPCAST=_upcast(a), num_warps=warps,
    )  # fmt: skip
    return out


def lse_pair_bwd(x, y, scale, row_lse, col_lse, d_row, d_col):
    lse = dict(lse_a=row_lse, lse_b=col_lse, d_a=d_row, d_b=d_col)
    if deterministic():
        # Two sweeps, each program owning its rows: 2 + 2 GEMM units, bitwise reproducible.
        first = _grad_rows(x, y, scale, write_ds=True, **lse)
        gy = _grad_rows(y, x, scale, lse_a=col_lse, lse_b=row_lse, d_a=d_col, d_b=d_row)["ga"]
    else:
        # One sweep: 1 recompute + 2 GEMM units; dy's partials are added with fp32 atomics.
        first = _grad_rows(x, y, scale, write_ds=True, acc_b=True, **lse)
        gy = first["gb"]
    s = scale.float()
    # ds from per-row partials reduced in a fixed order: exact and reproducible on both paths.
    return (first["ga"] * s).to(x.dtype), (gy * s).to(y.dtype), first["ds"].sum()


def siglip_fwd(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad):
    common = dict(bias=bias, inv_norm=inv_norm, siglip=True)
    fwd = dict(grp_a=x_groups, grp_b=y_groups, offset_a=row_offset, offset_b=col_offset, write_loss=True, **common)
    if not need_grad:
        # The loss alone: 1 GEMM unit.
        return (_grad_rows(x, y, scale, acc_a=False, **fwd)["loss"].sum() * inv_norm,)
    one_sweep = not deterministic()
    first = _grad_rows(x, y, scale, write_ds=True, acc_b=one_sweep, **fwd)
    if one_sweep:
        gy = first["gb"]
    else:
        swapped = dict(grp_a=y_groups, grp_b=x_groups, offset_a=col_offset, offset_b=row_offset, **common)
        gy = _grad_rows(y, x, scale, **swapped)["ga"]
    s = scale.float()
    # ds = Σ G⟨x, y⟩ and db = Σ G from per-row partials reduced in a fixed order on both paths.
    loss, ds, db = first["loss"].sum() * inv_norm, first["ds"].sum(), first["gsum"].sum()
    return loss, (first["ga"] * s).to(x.dtype), (gy * s).to(y.dtype), ds, db


@torch.library.custom_op("vlkernels::lse_pair", mutates_args=())
def _lse_pair_op(x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape[0] == 0 or y.shape[0] == 0:
        return x.new_full((x.shape[0],), float("-inf"), dtype=torch.float32), x.new_full(
            (y.shape[0],), float("-inf"), dtype=torch.float32
        )
    row, col = lse_pair_fwd(x, y, scale) if use_triton(x) else lse_pair_fwd_cpu(x, y, scale)
    bad = _nonfinite_flag(x, y, scale)
    return row + bad, col + bad


@_lse_pair_op.register_fake
def _(x, y, scale):
    return x.new_empty(x.shape[0], dtype=torch.float32), x.new_empty(y.shape[0], dtype=torch.float32)


@torch.library.custom_op("vlkernels::lse_pair_backward", mutates_args=())
def _lse_pair_bwd_op(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    row_lse: torch.Tensor,
    col_lse: torch.Tensor,
    d_row: torch.Tensor,
    d_col: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    d_row, d_col = d_row.float().contiguous(), d_col.float().contiguous()
    if x.shape[0] == 0 or y.shape[0] == 0:
        return torch.zeros_like(x), torch.zeros_like(y), scale.new_zeros((), dtype=torch.float32)
    if use_triton(x):
        return lse_pair_bwd(x, y, scale, row_lse, col_lse, d_row, d_col)
    return lse_pair_bwd_cpu(x, y, scale, row_lse, col_lse, d_row, d_col)


@_lse_pair_bwd_op.register_fake
def _(x, y, scale, row_lse, col_lse, d_row, d_col):
    return torch.empty_like(x), torch.empty_like(y), scale.new_empty((), dtype=torch.float32)


def _lse_pair_setup(ctx, inputs, output):
    x, y, scale = inputs
    ctx.save_for_backward(x, y, scale, *output)


def _lse_pair_backward(ctx, d_row, d_col):
    x, y, scale, row, col = ctx.saved_tensors
    d_row = torch.zeros_like(row) if d_row is None else d_row
    d_col = torch.zeros_like(col) if d_col is None else d_col
    dx, dy, ds = _lse_pair_bwd_op(x, y, scale, row, col, d_row, d_col)
    return dx, dy, ds.reshape(scale.shape).to(scale.dtype)


_lse_pair_op.register_autograd(_lse_pair_backward, setup_context=_lse_pair_setup)


@torch.library.custom_op("vlkernels::siglip_fused", mutates_args=())
def _siglip_op(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
    x_groups: torch.Tensor | None,
    y_groups: torch.Tensor | None,
    row_offset: int,
    col_offset: int,
    inv_norm: float,
    need_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    run = siglip_fwd if use_triton(x) else siglip_fwd_cpu
    out = run(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad)
    bad = _nonfinite_flag(x, y, scale, bias)
    if not need_grad:
        empty = x.new_empty(0)
        return out[0] + bad, empty, empty.clone(), scale.new_zeros(()), scale.new_zeros(())
    loss, gx, gy, ds, db = out
    return loss + bad, gx + bad.to(gx.dtype), gy + bad.to(gy.dtype), ds + bad, db + bad


@_siglip_op.register_fake
def _(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad):
    loss = x.new_empty((), dtype=torch.float32)
    if not need_grad:
        return loss, x.new_empty(0), x.new_empty(0), scale.new_empty(()), scale.new_empty(())
    return loss, torch.empty_like(x), torch.empty_like(y), scale.new_empty(()), scale.new_empty(())


def _siglip_setup(ctx, inputs, output):
    ctx.has_bias = inputs[3] is not None
    ctx.scale_meta = (inputs[2].shape, inputs[2].dtype)
    ctx.bias_meta = (inputs[3].shape, inputs[3].dtype) if ctx.has_bias else None
    ctx.save_for_backward(*output[1:])


def _siglip_backward(ctx, g_loss, *_):
    gx, gy, ds, db = ctx.saved_tensors
    if gx.numel() == 0 and ctx.needs_input_grad[0]:
        raise RuntimeError("siglip_fused ran without gradients (need_grad=False) but a gradient was requested")
    g = g_loss.float()
    dscale = (ds * g).reshape(ctx.scale_meta[0]).to(ctx.scale_meta[1])
    dbias = (db * g).reshape(ctx.bias_meta[0]).to(ctx.bias_meta[1]) if ctx.has_bias else None
    return gx * g.to(gx.dtype), gy * g.to(gy.dtype), dscale, dbias, None, None, None, None, None, None


_siglip_op.register_autograd(_siglip_backward, setup_context=_siglip_setup)


def lse_pair(x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable ``(logsumexp_j s·⟨x_i, y_j⟩, logsumexp_i s·⟨x_i, y_j⟩)`` in fp32, without the N×M matrix.

    Inputs are validated by the public losses; ``scale`` is a 0-dim fp32 tensor.
    """
    return _lse_pair_op(x, y, scale)


def siglip_fused(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad) -> torch.Tensor:
    """Differentiable SigLIP loss of one (x, y) block; gradients are computed in the forward pass when need_grad."""
    return _siglip_op(x, y, scale, bias, x_groups, y_groups, int(row_offset), int(col_offset), float(inv_norm),
                      bool(need_grad))[0]  # fmt: skip
