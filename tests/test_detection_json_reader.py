"""The detection JSON reader against ``json.loads`` + the object path + pycocotools, on a few hundred generated and
mutated files (fuzz/fuzz_detection_json.py's generator and oracles, run deterministically here without atheris:
repeated keys, BOMs, UTF-16/32, deep nesting, huge and non-finite numbers, ids near 2**31, 2**53 and 2**63, raw byte
edits), on the committed seed corpus, and on hand-written files for each of those shapes."""

import collections
import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

from vlkernels.detection import COCOeval

REPO = Path(__file__).resolve().parent.parent


def _target():
    spec = importlib.util.spec_from_file_location("fuzz_detection_json", REPO / "fuzz" / "fuzz_detection_json.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def target():
    return _target()


def test_generated_and_mutated_files_agree_with_json_and_pycocotools(target):
    seen = collections.Counter()
    for seed in range(300):
        rng = random.Random(seed)
        seen[target.check(rng.randbytes(rng.randint(0, 200)))] += 1
    # Every oracle was exercised: refused files, read-then-refused records, and evaluations compared with
    # pycocotools.
    assert seen["refused"] >= 10 and seen["error"] >= 10 and seen["ok+pycocotools"] >= 20, seen


def test_seed_corpus_agrees(target):
    seeds = sorted((REPO / "fuzz" / "seeds" / "detection_json").iterdir())
    assert seeds
    for p in seeds:
        target.check(p.read_bytes())


def _gt(ids=(1, 2)):
    return {
        "images": [{"id": i, "height": 100, "width": 120} for i in ids],
        "categories": [{"id": 1}],
        "annotations": [
            {"id": k + 1, "image_id": i, "category_id": 1, "bbox": [10, 10, 30, 30], "area": 900.0, "iscrowd": 0}
            for k, i in enumerate(ids)
        ],
    }


def _res(ids=(1, 2)):
    return [
        {"image_id": i, "category_id": 1, "bbox": [11, 10, 30, 30], "score": 0.5 + k / 10} for k, i in enumerate(ids)
    ]


def _stats(gt, res):
    E = COCOeval(gt, res, "bbox")
    E.evaluate()
    E.accumulate()
    return E.eval["precision"]


@pytest.mark.parametrize(
    "text, want",
    [
        # A repeated key: the last value wins, as in json.load (the first, 7, would leave image 2's annotation and
        # result without an image and be refused).
        ('{"images": [{"id": 1, "height": 100, "width": 120}, {"id": 7, "id": 2, "height": 100, "width": 120}]', "2"),
        ('{"annotations": [], "annotations": [], "images": [{"id": 1, "height": 100, "width": 120}]', "1"),
    ],
)
def test_repeated_keys_resolve_as_json_load(tmp_path, text, want):
    base = _gt()
    rest = json.dumps({k: v for k, v in base.items() if k not in text})[1:]
    body = text + ", " + rest
    path = tmp_path / "gt.json"
    path.write_text(body)
    obj = json.loads(body)
    assert str(obj["images"][-1]["id"]) == want
    res = [r for r in _res() if r["image_id"] in [i["id"] for i in obj["images"]]]
    np.testing.assert_array_equal(_stats(str(path), res), _stats(obj, res))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"])
def test_encodings_and_bom_read_as_json_loads(tmp_path, encoding):
    gt, res = _gt(), _res()
    (tmp_path / "gt.json").write_bytes(json.dumps(gt).encode(encoding))
    (tmp_path / "res.json").write_bytes(json.dumps(res).encode(encoding))
    np.testing.assert_array_equal(_stats(str(tmp_path / "gt.json"), str(tmp_path / "res.json")), _stats(gt, res))


@pytest.mark.parametrize("ids", [(2**31 - 1, 2**31), (2**53, 2**53 + 1), (2**63 - 1, -(2**63)), (-1, 0)])
def test_ids_near_limits_through_files(tmp_path, ids):
    gt, res = _gt(ids), _res(ids)
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "res.json").write_text(json.dumps(res))
    np.testing.assert_array_equal(_stats(str(tmp_path / "gt.json"), str(tmp_path / "res.json")), _stats(gt, res))
    E = COCOeval(str(tmp_path / "gt.json"), str(tmp_path / "res.json"), "bbox")
    E.evaluate()
    assert [int(i) for i in E.params.imgIds] == sorted(ids)


@pytest.mark.parametrize(
    "body, match",
    [
        ("[" * 5000 + "]" * 5000, "nests arrays / objects too deeply"),
        ('{"images": [{"id": ' + "9" * 5000 + "}]}", "holds a value Python cannot read"),
        ('{"images": [' + "1e400" * 1, "is not valid JSON"),
        ("\ufeff\ufeff{}", "is not valid JSON"),
        ("", "is not valid JSON"),
    ],
)
def test_unreadable_files_are_refused_naming_the_file(tmp_path, body, match):
    path = tmp_path / "gt.json"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError, match=match) as e:
        COCOeval(str(path), [], "bbox")
    assert repr(str(path)) in str(e.value)
    with pytest.raises((ValueError, RecursionError)):
        json.loads(path.read_bytes())


def test_huge_and_non_finite_numbers_are_named(tmp_path):
    gt = _gt()
    text = json.dumps(gt).replace('"height": 100', '"height": 1e400', 1)
    (tmp_path / "gt.json").write_text(text)
    with pytest.raises(ValueError, match=r"images\[0\]\['height'\] must be an integer, got inf"):
        COCOeval(str(tmp_path / "gt.json"), [], "bbox")
    text = json.dumps(gt).replace('"area": 900.0', '"area": NaN', 1)
    (tmp_path / "gt.json").write_text(text)
    with pytest.raises(ValueError, match=r"annotations\[0\]\['area'\] must be finite, got nan"):
        COCOeval(str(tmp_path / "gt.json"), [], "bbox")
