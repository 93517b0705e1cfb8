"""Contrastive losses, forward + backward: vlkernels' streaming InfoNCE / SigLIP against open_clip's ClipLoss /
SigLipLoss (which build the N×N logits), with peak memory side by side; on GPU also against one cuBLAS GEMM of the
same shape (the physical floor). GEMM units of forward + backward: InfoNCE 4 on the default (atomic) Triton path and on
CPU, 5 on the deterministic Triton path; SigLIP 3, 3 and 4. Each row's notes name the path that ran."""

from __future__ import annotations

import contextlib

import torch

import vlkernels
from vlkernels.contrastive.ops import GEMM_UNITS, grad_path
from vlkernels.testing import open_clip_loss_module

from .harness import Bench, Skip, register


def _inputs(n: int, d: int, dtype: torch.dtype, device: str):
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1).to(device=device, dtype=dtype)
    y = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1).to(device=device, dtype=dtype)
    scale = torch.tensor(10.0, device=device)
    bias = torch.tensor(-10.0, device=device)
    return x, y, scale, bias


@contextlib.contextmanager
def _deterministic():
    """torch.use_deterministic_algorithms(True) for one call (warn_only: only the losses' own path is of interest)."""
    enabled, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def _fwd_bwd(loss_fn, x, y, scale, bias, with_bias: bool, path: str | None = None):
    def run():
        ctx = _deterministic() if path == "deterministic" else contextlib.nullcontext()
        with ctx:
            # The gradient path is chosen when the op runs: make sure the one the row's notes name is the one timed.
            if path is not None and grad_path(x) != path:
                raise AssertionError(f"expected the {path} gradient path, {grad_path(x)} would run")
            leaves = [t.detach().requires_grad_() for t in (x, y, scale, bias)]
            loss = loss_fn(*leaves) if with_bias else loss_fn(*leaves[:3])
            loss.backward()
        return [loss.detach()] + [t.grad for t in leaves[: 4 if with_bias else 3]]

    return run


def _check(rtol: float, atol: float):
    def check(out):
        ref = out.get("open_clip")
        if ref is None:
            return
        for name, vals in out.items():
            for k, (a, e) in enumerate(zip(vals, ref)):
                err = float((a.float() - e.float()).abs().max())
                tol = atol + rtol * float(e.float().abs().max())
                if err > tol:
                    raise AssertionError(f"{name} output {k} differs from open_clip by {err:.3e} (tol {tol:.3e})")

    return check


LOSS_LABELS = {"info_nce": "InfoNCE (ClipLoss)", "siglip": "SigLIP (SigLipLoss)"}


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def _cases(n: int, d: int, dtype: torch.dtype, device: str, repeats: int | None) -> list[Bench]:
    oc = open_clip_loss_module()
    if oc is None:
        raise Skip("needs open-clip-torch (pip install -c constraints.txt --no-deps -r requirements-nodeps.txt)")
    x, y, s, b = _inputs(n, d, dtype, device)
    gemm_flops = 2.0 * n * n * d
    tol = (1e-4, 1e-6) if dtype == torch.float32 else (3e-2, 1e-3)
    benches = []
    path = grad_path(x)
    for name, key, ours, theirs, with_bias in (
        ("clip", "info_nce", vlkernels.ClipLoss(), oc.ClipLoss(), False),
        ("siglip", "siglip", vlkernels.SigLipLoss(), oc.SigLipLoss(), True),
    ):
        units = GEMM_UNITS[(key, path)]
        providers = {"vlkernels": _fwd_bwd(ours, x, y, s, b, with_bias, path)}
        notes = f"{name} loss; vlkernels path={path} ({units} GEMM units)"
        if path == "atomic":
            providers["vlkernels_deterministic"] = _fwd_bwd(ours, x, y, s, b, with_bias, "deterministic")
            notes += f"; vlkernels_deterministic path=deterministic ({GEMM_UNITS[(key, 'deterministic')]} units)"
        providers["open_clip"] = _fwd_bwd(theirs, x, y, s, b, with_bias)
        benches.append(
            Bench(
                providers=providers,
                baseline="open_clip",
                check=_check(*tol),
                mode="fwd+bwd",
                label=f"{LOSS_LABELS[key]} fwd+bwd, {dtype_name(dtype)}",
                flops=units * gemm_flops,
                repeats=repeats,
                notes=f"{notes}; TFLOP/s counts {units} GEMM units of 2·N²·D for every provider",
            )
        )
    return benches


@register("contrastive", "loss_cpu", quick={"n": 2048, "d": 256}, full={"n": 16384, "d": 512}, devices=("cpu",))
def _loss_cpu(n: int, d: int, device: str) -> list[Bench]:
    # A full-size fwd+bwd takes seconds on CPU: two timed runs keep the whole family under the time budget.
    return _cases(n, d, torch.float32, device, repeats=2 if n > 4096 else 3)


@register(
    "contrastive",
    "loss_gpu",
    quick={"n": 16384, "d": 768},
    full={"n": 65536, "d": 768},
    devices=("cuda",),
)
def _loss_gpu(n: int, d: int, device: str) -> list[Bench]:
    benches = _cases(n, d, torch.bfloat16, device, repeats=10)
    x, y, _, _ = _inputs(n, d, torch.bfloat16, device)
    benches.append(
        Bench(
            providers={"cublas_gemm": lambda: x @ y.T},
            mode="fwd",
            flops=2.0 * n * n * d,
            repeats=10,
            notes="one bf16 GEMM x·yᵀ of the loss shape: the unit the fused losses are measured in",
        )
    )
    return benches
