"""The losses as an open_clip user meets them: result dtypes, float64, saturated logits, batches without positives,
docstrings; and a toy loss added in this file alone, through the shared sweep kernel."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import vlkernels
from vlkernels._triton import triton_installed
from vlkernels.testing import (
    assert_losses_within_bounds,
    assert_within_bounds,
    contrastive_error_bounds,
    contrastive_inputs,
    loss_and_grads,
)


def _pairs(oc):
    return (("info_nce", oc.ClipLoss(), vlkernels.ClipLoss()), ("siglip", oc.SigLipLoss(), vlkernels.SigLipLoss()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("scale_kind", ["0-dim fp32", "(1,) fp32", "float"])
@pytest.mark.parametrize("bias_kind", ["0-dim fp32", "(1,) fp32", "float"])
def test_losses_return_open_clips_dtype(backend, oc, dtype, scale_kind, bias_kind):
    """The loss's dtype is open_clip's: its logits' (scale times features under torch's promotion); the bias, added
    in place there, never changes it."""
    x, y, s, b = contrastive_inputs(12, 16, 10.0, seed=1)
    scale = {"0-dim fp32": s.float(), "(1,) fp32": s.float().reshape(1), "float": 10.0}[scale_kind]
    bias = {"0-dim fp32": b.float(), "(1,) fp32": b.float().reshape(1), "float": float(b)}[bias_kind]
    for _, theirs, ours in _pairs(oc):
        xd, yd = x.to(dtype), y.to(dtype)
        try:
            want = theirs(xd, yd, scale, bias).dtype
        except RuntimeError:
            # open_clip multiplies `(scale * x) @ y.T`: a (1,) fp32 scale promotes x, then the matmul mixes dtypes.
            want = torch.promote_types(dtype, torch.float32)
        got = ours(xd, yd, scale, bias)
        assert got.dtype == want, (type(ours).__name__, dtype, scale_kind, bias_kind)


def test_saturated_logits_gradients_from_consistent_log_sum_exps(backend, oc):
    """Unnormalised features at scale 100 (logits in the thousands, every softmax saturated, some columns' sums
    underflowing): the backward recomputes the logit tile, and the log-sum-exps it divides by come from the same
    products, so a saturated entry's exp(t - lse) is exactly 1 and the gradients keep fp32's accuracy. Bound: the
    sums behind each gradient entry, (D + M) roundings of u each, with a factor 8 of slack, relative to the largest
    entry (an lse off by one ulp of a thousands-sized logit errs by ~2e-4)."""
    torch.manual_seed(0)
    x, y = torch.randn(2, 64) * 3, torch.randn(2, 64)
    s = torch.tensor(100.0)

    def grads(mod, *t):
        t = [v.clone().requires_grad_() for v in t]
        return torch.autograd.grad(mod(*t), t)

    want = grads(oc.ClipLoss(), x.double(), y.double(), s.double())
    got = grads(vlkernels.ClipLoss(), x, y, s)
    bound = 8 * (64 + 2) * 2.0**-24
    for name, g, w in zip(("image", "text"), got, want):
        err = float((g.double() - w).abs().max() / w.abs().max())
        assert err <= bound, (name, err, bound)


def test_losses_float64_match_open_clip_in_float64(backend, oc):
    """float64 features are accepted and computed in float64 (the torch path on every device)."""
    x, y, s, b = contrastive_inputs(37, 48, 30.0, seed=2)
    for kind, theirs, ours in _pairs(oc):
        expected = loss_and_grads(theirs, x, y, s, b)
        got = loss_and_grads(ours, x, y, s, b)
        assert all(t.dtype == torch.float64 for t in got)
        assert_losses_within_bounds(kind, got, expected, x, y, s, b, u=2.0**-52)


def test_info_nce_saturated_pairs_give_exactly_zero(backend, oc):
    """Unnormalised features with confident pairs: every off-diagonal logit is far below the positive, so the exact
    loss is 0 in fp32 (open_clip returns exactly 0); a cross-entropy computed from two different roundings of the
    positive logit used to come out negative (-1.1e-5)."""
    g = torch.Generator().manual_seed(3)
    eye = torch.eye(64, dtype=torch.float64)
    x = 40 * eye + 0.01 * torch.randn(64, 64, generator=g, dtype=torch.float64)
    y = 40 * eye + 0.01 * torch.randn(64, 64, generator=g, dtype=torch.float64)
    s = torch.tensor(1.0)
    theirs = oc.ClipLoss()(x.float(), y.float(), s)
    assert float(theirs) == 0.0
    ours = vlkernels.ClipLoss()(x.float(), y.float(), s)
    assert float(ours) == 0.0
    for eps in (0.0, 0.1):
        groups = torch.arange(64) // 2
        for kw in ({}, {"image_groups": groups, "text_groups": groups}):
            assert float(vlkernels.info_nce_loss(x.float(), y.float(), s, label_smoothing=eps, **kw)) >= 0.0


def test_info_nce_without_any_positive_pair_raises(backend):
    x, y, s, _ = contrastive_inputs(6, 8, 5.0, m=7, seed=4)
    with pytest.raises(ValueError, match="no image and text share a group id"):
        vlkernels.info_nce_loss(x.float(), y.float(), s.float(), image_groups=torch.arange(6),
                                text_groups=torch.arange(7) + 100)  # fmt: skip
    with pytest.raises(ValueError, match="at least one positive pair"):
        vlkernels.ClipLoss()(x.float(), y.float(), s.float(), image_groups=torch.zeros(6, dtype=torch.long),
                             text_groups=torch.ones(7, dtype=torch.long))  # fmt: skip


@pytest.mark.parametrize(
    "fn", [vlkernels.ClipLoss.forward, vlkernels.SigLipLoss.forward, vlkernels.info_nce_loss, vlkernels.siglip_loss]
)
def test_losses_have_contract_docstrings(fn):
    """help(ClipLoss.forward) states the contract, not torch.nn.Module's generic text."""
    doc = fn.__doc__ or ""
    assert doc != torch.nn.Module.forward.__doc__
    for part in ("Args:", "Returns:", "Raises:", "open_clip", "dtype"):
        assert part in doc, (fn.__qualname__, part)


if triton_installed():
    import triton
    import triton.language as tl

    from vlkernels.contrastive.kernels import _softplus_sigmoid

    # A temperature-only sigmoid loss, defined here only: L = (1/N)·Σ_ij w_ij·softplus(-z_ij·s·⟨x_i, y_j⟩) with
    # w = 2 on positives (so it differs from SigLIP without bias). One gradient-tile helper of the shared signature;
    # the sweep kernel does the rest.
    @triton.jit
    def _toy_grad_tile(s, offs_m, offs_n, mask_m, mask_n, r0, r1, c0, c1, bias_ptr, offset_a, offset_b, inv_norm):
        pos = (offs_m[:, None] + offset_a) == (offs_n[None, :] + offset_b)
        w = tl.where(pos, 2.0, 1.0)
        t = tl.where(pos, -s, s)
        softplus, sigmoid = _softplus_sigmoid(t)
        mask = mask_m[:, None] & mask_n[None, :]
        g = tl.where(mask, tl.where(pos, -sigmoid, sigmoid) * w * inv_norm, 0.0)
        return g, tl.where(mask, softplus * w * inv_norm, 0.0)


class _ToyLoss(torch.autograd.Function):
    """The toy loss's launcher: one dual sweep gives the loss, dx, dy (atomics) and ds."""

    @staticmethod
    def forward(ctx, x, y, s):
        from vlkernels.contrastive import ops

        out = ops._grad_rows(x, y, s, _toy_grad_tile, inv_norm=1.0 / x.shape[0], acc_b=True, write_ds=True,
                             write_loss=True)  # fmt: skip
        ctx.save_for_backward(out["ga"] * s, out["gb"] * s, out["ds"].sum())
        return out["loss"].sum()

    @staticmethod
    def backward(ctx, g):
        gx, gy, ds = ctx.saved_tensors
        return g * gx, g * gy, g * ds


def _toy_ref(x, y, s, b):
    z = torch.eye(x.shape[0], dtype=x.dtype) * 2 - 1
    w = torch.eye(x.shape[0], dtype=x.dtype) + 1
    return (F.softplus(-z * s * (x @ y.T)) * w).sum() / x.shape[0] + 0 * b


def test_toy_loss_through_the_shared_sweep_kernel():
    """Adding a loss takes one gradient-tile helper and one launcher: both live in this test file."""
    if not triton_installed() or (not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"):
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    x, y, s, b = contrastive_inputs(37, 24, 12.0, seed=5)
    expected = loss_and_grads(_toy_ref, x, y, s, b)
    got = loss_and_grads(lambda x, y, s, b: _ToyLoss.apply(x, y, s) + 0 * b, x.float(), y.float(), s.float(), b.float())
    # The toy loss is SigLIP with weights 1..2 and no bias: twice SigLIP's bound covers it.
    bounds = contrastive_error_bounds("siglip", x, y, s, None, upstream=0.75)
    for k, name in enumerate(("loss", "d image", "d text", "d scale")):
        assert_within_bounds(got[k], expected[k], 2 * bounds[name], name)
