"""Ctrl-C during a long retrieval call on the CPU engine's worker threads: KeyboardInterrupt within
0.5 s, and the next call runs normally. The workers are Python threads that each call C++ per tile; a SIGINT may be
delivered to any of them, and only the main thread runs Python's handlers, so the calling thread must wake by itself
and stop the workers."""

from pathlib import Path

from vlkernels.testing import check_interrupts

REPO = Path(__file__).resolve().parent.parent

# Each call runs for tens of seconds on 2 cores unless interrupted (hundreds of GFLOP of score tiles).
CALLS = {
    "evaluate": "evaluate(img, txt, lab)",
    "topk": "topk(txt, img, 10)",
    # k >= a quarter of the gallery (screen.DENSE_SHARE): the dense exact tiles, and 15,000 of 60,000 kept per query.
    "topk_dense": "topk(txt[:2000], img, 15_000)",
}

_SETUP = """
import numpy as np, torch
import vlkernels
from vlkernels.retrieval import evaluate, topk
from vlkernels.retrieval.reference import evaluate_ref
vlkernels.set_num_threads(3)  # three worker threads, whatever the machine: the case the main thread alone missed
g = torch.Generator().manual_seed(0)
img = torch.randn(60_000, 64, generator=g)
lab = np.arange(60_000)  # few pairs, many tiles: the call's time is the workers' tiles, not the main thread's plan
txt = img + torch.randn(60_000, 64, generator=g)
small = (torch.randn(30, 8, dtype=torch.float64), torch.randn(60, 8, dtype=torch.float64), np.arange(60) % 30)
evaluate(*small)
"""


# Several points of the call: planning and exact thresholds (early), the first tiles, and well into the sweep.
WAITS = (0.05, 0.3, 1.0)


def test_sigint_stops_a_long_retrieval_call():
    rounds = [(call, wait) for call in CALLS.values() for wait in WAITS]
    check_interrupts(_SETUP, "evaluate(*small) == evaluate_ref(*small)", rounds, bound=0.5)
