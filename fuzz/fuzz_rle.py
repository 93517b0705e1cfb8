"""Atheris target for the COCO RLE readers and builders: compressed-string parsing (decode, area, bbox),
merge, polygons / boxes to RLE (frPyObjects), and the registered RleCounts ops called with arbitrary tensors.

Any exception other than the documented ValueError / TypeError is a finding, and so is a result that differs from
pycocotools on inputs both accept. Run: ``python fuzz/fuzz_rle.py -atheris_runs=100000`` (a sanitizer build of
the extension makes memory errors fatal)."""

import sys

import atheris
import numpy as np
import torch
from pycocotools import _mask as coco_c
from pycocotools import mask as coco_mask

# Only vlkernels' Python is instrumented (torch would take minutes); the C++ is covered by a sanitizer build.
with atheris.instrument_imports(include=["vlkernels"]):
    from vlkernels.boxes import fr_py_objects, rle_merge
    from vlkernels.ops import rle_area, rle_decode, rle_to_bbox

EXPECTED = (ValueError, TypeError)


def _strings(fdp: atheris.FuzzedDataProvider, h: int, w: int) -> list[dict]:
    n = fdp.ConsumeIntInRange(1, 3)
    return [{"size": [h, w], "counts": fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 24))} for _ in range(n)]


def _parse_and_compare(fdp: atheris.FuzzedDataProvider, h: int, w: int) -> None:
    rles = _strings(fdp, h, w)
    try:
        masks = rle_decode(rles).numpy()
    except EXPECTED:
        return
    # Accepted strings are valid COCO RLEs: pycocotools reads them to the same masks.
    np.testing.assert_array_equal(masks, coco_mask.decode(rles).transpose(2, 0, 1))
    np.testing.assert_array_equal(rle_area(rles).numpy(), coco_mask.area(rles).astype(np.int64))
    np.testing.assert_array_equal(rle_to_bbox(rles).numpy(), coco_mask.toBbox(rles))
    for inter in (0, 1):
        ours = rle_merge(rles, inter)
        # pycocotools' rleMerge reads cnts[0] of an RLE with no runs (a 0-pixel image) through a null pointer.
        if h * w > 0:
            assert ours == coco_mask.merge(rles, inter)


def _polygons(fdp: atheris.FuzzedDataProvider, h: int, w: int) -> None:
    scale = [1.0, 10.0, 1e3, 1e5][fdp.ConsumeIntInRange(0, 3)]
    polys = []
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        k = fdp.ConsumeIntInRange(3, 12)
        polys.append([round(fdp.ConsumeFloatInRange(-scale, scale), fdp.ConsumeIntInRange(0, 3)) for _ in range(2 * k)])
    ours = fr_py_objects(polys, h, w)
    if w > 0:  # pycocotools' unsigned w - 1 makes w = 0 garbage (README: deliberate difference)
        assert ours == coco_c.frPoly(polys, h, w), (h, w, polys)
        assert rle_merge(ours) == coco_mask.merge(ours)


def _arbitrary(fdp: atheris.FuzzedDataProvider, h: int, w: int) -> None:
    # Hostile polygons and boxes: NaN, inf, huge, odd lengths, wrong types.
    values = [
        fdp.ConsumeRegularFloat() if fdp.ConsumeBool() else fdp.ConsumeFloat()
        for _ in range(fdp.ConsumeIntInRange(0, 9))
    ]
    obj = [values, values[: fdp.ConsumeIntInRange(0, len(values))]] if fdp.ConsumeBool() else values
    fr_py_objects(obj, h, w)


def _ops(fdp: atheris.FuzzedDataProvider, h: int, w: int) -> None:
    counts = torch.tensor(fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 8), -3, 40), dtype=torch.int64)
    offsets = torch.tensor(fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 4), -2, 10), dtype=torch.int64)
    op = fdp.ConsumeIntInRange(0, 3)
    ops = torch.ops.vlkernels
    if op == 0:
        ops.rle_counts_decode(counts, offsets, h, w)
    elif op == 1:
        ops.rle_counts_area(counts, offsets)
    elif op == 2:
        ops.rle_counts_bbox(counts, offsets, h, w)
    else:
        crowd = torch.zeros(max(offsets.numel() - 1, 0), dtype=torch.uint8)
        ops.rle_counts_iou(counts, offsets, counts, offsets, h, w, crowd)


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    target = fdp.ConsumeIntInRange(0, 3)
    h, w = fdp.ConsumeIntInRange(0, 24), fdp.ConsumeIntInRange(0, 24)
    try:
        [_parse_and_compare, _polygons, _arbitrary, _ops][target](fdp, h, w)
    except EXPECTED:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
