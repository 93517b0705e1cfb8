"""Boxes family: box IoU vs torchvision's formula in plain torch, COCO RLE IoU vs pycocotools, dense mask IoU vs
a torch reference. torchvision does not install beside this torch, so its ``box_iou`` runs here as the same torch
expression (``torchvision-formula``: the [N, M, 2] broadcast of ``_box_inter_union``)."""

import numpy as np
import torch

from vlkernels.boxes.reference import mask_iou_ref
from vlkernels.ops import RleCounts, box_iou, mask_iou, rle_encode, rle_iou

from .harness import Bench, register


def _random_boxes(n: int, g: torch.Generator) -> torch.Tensor:
    xy = torch.rand(n, 2, generator=g) * 600
    wh = torch.rand(n, 2, generator=g) * 200 + 1
    return torch.cat([xy, xy + wh], 1)


def _torchvision_box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    # torchvision.ops.box_iou, expression for expression (box_area, _box_inter_union, inter / union).
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union


@register("boxes", "box_iou", quick={"n": 1000, "m": 1000}, full={"n": 4000, "m": 4000})
def _box_iou(n: int, m: int, device: str) -> Bench:
    g = torch.Generator().manual_seed(0)
    a, b = _random_boxes(n, g).to(device), _random_boxes(m, g).to(device)

    def check(out):
        torch.testing.assert_close(out["vlkernels"], out["torchvision-formula"], rtol=1e-6, atol=1e-7)

    return Bench(
        providers={"vlkernels": lambda: box_iou(a, b), "torchvision-formula": lambda: _torchvision_box_iou(a, b)},
        baseline="torchvision-formula",
        check=check,
        # Inputs plus the N x M fp32 output: the memory traffic floor.
        bytes=(n + m) * 16 + n * m * 4,
        notes="fp32 xyxy pairwise IoU; torchvision-formula = torchvision.ops.box_iou's torch code",
    )


def _coco_rles(n: int, h: int, w: int, seed: int) -> list:
    """COCO-like instance masks: random convex 24-gons (object radii 8..200 px) rasterized by pycocotools."""
    from pycocotools import mask as coco_mask

    g = np.random.default_rng(seed)
    t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    polys = []
    for _ in range(n):
        cx, cy = g.uniform(0, w), g.uniform(0, h)
        rx, ry = np.exp(g.uniform(np.log(8), np.log(200), 2))
        jitter = g.uniform(0.8, 1.0, 24)
        xs = np.clip(cx + rx * jitter * np.cos(t), 0, w - 1)
        ys = np.clip(cy + ry * jitter * np.sin(t), 0, h - 1)
        polys.append(np.stack([xs, ys], 1).reshape(-1).tolist())
    return coco_mask.frPyObjects(polys, h, w)


# The RLE IoU cases, on the CPU and on the GPU, time the same N x M pairs of COCO-like masks.
_RLE_SIZES = {"quick": {"n": 300, "m": 300, "h": 480, "w": 640}, "full": {"n": 1000, "m": 1000, "h": 480, "w": 640}}


def _rle_bench(n: int, m: int, h: int, w: int, device: str, strings: bool, notes: str) -> Bench:
    """N x M RLE IoU of COCO-like masks against pycocotools, bit-identical: RleCounts on ``device``
    (``vlkernels-counts``), and with ``strings`` also the compressed strings themselves (``vlkernels``)."""
    from pycocotools import mask as coco_mask

    dt, gt = _coco_rles(n, h, w, 1), _coco_rles(m, h, w, 2)
    crowd = [0] * m
    dc, gc = RleCounts.from_coco(dt, device=device), RleCounts.from_coco(gt, device=device)
    providers = {"vlkernels": lambda: rle_iou(dt, gt, crowd)} if strings else {}
    providers["vlkernels-counts"] = lambda: rle_iou(dc, gc, crowd)
    providers["pycocotools"] = lambda: coco_mask.iou(dt, gt, crowd)
    return Bench(providers=providers, baseline="pycocotools", check=_check_bit_identical, notes=notes)


def _check_bit_identical(out):
    ref = out["pycocotools"]
    for name, value in out.items():
        if name != "pycocotools" and not np.array_equal(value.cpu().numpy(), ref):
            raise AssertionError(
                f"{name} RLE IoU differs from pycocotools in {int((value.cpu().numpy() != ref).sum())}"
            )


@register("boxes", "rle_iou", **_RLE_SIZES, devices=("cpu",))
def _rle_iou(n: int, m: int, h: int, w: int, device: str) -> Bench:
    notes = (
        "vlkernels: compressed-string RLEs in (string decoding included), column-plane C++ kernel; "
        "vlkernels-counts: RleCounts in, C++ twin of the CUDA per-pair kernel; float64 IoU out; check: bit-identical"
    )
    return _rle_bench(n, m, h, w, device, strings=True, notes=notes)


@register("boxes", "rle_iou_counts", **_RLE_SIZES, devices=("cuda",))
def _rle_iou_counts(n: int, m: int, h: int, w: int, device: str) -> Bench:
    notes = "RleCounts on the GPU (warp per pair) vs pycocotools on the host CPU; check: bit-identical"
    return _rle_bench(n, m, h, w, device, strings=False, notes=notes)


# The layouts users hold. pycocotools encodes only (H, W, N) Fortran-order uint8; any other layout is converted for
# it inside its timing (np.asfortranarray of the transpose, a bool -> uint8 view). vlkernels reads all four in place
# (a Fortran array as the zero-copy torch view .permute(2, 0, 1)).
_ENCODE_LAYOUTS = {
    "rle_encode": ("nhw", torch.bool),
    "rle_encode_nhw_uint8": ("nhw", torch.uint8),
    "rle_encode_fortran_uint8": ("fortran", torch.uint8),
    "rle_encode_fortran_bool": ("fortran", torch.bool),
}


def _rle_encode_case(layout: str, dtype: torch.dtype):
    def case(n: int, h: int, w: int, device: str) -> Bench:
        from pycocotools import mask as coco_mask

        host = coco_mask.decode(_coco_rles(n, h, w, 5))  # (H, W, N) Fortran-order uint8
        np_dtype = np.bool_ if dtype == torch.bool else np.uint8
        if layout == "fortran":
            held = np.asfortranarray(host.astype(np_dtype))
            masks = torch.from_numpy(held).permute(2, 0, 1).to(device)

            def coco():
                return coco_mask.encode(held.view(np.uint8))
        else:
            masks = torch.from_numpy(np.ascontiguousarray(host.transpose(2, 0, 1))).to(dtype).to(device)

            def coco():
                return coco_mask.encode(np.asfortranarray(masks.cpu().numpy().view(np.uint8).transpose(1, 2, 0)))

        def check(out):
            if out["vlkernels"] != out["pycocotools"] or out["vlkernels-counts"].to_coco() != out["pycocotools"]:
                raise AssertionError("RLE encoding differs from pycocotools")

        kind = "Fortran (H, W, N) numpy" if layout == "fortran" else "(N, H, W) C-order torch"
        return Bench(
            providers={
                "vlkernels": lambda: rle_encode(masks),
                "vlkernels-counts": lambda: rle_encode(masks, compress=False),
                "pycocotools": coco,
            },
            baseline="pycocotools",
            check=check,
            bytes=n * h * w,
            notes=f"{kind} {str(dtype).replace('torch.', '')} masks -> compressed strings (vlkernels) or RleCounts "
            "(vlkernels-counts); pycocotools' timing includes converting to its (H, W, N) Fortran uint8 layout "
            + ("(a free bool -> uint8 view)" if layout == "fortran" else "(transpose copy)"),
        )

    return case


for _name, (_layout, _dtype) in _ENCODE_LAYOUTS.items():
    register("boxes", _name, quick={"n": 32, "h": 480, "w": 640}, full={"n": 100, "h": 480, "w": 640})(
        _rle_encode_case(_layout, _dtype)
    )


@register(
    "boxes",
    "coco_mask_encode",
    quick={"n": 32, "h": 480, "w": 640},
    full={"n": 120, "h": 480, "w": 640},
    devices=("cpu",),  # numpy arrays in, as pycocotools
)
def _coco_mask_encode(n: int, h: int, w: int, device: str) -> Bench:
    """The pycocotools.mask drop-in on pycocotools' own layout: the same (H, W, N) Fortran uint8 array handed to
    each module's encode, nothing converted by anyone."""
    from faster_coco_eval.core import mask as fce_mask
    from pycocotools import mask as coco_mask

    from vlkernels.boxes import coco_mask as vlk_mask

    held = coco_mask.decode(_coco_rles(n, h, w, 5))  # (H, W, N) Fortran-order uint8

    def check(out):
        for name in ("vlkernels", "faster_coco_eval"):
            if out[name] != out["pycocotools"]:
                raise AssertionError(f"{name}: encode differs from pycocotools")

    return Bench(
        providers={
            "vlkernels": lambda: vlk_mask.encode(held),
            "pycocotools": lambda: coco_mask.encode(held),
            "faster_coco_eval": lambda: fce_mask.encode(held),
        },
        baseline="pycocotools",
        check=check,
        bytes=n * h * w,
        notes="maskUtils.encode(a) with a = (H, W, N) Fortran uint8 numpy array, the same array for all three: "
        "vlkernels.boxes.coco_mask, pycocotools.mask, faster_coco_eval.core.mask; check: identical dicts",
    )


@register(
    "boxes",
    "mask_iou",
    quick={"n": 32, "m": 32, "h": 480, "w": 640},
    full={"n": 100, "m": 100, "h": 480, "w": 640},
)
def _mask_iou(n: int, m: int, h: int, w: int, device: str) -> Bench:
    # The inputs are decoded by vlkernels' own pycocotools-compatible codec: the anchor here is torch alone.
    from vlkernels.boxes import coco_mask

    a = torch.from_numpy(coco_mask.decode(_coco_rles(n, h, w, 3)).transpose(2, 0, 1).copy()).bool().to(device)
    b = torch.from_numpy(coco_mask.decode(_coco_rles(m, h, w, 4)).transpose(2, 0, 1).copy()).bool().to(device)

    def check(out):
        if not torch.equal(out["vlkernels"].cpu(), out["torch"].cpu()):
            raise AssertionError("mask IoU differs from the torch reference")

    return Bench(
        providers={"vlkernels": lambda: mask_iou(a, b), "torch": lambda: mask_iou_ref(a, b)},
        baseline="torch",
        check=check,
        bytes=(n + m) * h * w,
        notes="dense bool masks; torch = float64 matmul of flattened masks (mask_iou_ref)",
    )
