"""COCO RLE and dense mask IoU against pycocotools itself (bit-exact)."""

import numpy as np
import pytest
import torch
from pycocotools import mask as coco_mask

from vlkernels.boxes.reference import mask_iou_ref
from vlkernels.ops import mask_iou, rle_area, rle_decode, rle_encode, rle_iou, rle_to_bbox


def blobs(n, h, w, seed=0, empty_every=7):
    """Random rectangles and ellipses (COCO-like objects), plus empty, full and noisy masks."""
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.zeros((n, h, w), dtype=np.uint8)
    for k in range(n):
        if k % empty_every == 0:
            continue
        cy, cx = g.uniform(0, h), g.uniform(0, w)
        ry, rx = g.uniform(0.5, max(h / 2, 0.6)), g.uniform(0.5, max(w / 2, 0.6))
        if k % 3 == 0:
            out[k] = (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)
        elif k % 3 == 1:
            out[k] = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        else:
            out[k] = g.random((h, w)) < 0.3
    if n > 2:
        out[1] = 1
    return out


def coco_encode(masks: np.ndarray):
    return coco_mask.encode(np.asfortranarray(masks.transpose(1, 2, 0)))


@pytest.mark.parametrize("hw", [(1, 1), (1, 37), (37, 1), (23, 41), (64, 48)])
def test_rle_encode_decode_area_bbox_match_pycocotools(hw):
    masks = blobs(15, *hw, seed=hw[0])
    ours = rle_encode(torch.from_numpy(masks))
    ref = coco_encode(masks)
    assert ours == ref  # sizes and compressed strings, byte for byte
    assert rle_encode(torch.from_numpy(masks[3]).bool()) == ref[3]
    np.testing.assert_array_equal(rle_decode(ref).numpy(), coco_mask.decode(ref).transpose(2, 0, 1))
    np.testing.assert_array_equal(rle_decode(ref[4]).numpy(), coco_mask.decode(ref[4]))
    np.testing.assert_array_equal(rle_area(ref).numpy(), coco_mask.area(ref).astype(np.int64))
    np.testing.assert_array_equal(rle_to_bbox(ref).numpy(), coco_mask.toBbox(ref))
    assert rle_area(ref[5]).dim() == 0 and rle_to_bbox(ref[5]).shape == (4,)


def test_rle_encode_noncontiguous_and_str_counts():
    masks = torch.from_numpy(blobs(6, 40, 30, seed=3))
    view = masks.transpose(1, 2)  # (6, 30, 40), not contiguous
    assert rle_encode(view) == coco_encode(view.contiguous().numpy())
    ref = coco_encode(masks.numpy())
    as_str = [{"size": r["size"], "counts": r["counts"].decode()} for r in ref]
    np.testing.assert_array_equal(rle_decode(as_str).numpy(), masks.numpy())


def test_rle_uncompressed_counts_match_frpyobjects():
    masks = blobs(5, 20, 17, seed=4)
    runs = []
    for m in masks:
        flat = m.T.reshape(-1)  # column-major
        change = np.flatnonzero(np.diff(np.concatenate([[0], flat, [2]])))
        runs.append({"size": [20, 17], "counts": np.diff(np.concatenate([[0], change])).tolist()})
    runs[0]["counts"] = [20 * 17]  # all background
    compressed = coco_mask.frPyObjects(runs, 20, 17)
    np.testing.assert_array_equal(rle_area(runs).numpy(), coco_mask.area(compressed).astype(np.int64))
    np.testing.assert_array_equal(rle_to_bbox(runs).numpy(), coco_mask.toBbox(compressed))
    mixed = [runs[0], compressed[1], runs[2], compressed[3], runs[4]]
    np.testing.assert_array_equal(rle_iou(mixed, compressed).numpy(), coco_mask.iou(compressed, compressed, [0] * 5))


@pytest.mark.parametrize("crowd_every", [0, 2, 3])
def test_rle_iou_bit_identical_to_pycocotools(crowd_every):
    dt = coco_encode(blobs(37, 48, 64, seed=5))
    gt = coco_encode(blobs(23, 48, 64, seed=6, empty_every=5))
    iscrowd = [int(crowd_every > 0 and k % crowd_every == 0) for k in range(len(gt))]
    ours = rle_iou(dt, gt, iscrowd)
    ref = coco_mask.iou(dt, gt, iscrowd)
    assert ours.dtype == torch.float64 and ours.shape == (37, 23)
    np.testing.assert_array_equal(ours.numpy(), ref)
    # Two empty masks -> 0, as pycocotools.
    assert ours[0, 0] == 0 and ref[0, 0] == 0


def test_rle_iou_multi_piece_columns_and_wrapping_runs():
    # Horizontal stripes give 1..6 foreground pieces per column (the column-plane path up to 4, the interval merge
    # beyond), shifted boxes and full columns give runs that wrap from one column into the next.
    h, w = 48, 40
    masks = []
    for period in (48, 24, 16, 12, 10, 8):
        for shift in (0, 3):
            m = np.zeros((h, w), dtype=np.uint8)
            m[(np.arange(h) + shift) % period < period // 2, 5 + shift : 30 + shift] = 1
            masks.append(m)
    full_cols = np.zeros((h, w), dtype=np.uint8)
    full_cols[:, 10:20] = 1
    full_cols[40:, 20] = 1
    full_cols[:5, 21] = 1
    masks.append(full_cols)
    masks = np.stack(masks)
    rles = coco_encode(masks)
    crowd = [k % 3 == 0 for k in range(len(rles))]
    np.testing.assert_array_equal(rle_iou(rles, rles, crowd).numpy(), coco_mask.iou(rles, rles, crowd))


def test_coco_box_iou_bit_identical_to_pycocotools():
    g = np.random.default_rng(7)
    dt = np.concatenate([g.uniform(0, 50, (41, 2)), g.uniform(0, 30, (41, 2))], 1)
    gt = np.concatenate([g.uniform(0, 50, (19, 2)), g.uniform(0, 30, (19, 2))], 1)
    gt[0] = dt[0]
    gt[1] = [dt[1, 0] + dt[1, 2], dt[1, 1], 5, 5]  # touching
    gt[2, 2:] = 0  # zero-area
    crowd = (np.arange(19) % 4 == 0).astype(np.uint8)
    ref = coco_mask.iou(dt, gt, crowd)
    np.testing.assert_array_equal(rle_iou(dt, gt, crowd).numpy(), ref)
    np.testing.assert_array_equal(rle_iou(torch.from_numpy(dt), gt.tolist(), torch.from_numpy(crowd)).numpy(), ref)


def test_rle_iou_empty_inputs():
    gt = coco_encode(blobs(3, 8, 8))
    assert rle_iou([], gt, [0, 0, 0]).shape == (0, 3)
    assert rle_iou(gt, []).shape == (3, 0)
    assert rle_decode([]).shape == (0, 0, 0)
    assert rle_area([]).shape == (0,)


@pytest.mark.parametrize(
    "counts, match",
    [
        (b"1" * 3 + b"\x7f", "invalid character"),
        (b"0" + b"p", "invalid character"),
        (b"0P", "truncated"),  # continuation bit set on the last character: must not read past the end
        (b"1PPPPPPPP1", "longer than 7"),
        (b"52", "runs sum to"),
        (b"0:1", "runs sum to"),
        (b"@5", "decodes to"),  # a negative first run
    ],
)
def test_rle_malformed_strings_raise(counts, match):
    rle = {"size": [2, 5], "counts": counts}
    for fn in (rle_decode, rle_area, rle_to_bbox):
        with pytest.raises(ValueError, match=match):
            fn([rle])
    with pytest.raises(ValueError, match=match):
        rle_iou([rle], [rle])


def test_rle_validation_errors():
    a = coco_encode(blobs(2, 4, 5))
    b = coco_encode(blobs(2, 5, 4))
    with pytest.raises(ValueError, match="masks must match"):
        rle_iou(a, b)
    with pytest.raises(ValueError, match="share one size"):
        rle_decode([a[0], b[0]])
    with pytest.raises(ValueError, match="iscrowd"):
        rle_iou(a, a, [0])
    with pytest.raises(ValueError, match="both be RLE lists"):
        rle_iou(a, np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        rle_iou(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        rle_iou(np.full((1, 4), np.nan), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="'size' and 'counts'"):
        rle_area([{"counts": b"0"}])
    with pytest.raises(ValueError, match=r"\[height, width\]"):
        rle_area([{"size": [3], "counts": b"3"}])
    with pytest.raises(ValueError, match="non-negative"):
        rle_area([{"size": [-1, 3], "counts": b"3"}])
    with pytest.raises(ValueError, match="run lengths"):
        rle_area([{"size": [1, 3], "counts": [1, -1, 3]}])
    with pytest.raises(ValueError, match="runs sum to"):
        rle_area([{"size": [1, 3], "counts": [1, 1]}])
    with pytest.raises(ValueError, match="list of RLE dicts"):
        rle_iou(a[0], a)
    with pytest.raises(ValueError, match="dtype"):
        rle_encode(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="dimensions"):
        rle_encode(torch.zeros(2, 3, 4, 5, dtype=torch.bool))


@pytest.mark.parametrize("shape", [(5, 7, 9), (1, 64, 64), (37, 13, 11), (3, 33, 65)])
def test_mask_iou_matches_pycocotools_and_torch(shape):
    n, h, w = shape
    a = blobs(n, h, w, seed=8)
    b = blobs(n + 4, h, w, seed=9)
    ours = mask_iou(torch.from_numpy(a), torch.from_numpy(b).bool())
    ref = coco_mask.iou(coco_encode(a), coco_encode(b), [0] * (n + 4))
    np.testing.assert_array_equal(ours.numpy(), ref)
    torch.testing.assert_close(ours, mask_iou_ref(torch.from_numpy(a), torch.from_numpy(b)), rtol=1e-15, atol=0)


def test_mask_iou_batched_aligned_noncontiguous_empty():
    a = torch.from_numpy(blobs(24, 20, 30, seed=10)).reshape(2, 3, 4, 20, 30)
    b = torch.from_numpy(blobs(24, 20, 30, seed=11)).reshape(2, 3, 4, 20, 30)
    torch.testing.assert_close(mask_iou(a, b), mask_iou_ref(a, b), rtol=1e-15, atol=0)
    torch.testing.assert_close(mask_iou(a, b, aligned=True), mask_iou_ref(a, b, aligned=True), rtol=1e-15, atol=0)
    nc = a.transpose(-1, -2)
    torch.testing.assert_close(mask_iou(nc, nc[..., :2, :, :]), mask_iou_ref(nc, nc[..., :2, :, :]))
    assert mask_iou(a[..., :0, :, :], b).shape == (2, 3, 0, 4)
    assert mask_iou(a[..., :0, :], b[..., :0, :]).abs().sum() == 0  # zero-pixel masks: empty unions -> 0


def test_mask_iou_validation_errors():
    a = torch.zeros(2, 4, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask size"):
        mask_iou(a, torch.zeros(2, 5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="dtype"):
        mask_iou(a.float(), a)
    with pytest.raises(ValueError, match="at least 3"):
        mask_iou(a[0], a)
    with pytest.raises(ValueError, match="batch dims"):
        mask_iou(a[None].expand(2, 2, 4, 5), a[None].expand(3, 2, 4, 5))
    with pytest.raises(ValueError, match="aligned"):
        mask_iou(a, a[:1], aligned=True)


def test_mask_iou_custom_op_registration():
    a = torch.from_numpy(blobs(3, 9, 7, seed=12)).reshape(1, 3, 63)
    b = torch.from_numpy(blobs(2, 9, 7, seed=13)).reshape(1, 2, 63)
    torch.library.opcheck(torch.ops.vlkernels.mask_iou.default, (a, b, False))


@pytest.mark.parametrize("hw", [(1, 1), (1, 130), (130, 1), (63, 65), (64, 64), (37, 129), (5, 200)])
def test_rle_encode_every_layout_matches_pycocotools(hw):
    # The SIMD encoder reads column-contiguous (Fortran / pycocotools' layout) and row-contiguous (torch C order)
    # masks in place; other strides take the generic scan. Values other than 0/1 count as foreground.
    masks = blobs(12, *hw, seed=hw[0] * 7 + hw[1])
    masks[2] *= 200
    ref = coco_encode(masks.astype(bool).astype(np.uint8))
    nhw = torch.from_numpy(masks)
    fortran = torch.from_numpy(np.asfortranarray(masks.transpose(1, 2, 0))).permute(2, 0, 1)
    wide = torch.zeros(12, hw[0], hw[1] + 3, dtype=torch.uint8)
    wide[:, :, 1:-2] = nhw
    strided = torch.zeros(12, 2 * hw[0], 2 * hw[1], dtype=torch.uint8)
    strided[:, ::2, ::2] = nhw
    layouts = {
        "nhw": nhw,
        "nhw_bool": nhw.bool(),
        "fortran": fortran,
        "fortran_bool": fortran.bool(),
        "row_padded": wide[:, :, 1:-2],
        "strided": strided[:, ::2, ::2],
    }
    for name, m in layouts.items():
        assert rle_encode(m) == ref, name
        assert rle_encode(m, compress=False).to_coco() == ref, name


def test_rle_str_counts_must_be_ascii():
    # pycocotools encodes str counts as UTF-8; no valid COCO string has a non-ASCII character, so "é" is refused
    # by name instead of being decoded as some mask.
    for counts in ("é", "1é2", "1\u200b3"):
        with pytest.raises(ValueError, match="non-ASCII character"):
            rle_decode({"size": [2, 2], "counts": counts})
        with pytest.raises(ValueError, match="non-ASCII character"):
            rle_area([{"size": [2, 2], "counts": "13"}, {"size": [2, 2], "counts": counts}])


@pytest.mark.parametrize(
    "module",
    [
        "vlkernels.boxes.rle",
        "vlkernels.boxes.rle_counts",
        "vlkernels.boxes.rle_dicts",
        "vlkernels.boxes.mask_api",
        "vlkernels.boxes.masks",
        "vlkernels.boxes.coco_mask",
        "vlkernels.boxes.iou",
        "vlkernels.boxes",
    ],
)
def test_boxes_modules_import_first_in_a_fresh_subprocess(module):
    # No import cycle: each module imports as the first thing of vlkernels a new process loads (a fork server's child:
    # torch imported, vlkernels not, as the child checks).
    from forked import run_forked

    code = (
        "import sys\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'vlkernels']\n"
        "assert not loaded, f'the child had imported {loaded} already'\n"
        f"import {module}\n"
    )
    err = run_forked(code)
    assert err is None, f"import {module} first: {err[-2000:]}"


def test_boxes_module_level_imports_are_acyclic():
    # Importing any module first still runs vlkernels/__init__ (which imports the whole family), so the subprocess
    # test above cannot see a cycle the package order hides: check the module-level import graph itself.
    import ast
    from pathlib import Path

    pkg = Path(__file__).resolve().parent.parent / "vlkernels" / "boxes"
    names = {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for name in names:
        deps = set()
        for node in ast.parse((pkg / f"{name}.py").read_text()).body:  # module level only: lazy imports are fine
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "vlkernels.boxes":
                    deps |= {a.name for a in node.names if a.name in names}
                elif node.module.startswith("vlkernels.boxes."):
                    deps.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names if a.name.startswith("vlkernels.boxes.")}
        graph[name] = deps & names
    assert graph["rle"] and "rle_counts" in graph["rle"]  # the graph is really read

    state = {}

    def visit(n, path):
        if state.get(n) == "done":
            return
        assert state.get(n) != "active", f"import cycle: {' -> '.join([*path, n])}"
        state[n] = "active"
        for d in sorted(graph[n]):
            visit(d, [*path, n])
        state[n] = "done"

    for n in sorted(graph):
        visit(n, [])
