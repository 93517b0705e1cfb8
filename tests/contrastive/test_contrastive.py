"""Contrastive losses against open_clip's own loss.py (loaded by path), torch's cross_entropy and the paper formulas.

Two backends: the Triton kernels (on CPU through TRITON_INTERPRET=1, on CUDA when present) and the chunked torch
CPU path (TRITON_INTERPRET=0). fp32 results are compared with open_clip run in fp64; fp16/bf16 follow the low-
precision rule of vlkernels.testing (error at most 2× that of open_clip run in the same low precision).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vlkernels
from vlkernels.contrastive import configs
from vlkernels.contrastive.reference import info_nce_loss_ref, siglip_loss_ref
from vlkernels.testing import (
    assert_close_lowp,
    assert_losses_within_bounds,
    assert_within_bounds,
    contrastive_error_bounds,
    contrastive_inputs,
    loss_and_grads,
)

make_inputs, run = contrastive_inputs, loss_and_grads


def check(loss, actual, expected, x, y, s, b, **kw):
    """fp32 results against the fp64 reference, within the error bound of vlkernels.testing (from the inputs)."""
    assert_losses_within_bounds(loss, actual, expected, x, y, s, b, **kw)


CPU_GRID = [(1, 64, 1.0), (1, 1000, 100.0), (37, 96, 14.3), (37, 768, 100.0), (300, 64, 50.0), (300, 1000, 1.0)]
CPU_GRID += [(1025, 96, 100.0), (1025, 768, 7.0)]
TRITON_GRID = [(1, 64, 100.0), (37, 1000, 14.3), (300, 96, 30.0)]


def _grid(backend_name):
    return CPU_GRID if backend_name == "cpu" else TRITON_GRID


@pytest.mark.parametrize("loss_name", ["clip", "siglip"])
@pytest.mark.parametrize("case", range(len(CPU_GRID)))
def test_losses_match_open_clip_fp32(backend, device, oc, loss_name, case, monkeypatch):
    grid = CPU_GRID if os.environ.get("TRITON_INTERPRET") == "0" else TRITON_GRID
    if case >= len(grid):
        pytest.skip("the Triton interpreter runs a representative subset of the grid")
    n, d, s = grid[case]
    x, y, sc, b = make_inputs(n, d, s, seed=case)
    theirs_fn = oc.ClipLoss() if loss_name == "clip" else oc.SigLipLoss()
    ours_fn = vlkernels.ClipLoss() if loss_name == "clip" else vlkernels.SigLipLoss()
    expected = run(theirs_fn, x, y, sc, b)
    actual = run(ours_fn, x, y, sc.float(), b.float(), dtype=torch.float32, device=device)
    check(KIND[loss_name], actual, expected, x, y, sc, b)


KIND = {"clip": "info_nce", "siglip": "siglip"}


def _pairs(oc):
    return (("info_nce", oc.ClipLoss(), vlkernels.ClipLoss()), ("siglip", oc.SigLipLoss(), vlkernels.SigLipLoss()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("loss_name", ["clip", "siglip"])
def test_losses_low_precision_rule(backend, device, oc, loss_name, dtype):
    n, d = (300, 96) if device == "cuda" or backend == "cpu" else (100, 96)
    x, y, s, b = make_inputs(n, d, 20.0, seed=3)
    theirs_fn = oc.ClipLoss() if loss_name == "clip" else oc.SigLipLoss()
    ours_fn = vlkernels.ClipLoss() if loss_name == "clip" else vlkernels.SigLipLoss()
    exact = run(theirs_fn, x, y, s, b)
    base = run(theirs_fn, x, y, s.float(), b.float(), dtype=dtype)
    ours = run(ours_fn, x, y, s.float(), b.float(), dtype=dtype, device=device)
    for k, name in enumerate(("loss", "d image", "d text", "d scale")):
        floor = 1e-3 * float(exact[k].abs().max()) + 1e-12
        assert_close_lowp(ours[k].cpu(), exact[k], base[k], floor=floor, name=name)
    assert ours[1].dtype == dtype and ours[2].dtype == dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_info_nce_low_precision_confident_batch(backend, device, oc, dtype):
    """A well-trained batch (each text next to its image, s = 30, loss ~1e-7): a feature's gradient is the small
    difference of two large parts (log-sum-exp and positive logit). Rounding each part to fp16/bf16 before adding
    them left an error hundreds of times the gradient; they must meet in fp32 and be rounded once."""
    g = torch.Generator().manual_seed(9)
    x = F.normalize(torch.randn(64, 32, generator=g, dtype=torch.float64), dim=1)
    y = F.normalize(x + 0.03 * torch.randn(64, 32, generator=g, dtype=torch.float64), dim=1)
    x, y = x.to(dtype).double(), y.to(dtype).double()  # the inputs as the low-precision run sees them
    s, b = torch.tensor(30.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    exact = run(oc.ClipLoss(), x, y, s, b)
    base = run(oc.ClipLoss(), x, y, s.float(), b.float(), dtype=dtype)
    ours = run(vlkernels.ClipLoss(), x, y, s.float(), b.float(), dtype=dtype, device=device)
    for k, name in ((1, "d image"), (2, "d text")):
        # Errors relative to the gradient's largest element (most elements are far below it).
        assert_close_lowp(ours[k].cpu(), exact[k], base[k], floor=float(exact[k].abs().max()), name=name)


def test_info_nce_loss_groups_and_smoothing_vs_formula(backend, device):
    # Rectangular: 5 captions for some images, none for the last two; some captions of images not in the batch.
    x, y, s, b = make_inputs(23, 40, 12.0, m=61, seed=5)
    gx = torch.arange(23)
    gy = torch.cat([torch.arange(21).repeat_interleave(2), torch.randint(0, 21, (15,)), torch.tensor([90, 91, 92, 93])])
    for eps in (0.0, 0.2):
        kw = {"image_groups": gx, "text_groups": gy, "label_smoothing": eps}
        expected = run(info_nce_loss_ref, x, y, s, b, **kw)
        kw_dev = {"image_groups": gx.to(device), "text_groups": gy.to(device), "label_smoothing": eps}
        actual = run(vlkernels.info_nce_loss, x, y, s.float(), b.float(), dtype=torch.float32, device=device, **kw_dev)
        check("info_nce", actual, expected, x, y, s, b, **kw)


def test_info_nce_loss_smoothing_matches_torch_cross_entropy(backend, device):
    x, y, s, b = make_inputs(37, 96, 30.0, seed=6)

    def torch_ce(x, y, s, b, label_smoothing):
        logits = s * x @ y.T + b
        labels = torch.arange(x.shape[0])
        ce = F.cross_entropy
        return (ce(logits, labels, label_smoothing=label_smoothing) + ce(logits.T, labels, label_smoothing=0.3)) / 2

    expected = run(torch_ce, x, y, s, b, label_smoothing=0.3)
    actual = run(vlkernels.info_nce_loss, x, y, s.float(), b.float(), torch.float32, device, label_smoothing=0.3)
    check("info_nce", actual, expected, x, y, s, b, label_smoothing=0.3)


def test_siglip_loss_groups_vs_formula(backend, device):
    x, y, s, b = make_inputs(29, 50, 9.0, m=44, seed=7)
    gx, gy = torch.randint(0, 12, (29,)), torch.randint(0, 12, (44,))
    expected = run(siglip_loss_ref, x, y, s, b, image_groups=gx, text_groups=gy)
    actual = run(vlkernels.siglip_loss, x, y, s.float(), b.float(), torch.float32, device, image_groups=gx.to(device),
                 text_groups=gy.to(device))  # fmt: skip
    check("siglip", actual, expected, x, y, s, b, image_groups=gx, text_groups=gy)


REFS = (("info_nce", info_nce_loss_ref, vlkernels.info_nce_loss), ("siglip", siglip_loss_ref, vlkernels.siglip_loss))


def test_losses_many_tiles(monkeypatch, oc):
    """Triton with 16-wide tiles: many row/column tiles, several row blocks per forward program, ragged edges."""
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    small = {k: configs.Tiles(16, 16, 16, 4, 1, group_n=2) for k in configs.INTERPRETER}
    monkeypatch.setattr(configs, "INTERPRETER", small)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y, s, b = make_inputs(70, 20, 25.0, seed=8)
    for kind, theirs, ours in _pairs(oc):
        check(kind, run(ours, x, y, s.float(), b.float(), torch.float32, device), run(theirs, x, y, s, b), x, y, s, b)
    x, y, s, b = make_inputs(40, 20, 8.0, m=50, seed=9)
    gx, gy = torch.randint(0, 15, (40,)), torch.randint(0, 15, (50,))
    for kind, ref, ours in REFS:
        expected = run(ref, x, y, s, b, image_groups=gx, text_groups=gy)
        got = run(
            ours,
            x,
            y,
            s.float(),
            b.float(),
            torch.float32,
            device,
            image_groups=gx.to(device),
            text_groups=gy.to(device),
        )
        check(kind, got, expected, x, y, s, b, image_groups=gx, text_groups=gy)


def test_losses_cpu_path_many_chunks(monkeypatch, oc):
    """The chunked CPU path with tiny chunks (3 rows) and factor blocks (7 columns): ragged chunk edges, the
    diagonal crossing chunks, groups, and the exact fallbacks for extreme logits."""
    from vlkernels.contrastive import cpu

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(cpu, "CHUNK_ELEMS", 3 * 70)
    monkeypatch.setattr(cpu, "FACTOR_COLS", 7)
    x, y, s, b = make_inputs(70, 20, 25.0, seed=17)
    for kind, theirs, ours in _pairs(oc):
        check(kind, run(ours, x, y, s.float(), b.float(), torch.float32), run(theirs, x, y, s, b), x, y, s, b)
        # Logits up to ~7500: the fp32 error of the logits alone is u·|ℓ| ≈ 5e-4, the bound scales with it.
        xe, ye = x * torch.linspace(0.1, 30, 70, dtype=torch.float64)[:, None], y * 20
        check(kind, run(ours, xe, ye, s.float(), b.float(), torch.float32), run(theirs, xe, ye, s, b), xe, ye, s, b)
    gx, gy = torch.randint(0, 20, (70,)), torch.randint(0, 20, (70,))
    for kind, ref, ours in REFS:
        expected = run(ref, x, y, s, b, image_groups=gx, text_groups=gy)
        got = run(ours, x, y, s.float(), b.float(), torch.float32, image_groups=gx, text_groups=gy)
        check(kind, got, expected, x, y, s, b, image_groups=gx, text_groups=gy)


def test_losses_non_contiguous_inputs(backend, device, oc):
    x, y, s, b = make_inputs(37, 96, 10.0, seed=10)
    for kind, theirs, ours in _pairs(oc):
        expected = run(theirs, x, y, s, b)

        def strided(xs, ys, sc, bi, ours=ours):
            # Column-major features and a row-strided view: the kernels take both strides.
            xt = xs.t().contiguous().t()
            yw = torch.cat([ys, ys], dim=1)[:, : ys.shape[1]]
            return ours(xt, yw, sc, bi)

        check(kind, run(strided, x, y, s.float(), b.float(), torch.float32, device), expected, x, y, s, b)


def test_clip_loss_signature_and_returns(oc):
    x, y, s, b = make_inputs(9, 16, 5.0, seed=11)
    ours, theirs = vlkernels.ClipLoss(cache_labels=True), oc.ClipLoss(cache_labels=True)
    xf, yf, sf = x.float(), y.float(), s.float()
    out = ours(image_features=xf, text_features=yf, logit_scale=sf, logit_bias=None, output_dict=True)
    assert set(out) == {"contrastive_loss"} and out["contrastive_loss"].dim() == 0
    ref = theirs(x, y, s)
    bound = contrastive_error_bounds("info_nce", x, y, s)["loss"]
    assert_within_bounds(out["contrastive_loss"], ref, bound, "loss")
    assert_within_bounds(ours(xf, yf, 5.0), ref, bound, "loss, float scale")
    sig = vlkernels.SigLipLoss()(xf, yf, logit_scale=sf, logit_bias=b.float(), output_dict=True)["contrastive_loss"]
    assert_within_bounds(sig, oc.SigLipLoss()(x, y, s, b), contrastive_error_bounds("siglip", x, y, s, b)["loss"])


def test_losses_scale_from_log_parameter(backend, device):
    """The usual model wiring: logit_scale = log_scale.exp() (a 1-element parameter); its gradient flows through."""
    x, y, _, b = make_inputs(20, 24, 1.0, seed=12)
    for kind, ref, ours in REFS:
        p = torch.full((1,), math.log(30.0), device=device, requires_grad=True)
        ours(x.float().to(device), y.float().to(device), p.exp(), b.float().to(device)).backward()
        q = torch.full((1,), math.log(30.0), dtype=torch.float64, requires_grad=True)
        ref(x, y, q.exp(), b).backward()
        # d/d log s = s·d/ds: the ds bound times s, plus the roundings of exp and of the product (4u relative).
        bound = 30.0 * contrastive_error_bounds(kind, x, y, 30.0, b)["d scale"] + 4 * 2.0**-24 * q.grad.abs()
        assert_within_bounds(p.grad, q.grad, bound, f"{kind} d log-scale")


@pytest.mark.parametrize("bad", ["nan_image", "inf_text", "nan_scale", "nan_bias", "inf_bias"])
def test_losses_non_finite_inputs_give_nan(backend, device, bad):
    """NaN loss and NaN gradients (as open_clip's), so that AMP's GradScaler, which reads the gradients, skips the
    step; InfoNCE's bias cancels in the value but must not leave finite gradients behind."""
    x, y, s, b = make_inputs(20, 24, 5.0, seed=13)
    if bad == "nan_image":
        x[3, 2] = float("nan")
    elif bad == "inf_text":
        y[0, 0] = float("inf")
    elif bad == "nan_scale":
        s = torch.tensor(float("nan"), dtype=torch.float64)
    else:
        b = torch.tensor(float("nan" if bad == "nan_bias" else "inf"), dtype=torch.float64)
    for fn in (vlkernels.info_nce_loss, vlkernels.siglip_loss):
        loss, gx, gy, gs, gb = run(fn, x, y, s.float(), b.float(), torch.float32, device)
        assert torch.isnan(loss) and torch.isnan(gx).any() and torch.isnan(gy).any()
        if "bias" in bad:
            assert torch.isnan(gs) and torch.isnan(gb)
        with pytest.raises(ValueError, match="NaN/Inf"):
            fn(x.float(), y.float(), s.float(), b.float(), check_finite=True)


@pytest.mark.parametrize("scale", [0.0, -3.0])
def test_losses_non_positive_scale_follow_the_formula(backend, device, oc, scale):
    """Documented: any finite scale is accepted (no host-side check); s = 0 gives log N, s < 0 the formula."""
    x, y, _, b = make_inputs(17, 24, 1.0, seed=14)
    s = torch.tensor(scale, dtype=torch.float64)
    for kind, theirs, ours in _pairs(oc):
        check(kind, run(ours, x, y, s.float(), b.float(), torch.float32, device), run(theirs, x, y, s, b), x, y, s, b)
    if scale == 0.0:
        # All logits are exactly 0: log(17) from a sum of 17 ones, a few fp32 roundings (16u covers them).
        assert math.isclose(float(vlkernels.info_nce_loss(x.float(), y.float(), 0.0)), math.log(17), rel_tol=1e-6)


@pytest.mark.parametrize("spread", [1.0, 30.0])
def test_losses_extreme_logits(backend, device, oc, spread):
    """Logits spanning thousands (norms up to ~60, s = 100): every exp shortcut of the CPU path must fall back to
    the exact form (row/column log-sum-exps far apart, column sums underflowing)."""
    x, y, s, b = make_inputs(150, 32, 100.0, seed=16)
    x = x * torch.linspace(0.1, spread, 150, dtype=torch.float64)[:, None]
    y = y * torch.linspace(spread, 0.1, 150, dtype=torch.float64)[:, None]
    for kind, theirs, ours in _pairs(oc):
        actual = run(ours, x, y, s.float(), b.float(), torch.float32, device)
        check(kind, actual, run(theirs, x, y, s, b), x, y, s, b)


def test_finite_bias_leaves_info_nce_unchanged():
    """The bias cancels in InfoNCE: with any finite bias the loss and gradients equal those without one, bit for
    bit, and the bias's gradient is exactly 0."""
    x, y, s, _ = make_inputs(20, 24, 5.0, seed=17)

    def grads(bias):
        leaves = [t.float().requires_grad_() for t in (x, y, s)]
        extra = [] if bias is None else [torch.tensor(bias, requires_grad=True)]
        loss = vlkernels.info_nce_loss(*leaves, *extra)
        loss.backward()
        return [loss.detach()] + [t.grad for t in leaves + extra]

    a = grads(None)
    for bias in (-10.0, 3.5, -1e30):
        got = grads(bias)
        assert all(torch.equal(u, v) for u, v in zip(got[:4], a)) and got[4] == 0


def test_siglip_double_backward_refused():
    """siglip_loss's gradients are values computed in the forward: a gradient penalty through them (create_graph)
    must raise, not give every second derivative as 0."""
    x, y, s, b = (t.float() for t in make_inputs(6, 8, 5.0, seed=18))
    x.requires_grad_()
    loss = vlkernels.siglip_loss(x, y, s, b)
    with pytest.raises(RuntimeError, match="not twice differentiable"):
        torch.autograd.grad(loss, x, create_graph=True)
    (gx,) = torch.autograd.grad(vlkernels.siglip_loss(x, y, s, b), x)  # first order still works
    assert torch.isfinite(gx).all()


def test_numpy_scalar_scale_and_bias_accepted():
    x, y, _, _ = (t.float() for t in make_inputs(6, 8, 5.0, seed=19))
    for fn in (vlkernels.info_nce_loss, vlkernels.siglip_loss):
        want = fn(x, y, 5.0, -2.0)
        for kind in (np.float32, np.float64, np.int64):
            assert torch.equal(fn(x, y, kind(5), kind(-2)), want)
        with pytest.raises(ValueError, match="logit_scale must be a float"):
            fn(x, y, np.bool_(True))


def test_siglip_loss_without_grad_matches():
    x, y, s, b = make_inputs(30, 20, 10.0, seed=15)
    with torch.no_grad():
        a = vlkernels.siglip_loss(x.float(), y.float(), s.float(), b.float())
    assert_within_bounds(a, siglip_loss_ref(x, y, s, b), contrastive_error_bounds("siglip", x, y, s, b)["loss"])


def _bad_calls():
    x, y, s = torch.randn(4, 8), torch.randn(4, 8), torch.tensor(2.0)
    g = torch.arange(4)
    f = vlkernels.info_nce_loss
    return {
        "not a tensor": (lambda: f(x.tolist(), y, s), "must be a torch.Tensor"),
        "D differs": (lambda: f(x, torch.randn(4, 9), s), "feature dimensions differ"),
        "dtype mix": (lambda: f(x, y.half(), s), "same dtype"),
        "int features": (lambda: f(x.long(), y.long(), s), "expected one of"),
        "1-D": (lambda: f(x[0], y[0], s), "2 dimensions"),
        "empty": (lambda: f(x[:0], y[:0], s), "empty batch"),
        "D=0": (lambda: f(x[:, :0], y[:, :0], s), "D=0"),
        "N != M": (lambda: f(x, torch.randn(5, 8), s), "diagonal"),
        "scale shape": (lambda: f(x, y, torch.ones(2)), "exactly one value"),
        "scale type": (lambda: f(x, y, "2"), "float or a one-element tensor"),
        "scale int": (lambda: f(x, y, torch.tensor(2)), "floating-point"),
        "bias shape": (lambda: f(x, y, s, torch.ones(3)), "exactly one value"),
        "one group": (lambda: f(x, y, s, image_groups=g), "together"),
        "group length": (lambda: f(x, y, s, image_groups=g[:3], text_groups=g), "3 entries"),
        "group dtype": (lambda: f(x, y, s, image_groups=g.float(), text_groups=g), "image_groups has dtype"),
        "smoothing": (lambda: f(x, y, s, label_smoothing=1.0), "label_smoothing"),
        "siglip D": (lambda: vlkernels.siglip_loss(x, torch.randn(4, 9), s), "feature dimensions differ"),
        "siglip empty": (lambda: vlkernels.siglip_loss(x[:0], y, s), "empty batch"),
        "horovod": (lambda: vlkernels.ClipLoss(use_horovod=True), "horovod"),
        "rank": (lambda: vlkernels.ClipLoss(rank=2, world_size=2), "rank"),
        # Fractions were truncated (rank 0 of 1: a local loss), strings read by int().
        "fractional world": (lambda: vlkernels.ClipLoss(rank=0.7, world_size=1.9), "need integers"),
        "string rank": (lambda: vlkernels.SigLipLoss(rank="0", world_size=1), "need integers"),
        "dist_impl": (lambda: vlkernels.SigLipLoss(dist_impl="ring"), "dist_impl"),
        "module smoothing": (lambda: vlkernels.ClipLoss(label_smoothing=-0.1), "label_smoothing"),
        "no group": (lambda: vlkernels.ClipLoss(rank=1, world_size=2)(x, y, s), "process group"),
        "siglip no group": (lambda: vlkernels.SigLipLoss(rank=0, world_size=3)(x, y, s, s), "process group"),
    }


@pytest.mark.parametrize("case", list(_bad_calls()))
def test_losses_validation_errors(case):
    call, match = _bad_calls()[case]
    with pytest.raises(ValueError, match=match):
        call()


def test_losses_torch_compile_fullgraph_matches_eager():
    """A training step (features from a linear layer, learnable log-scale and bias) compiled with fullgraph."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(12, 16, dtype=torch.float32)
    log_s = torch.nn.Parameter(torch.tensor(math.log(10.0)))
    bias = torch.nn.Parameter(torch.tensor(-4.0))
    clip, sig = vlkernels.ClipLoss(), vlkernels.SigLipLoss()
    a, t = torch.randn(21, 12), torch.randn(21, 12)

    def step(a, t):
        x, y = lin(a), lin(t)
        return clip(x, y, log_s.exp()) + sig(x, y, log_s.exp(), bias)

    def grads(fn):
        for p in (*lin.parameters(), log_s, bias):
            p.grad = None
        loss = fn(a, t)
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in (*lin.parameters(), log_s, bias)]

    eager = grads(step)
    compiled = grads(torch.compile(step, fullgraph=True, backend="aot_eager"))
    # Both run the same ops in the same order (aot_eager only traces); the slack covers a decomposition reordering a
    # reduction, far below any formula error.
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)
