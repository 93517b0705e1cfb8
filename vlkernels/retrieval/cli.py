"""`vlkernels retrieval`: exact retrieval metrics from embedding files.

GT.json is one of:
  {"text_to_image": [3, 3, 3, 3, 3, 0, ...]}            image index of each text (row order of --texts);
                                                          image-to-text positives are each image's texts
  {"t2i": {"17": [3, 8]}, "i2t": {"3": [17, 15, 16]}}     general positives: query index -> gallery indices; only
                                                          the listed queries are evaluated. One of t2i/i2t may be
                                                          left out: it is then the transpose of the other, with
                                                          every query evaluated (see --empty)
Indices are 0-based rows of the embedding files, JSON integers (a float such as 2.0 or 0.5 is refused).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from vlkernels._cli_io import add_family_parser, write_json


def _int(v, where: str) -> int:
    """A JSON integer (bools and floats refused: 0.5 must not become 0)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where} must be an integer index, got {json.dumps(v)[:60]}")
    return v


def _positives(spec, nq: int, ng: int, name: str, path: Path):
    from vlkernels.retrieval.positives import Positives

    if not isinstance(spec, dict):
        raise ValueError(f"{path}: '{name}' must map query index -> list of gallery indices, got {type(spec).__name__}")
    qs, gs, queries = [], [], []
    for key, items in spec.items():
        try:
            q = int(key)
        except ValueError:
            raise ValueError(f"{path}: '{name}' key {key!r} is not an integer query index") from None
        if not isinstance(items, list):
            raise ValueError(f"{path}: '{name}'[{key!r}] must be a list of gallery indices, got {type(items).__name__}")
        queries.append(q)
        for j, g in enumerate(items):
            qs.append(q)
            gs.append(_int(g, f"{path}: '{name}'[{key!r}][{j}]"))
    pairs = (np.array(qs, dtype=np.int64), np.array(gs, dtype=np.int64))
    try:
        return Positives.from_pairs(*pairs, nq, ng, queries=queries, allow_empty=True)
    except ValueError as e:
        raise ValueError(f"{path}: '{name}': {e}") from None


def read_gt(path: Path, n_img: int, n_txt: int) -> dict:
    """Parse GT.json into evaluate() keyword arguments; errors name the file and the key."""
    try:
        gt = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read ground truth {path}: {e}") from e
    except RecursionError:
        raise ValueError(f"cannot read ground truth {path}: JSON nested too deeply") from None
    if not isinstance(gt, dict):
        raise ValueError(f"{path}: expected a JSON object with 'text_to_image' or 't2i'/'i2t'")
    if "text_to_image" in gt:
        labels = gt["text_to_image"]
        if not isinstance(labels, list):
            raise ValueError(f"{path}: 'text_to_image' must be a list of image indices, got {type(labels).__name__}")
        return {"text_to_image": np.array([_int(v, f"{path}: text_to_image[{i}]") for i, v in enumerate(labels)])}
    if "t2i" not in gt and "i2t" not in gt:
        raise ValueError(f"{path}: expected key 'text_to_image', or 't2i' and/or 'i2t'")
    out = {}
    if "t2i" in gt:
        out["t2i"] = _positives(gt["t2i"], n_txt, n_img, "t2i", path)
    if "i2t" in gt:
        out["i2t"] = _positives(gt["i2t"], n_img, n_txt, "i2t", path)
    return out


def _check_output(path: Path | None) -> None:
    """Refuse an unwritable --json target before hours of computing, not after."""
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"--json {path} is a directory; give a file path")
    if not parent.is_dir():
        raise ValueError(f"--json {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--json {path}: not writable")


def cmd_retrieval(args: argparse.Namespace) -> int:
    from vlkernels.retrieval.functional import evaluate
    from vlkernels.retrieval.io import Embeddings

    try:
        _check_output(args.json)
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
            top_k=args.top_k,
            empty=args.empty,
            **gt,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"images {images.shape[0]} x texts {texts.shape[0]}, D={images.shape[1]}")
    print(res.table())
    return 0 if args.json is None else write_json(args.json, dict(res))


def register(subparsers) -> None:
    summary = "exact image-text retrieval metrics (R@K, MeanR, MedianR, MRR, mAP, mAP@R, R-Precision, NDCG)"
    p = add_family_parser(subparsers, "retrieval", summary, __doc__)
    p.add_argument("--images", type=Path, required=True, help="image embeddings (N_img, D): .npy or .safetensors")
    p.add_argument("--texts", type=Path, required=True, help="text embeddings (N_txt, D): .npy or .safetensors")
    p.add_argument("--gt", type=Path, required=True, help="ground truth JSON (format above)")
    p.add_argument("--k", type=int, nargs="+", default=[1, 5, 10], help="K of R@K (default 1 5 10)")
    p.add_argument("--json", type=Path, default=None, help="write the metrics as JSON to this file")
    p.add_argument("--top-k", type=int, default=None, help="cut MRR, mAP, R-Precision and NDCG at rank k")
    p.add_argument(
        "--empty",
        choices=("error", "skip", "zero", "one"),
        default="error",
        help="queries without a positive: error (default), skip them, or score them 0 / 1",
    )
    p.add_argument("--images-key", default=None, help="tensor name in a multi-tensor .safetensors file")
    p.add_argument("--texts-key", default=None, help="tensor name in a multi-tensor .safetensors file")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.add_argument(
        "--backend",
        choices=("auto", "cpu", "triton", "torch"),
        default="auto",
        help="auto: C++ on CPU (files live on the host); triton: stream the files to the current CUDA device; "
        "torch: the chunked torch path",
    )
    p.add_argument(
        "--device-chunk", type=int, default=1 << 16, help="rows per chunk streamed to the device (triton backend)"
    )
    p.set_defaults(func=cmd_retrieval)
