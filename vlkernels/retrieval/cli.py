"""`vlkernels retrieval`: exact retrieval metrics from embedding files.

GT.json is one of:
  {"text_to_image": [3, 3, 3, 3, 3, 0, ...]}            image index of each text (row order of --texts);
                                                          image-to-text positives are each image's texts
  {"t2i": {"17": [3, 8]}, "i2t": {"3": [17, 15, 16]}}     general positives: query index -> gallery indices; only
                                                          the listed queries are evaluated. One of t2i/i2t may be
                                                          left out: it is then the transpose of the other, with
                                                          every query evaluated (see --empty)
Indices are 0-based rows of the embedding files, JSON integers (a float such as 2.0 or 0.5 is refused).

On the host (the default backend) neither file is loaded whole: the images are read in blocks (--block-images) and
the texts streamed past each block, so files larger than memory work. --text-topk K adds the best K images of every
text from the same pass, written with --topk-out as an .npz of `values` (N_txt, K) and `indices` (N_txt, K).
Ctrl-C stops a run between tiles (exit status 130).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from vlkernels._cli_io import add_family_parser, check_output, write_json


def _int(v, where: str) -> int:
    """A JSON integer (bools and floats refused: 0.5 must not become 0), within int64 (the range check against the
    matrices' sizes comes later)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where} must be an integer index, got {json.dumps(v)[:60]}")
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"{where} = {str(v)[:40]}... is out of range")
    return v


def _key_index(key: str, where: str) -> int:
    """A JSON object key holding a query index: ASCII digits with an optional '-', as json.dumps writes an int (not
    ' 1 ', '1_0' or other scripts' digits, which int() would take)."""
    digits = key[1:] if key.startswith("-") else key
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{where} key {key[:40]!r} is not an integer query index")
    if len(digits) > 19:
        raise ValueError(f"{where} key {key[:40]}... is out of range")
    return _int(int(key), f"{where} key")


def _positives(spec, nq: int, ng: int, name: str, path: Path):
    from vlkernels.retrieval.positives import Positives

    if not isinstance(spec, dict):
        raise ValueError(f"{path}: '{name}' must map query index -> list of gallery indices, got {type(spec).__name__}")
    qs, gs, queries = [], [], []
    for key, items in spec.items():
        q = _key_index(key, f"{path}: '{name}'")
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


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose keys are all distinct (json.loads would keep the last of a repeated key and drop the
    others' positives without a word)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {dup[:40]!r} appears more than once in one object")
    return out


def read_gt(path: Path, n_img: int, n_txt: int) -> dict:
    """Parse GT.json into evaluate() keyword arguments; errors name the file and the key."""
    try:
        gt = json.loads(Path(path).read_text(), object_pairs_hook=_unique_keys)
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON, an integer of over 4,300 digits
        raise ValueError(f"cannot read ground truth {path}: {e}") from e
    except RecursionError:
        raise ValueError(f"cannot read ground truth {path}: JSON nested too deeply") from None
    if not isinstance(gt, dict):
        raise ValueError(f"{path}: expected a JSON object with 'text_to_image' or 't2i'/'i2t'")
    unknown = sorted(set(gt) - {"text_to_image", "t2i", "i2t"})
    if unknown:  # a misspelt direction would otherwise be dropped and derived from the other one
        raise ValueError(
            f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; expected 'text_to_image', or 't2i' and/or 'i2t'"
        )
    if "text_to_image" in gt and ("t2i" in gt or "i2t" in gt):
        raise ValueError(f"{path}: give either 'text_to_image' or 't2i'/'i2t', not both")
    if "text_to_image" in gt:
        labels = gt["text_to_image"]
        if not isinstance(labels, list):
            raise ValueError(f"{path}: 'text_to_image' must be a list of image indices, got {type(labels).__name__}")
        if len(labels) != n_txt:
            raise ValueError(f"{path}: 'text_to_image' has {len(labels)} entries; expected one per text ({n_txt})")
        for i, v in enumerate(labels):
            if not 0 <= _int(v, f"{path}: text_to_image[{i}]") < n_img:
                raise ValueError(f"{path}: text_to_image[{i}] = {v} is out of range [0, {n_img}) (image rows)")
        return {"text_to_image": np.array(labels, dtype=np.int64)}
    if "t2i" not in gt and "i2t" not in gt:
        raise ValueError(f"{path}: expected key 'text_to_image', or 't2i' and/or 'i2t'")
    out = {}
    if "t2i" in gt:
        out["t2i"] = _positives(gt["t2i"], n_txt, n_img, "t2i", path)
    if "i2t" in gt:
        out["i2t"] = _positives(gt["i2t"], n_img, n_txt, "i2t", path)
    return out


def cmd_retrieval(args: argparse.Namespace) -> int:
    from vlkernels.retrieval.functional import evaluate, topk
    from vlkernels.retrieval.io import Embeddings
    from vlkernels.retrieval.stream import evaluate_stream

    images = texts = None
    try:
        check_output(args.json)
        check_output(args.topk_out, "--topk-out")
        if args.topk_out is not None and not args.text_topk:
            raise ValueError("--topk-out needs --text-topk K (the number of images kept per text)")
        if args.text_topk is not None and args.text_topk < 1:
            raise ValueError(f"--text-topk must be a positive integer, got {args.text_topk}")
        if args.text_topk and args.topk_out is None:
            raise ValueError("--text-topk K needs --topk-out FILE.npz (where the top-K is written)")
        for flag, key, path in (
            ("--images-key", args.images_key, args.images),
            ("--texts-key", args.texts_key, args.texts),
        ):
            if key is not None and Path(path).suffix != ".safetensors":
                raise ValueError(f"{flag} names a tensor of a .safetensors file; {path} is not one")
        images = Embeddings(args.images, "images", args.images_key)
        texts = Embeddings(args.texts, "texts", args.texts_key)
        gt = read_gt(args.gt, len(images), len(texts))
        common = dict(ks=args.k, progress=args.progress, top_k=args.top_k, empty=args.empty, **gt)
        top = None
        if args.backend in ("auto", "cpu"):
            # Files live on the host: the streaming CPU engine (one image block resident at a time).
            res = evaluate_stream(
                images, texts, text_topk=args.text_topk or 0, block_images=args.block_images, **common
            )
            top = getattr(res, "text_topk", None)
        else:
            res = evaluate(images, texts, backend=args.backend, device_chunk=args.device_chunk, **common)
            if args.text_topk:
                top = topk(texts, images, args.text_topk, backend=args.backend, device_chunk=args.device_chunk)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        shapes = ", ".join(f"{m.name} {m.shape}" for m in (images, texts) if m is not None)
        print(f"error: not enough memory for this evaluation ({shapes or 'reading the inputs'})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"images {images.shape[0]} x texts {texts.shape[0]}, D={images.shape[1]}")
    print(res.table())
    m = res.meta
    if m.get("rechecked_fraction") is not None:
        print(f"screen {m['screen']}: re-checked {m['rechecked_pairs']} pairs ({m['rechecked_fraction']:.2e})")
    status = 0
    if top is not None and args.topk_out is not None:
        status = _write_topk(args.topk_out, top)
    if args.json is not None:
        status = write_json(args.json, dict(res)) or status
    return status


def _write_topk(path: Path, top) -> int:
    values, indices = top
    try:
        with path.open("wb") as f:  # a file object: np.savez would append ".npz" to a path without it
            np.savez(f, values=values.cpu().numpy(), indices=indices.cpu().numpy())
    except OSError as e:
        print(f"error: cannot write {path}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def register(subparsers) -> None:
    summary = "exact image-text retrieval metrics (R@K, MeanR, MedianR, MRR, mAP, mAP@R, R-Precision, NDCG)"
    p = add_family_parser(subparsers, "retrieval", summary, __doc__)
    p.add_argument("--images", type=Path, required=True, help="image embeddings (N_img, D): .npy or .safetensors")
    p.add_argument("--texts", type=Path, required=True, help="text embeddings (N_txt, D): .npy or .safetensors")
    p.add_argument("--gt", type=Path, required=True, help="ground truth JSON (format above)")
    p.add_argument("--k", type=int, nargs="+", default=[1, 5, 10], help="K of R@K (default 1 5 10)")
    p.add_argument("--json", type=Path, default=None, help="write the metrics as JSON to this file (NaN as null)")
    p.add_argument("--top-k", type=int, default=None, help="cut MRR, mAP, R-Precision and NDCG at rank k")
    p.add_argument(
        "--empty",
        choices=("error", "skip", "zero", "one"),
        default="error",
        help="queries without a positive: error (default), skip them, or score them 0 / 1",
    )
    p.add_argument("--images-key", default=None, help="tensor name in a multi-tensor .safetensors file")
    p.add_argument("--texts-key", default=None, help="tensor name in a multi-tensor .safetensors file")
    p.add_argument("--progress", action="store_true", help="show a progress bar (tiles done, rate and ETA)")
    p.add_argument("--text-topk", type=int, default=None, help="also find the best K images of every text")
    p.add_argument("--topk-out", type=Path, default=None, help="write the --text-topk result here (.npz)")
    p.add_argument(
        "--block-images",
        type=int,
        default=None,
        help="images read per block on the host (default: 256 MiB of them); peak memory grows with it",
    )
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
