"""Every ISA copy of the multiversioned C++ loops (csrc/core/cpu_features.h) that this machine can run gives the
anchors' answers: VLKERNELS_CPU_ISA caps the copy the dispatch picks, so each level runs in its own process (the
CPU features are read once per process, when the extension loads): a fork server's child (tests/forked.py), which has
imported torch but not vlkernels, sets the cap before its first import of vlkernels."""

from pathlib import Path

import pytest
from forked import run_forked

# count_above on ties, NaN, +-inf, -0.0 == 0.0, denormals and odd row lengths (vector tails) against the plain
# reference; rle_encode, mask_iou and rle_iou against pycocotools; retrieval's exact scores (dense tiles, and top-k's
# screened and dense paths) bit for bit against the float64 definition. Run in a child process with the cap set,
# which has not loaded the extension yet (else the cap would not apply).
CHILD = """
import sys
assert "vlkernels._C" not in sys.modules, "the extension was loaded before the cap was set"
import numpy as np, torch
from pycocotools import mask as coco_mask
from vlkernels.core.reference import count_above_ref
from vlkernels.ops import count_above, mask_iou, rle_encode, rle_iou

rng = np.random.default_rng(0)
special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, -1e-310, 5e-324])
for dtype in (torch.float32, torch.float64):
    for m in (1, 7, 8, 15, 16, 17, 37, 64, 257, 1000, 4099):
        s = np.round(rng.standard_normal((23, m)), 1)
        pick = rng.random(s.shape) < 0.15
        s[pick] = rng.choice(special, size=int(pick.sum()))
        t = np.round(rng.standard_normal(23), 1)
        t[:8] = special
        scores, thr = torch.tensor(s, dtype=dtype), torch.tensor(t, dtype=dtype)
        for inclusive in (False, True):
            got = count_above(scores, thr, inclusive=inclusive)
            assert torch.equal(got, count_above_ref(scores, thr, inclusive)), (dtype, m, inclusive)
for h, w in ((1, 1), (7, 9), (33, 65), (64, 64), (129, 67)):
    masks = (rng.random((5, h, w)) < [[[0.02]], [[0.5]], [[0.98]], [[0.0]], [[1.0]]]).astype(np.uint8)
    got = rle_encode(torch.from_numpy(masks))
    want = coco_mask.encode(np.asfortranarray(masks.transpose(1, 2, 0)))
    assert [g["counts"] for g in got] == [x["counts"] for x in want], (h, w)
    crowd = [0, 1, 0, 1, 0]
    want_iou = np.asarray(coco_mask.iou(want, want, crowd)).reshape(5, 5)
    assert np.array_equal(rle_iou(got, got, crowd).numpy(), want_iou), (h, w)
    m = torch.from_numpy(masks)
    assert np.array_equal(mask_iou(m, m).numpy(), np.asarray(coco_mask.iou(want, want, [0] * 5)).reshape(5, 5))

from vlkernels import _ext
from vlkernels.retrieval import topk
from vlkernels.retrieval.reference import exact_scores_ref, topk_ref
for d in (9, 37, 515):
    for dt in (np.float32, np.float64):
        q, g = rng.standard_normal((13, d)).astype(dt), rng.standard_normal((29, d)).astype(dt)
        out = torch.empty(13, 29, dtype=torch.float64)
        _ext.load().exact_tile(torch.from_numpy(q).double(), torch.from_numpy(g).double(), out, dt == np.float32)
        assert np.array_equal(out.numpy().view(np.int64), exact_scores_ref(q, g).view(np.int64)), (d, dt)
        for k in (3, 10):  # the screened path, then the dense one (k >= gallery / 4)
            got, want = topk(torch.from_numpy(q), torch.from_numpy(g), k), topk_ref(q, g, k)
            assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0].to(got[0].dtype)), (d, dt, k)
"""


def _levels() -> list[str]:
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    wanted = [("baseline", set()), ("popcnt", {"popcnt"}), ("avx2", {"avx2"}), ("avx512", {"avx512f", "avx512bw"})]
    return [name for name, need in wanted if need <= flags]


@pytest.mark.parametrize("level", _levels())
def test_count_above_and_rle_encode_equal_the_anchors_at_every_isa_level(level):
    err = run_forked(CHILD, {"VLKERNELS_CPU_ISA": level})
    assert err is None, err[-3000:]


def test_cpu_isa_refuses_an_unknown_level():
    code = "import torch\nfrom vlkernels.ops import count_above\ncount_above(torch.zeros(1, 3), torch.zeros(1))"
    err = run_forked(code, {"VLKERNELS_CPU_ISA": "avx3"})
    assert err is not None
    assert "ValueError: VLKERNELS_CPU_ISA must be one of baseline, popcnt, avx2, avx512, got 'avx3'" in err
