"""Reproducible COCO-val2017-shaped and LVIS-shaped detection data (tests and benchmarks).

COCO val2017: 5,000 images, ~36,800 objects over 80 categories (Zipf-like category frequencies, ~7.4 objects per
image), sizes ~41% small / 34% medium / 25% large, ~1% crowd. Each object is an axis-aligned ellipse inscribed in
its box (mask as RLE: the pixels whose centres fall inside; ``area`` is the mask's pixel count). Detections: 1-3
jittered copies of each ground truth (category mostly kept) plus false positives, 100 per image, scores rounded to
3 decimals so that ties occur. LVIS shape: 1,203 categories with r/c/f frequencies, ``neg_category_ids`` and
``not_exhaustive_category_ids`` per image, 300 detections per image.
"""

from __future__ import annotations

import numpy as np

from vlkernels.boxes.rle_counts import RleCounts

_SIZES = [(480, 640), (427, 640), (640, 480), (640, 427), (375, 500), (512, 640)]


def _ellipse_runs(box: np.ndarray, h: int, w: int) -> np.ndarray:
    """Column-major RLE runs of the ellipse inscribed in the xywh box, pixel centres inside (canonical runs)."""
    x, y, bw, bh = box
    cx, cy, rx, ry = x + bw / 2, y + bh / 2, max(bw / 2, 1e-9), max(bh / 2, 1e-9)
    cols = np.arange(max(int(np.floor(x)), 0), min(int(np.ceil(x + bw)), w))
    dx = (cols + 0.5 - cx) / rx
    s = np.sqrt(np.clip(1 - dx * dx, 0, None)) * ry
    inside = np.abs(dx) <= 1
    y0 = np.maximum(np.ceil(cy - s - 0.5), 0).astype(np.int64)
    y1 = np.minimum(np.floor(cy + s - 0.5), h - 1).astype(np.int64)
    ok = inside & (y1 >= y0)
    cols, y0, y1 = cols[ok], y0[ok], y1[ok]
    starts, ends = cols * h + y0, cols * h + y1 + 1
    if starts.size == 0:
        return np.array([h * w], dtype=np.int64)
    # Merge intervals that touch across a column boundary (a run must not be followed by a zero-length one).
    touch = ends[:-1] == starts[1:]
    keep_s = np.r_[True, ~touch]
    keep_e = np.r_[~touch, True]
    b = np.empty(2 * int(keep_s.sum()), dtype=np.int64)
    b[0::2], b[1::2] = starts[keep_s], ends[keep_e]
    return np.diff(np.r_[0, b, h * w])


def _boxes_of(n: int, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """COCO's size mix: areas log-uniform inside small / medium / large, aspect ratios log-normal."""
    cls = rng.choice(3, size=n, p=[0.41, 0.34, 0.25])
    lo = np.array([16.0, 1024.0, 9216.0])[cls]
    hi = np.array([1024.0, 9216.0, 0.5 * h * w])[cls]
    area = np.exp(rng.uniform(np.log(lo), np.log(hi)))
    ar = np.exp(rng.normal(0, 0.5, n))
    bw = np.clip(np.sqrt(area * ar), 2, w - 1)
    bh = np.clip(area / bw, 2, h - 1)
    x = rng.uniform(0, w - bw)
    y = rng.uniform(0, h - bh)
    return np.stack([x, y, bw, bh], 1)


def _rle_strings(runs: list[np.ndarray], h: int, w: int) -> list[dict]:
    counts = np.concatenate(runs)
    offsets = np.r_[0, np.cumsum([r.size for r in runs])]
    import torch

    rc = RleCounts._trusted(torch.from_numpy(counts), torch.from_numpy(offsets.astype(np.int64)), (h, w))
    return rc.to_coco()


def detection_data(
    n_images: int = 5000,
    n_cats: int = 80,
    objects_per_image: float = 7.36,
    dets_per_image: int = 100,
    masks: bool = False,
    lvis: bool = False,
    seed: int = 0,
) -> tuple[dict, list[dict]]:
    """A ground-truth dataset dict and a results list (COCO format).

    Args:
        masks: give every annotation and detection an RLE ``segmentation`` (the ellipse mask); otherwise the
            ground-truth ``area`` is the ellipse's analytic area and detections carry boxes only.
        lvis: LVIS fields (category ``frequency``, per-image ``neg_category_ids`` / ``not_exhaustive_category_ids``,
            no ``iscrowd``).
    """
    rng = np.random.default_rng(seed)
    cat_ids = np.sort(rng.choice(np.arange(1, 3 * n_cats), size=n_cats, replace=False))
    pop = 1.0 / np.arange(1, n_cats + 1) ** 0.9
    pop = rng.permutation(pop / pop.sum())
    categories = [{"id": int(c), "name": f"c{c}"} for c in cat_ids]
    if lvis:
        for c, p in zip(categories, pop):
            rank = p * n_cats
            c["frequency"] = "f" if rank > 1.5 else ("c" if rank > 0.4 else "r")
    images, anns, results = [], [], []
    ann_id = 1
    for i in range(n_images):
        img_id = 1000 + 3 * i
        h, w = _SIZES[rng.integers(len(_SIZES))]
        n_obj = int(rng.geometric(1 / (objects_per_image + 1))) - 1
        img_cats = rng.choice(cat_ids, size=min(3, n_cats), p=pop, replace=False)
        cats = rng.choice(img_cats, size=n_obj)
        boxes = _boxes_of(n_obj, h, w, rng)
        crowd = (rng.random(n_obj) < 0.01).astype(int) if not lvis else np.zeros(n_obj, dtype=int)
        runs = [_ellipse_runs(b, h, w) for b in boxes] if masks else []
        gt_area = [int(r[1::2].sum()) for r in runs] if masks else (np.pi / 4 * boxes[:, 2] * boxes[:, 3]).round(2)
        segs = _rle_strings(runs, h, w) if masks and runs else []
        img = {"id": img_id, "height": h, "width": w}
        if lvis:
            present = set(cats.tolist())
            others = [int(c) for c in rng.choice(cat_ids, size=6, replace=False) if c not in present]
            img["neg_category_ids"] = others[:4]
            img["not_exhaustive_category_ids"] = [int(c) for c in list(present)[:1]] if rng.random() < 0.3 else []
        images.append(img)
        for j in range(n_obj):
            a = {
                "id": ann_id,
                "image_id": img_id,
                "category_id": int(cats[j]),
                "bbox": [round(float(v), 2) for v in boxes[j]],
                "area": float(gt_area[j]),
            }
            if not lvis:
                a["iscrowd"] = int(crowd[j])
            if masks:
                seg = segs[j]
                a["segmentation"] = {"size": seg["size"], "counts": seg["counts"].decode()}
            anns.append(a)
            ann_id += 1
        # Detections: jittered copies of the objects, then false positives up to dets_per_image.
        dboxes, dcats, dscores = [], [], []
        for j in range(n_obj):
            for _ in range(int(rng.integers(1, 4))):
                b = boxes[j].copy()
                b[:2] += rng.normal(0, 0.08, 2) * b[2:]
                b[2:] *= np.exp(rng.normal(0, 0.12, 2))
                dboxes.append(b)
                dcats.append(int(cats[j]) if rng.random() < 0.9 else int(rng.choice(cat_ids)))
                dscores.append(rng.uniform(0.3, 1.0))
        n_fp = max(dets_per_image - len(dboxes), 0)
        if n_fp:
            dboxes.extend(_boxes_of(n_fp, h, w, rng))
            pool = np.r_[img_cats, rng.choice(cat_ids, size=4)]
            dcats.extend(int(c) for c in rng.choice(pool, size=n_fp))
            dscores.extend(rng.uniform(0.0, 0.6, n_fp))
        dboxes = np.array(dboxes[:dets_per_image]).reshape(-1, 4)
        # Clip to the image (a detector's boxes lie inside it).
        x0 = np.clip(dboxes[:, 0], 0, w - 1)
        y0 = np.clip(dboxes[:, 1], 0, h - 1)
        dboxes[:, 2] = np.clip(dboxes[:, 0] + dboxes[:, 2], x0 + 1, w) - x0
        dboxes[:, 3] = np.clip(dboxes[:, 1] + dboxes[:, 3], y0 + 1, h) - y0
        dboxes[:, 0], dboxes[:, 1] = x0, y0
        dsegs = _rle_strings([_ellipse_runs(b, h, w) for b in dboxes], h, w) if masks and len(dboxes) else []
        for j in range(len(dboxes)):
            r = {
                "image_id": img_id,
                "category_id": dcats[j],
                "bbox": [round(float(v), 2) for v in dboxes[j]],
                "score": round(float(dscores[j]), 3),
            }
            if masks:
                r["segmentation"] = {"size": [h, w], "counts": dsegs[j]["counts"].decode()}
            results.append(r)
    gt = {"images": images, "annotations": anns, "categories": categories}
    return gt, results
