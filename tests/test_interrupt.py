"""Ctrl-C during a long C++ call: KeyboardInterrupt within ~0.1 s, and the module still works."""

from pathlib import Path

from vlkernels.testing import check_interrupts

REPO = Path(__file__).resolve().parent.parent

# Each case: a call that runs for tens of seconds unless interrupted. `count_above` reads one row broadcast to
# 10^6 rows (stride 0, so 4·10^10 compares need no memory); the spin is the bare parallel_for + check_interrupt.
CALLS = {
    "count_above-threads": "count_above(torch.randn(1, 40_000).expand(1_000_000, 40_000), torch.zeros(1_000_000))",
    "count_above-serial": "count_above(torch.randn(1, 40_000).expand(1_000_000, 40_000), torch.zeros(1_000_000), "
    "num_threads=1)",
    "spin-threads": "C._test_spin_interruptible(60.0, 3)",
}

_SETUP = """
import numpy as np, torch
from vlkernels import _ext
from vlkernels.ops import count_above
C = _ext.load()
count_above(torch.randn(4, 3), torch.zeros(4))
s, t = torch.randn(300, 200), torch.randn(300)
"""
_AFTER = "np.array_equal(count_above(s, t).numpy(), (s.numpy() > t.numpy()[:, None]).sum(1))"


def test_sigint_stops_a_long_call():
    # The README promises ~0.1 s; 0.5 s leaves room for a loaded 2-core CI machine.
    check_interrupts(_SETUP, _AFTER, [(call, 0.5) for call in CALLS.values()], bound=0.5)
