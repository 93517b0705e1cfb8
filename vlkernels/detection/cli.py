"""`vlkernels detection GT.json RESULTS.json`: COCO (or LVIS) detection / segmentation mAP.

Prints pycocotools' 12 summary lines (lvis-api's 13 with --lvis) and optionally writes them as JSON:
  COCO: {"iou_type": "bbox", "stats": [12 numbers], "AP": ..., "AP50": ..., ..., "ARl": ...}
  LVIS: {"iou_type": "segm", "results": {"AP": ..., "APr": ..., ..., "ARl@300": ...}}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vlkernels._cli_io import add_family_parser, check_output, write_json

_COCO_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def cmd_detection(args: argparse.Namespace) -> int:
    from vlkernels.detection import COCOeval, LVISEval

    try:
        check_output(args.json)  # before the evaluation, not after it
        if args.lvis:
            E = LVISEval(str(args.gt), str(args.results), args.iou_type)
            E.run()
            E.print_results()
            out = {"iou_type": args.iou_type, "results": {k: float(v) for k, v in E.results.items()}}
        else:
            E = COCOeval(str(args.gt), str(args.results), args.iou_type)
            E.evaluate()
            E.accumulate()
            E.summarize()
            stats = [float(v) for v in E.stats]
            out = {"iou_type": args.iou_type, "stats": stats, **dict(zip(_COCO_NAMES, stats))}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (TypeError, KeyError, IndexError, AttributeError, RecursionError, UnicodeError, OverflowError) as e:
        # The readers turn every malformed input they know into a ValueError naming it; anything else still gets a
        # message naming the files, not a traceback.
        print(f"error: cannot evaluate {args.results} against {args.gt}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0 if args.json is None else write_json(args.json, out)


def register(subparsers) -> None:
    summary = "COCO / LVIS detection and instance-segmentation mAP (pycocotools / lvis-api numbers)"
    p = add_family_parser(subparsers, "detection", summary, __doc__)
    p.add_argument("gt", type=Path, help="ground truth (COCO / LVIS annotation JSON)")
    p.add_argument("results", type=Path, help="detections (COCO results JSON: a list of dicts)")
    p.add_argument("--iou-type", choices=("bbox", "segm"), default="bbox", help="boxes or masks (default bbox)")
    p.add_argument("--lvis", action="store_true", help="LVIS federated evaluation (lvis-api 0.5.3)")
    p.add_argument("--json", type=Path, default=None, help="write the summary numbers as JSON to this file")
    p.set_defaults(func=cmd_detection)
