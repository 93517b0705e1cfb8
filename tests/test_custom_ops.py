"""One autograd pattern: l2_normalize and pair_cosine are torch.library custom ops with fake (and
for l2_normalize autograd) registrations, so opcheck passes and torch.compile(fullgraph=True) traces through them."""

import pytest
import torch

from vlkernels.metrics import similarity as sim
from vlkernels.metrics.reference import pair_cosine_ref
from vlkernels.ops import l2_normalize
from vlkernels.testing import FP32_TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_l2_normalize_opcheck(dtype):
    x = torch.randn(7, 33, dtype=dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.vlkernels.l2_normalize.default, (x, 1e-12))
    # A zero row (the eps branch of the gradient) and a row-strided view.
    z = torch.randn(6, 40, dtype=dtype)
    z[2] = 0
    torch.library.opcheck(torch.ops.vlkernels.l2_normalize.default, (z[:, :20].requires_grad_(), 1e-12))


def test_l2_normalize_compiles_fullgraph_with_grad():
    x = torch.randn(9, 17, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(9, 17, dtype=torch.float64)

    def f(t):
        return (l2_normalize(t) * 2).sum(-1)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    (g_got,) = torch.autograd.grad(compiled(x), x, dy.sum(-1))
    xr = x.detach().clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad((torch.nn.functional.normalize(xr, dim=-1) * 2).sum(-1), xr, dy.sum(-1))
    torch.testing.assert_close(g_got, g_ref)
    torch.testing.assert_close(compiled(x), f(x))


@pytest.mark.parametrize("mode", ["pairs", "idx", "group"])
def test_pair_cosine_opcheck_and_compile(mode):
    x, y = torch.randn(12, 16), torch.randn(12 if mode == "pairs" else 4, 16)
    idx = torch.randint(0, 4, (12,)) if mode == "idx" else None
    group = 3 if mode == "group" else None
    torch.library.opcheck(torch.ops.vlkernels.pair_cosine.default, (x, y, idx, 1e-12, group))
    rows = {"pairs": torch.arange(12), "idx": idx, "group": torch.arange(12) // 3}[mode]
    compiled = torch.compile(
        lambda a, b: sim._pair_cosine_op(a, b, idx, 1e-12, group) * 2, fullgraph=True, backend="aot_eager"
    )
    torch.testing.assert_close(compiled(x, y).double(), pair_cosine_ref(x, y[rows]) * 2, **FP32_TOL)
