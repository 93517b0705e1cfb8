"""`vlkernels retrieval`: exact retrieval metrics from embedding files.

GT.json is one of:
  {"text_to_image": [3, 3, 3, 3, 3, 0, ...]}            image index of each text (row order of --texts);
                                                          image-to-text positives are each image's texts
  {"t2i": {"17": [3, 8]}, "i2t": {"3": [17, 15, 16]}}     general positives: query index -> gallery indices; only
                                                          the listed queries are evaluated (one of t2i/i2t may be
                                                          left out: it is then the transpose of the other)
Indices are 0-based rows of the embedding files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _positives(spec: dict, nq: int, ng: int, name: str):
    from vlkernels.retrieval.positives import Positives

    if not isinstance(spec, dict):
        raise ValueError(f"GT '{name}' must map query index -> list of gallery indices")
    qs, gs, queries = [], [], []
    for q, items in spec.items():
        queries.append(int(q))
        for g in items:
            qs.append(int(q))
            gs.append(int(g))
    return Positives.from_pairs(np.array(qs, dtype=np.int64), np.array(gs, dtype=np.int64), nq, ng, queries=queries)


def read_gt(path: Path, n_img: int, n_txt: int) -> dict:
    """Parse GT.json into evaluate() keyword arguments."""
    try:
        gt = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read ground truth {path}: {e}") from e
    if not isinstance(gt, dict):
        raise ValueError(f"{path}: expected a JSON object with 'text_to_image' or 't2i'/'i2t'")
    if "text_to_image" in gt:
        return {"text_to_image": np.asarray(gt["text_to_image"], dtype=np.int64)}
    if "t2i" not in gt and "i2t" not in gt:
        raise ValueError(f"{path}: expected key 'text_to_image', or 't2i' and/or 'i2t'")
    out = {}
    if "t2i" in gt:
        out["t2i"] = _positives(gt["t2i"], n_txt, n_img, "t2i")
    if "i2t" in gt:
        out["i2t"] = _positives(gt["i2t"], n_img, n_txt, "i2t")
    return out


def cmd_retrieval(args: argparse.Namespace) -> int:
    from vlkernels.retrieval.io import Embeddings
    from vlkernels.retrieval.ops import evaluate

    try:
        images = Embeddings(args.images, "images", args.images_key)
        texts = Embeddings(args.texts, "texts", args.texts_key)
        gt = read_gt(args.gt, len(images), len(texts))
        res = evaluate(
            images,
            texts,
            ks=args.k,
            progress=args.progress,
            backend=args.backend,
            device_chunk=args.device_chunk,
            **gt,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"images {images.shape[0]} x texts {texts.shape[0]}, D={images.shape[1]}")
    print(res.table())
    if args.json is not None:
        args.json.write_text(json.dumps(dict(res), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "retrieval",
        help="exact image-text retrieval metrics (R@K, MeanR, MedianR, MRR, mAP, mAP@R, R-Precision, NDCG)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--images", type=Path, required=True, help="image embeddings (N_img, D): .npy or .safetensors")
    p.add_argument("--texts", type=Path, required=True, help="text embeddings (N_txt, D): .npy or .safetensors")
    p.add_argument("--gt", type=Path, required=True, help="ground truth JSON (format above)")
    p.add_argument("--k", type=int, nargs="+", default=[1, 5, 10], help="K of R@K (default 1 5 10)")
    p.add_argument("--json", type=Path, default=None, help="write the metrics as JSON to this file")
    p.add_argument("--images-key", default=None, help="tensor name in a multi-tensor .safetensors file")
    p.add_argument("--texts-key", default=None, help="tensor name in a multi-tensor .safetensors file")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.add_argument(
        "--backend",
        choices=("auto", "cpu", "triton"),
        default="auto",
        help="auto: C++ on CPU (files live on the host); triton: stream the files to the current CUDA device",
    )
    p.add_argument(
        "--device-chunk", type=int, default=1 << 16, help="rows per chunk streamed to the device (triton backend)"
    )
    p.set_defaults(func=cmd_retrieval)
