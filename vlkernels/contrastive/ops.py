"""Launchers, torch.library ops and autograd for the two streaming primitives the losses are built from.

- ``lse_pair(x, y, s)``: the row log-sum-exp (over y) and column log-sum-exp (over x) of ``s·x·yᵀ`` in one pass;
  its backward recomputes the tiles. InfoNCE is these normalizers minus linear terms (see ``losses.py``).
- ``siglip_fused(...)``: the SigLIP loss and, in the same pass, its gradients (saved for backward).

Gradient paths (Triton; ``grad_path`` names the one in force, ``GEMM_UNITS`` their cost): by default one sweep over
the tiles gives both operands' gradients, the second by fp32 atomics; under
``torch.use_deterministic_algorithms(True)`` one sweep per operand, no atomics. See README.md.

Triton runs on CUDA (and on CPU under ``TRITON_INTERPRET=1``) for fp32/fp16/bf16; elsewhere, and for float64 on
every device, the chunked torch path of ``cpu.py`` (float64 is a reference dtype: its GEMMs go to the device's
float64 BLAS, which Triton's tensor-core tiles cannot match in precision).
Both are registered with ``torch.library`` so ``torch.compile(fullgraph=True)`` treats them as opaque ops.
"""

from __future__ import annotations

import torch

from vlkernels._triton import fell_back, run_triton, use_triton
from vlkernels.contrastive.configs import tiles
from vlkernels.contrastive.cpu import acc_dtype, lse_pair_bwd_cpu, lse_pair_fwd_cpu, siglip_fwd_cpu


def _num_programs(x: torch.Tensor, row_blocks: int) -> int:
    if x.device.type == "cuda":
        return max(1, min(row_blocks, torch.cuda.get_device_properties(x.device).multi_processor_count))
    return max(1, min(row_blocks, 4))


def _nonfinite_flag(*tensors: torch.Tensor | None) -> torch.Tensor:
    """0-dim fp32: NaN when any input holds NaN/Inf, else 0. Added to outputs so a bad step yields NaN, not garbage,
    without a host sync (AMP loss scalers then skip the step, as they do with open_clip)."""
    zero = torch.zeros((), dtype=torch.float32, device=tensors[0].device)
    ok = torch.ones((), dtype=torch.bool, device=zero.device)
    for t in tensors:
        if t is None or t.numel() == 0:
            continue
        # NaN and ±inf show in the extremes (min/max propagate NaN): one pass over t, where isfinite().all() takes two.
        lo, hi = torch.aminmax(t)
        ok = ok & torch.isfinite(lo) & torch.isfinite(hi)
    return torch.where(ok, zero, torch.full_like(zero, float("nan")))


def on_triton(x: torch.Tensor) -> bool:
    """True when the Triton kernels run for features like ``x``; float64 always takes the torch path."""
    return x.dtype != torch.float64 and use_triton(x)


def _narrow_for_triton(x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype):
    """``(x, y)`` in ``dtype`` (the dtype the kernels read) when the Triton kernels run for it, else None: the torch
    path computes from the fp32 inputs as they are, so it gets no narrowed copies."""
    if not on_triton(x.new_empty(0, dtype=dtype)):
        return None
    return x.to(dtype), y.to(dtype)


def lse_pair_fwd(
    x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, diag_offset: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import triton

    from vlkernels.contrastive.kernels import _lse_pair_fwd_kernel

    # Row-contiguous operands (a copy only for other layouts): the kernels' tiles assume a unit feature stride
    # (vlkernels/core/tiles.py), which also lets Triton vectorize the tile loads.
    x, y = x.contiguous(), y.contiguous()
    n, d = x.shape
    m = y.shape[0]
    t = tiles("fwd", x)
    programs = _num_programs(x, triton.cdiv(n, t.block_m))
    row = torch.empty(n, dtype=torch.float32, device=x.device)
    diag = torch.empty(n, dtype=torch.float32, device=x.device)
    col_max = torch.full((programs, m), float("-inf"), dtype=torch.float32, device=x.device)
    col_sum = torch.zeros((programs, m), dtype=torch.float32, device=x.device)
    _lse_pair_fwd_kernel[(programs,)](
        x, y, scale, row, diag, col_max, col_sum, n, m, d, x.stride(0), y.stride(0), diag_offset, programs,
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    # Merge the P per-program column partials: lse = M + log Σ_p l_p·exp(m_p - M).
    top = col_max.max(dim=0).values
    col = top + torch.log((col_sum * torch.exp(col_max - top)).sum(dim=0))
    return row, col, diag


def deterministic() -> bool:
    """True when the Triton backward must take the deterministic two-sweep path (no atomics)."""
    return torch.are_deterministic_algorithms_enabled()


def grad_path(x: torch.Tensor) -> str:
    """Which gradient path the losses take for features like ``x`` now: ``"atomic"`` (Triton, one sweep, the
    default), ``"deterministic"`` (Triton, one sweep per operand, under ``torch.use_deterministic_algorithms``) or
    ``"cpu"`` (the chunked torch path, deterministic)."""
    if not on_triton(x) or any(fell_back(op, x) for op in ("lse_pair_bwd", "siglip")):
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
    grad_tile,
    *,
    rows: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    cols: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    bias: torch.Tensor | None = None,
    offset_a: int = 0,
    offset_b: int = 0,
    inv_norm: float = 1.0,
    acc_a: bool = True,
    acc_b: bool = False,
    write_ds: bool = False,
    write_loss: bool = False,
    write_gsum: bool = False,
    tiles_of: str = "",
) -> dict[str, torch.Tensor]:
    """One sweep of ``_grad_sweep_kernel`` over the tiles of s·A·Bᵀ with the loss's gradient tile ``grad_tile`` (a
    ``@triton.jit`` function of the signature in kernels.py; rows/cols/bias are what it reads). Returns fp32 tensors:
    ``ga = G·B`` (acc_a), ``gb = Gᵀ·A`` (acc_b, atomics), per row ``ds = Σ_j G_ij⟨a_i, b_j⟩`` (write_ds), the element
    loss sum ``loss`` (write_loss) and ``gsum = Σ_j G_ij`` (write_gsum). ``tiles_of`` names a loss with its own
    rows in the tile table (``configs.CUDA``), else the generic sweep tiles are used."""
    import triton

    from vlkernels.contrastive.kernels import _grad_sweep_kernel

    n, d = a.shape
    m = b.shape[0]
    f32 = {"dtype": torch.float32, "device": a.device}
    wanted = {"ga": acc_a, "gb": acc_b, "ds": write_ds, "loss": write_loss, "gsum": write_gsum}
    # gb is the atomic path's one extra buffer: B's gradient accumulated in fp32 (M×D×4 bytes), cast once at the end.
    shapes = {"ga": (n, d), "gb": (m, d), "ds": (n,), "loss": (n,), "gsum": (n,)}
    out = {k: torch.zeros(shapes[k], **f32) for k, on in wanted.items() if on}
    if n == 0 or m == 0:
        return out
    t = tiles(f"{tiles_of}{'dual' if acc_b else 'sweep'}", a)
    _grad_sweep_kernel[(triton.cdiv(n, t.block_m),)](
        a, b, scale, *rows, *cols, bias, out.get("ga"), out.get("gb"), out.get("ds"), out.get("loss"), out.get("gsum"),
        n, m, d, a.stride(0), b.stride(0), offset_a, offset_b, inv_norm,
        GRAD_TILE=grad_tile, BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, GROUP_N=t.group_n,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out


def lse_pair_bwd(x, y, scale, row_lse, col_lse, d_row, d_col, d_diag, diag_offset):
    from vlkernels.contrastive.kernels import _info_nce_grad_tile as tile

    x, y = x.contiguous(), y.contiguous()
    # The positives' gradient d_diag enters the tile at (i, i + diag_offset) (the kernel's bias_ptr, a row vector).
    rows_x = dict(rows=(row_lse, d_row), cols=(col_lse, d_col), bias=d_diag, offset_a=diag_offset)
    if deterministic():
        # Two sweeps, each program owning its rows: 2 + 2 GEMM units, bitwise reproducible.
        first = _grad_rows(x, y, scale, tile, tiles_of="info_nce_", write_ds=True, **rows_x)
        # Swapped, the positives' gradient is a row vector of y: d_diag moved to the columns i + diag_offset.
        d_diag_y = torch.zeros(y.shape[0], dtype=torch.float32, device=y.device)
        n_pos = max(0, min(x.shape[0], y.shape[0] - diag_offset))
        d_diag_y[diag_offset : diag_offset + n_pos] = d_diag[:n_pos]
        rows_y = dict(rows=(col_lse, d_col), cols=(row_lse, d_row), bias=d_diag_y, offset_b=diag_offset)
        gy = _grad_rows(y, x, scale, tile, tiles_of="info_nce_", **rows_y)["ga"]
    else:
        # One sweep: 1 recompute + 2 GEMM units; dy's partials are added with fp32 atomics.
        first = _grad_rows(x, y, scale, tile, tiles_of="info_nce_", write_ds=True, acc_b=True, **rows_x)
        gy = first["gb"]
    s = scale.float()
    # ds from per-row partials reduced in a fixed order: exact and reproducible on both paths.
    return (first["ga"] * s).to(x.dtype), (gy * s).to(y.dtype), first["ds"].sum()


def siglip_fwd(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad):
    from vlkernels.contrastive.kernels import _siglip_grad_tile as tile

    x, y = x.contiguous(), y.contiguous()
    fwd = dict(rows=(x_groups, None), cols=(y_groups, None), bias=bias, offset_a=row_offset, offset_b=col_offset)
    if not need_grad:
        # The loss alone: 1 GEMM unit.
        return (_grad_rows(x, y, scale, tile, acc_a=False, write_loss=True, inv_norm=inv_norm, **fwd)["loss"].sum(),)
    one_sweep = not deterministic()
    first = _grad_rows(
        x, y, scale, tile, write_ds=True, write_loss=True, write_gsum=True, acc_b=one_sweep, inv_norm=inv_norm, **fwd
    )
    if one_sweep:
        gy = first["gb"]
    else:
        swapped = dict(rows=(y_groups, None), cols=(x_groups, None), offset_a=col_offset, offset_b=row_offset)
        gy = _grad_rows(y, x, scale, tile, bias=bias, inv_norm=inv_norm, **swapped)["ga"]
    s = scale.float()
    # ds = Σ G⟨x, y⟩ and db = Σ G from per-row partials reduced in a fixed order on both paths.
    loss, ds, db = first["loss"].sum(), first["ds"].sum(), first["gsum"].sum()
    return loss, (first["ga"] * s).to(x.dtype), (gy * s).to(y.dtype), ds, db


@torch.library.custom_op("vlkernels::lse_pair", mutates_args=())
def _lse_pair_op(
    x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, diag_offset: int, compute_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if x.shape[0] == 0 or y.shape[0] == 0:
        acc = acc_dtype(x.dtype)
        inf = float("-inf")
        return (
            x.new_full((x.shape[0],), inf, dtype=acc),
            x.new_full((y.shape[0],), inf, dtype=acc),
            x.new_zeros((x.shape[0],), dtype=acc),
        )
    narrow = _narrow_for_triton(x, y, compute_dtype)
    if narrow is not None:
        # A Triton compile/launch failure on first use falls back to the chunked torch path (vlkernels._triton).
        row, col, diag = run_triton("lse_pair_fwd", lse_pair_fwd, lse_pair_fwd_cpu, *narrow, scale, diag_offset)
    else:
        row, col, diag = lse_pair_fwd_cpu(x, y, scale, diag_offset)
    bad = _nonfinite_flag(x, y, scale)
    return row + bad, col + bad, diag + bad


@_lse_pair_op.register_fake
def _(x, y, scale, diag_offset, compute_dtype):
    acc = acc_dtype(x.dtype)
    return x.new_empty(x.shape[0], dtype=acc), x.new_empty(y.shape[0], dtype=acc), x.new_empty(x.shape[0], dtype=acc)


@torch.library.custom_op("vlkernels::lse_pair_backward", mutates_args=())
def _lse_pair_bwd_op(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    row_lse: torch.Tensor,
    col_lse: torch.Tensor,
    d_row: torch.Tensor,
    d_col: torch.Tensor,
    d_diag: torch.Tensor,
    diag_offset: int,
    compute_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    acc = acc_dtype(x.dtype)
    d_row, d_col, d_diag = (t.to(acc).contiguous() for t in (d_row, d_col, d_diag))
    if x.shape[0] == 0 or y.shape[0] == 0:
        return torch.zeros_like(x), torch.zeros_like(y), scale.new_zeros((), dtype=acc)
    narrow = _narrow_for_triton(x, y, compute_dtype)
    if narrow is not None:
        args = (*narrow, scale, row_lse, col_lse, d_row, d_col, d_diag, diag_offset)
        dx, dy, ds = run_triton("lse_pair_bwd", lse_pair_bwd, lse_pair_bwd_cpu, *args)
        return dx.to(x.dtype), dy.to(y.dtype), ds
    return lse_pair_bwd_cpu(x, y, scale, row_lse, col_lse, d_row, d_col, d_diag, diag_offset)


@_lse_pair_bwd_op.register_fake
def _(x, y, scale, row_lse, col_lse, d_row, d_col, d_diag, diag_offset, compute_dtype):
    return torch.empty_like(x), torch.empty_like(y), scale.new_empty((), dtype=acc_dtype(x.dtype))


def _lse_pair_setup(ctx, inputs, output):
    x, y, scale, diag_offset, compute_dtype = inputs
    ctx.diag_offset, ctx.compute_dtype = diag_offset, compute_dtype
    ctx.save_for_backward(x, y, scale, *output[:2])


def _lse_pair_backward(ctx, d_row, d_col, d_diag):
    x, y, scale, row, col = ctx.saved_tensors
    d_row = torch.zeros_like(row) if d_row is None else d_row
    d_col = torch.zeros_like(col) if d_col is None else d_col
    d_diag = torch.zeros_like(row) if d_diag is None else d_diag
    dx, dy, ds = _lse_pair_bwd_op(x, y, scale, row, col, d_row, d_col, d_diag, ctx.diag_offset, ctx.compute_dtype)
    return dx, dy, ds.reshape(scale.shape).to(scale.dtype), None, None


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
    args = (x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad)
    out = run_triton("siglip", siglip_fwd, siglip_fwd_cpu, *args) if on_triton(x) else siglip_fwd_cpu(*args)
    bad = _nonfinite_flag(x, y, scale, bias)
    if not need_grad:
        empty = x.new_empty(0)
        return out[0] + bad, empty, empty.clone(), scale.new_zeros(()), scale.new_zeros(())
    loss, gx, gy, ds, db = out
    return loss + bad, gx + bad.to(gx.dtype), gy + bad.to(gy.dtype), ds + bad, db + bad


@_siglip_op.register_fake
def _(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad):
    loss = x.new_empty((), dtype=acc_dtype(x.dtype))
    if not need_grad:
        return loss, x.new_empty(0), x.new_empty(0), scale.new_empty(()), scale.new_empty(())
    return loss, torch.empty_like(x), torch.empty_like(y), scale.new_empty(()), scale.new_empty(())


def _siglip_setup(ctx, inputs, output):
    ctx.has_bias = inputs[3] is not None
    ctx.scale_meta = (inputs[2].shape, inputs[2].dtype)
    ctx.bias_meta = (inputs[3].shape, inputs[3].dtype) if ctx.has_bias else None
    ctx.save_for_backward(*output[1:])


def _siglip_backward(ctx, g_loss, *_):
    if torch.is_grad_enabled():
        # create_graph=True: the gradients below are values saved by the forward, so a graph through them would
        # give every second derivative as 0 without a word.
        raise RuntimeError(
            "siglip_loss is not twice differentiable (its gradients are computed in the forward pass); "
            "backward with create_graph=True is not supported"
        )
    gx, gy, ds, db = ctx.saved_tensors
    if gx.numel() == 0 and ctx.needs_input_grad[0]:
        raise RuntimeError("siglip_fused ran without gradients (need_grad=False) but a gradient was requested")
    g = g_loss.to(ds.dtype)
    dscale = (ds * g).reshape(ctx.scale_meta[0]).to(ctx.scale_meta[1])
    dbias = (db * g).reshape(ctx.bias_meta[0]).to(ctx.bias_meta[1]) if ctx.has_bias else None
    return gx * g.to(gx.dtype), gy * g.to(gy.dtype), dscale, dbias, None, None, None, None, None, None


_siglip_op.register_autograd(_siglip_backward, setup_context=_siglip_setup)


def lse_pair(
    x: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    diag_offset: int = 0,
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logsumexp_j ℓ_ij, logsumexp_i ℓ_ij, ℓ_{i, i+diag_offset})`` of ``ℓ = s·x·yᵀ`` without the N×M matrix, in
    fp32 (float64 for float64 features), all three differentiable. The third (0 where the column does not exist)
    comes from the same products as the log-sum-exps, so ``lse - diag >= 0`` holds exactly, and its gradient joins
    the softmax's in the backward's gradient tile (before any rounding to a narrow dtype).

    Inputs are validated by the public losses; ``scale`` is a 0-dim tensor of the accumulation dtype.
    ``compute_dtype``: the dtype the kernels read (default: x's). The losses pass fp32 copies of fp16/bf16 features
    with compute_dtype fp16/bf16 (the values are exact in it): the kernels run at the narrow dtype's speed, and the
    gradients come back in fp32, where they meet the linear terms' gradients before one rounding to the features'
    dtype (two gradients rounded separately, then added, lose a confident batch's small gradient to cancellation).
    """
    return _lse_pair_op(x, y, scale, int(diag_offset), compute_dtype or x.dtype)


def siglip_fused(x, y, scale, bias, x_groups, y_groups, row_offset, col_offset, inv_norm, need_grad) -> torch.Tensor:
    """Differentiable SigLIP loss of one (x, y) block; gradients are computed in the forward pass when need_grad."""
    return _siglip_op(x, y, scale, bias, x_groups, y_groups, int(row_offset), int(col_offset), float(inv_norm),
                      bool(need_grad))[0]  # fmt: skip
