"""Core helpers: multithreaded C++ rank counting against the torch expression users would write."""

import torch

from vlkernels.core.reference import count_above_ref
from vlkernels.ops import count_above

from .harness import Bench, register


@register("core", "count_above", quick={"n": 2000, "m": 5000}, full={"n": 5000, "m": 25000})
def _count_above(n: int, m: int, device: str) -> Bench:
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(n, m, generator=g).to(device)
    thr = torch.randn(n, generator=g).to(device)

    def check(out):
        for name, v in out.items():
            if not torch.equal(v.cpu(), out["torch"].cpu()):
                raise AssertionError(f"{name} counts differ from torch")

    return Bench(
        providers={"vlkernels": lambda: count_above(scores, thr), "torch": lambda: count_above_ref(scores, thr)},
        baseline="torch",
        check=check,
        bytes=scores.numel() * scores.element_size(),
    )
