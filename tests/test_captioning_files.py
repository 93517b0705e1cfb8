"""Captions files read like json.load reads them, on every path: the C++ reader (two paths), the Python reader (one
path and one object) and the objects json.load gives (duplicate keys: the last wins; a UTF-8 byte order mark)."""

import codecs
import json

import pytest

from vlkernels.captioning import evaluate_captions

PREDS = [
    {"image_id": 1, "caption": "a dog runs on the grass"},
    {"image_id": 2, "caption": "a cat sleeps"},
]
PREDS_STR = [{"image_id": "1", "caption": "a dog runs on the grass"}, {"image_id": "2", "caption": "a cat sleeps"}]
R1 = '{"image_id": 1, "caption": "a dog runs on grass"}, {"image_id": 2, "caption": "a cat is sleeping"}'
R2 = '{"image_id": 1, "caption": "a bird flies"}, {"image_id": 2, "caption": "a cat sleeps on a bed"}'


def _all_paths(tmp_path, refs_bytes: bytes, preds: list, tokenize: bool = False) -> list[dict]:
    """Scores from the C++ file reader, the Python file reader and json.load's objects (all must agree)."""
    refs = tmp_path / "refs.json"
    refs.write_bytes(refs_bytes)
    preds_path = tmp_path / "preds.json"
    preds_path.write_text(json.dumps(preds), encoding="utf-8")
    return [
        evaluate_captions(refs, preds_path, tokenize=tokenize),  # C++ reader
        evaluate_captions(refs, preds, tokenize=tokenize),  # Python reader of the file
        evaluate_captions(json.loads(refs_bytes), preds, tokenize=tokenize),  # json.load's objects
    ]


@pytest.mark.parametrize(
    "refs_text, preds",
    [
        # Two "annotations" lists: json.load keeps the second (the finding: CIDEr 1.665 on the file path, 3.331 on
        # the object path, before).
        ('{"annotations": [' + R1 + '], "annotations": [' + R2 + "]}", PREDS),
        ('{"annotations": [' + R2 + '], "images": [], "annotations": [' + R1 + "]}", PREDS),
        # A repeated image key of the {image_id: [captions]} layout: the last list, at the first key's position.
        ('{"1": ["a dog runs on grass"], "2": ["a cat sleeps"], "1": ["a bird flies", "a dog"]}', PREDS_STR),
        ('{"2": ["a cat"], "1": ["x y"], "2": ["a cat sleeps on a bed", "one cat"], "1": ["a dog runs"]}', PREDS_STR),
        # An earlier value that would be an error is replaced by a valid one.
        ('{"annotations": 5, "annotations": [' + R1 + "]}", PREDS),
        ('{"annotations": [{"image_id": 1}], "annotations": [' + R1 + "]}", PREDS),
        ('{"1": 5, "2": ["a cat"], "1": ["a dog runs"]}', PREDS_STR),
        ('{"1": ["a", 3], "2": ["a cat"], "1": ["a dog runs"]}', PREDS_STR),
        # Repeated fields of a record.
        (
            '[{"image_id": 1, "caption": "a dog", "caption": "a dog runs on grass"}, '
            '{"image_id": 7, "image_id": 2, "caption": 5, "caption": "a cat"}]',
            PREDS,
        ),
        ('[{"image_id": "1", "image_id": 1, "caption": "a dog"}, {"image_id": 2, "caption": "a cat"}]', PREDS),
    ],
)
@pytest.mark.parametrize("tokenize", [False, True])
def test_duplicate_keys_resolve_as_json_load(tmp_path, refs_text, preds, tokenize):
    got = _all_paths(tmp_path, refs_text.encode(), preds, tokenize)
    assert got[0] == got[2]
    assert got[1] == got[2]


def test_duplicate_keys_change_the_score_the_way_json_load_does(tmp_path):
    """The repeated "annotations" case of the finding: the scores are those of the last list alone."""
    doubled = _all_paths(tmp_path, ('{"annotations": [' + R1 + '], "annotations": [' + R2 + "]}").encode(), PREDS)
    last = _all_paths(tmp_path, ('{"annotations": [' + R2 + "]}").encode(), PREDS)
    both = _all_paths(tmp_path, ('{"annotations": [' + R1 + ", " + R2 + "]}").encode(), PREDS)
    assert doubled[0] == last[0]
    assert doubled[0]["CIDEr"] != both[0]["CIDEr"]


@pytest.mark.parametrize(
    "refs_text, match",
    [
        # The last value decides, and is wrong.
        ('{"annotations": [' + R1 + '], "annotations": 5}', "expected a list of .* records, got int"),
        ('{"annotations": [' + R1 + '], "annotations": [{"image_id": 1}]}', r"\[0\]: record must be a dict"),
        ('{"1": ["a dog"], "2": ["a cat"], "1": 5}', r"\['1'\]: a \{image_id: \[captions\]\} reference file"),
        ('[{"image_id": 1, "caption": "a dog", "caption": null}]', r"\[0\] \(image 1\): caption must be str"),
    ],
)
def test_duplicate_keys_last_value_errors_on_every_path(tmp_path, refs_text, match):
    refs = tmp_path / "refs.json"
    refs.write_text(refs_text, encoding="utf-8")
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps(PREDS), encoding="utf-8")
    with pytest.raises(ValueError, match="refs.json.*" + match):
        evaluate_captions(refs, preds, tokenize=False)
    with pytest.raises(ValueError, match="refs.json.*" + match):
        evaluate_captions(refs, PREDS, tokenize=False)


def test_content_errors_come_after_syntax_errors(tmp_path):
    """json.load reads the whole text before anything checks the records: a malformed file is reported as
    malformed even when an earlier record is also wrong, on both readers."""
    refs = tmp_path / "refs.json"
    refs.write_text('[{"image_id": 1}, {"image_id": 1, "caption": "a"} x', encoding="utf-8")
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps(PREDS), encoding="utf-8")
    for p in (preds, PREDS):
        with pytest.raises(ValueError, match="refs.json: malformed JSON"):
            evaluate_captions(refs, p, tokenize=False)


@pytest.mark.parametrize("which", ["refs", "preds"])
def test_utf8_byte_order_mark_is_accepted_on_every_path(tmp_path, which):
    """A UTF-8 BOM is skipped, as json.loads does with bytes (json.load of a str with a BOM raises): the scores equal
    those of the file without it, on the C++ and the Python reader."""
    refs_text = "[" + R1 + "]"
    plain = _all_paths(tmp_path, refs_text.encode(), PREDS)[0]
    refs = tmp_path / "refs_bom.json"
    preds = tmp_path / "preds_bom.json"
    refs.write_bytes((codecs.BOM_UTF8 if which == "refs" else b"") + refs_text.encode())
    preds.write_bytes((codecs.BOM_UTF8 if which == "preds" else b"") + json.dumps(PREDS).encode())
    assert json.loads(refs.read_bytes()) == json.loads(refs_text)
    assert evaluate_captions(refs, preds, tokenize=False) == plain
    if which == "refs":
        assert evaluate_captions(refs, PREDS, tokenize=False) == plain
    else:
        assert evaluate_captions(json.loads(refs_text), preds, tokenize=False) == plain


def test_utf8_byte_order_mark_positions_in_errors(tmp_path):
    """Line and column count from the text after the mark (Python's decoder drops it); byte offsets count it."""
    refs = tmp_path / "refs.json"
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps(PREDS), encoding="utf-8")
    refs.write_bytes(codecs.BOM_UTF8 + b'[{"image_id": 1, "caption": "a"} x]')
    for p in (preds, PREDS):
        with pytest.raises(ValueError, match="refs.json: malformed JSON.* at line 1 column 34"):
            evaluate_captions(refs, p, tokenize=False)
    refs.write_bytes(codecs.BOM_UTF8 + b'[{"image_id": 1, "caption": "\xe9"}]')
    for p in (preds, PREDS):
        with pytest.raises(ValueError, match="refs.json: invalid UTF-8 at byte 32"):
            evaluate_captions(refs, p, tokenize=False)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_files_are_refused_by_name(tmp_path, encoding):
    refs = tmp_path / "refs.json"
    refs.write_bytes(("[" + R1 + "]").encode(encoding))
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps(PREDS), encoding="utf-8")
    for p in (preds, PREDS):
        with pytest.raises(ValueError, match="refs.json: captions files must be UTF-8; this one looks like UTF-16"):
            evaluate_captions(refs, p, tokenize=False)


def test_reader_differential_on_generated_and_mutated_files():
    """The fuzz target's differential check (fuzz/captions_json_cases.py) on 300 fixed cases: generated files in the
    three layouts with ids near 2**31, 2**53, 2**63 and beyond, then duplicate keys, byte order marks, UTF-16/32,
    deep nesting, huge numbers, truncation and flipped bytes. The C++ reader and json.loads + the Python path must
    both accept with equal scores, or both refuse."""
    import random
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
    from captions_json_cases import Differential, generate, mutate

    diff = Differential()
    outcomes = {"ok": 0, "ValueError": 0}
    for seed in range(300):
        rng = random.Random(seed)
        refs, preds = generate(rng)
        for _ in range(seed % 3):
            if rng.random() < 0.7:
                refs = mutate(rng, refs)
            else:
                preds = mutate(rng, preds)
        outcomes[diff.check(refs, preds, tokenize=seed % 5 == 0)] += 1
    # Both kinds of outcome are exercised (the check cannot pass by refusing everything).
    assert outcomes["ok"] >= 60 and outcomes["ValueError"] >= 30, outcomes


@pytest.mark.parametrize("tokenize", [False, True])
def test_lone_surrogate_escapes_are_refused_only_where_scored(tmp_path, tokenize):
    """json.load keeps a lone surrogate escape ("\\udc00") in the str; the in-memory path refuses such a caption only
    when it is scored. The files reader does the same: an unscored image's caption (and a str id) may hold one."""
    unscored = '{"1": ["a dog runs on grass", "a dog"], "2": ["a cat sleeps"], "9": ["on \\udE3d\\ude00 a"]}'
    preds = [{"image_id": "1", "caption": "a dog runs"}, {"image_id": "2", "caption": "a cat"}]
    got = _all_paths(tmp_path, unscored.encode(), preds, tokenize)
    assert got[0] == got[1] == got[2]
    key = '{"1": ["a dog runs on grass"], "x\\ud800": ["a cat sleeps"]}'
    preds_key = [{"image_id": "1", "caption": "a dog runs"}, {"image_id": "x\ud800", "caption": "a cat"}]
    got = _all_paths(tmp_path, key.encode(), preds_key, tokenize)
    assert got[0] == got[1] == got[2] and list(got[0]["per_image"]) == ["1", "x\ud800"]
    scored = '{"1": ["a dog runs on grass", "a \\ud83d dog"], "2": ["a cat sleeps"]}'
    for refs in (scored.encode(), json.loads(scored)):
        if not isinstance(refs, dict):
            (tmp_path / "refs.json").write_bytes(refs)
            refs = tmp_path / "refs.json"
        with pytest.raises(ValueError, match="image '1' reference 1: not valid UTF-8"):
            evaluate_captions(refs, preds, tokenize=tokenize)
    (tmp_path / "refs.json").write_text('{"1": ["a dog"], "2": ["a cat"]}', encoding="utf-8")
    (tmp_path / "preds.json").write_text('[{"image_id": "1", "caption": "\\udc00"}, {"image_id": "2", "caption": "a"}]')
    with pytest.raises(ValueError, match="preds.json: image '1' caption: not valid UTF-8"):
        evaluate_captions(tmp_path / "refs.json", tmp_path / "preds.json", tokenize=tokenize)
