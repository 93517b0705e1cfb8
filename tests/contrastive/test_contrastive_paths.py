"""The two Triton gradient paths of the contrastive losses, each against open_clip's own loss.py (and the paper
formulas of reference.py where open_clip has no equivalent: groups, rectangular batches, label smoothing).

- ``atomic`` (default): one backward sweep; dI in the program's own fp32 rows, dT by fp32 atomics.
- ``deterministic`` (``torch.use_deterministic_algorithms(True)``): one sweep per operand, no atomics.

The Triton kernels run on CUDA, or on CPU tensors under TRITON_INTERPRET=1 (conftest); shapes stay small.
"""

from __future__ import annotations

import os

import pytest
import torch

import vlkernels
from vlkernels import testing
from vlkernels.contrastive import configs
from vlkernels.contrastive import ops as cops
from vlkernels.contrastive.reference import info_nce_loss_ref, siglip_loss_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _needs_triton():
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")


@pytest.fixture(params=["atomic", "deterministic"])
def path(request):
    """Runs the test under the named gradient path and restores the global determinism flags afterwards."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(request.param == "deterministic")
    try:
        assert cops.grad_path(torch.empty(1, device=DEV)) == request.param
        yield request.param
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture
def sweeps(monkeypatch):
    """Records each gradient-kernel sweep as (rows, cols, acc_a, acc_b): the GEMM units a call spends."""
    calls = []
    orig = cops._grad_rows

    def spy(a, b, scale, grad_tile, **kw):
        calls.append((a.shape[0], b.shape[0], kw.get("acc_a", True), kw.get("acc_b", False)))
        return orig(a, b, scale, grad_tile, **kw)

    monkeypatch.setattr(cops, "_grad_rows", spy)
    return calls


def _pair(name, oc):
    return (oc.ClipLoss(), vlkernels.ClipLoss()) if name == "clip" else (oc.SigLipLoss(), vlkernels.SigLipLoss())


KIND = {"clip": "info_nce", "siglip": "siglip"}


@pytest.mark.parametrize("loss_name", ["clip", "siglip"])
@pytest.mark.parametrize(("n", "d", "s"), [(37, 96, 14.3), (37, 1000, 60.0)])
def test_paths_match_open_clip_fp32(path, oc, loss_name, n, d, s):
    theirs, ours = _pair(loss_name, oc)
    x, y, sc, b = testing.contrastive_inputs(n, d, s, seed=n + d)
    expected = testing.loss_and_grads(theirs, x, y, sc, b)
    got = testing.loss_and_grads(ours, x, y, sc.float(), b.float(), torch.float32, DEV)
    testing.assert_losses_within_bounds(KIND[loss_name], got, expected, x, y, sc, b)


@pytest.mark.parametrize("loss_name", ["clip", "siglip"])
def test_paths_bf16_low_precision_rule(path, oc, loss_name):
    theirs, ours = _pair(loss_name, oc)
    x, y, s, b = testing.contrastive_inputs(37, 96, 20.0, seed=3)
    exact = testing.loss_and_grads(theirs, x, y, s, b)
    base = testing.loss_and_grads(theirs, x, y, s.float(), b.float(), dtype=torch.bfloat16)
    got = testing.loss_and_grads(ours, x, y, s.float(), b.float(), dtype=torch.bfloat16, device=DEV)
    names = ("loss", "d image", "d text", "d scale", "d bias")
    for k, name in enumerate(names[: 5 if loss_name == "siglip" else 4]):
        floor = 1e-3 * float(exact[k].abs().max()) + 1e-12
        testing.assert_close_lowp(got[k].cpu(), exact[k], base[k], floor=floor, name=name)
    assert got[1].dtype == got[2].dtype == torch.bfloat16
    # The scale and bias gradients are reduced from fp32 G: beyond the rounding of the inputs to bf16 (taken out by
    # running the reference on the rounded inputs) their error is that of an fp32 computation.
    xr, yr = x.bfloat16().double(), y.bfloat16().double()
    rounded = testing.loss_and_grads(theirs, xr, yr, s, b)
    bounds = testing.contrastive_error_bounds(KIND[loss_name], xr, yr, s, b, upstream=0.75)
    for k, name in ((3, "d scale"), (4, "d bias")) if loss_name == "siglip" else ((3, "d scale"),):
        testing.assert_within_bounds(got[k], rounded[k], bounds[name], name)


@pytest.mark.parametrize("group_n", [1, 2])
def test_paths_many_tiles_rectangular_groups_smoothing(path, oc, monkeypatch, group_n):
    """16-wide tiles: every program wraps around its staggered column order; ragged edges on both operands;
    rectangular M > N with group ids (several positives, images and captions without any) and label smoothing; one
    or two column tiles per accumulator round trip (5 column tiles of 70 rows: a group of two ends with one)."""
    small = configs.Tiles(16, 16, 16, 4, 1, group_n=group_n)
    monkeypatch.setattr(configs, "INTERPRETER", dict.fromkeys(configs.INTERPRETER, small))
    x, y, s, b = testing.contrastive_inputs(70, 20, 25.0, seed=22)
    for name in ("clip", "siglip"):
        theirs, ours = _pair(name, oc)
        got = testing.loss_and_grads(ours, x, y, s.float(), b.float(), torch.float32, DEV)
        testing.assert_losses_within_bounds(KIND[name], got, testing.loss_and_grads(theirs, x, y, s, b), x, y, s, b)
    x, y, s, b = testing.contrastive_inputs(37, 24, 8.0, m=53, seed=23)
    gx = torch.arange(37) % 30
    gy = torch.cat([torch.arange(28).repeat_interleave(2)[:48], torch.tensor([40, 41, 42, 43, 44])])
    cases = [
        ("info_nce", info_nce_loss_ref, vlkernels.info_nce_loss, {"label_smoothing": 0.1}),
        ("siglip", siglip_loss_ref, vlkernels.siglip_loss, {}),
    ]
    for kind, ref, ours, extra in cases:
        expected = testing.loss_and_grads(ref, x, y, s, b, image_groups=gx, text_groups=gy, **extra)
        got = testing.loss_and_grads(ours, x, y, s.float(), b.float(), torch.float32, DEV, image_groups=gx.to(DEV),
                                     text_groups=gy.to(DEV), **extra)  # fmt: skip
        testing.assert_losses_within_bounds(kind, got, expected, x, y, s, b, image_groups=gx, text_groups=gy, **extra)


def test_paths_gemm_sweeps(path, sweeps):
    """The GEMM-unit count of each path, read off the kernel sweeps: the forward's lse pass is 1 unit, a sweep is
    1 (recompute) + 1 per accumulated operand."""
    x, y, s, b = testing.contrastive_inputs(20, 16, 5.0, m=20, seed=24)
    testing.loss_and_grads(vlkernels.info_nce_loss, x, y, s.float(), b.float(), torch.float32, DEV)
    clip_sweeps = list(sweeps)
    sweeps.clear()
    testing.loss_and_grads(vlkernels.siglip_loss, x, y, s.float(), b.float(), torch.float32, DEV)
    if path == "atomic":
        assert clip_sweeps == [(20, 20, True, True)] and sweeps == [(20, 20, True, True)]
    else:
        assert clip_sweeps == sweeps == [(20, 20, True, False), (20, 20, True, False)]
    units = {"clip": 1 + sum(1 + a + b for _, _, a, b in clip_sweeps), "siglip": sum(1 + a + b for *_, a, b in sweeps)}
    assert units == {"clip": cops.GEMM_UNITS[("info_nce", path)], "siglip": cops.GEMM_UNITS[("siglip", path)]}
    sweeps.clear()
    with torch.no_grad():
        vlkernels.siglip_loss(x.float().to(DEV), y.float().to(DEV), s.float(), b.float())
    assert sweeps == [(20, 20, False, False)]  # the loss alone: 1 unit


def test_paths_deterministic_is_bitwise_reproducible(oc):
    x, y, s, b = testing.contrastive_inputs(37, 40, 30.0, seed=25)
    enabled = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _, ours in (_pair("clip", oc), _pair("siglip", oc)):
            first = testing.loss_and_grads(ours, x, y, s.float(), b.float(), torch.float32, DEV)
            second = testing.loss_and_grads(ours, x, y, s.float(), b.float(), torch.float32, DEV)
            for a, c in zip(first, second):
                assert torch.equal(a, c)
    finally:
        torch.use_deterministic_algorithms(enabled)


def test_grad_path_names_the_backend(monkeypatch):
    assert cops.grad_path(torch.empty(1, device=DEV)) == "atomic"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if not torch.cuda.is_available():
        assert cops.grad_path(torch.empty(1)) == "cpu"
