"""`vlkernels captions REFS.json PREDS.json`: CIDEr-D, BLEU-4 and ROUGE-L of COCO-format results."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_captions(args: argparse.Namespace) -> int:
    from vlkernels.captioning.evaluate import evaluate_captions

    try:
        res = evaluate_captions(args.refs, args.preds, tokenize=not args.pretokenized, per_image=False)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"images   {res['images']}")
    print(f"CIDEr-D  {res['CIDEr']:.4f}")
    print(f"BLEU-4   {res['Bleu_4']:.4f}")
    print(f"ROUGE-L  {res['ROUGE_L']:.4f}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("captions", help="CIDEr-D, BLEU-4, ROUGE-L of COCO-format caption results")
    p.add_argument("refs", help="COCO captions annotation JSON (or a list of {image_id, caption})")
    p.add_argument("preds", help="results JSON: [{image_id, caption}], one per image")
    p.add_argument("--pretokenized", action="store_true", help="captions are already PTB-tokenized")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object (all metrics)")
    p.set_defaults(func=cmd_captions)
