"""`vlkernels captions` and evaluate_captions on malformed files: one clear error line, never a traceback."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vlkernels.captioning import Cider, evaluate_captions

REPO = Path(__file__).resolve().parent.parent
PREDS = [{"image_id": 1, "caption": "a dog"}]


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "refs,match",
    [
        ([{"image_id": [1], "caption": "a dog"}], r"refs.json\[0\]: image_id must be an int or str, got list"),
        ([{"image_id": {"a": 1}, "caption": "a dog"}], r"image_id must be an int or str, got dict"),
        ({"1": "a dog"}, r"refs.json\['1'\]: a \{image_id: \[captions\]\} reference file needs a list of str"),
        ({"1": ["a dog"]}, r"image 1 has no reference caption .*the annotations have '1'"),
        ("[" * 100_000 + "]" * 100_000, "refs.json: JSON nested too deeply"),
        ({"images": []}, "refs.json: a COCO annotation file needs an 'annotations' list"),
    ],
)
def test_cli_bad_reference_files(tmp_path, capsys, refs, match):
    from vlkernels.cli import main

    args = ["captions", str(_write(tmp_path, "refs.json", refs)), str(_write(tmp_path, "preds.json", PREDS))]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert re.search(match, err), err


def test_cli_results_dict_gets_the_results_hint(tmp_path, capsys):
    from vlkernels.cli import main

    anns = _write(tmp_path, "anns.json", {"annotations": [{"image_id": 1, "caption": "a dog"}]})
    for preds, extra in [({"1": ["a dog"]}, ""), ({"annotations": []}, "this looks like an annotation file")]:
        assert main(["captions", str(anns), str(_write(tmp_path, "preds.json", preds))]) == 2
        err = capsys.readouterr().err
        assert "preds.json: a results file is a list of {'image_id', 'caption'} records" in err
        assert "needs an 'annotations' list" not in err and extra in err


def test_reference_dict_layout_scores_like_the_scorer(tmp_path):
    gts = {"a": ["a dog runs", "a dog"], "b": ["a cat sits"]}
    res = {"a": ["a dog"], "b": ["a cat"]}
    refs = _write(tmp_path, "refs.json", gts)
    preds = [{"image_id": k, "caption": v[0]} for k, v in res.items()]
    out = evaluate_captions(refs, preds, tokenize=False)
    assert out["CIDEr"] == float(Cider().compute_score(gts, res)[0])


def test_cli_nested_json_subprocess(tmp_path):
    # The deep-nesting error as the installed command prints it (one line on stderr, exit status 2).
    refs = _write(tmp_path, "refs.json", "[" * 200_000 + "]" * 200_000)
    preds = _write(tmp_path, "preds.json", PREDS)
    cmd = [sys.executable, "-m", "vlkernels.cli", "captions", str(refs), str(preds)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip().endswith("JSON nested too deeply to read"), r.stderr
