"""Fuzz target: the detection JSON reader (``COCOeval`` on a ground-truth file and a results file).

Each input builds, from the fuzzed byte stream, a small COCO ground truth and results list (ids drawn near 0, 2**31,
2**53 and 2**63, integral floats, boxes, polygons), serializes them as JSON text and mutates the text: a repeated
key (``json.load`` keeps the last value), a byte-order mark or another encoding (UTF-16 / UTF-32, with or without a
BOM), deep nesting, huge or non-finite numbers, truncation and raw byte edits. Oracles:

- the bytes ``json.loads`` rejects are refused with a ValueError that names the file;
- otherwise the file path and the objects ``json.loads`` made give the same outcome (the same precision / recall
  arrays, or the same ValueError message);
- where both vlkernels and pycocotools evaluate the objects (bbox), the arrays are identical.

Anything else (another exception type, a difference, a sanitizer report) is a finding. The generator reads its
choices from the bytes itself (no atheris object), so tests/test_detection_json_reader.py runs the same cases.

    python fuzz/run.py --seconds 600 detection_json
"""

import contextlib
import copy
import io
import json
import os
import tempfile

import numpy as np

from vlkernels.detection import COCOeval

try:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval as PyCOCOeval
except ImportError:  # the oracle is optional; the file-vs-objects differential still runs
    COCO = PyCOCOeval = None
if "libasan" in os.environ.get("LD_PRELOAD", ""):
    # On the sanitized build the sanitizer watches vlkernels' C++; pycocotools' own C code has reports of its own.
    COCO = PyCOCOeval = None

_TMP = tempfile.mkdtemp(prefix="fuzz_detection_json_")
GT_PATH = os.path.join(_TMP, "gt.json")
RES_PATH = os.path.join(_TMP, "res.json")

# Ids where a float64 or int32 reading goes wrong and the int64 edges; then two beyond int64 (refused).
IDS = [1, 2, 3, 0, -1, 2**31 - 1, 2**31, 2**32, 2**53, 2**53 + 1, 2**53 + 2, 2**63 - 1, -(2**63)]
BAD_IDS = [2**63, 10**20]


class Choices:
    """Choices read from a byte string (0 once it is used up, so the rare branches are taken on high values), so the
    same bytes always build the same case."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def int(self, lo: int, hi: int) -> int:
        span = hi - lo + 1
        need = max(1, (span - 1).bit_length() + 7 >> 3)
        chunk = self.data[self.pos : self.pos + need]
        self.pos += need
        return lo + int.from_bytes(chunk.ljust(need, b"\0"), "little") % span

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def rest(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


def _id(c: Choices, pool: list):
    v = c.pick(pool)
    kind = c.int(0, 31)
    if kind == 31:
        return float(v)  # an integral float (exact within 2**53, refused beyond)
    if kind == 30:
        return v + 0.5 if abs(v) < 2**52 else v
    return v


def _box(c: Choices) -> list:
    box = [c.int(0, 80) + c.int(0, 3) / 4, c.int(0, 60) + c.int(0, 3) / 4, c.int(0, 40), c.int(0, 40)]
    if c.int(0, 20) == 20:
        box[c.int(0, 3)] = c.pick([-1, 1e308, 0.5])
    return box


def _poly(box: list) -> list:
    x, y, w, h = (float(v) for v in box)
    return [[x, y, x + w, y, x + w, y + h, x, y + h]]


def build(c: Choices) -> tuple[dict, list, str]:
    """A small COCO ground truth and results list, and the IoU type."""
    iou = "segm" if c.int(0, 3) == 0 else "bbox"
    pool = IDS + BAD_IDS if c.int(0, 15) == 15 else IDS
    img_ids = [c.pick(pool) for _ in range(c.int(1, 3))]
    cat_ids = [c.pick(pool) for _ in range(c.int(1, 3))]
    images = [{"id": _id(c, [i]), "height": 100, "width": 120} for i in img_ids]
    cats = [{"id": _id(c, [k]), "name": "c"} for k in cat_ids]
    anns = []
    for n in range(c.int(0, 5)):
        box = _box(c)
        anns.append(
            {
                "id": _id(c, [n + 1, *IDS]),
                "image_id": _id(c, img_ids),
                "category_id": _id(c, cat_ids),
                "bbox": box,
                "area": float(box[2] * box[3]),
                "iscrowd": c.pick([0, 0, 0, 1]),
                "segmentation": _poly(box),
            }
        )
    res = []
    for _ in range(c.int(0, 6)):
        box = _box(c)
        r = {"image_id": _id(c, img_ids), "category_id": _id(c, cat_ids), "score": c.int(0, 100) / 100}
        if iou == "bbox" or c.int(0, 1):
            r["bbox"] = box
        if iou == "segm":
            r["segmentation"] = _poly(box)
        res.append(r)
    return {"images": images, "categories": cats, "annotations": anns}, res, iou


def _dup_key(c: Choices, text: str) -> str:
    """Repeat one key of the text with another value before or after it (json keeps the last)."""
    keys = ['"id": ', '"image_id": ', '"category_id": ', '"score": ', '"bbox": ', '"height": ', '"annotations": ']
    key = c.pick(keys)
    at = [i for i in range(len(text)) if text.startswith(key, i)]
    if not at:
        return text
    i = c.pick(at)
    other = c.pick(["1", "2", "0.5", "[1, 2, 3, 4]", "[]", "null", str(2**53 + 1), '"x"'])
    if c.int(0, 1):
        return text[:i] + key + other + ", " + text[i:]
    end = text.find(",", i)
    end = text.find("}", i) if end < 0 else end
    return text[:end] + ", " + key + other + text[end:] if end > 0 else text


def mutate(c: Choices, text: str) -> bytes:
    for _ in range(max(0, c.int(-2, 2))):
        kind = c.int(0, 9)
        if kind <= 2:
            text = _dup_key(c, text)
        elif kind == 3:
            # Deep nesting inside a value (json's recursion limit is near 1000).
            depth = c.pick([10, 900, 3000])
            text = text.replace('"iscrowd": 0', '"iscrowd": ' + "[" * depth + "0" + "]" * depth, 1)
        elif kind == 4:
            text = text.replace("100", c.pick(["1e400", "-1e400", "1" * 5000, "NaN", "Infinity", "1e-400"]), 1)
        elif kind == 5:
            text = text.replace('"x"' if '"x"' in text else '"c"', c.pick(['"\\ud800"', '"é"', '"\\u0000"']), 1)
    enc = (
        "utf-8"
        if c.int(0, 1) == 0
        else c.pick(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"])
    )
    data = text.encode(enc, errors="surrogatepass")
    if c.int(0, 7) == 7:
        # Raw byte edits: truncation, insertion, overwrite.
        for _ in range(c.int(1, 3)):
            if not data:
                break
            i = c.int(0, len(data) - 1)
            op = c.int(0, 2)
            if op == 0:
                data = data[:i]
            elif op == 1:
                data = data[:i] + c.rest(c.int(1, 4)) + data[i:]
            else:
                data = data[:i] + c.rest(1) + data[i + 1 :]
    return data


def _evaluate(gt, res, iou) -> tuple:
    E = COCOeval(gt, res, iou)
    E.evaluate()
    E.accumulate()
    return E.eval["precision"], E.eval["recall"], E.eval["scores"]


def _outcome(gt, res, iou) -> tuple:
    try:
        return ("ok", _evaluate(gt, res, iou))
    except ValueError as e:
        return ("error", str(e))


def _parse(data: bytes):
    try:
        return True, json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError and the int-digits limit
        return False, None


def _pycocotools(gt, res, iou):
    """pycocotools' arrays on the parsed objects, or None where it does not evaluate them."""
    if COCO is None or iou != "bbox" or not isinstance(res, list) or not res:
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            c = COCO()
            c.dataset = copy.deepcopy(gt)
            c.createIndex()
            E = PyCOCOeval(c, c.loadRes(copy.deepcopy(res)), iou)
            E.evaluate()
            E.accumulate()
        return E.eval["precision"], E.eval["recall"], E.eval["scores"]
    except Exception:  # pycocotools' own failures (KeyError, AssertionError, ...): nothing to compare
        return None


def check(data: bytes) -> str:
    """One case; returns what was checked ("refused" / "error" / "ok" / "ok+pycocotools") or raises on a finding."""
    c = Choices(data)
    gt, res, iou = build(c)
    which = c.int(0, 2)  # mutate the ground truth, the results, or both
    gt_text, res_text = json.dumps(gt), json.dumps(res)
    gt_bytes = mutate(c, gt_text) if which != 1 else gt_text.encode()
    res_bytes = mutate(c, res_text) if which != 0 else res_text.encode()
    with open(GT_PATH, "wb") as f:
        f.write(gt_bytes)
    with open(RES_PATH, "wb") as f:
        f.write(res_bytes)
    from_file = _outcome(GT_PATH, RES_PATH, iou)
    ok_gt, gt_obj = _parse(gt_bytes)
    ok_res, res_obj = _parse(res_bytes)
    if not (ok_gt and ok_res):
        assert from_file[0] == "error", "json.loads refuses a file the reader accepted"
        named = repr(GT_PATH if not ok_gt else RES_PATH) in from_file[1]
        # The ground truth is read first: its own error may come before the unreadable results file.
        assert named or (ok_gt and from_file == _outcome(gt_obj, [], iou)), f"no file named: {from_file[1]}"
        return "refused"
    from_objects = _outcome(gt_obj, res_obj, iou)
    assert from_file[0] == from_objects[0], f"file path {from_file[0]} vs objects {from_objects[0]}"
    if from_file[0] == "error":
        assert from_file[1] == from_objects[1], (from_file[1], from_objects[1])
        return "error"
    for a, b in zip(from_file[1], from_objects[1]):
        np.testing.assert_array_equal(a, b)
    ref = _pycocotools(gt_obj, res_obj, iou)
    if ref is None:
        return "ok"
    for a, b, name in zip(ref, from_objects[1], ("precision", "recall", "scores")):
        np.testing.assert_array_equal(a, b, err_msg=name)
    return "ok+pycocotools"


def TestOneInput(data: bytes) -> None:
    check(data)


if __name__ == "__main__":
    import atheris

    atheris.Setup([], TestOneInput)
    atheris.Fuzz()
