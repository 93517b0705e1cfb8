"""`vlkernels captions` and evaluate_captions on malformed files: one clear error line, never a traceback."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _raw_demo(shared_data, n=300):
    import gzip

    golden = shared_data / "captions" / "golden"
    with gzip.open(golden / "coco_val2014_captions_reconstructed.json.gz", "rt", encoding="utf-8") as f:
        raw = json.load(f)
    ids = sorted(raw)[:n]
    anns = {"annotations": [{"image_id": int(k), "id": j, "caption": c} for k in ids for j, c in enumerate(raw[k])]}
    # Results in another order than the annotations, a few of them only; captions of other images as candidates.
    results = [{"image_id": int(k), "caption": raw[ids[(i * 7) % n]][0]} for i, k in enumerate(reversed(ids[: n - 20]))]
    return anns, results


@pytest.mark.parametrize("tokenize", [True, False])
@pytest.mark.parametrize("block", [65536, 3])
def test_file_path_equals_the_object_path(shared_data, tmp_path, monkeypatch, tokenize, block):
    # Two paths: the C++ file reader (blocked PTB tokenization, compact interning, CIDEr-D one n-gram length at a
    # time) and the Python objects path; equal bit for bit, per image and in corpus, whatever the block size.
    from vlkernels.captioning import evaluate

    anns, results = _raw_demo(shared_data)
    monkeypatch.setattr(evaluate, "_BLOCK_CAPTIONS", block)
    files = evaluate_captions(_write(tmp_path, "a.json", anns), _write(tmp_path, "r.json", results), tokenize=tokenize)
    objects = evaluate_captions(anns, results, tokenize=tokenize)
    assert files == objects and files["images"] == 280


@pytest.mark.parametrize(
    "images, want",
    [
        ([{"id": i} for i in (5, 2, 9, 1)], [5, 2, 9, 1, 7]),
        ([{"id": 9}, "x", {"file_name": "a"}, {"id": 2.0}, {"id": 5}, None, {"id": 9}, {"id": "2"}], [9, 5, 1, 2, 7]),
        ({"id": 3}, [1, 2, 5, 7, 9]),
    ],
    ids=["shuffled", "odd_entries", "not_a_list"],
)
@pytest.mark.parametrize("repeat", [False, True])
def test_both_readers_take_the_images_order(tmp_path, images, want, repeat):
    """The C++ reader and json.load + Python give the same image order (the images list's, then the captions'),
    whatever the list holds: entries that are not dicts or have no int or str id are passed over, a repeated
    "images" key keeps its last value."""
    caps = {i: [f"a dog number {i}", f"a cat {i}"] for i in (1, 2, 5, 7, 9)}
    body = json.dumps({"annotations": [{"image_id": i, "caption": c} for i, v in caps.items() for c in v]})[1:-1]
    listed = json.dumps(images)
    text = "{" + ('"images": [{"id": 7}], ' if repeat else "") + f'"images": {listed}, {body}}}'
    anns = json.loads(text)  # a dict literal with a repeated key keeps its last value, as json.loads does
    results = [{"image_id": i, "caption": f"a dog {i}"} for i in (7, 1, 9, 2, 5)]
    a = tmp_path / "a.json"
    a.write_text(text, encoding="utf-8")
    files = evaluate_captions(a, _write(tmp_path, "r.json", results))
    objects = evaluate_captions(anns, results)
    assert files == objects
    assert list(files["per_image"]) == want


def test_files_from_a_pipe_equal_regular_files(tmp_path):
    """A FIFO (or a shell's process substitution) has no size to map: it is read as json.load reads it, with the
    regular file's answers."""
    import os
    import threading

    anns = {"annotations": [{"image_id": 1, "caption": "a dog on the grass"}, {"image_id": 2, "caption": "a cat"}]}
    results = [{"image_id": 1, "caption": "a dog on grass"}, {"image_id": 2, "caption": "the cat"}]
    want = evaluate_captions(_write(tmp_path, "a.json", anns), _write(tmp_path, "r.json", results))
    fifo = tmp_path / "refs.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(json.dumps(anns)))
    writer.start()
    try:
        got = evaluate_captions(fifo, tmp_path / "r.json")
    finally:
        writer.join(timeout=10)
    assert got == want


def _captions(rng: np.random.Generator, n: int, random_words: bool) -> list[str]:
    """n captions of 7-14 words: words of 3-9 random letters (nearly every word and n-gram distinct), or a small
    vocabulary, capitalized with a full stop. Vectorized: the big files take tens of millions of characters."""
    n_words = rng.integers(7, 15, size=n)
    last = np.cumsum(n_words) - 1  # each caption's last word: followed by a newline, the others by a space
    if random_words:
        lens = rng.integers(3, 10, size=int(n_words.sum()))
        buf = rng.integers(ord("a"), ord("z") + 1, size=int(lens.sum() + lens.size), dtype=np.uint8)
        ends = np.cumsum(lens + 1) - 1
        buf[ends] = ord(" ")
        buf[ends[last]] = ord("\n")
        return buf.tobytes().decode().split("\n")[:n]
    vocab = "a man riding wave on top of surfboard the dog cat sitting table with plate food two people".split()
    idx = rng.integers(0, len(vocab), size=int(n_words.sum()))
    tokens = np.array([w + " " for w in vocab], dtype=object)[idx]
    tokens[last] = np.array([w + "\n" for w in vocab], dtype=object)[idx[last]]
    return [c.capitalize() + "." for c in "".join(tokens.tolist()).split("\n")[:n]]


def _write_big(path, n_img, refs=5, seed=0, random_words=False):
    rng = np.random.default_rng(seed)
    caps = _captions(rng, n_img * refs, random_words)
    with open(path / "refs.json", "w") as f:
        f.write('{"info": {}, "images": [], "annotations": [')
        f.write(
            ",".join(f'{{"image_id": {k // refs}, "id": {k % refs}, "caption": "{c}"}}' for k, c in enumerate(caps))
        )
        f.write("]}")
    caps = _captions(rng, n_img, random_words)
    with open(path / "preds.json", "w") as f:
        f.write("[" + ",".join(f'{{"image_id": {i}, "caption": "{c}"}}' for i, c in enumerate(caps)) + "]")
    return path / "refs.json", path / "preds.json"


_HWM = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"


def _peak_ratio(refs, preds):
    """Peak RSS of `vlkernels captions` above the interpreter's own (same imports, no file) over the files' size."""
    size = refs.stat().st_size + preds.stat().st_size
    # Peak RSS of the process before the command (imports and the extension loaded) and after it.
    code = (
        "from vlkernels.cli import main; import vlkernels._ext as e; e.load(); "
        f"base = {_HWM}; rc = main(['captions', {str(refs)!r}, {str(preds)!r}]); "
        f"assert rc == 0; print(base, {_HWM})"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    base, peak = map(int, r.stdout.strip().splitlines()[-1].split())
    ratio = (peak - base) * 1024 / size
    print(f"peak RSS above baseline: {ratio:.2f}x the files ({size / 1e6:.0f} MB; {peak}, {base} KiB)")
    return ratio


@pytest.mark.slow
def test_cli_peak_memory_bounded_by_the_file_size(tmp_path):
    # Peak RSS of `vlkernels captions` stays <= 3x the files' size on a typical vocabulary (it was ~16x when the
    # files became Python objects).
    refs, preds = _write_big(tmp_path, 100_000)
    assert refs.stat().st_size + preds.stat().st_size > 50e6
    assert _peak_ratio(refs, preds) <= 3.0


@pytest.mark.slow
@pytest.mark.parametrize("n_img", [20_000, 45_000])
def test_cli_peak_memory_random_words(tmp_path, n_img):
    # Distinct-heavy text (nearly every word and n-gram distinct): the vocabulary holds only words that may repeat and
    # CIDEr-D's n-grams are interned one length at a time, so memory stays linear in the words with a small constant
    # (it was ~22x a 14 MB pair, ~18x at 34 MB, ~12x at 187 MB when the vocabulary and the df table held every distinct
    # word and n-gram; now ~2x at each of these sizes).
    refs, preds = _write_big(tmp_path, n_img, random_words=True)
    assert refs.stat().st_size + preds.stat().st_size > n_img * 500
    assert _peak_ratio(refs, preds) <= 3.0


def test_file_reader_decodes_json_like_python(tmp_path):
    # Escapes, surrogate pairs, non-ASCII, extra fields, duplicate keys (the last wins), str and int ids, -0 and
    # whitespace: the C++ reader gives the captions Python's json gives.
    refs_text = (
        ' [ {"image_id": 1, "caption": "a \\u00e9t\\u00c9 d\\u00f6g \\ud83d\\ude00 \\"x\\" \\\\ \\/ \\t end"},\n'
        '{"caption": "ignored", "image_id": 1, "caption": "a dog\\nruns", "extra": [1, {"a": null}, 2.5e3, true]},'
        '{"image_id": "x1", "caption": "日本 語 cat"}, {"image_id": -0, "caption": "zero dog"} ]\r\n'
    )
    preds_text = '[{"image_id": 1, "caption": "a d\\u00f6g runs"}, {"image_id": "x1", "caption": "cat"},\n' + (
        '{"image_id": 0, "caption": "zero"}]'
    )
    refs = _write(tmp_path, "refs.json", refs_text)
    preds = _write(tmp_path, "preds.json", preds_text)
    for tokenize in (False, True):
        got = evaluate_captions(refs, preds, tokenize=tokenize)
        want = evaluate_captions(json.loads(refs_text), json.loads(preds_text), tokenize=tokenize)
        assert got == want


@pytest.mark.parametrize(
    "text,match",
    [
        ('[{"image_id": 1, "caption": "a \\ud800 b"}]', "lone surrogate"),
        ('[{"image_id": 1, "caption": "a\x01"}]', "malformed JSON: invalid control character"),
        ('[{"image_id": 1, "caption": "a"} 5]', "malformed JSON"),
        ('[{"image_id": 1, "caption": "a"}] x', "malformed JSON: extra data"),
        ('[{"image_id": 01, "caption": "a"}]', "malformed JSON"),
        ('[{"image_id": 1.5, "caption": "a"}]', r"\[0\]: image_id must be an int or str, got float"),
        ('[{"image_id": true, "caption": "a"}]', "image_id must be an int or str, got bool"),
        ('[{"image_id": 1, "caption": null}]', r"\[0\] \(image 1\): caption must be str, got NoneType"),
        ('[{"image_id": 1}]', r"\[0\]: record must be a dict with 'image_id' and 'caption'"),
        ("[3]", r"\[0\]: record must be a dict"),
        ('"text"', "expected a list of .* records, got str"),
        ("", "malformed JSON"),
        ('[{"image_id": 1, "caption": "\\x"}]', "invalid escape"),
    ],
)
def test_file_reader_errors(tmp_path, text, match):
    refs = _write(tmp_path, "refs.json", '[{"image_id": 1, "caption": "a"}]')
    bad = _write(tmp_path, "bad.json", text)
    with pytest.raises(ValueError, match=match):
        evaluate_captions(refs, bad, tokenize=False)
    (tmp_path / "latin1.json").write_bytes(b'[{"image_id": 1, "caption": "\xe9"}]')
    with pytest.raises(ValueError, match="latin1.json: invalid UTF-8 at byte 29"):
        evaluate_captions(refs, tmp_path / "latin1.json", tokenize=False)
    with pytest.raises(ValueError, match="missing.json: cannot read"):
        evaluate_captions(refs, tmp_path / "missing.json", tokenize=False)


def test_bindings_check_what_they_receive():
    # The C++ layer checks its inputs itself (a wrong object from a private caller is an exception, never a read
    # out of bounds or a write past an output Python allocated).
    import numpy as np

    from vlkernels import _ext
    from vlkernels.captioning._common import image_scores

    C = _ext.load()
    z = np.zeros(2)

    def score(gts, res, n=4, logdf=z, stem=None, outs=None):
        outs = list(image_scores(len(gts) if isinstance(gts, dict) else 0, n).values()) if outs is None else outs
        return C.cap_score_images(gts, res, False, C.CAP_CIDER, n, 6.0, True, 0.0, logdf, stem, *outs)

    with pytest.raises(ValueError, match="gts and res must be dicts"):
        score([], {})
    with pytest.raises(ValueError, match="n must be in"):
        score({}, {}, n=9)
    with pytest.raises(ValueError, match="same image ids"):
        score({1: ["a"]}, {2: ["a"]})
    # Outputs: one row per image, the metric's width, float64 / int64, writable.
    good = list(image_scores(1).values())
    for k, bad, match in [
        (0, np.zeros(2), "cider must have size 1"),
        (1, np.zeros((1, 9), np.int64), "bleu_stats must have size 10"),
        (1, np.zeros((1, 10)), "bleu_stats has dtype float64"),
        (2, np.zeros((1, 3)), "bleu must have size 4"),
        (2, np.zeros((1, 8))[:, ::2], "bleu must be contiguous"),
        (3, np.zeros(1, np.float32), "rouge has dtype float32"),
    ]:
        with pytest.raises(ValueError, match=match):
            score({1: ["a"]}, {1: ["a"]}, outs=[*good[:k], bad, *good[k + 1 :]])
    frozen = np.zeros(1)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="rouge .*writable|rouge .*read-only"):
        score({1: ["a"]}, {1: ["a"]}, outs=[*good[:3], frozen])
    # The stemmer callback: its result is checked, its exception goes through unchanged.
    for stem, err, match in [
        (lambda ws: ws[:-1], TypeError, "one str per word"),
        (lambda ws: [1] * len(ws), TypeError, "returned int, expected str"),
        (lambda ws: 1 / 0, ZeroDivisionError, "division"),
    ]:
        with pytest.raises(err, match=match):
            score({1: ["a b"]}, {1: ["a"]}, stem=stem)
    df = C.CapCiderDf(4)
    i64 = np.int64
    with pytest.raises(ValueError, match="outside the data array"):
        df.add_documents((np.zeros(3, i64), np.array([2], i64), np.array([5], i64)), np.array([0, 1], i64))
    with pytest.raises(ValueError, match="group offsets"):
        df.add_documents(["a b"], np.array([0, 5], i64))
    logs = np.zeros(2)

    def df_score(cands, group, logdf=logs, num_docs=1, out=None):
        out = np.zeros(len(cands)) if out is None else out
        return df.score(cands, ["a b"], np.array([0, 1], i64), group, 6.0, logdf, 0.0, num_docs, out)

    with pytest.raises(ValueError, match="no document frequencies"):
        df_score(["a"], np.array([0], i64))
    df.add_documents(["a b"], np.array([0, 1], i64))
    with pytest.raises(ValueError, match="ref_index out of range"):
        df_score(["a"], np.array([3], i64))
    with pytest.raises(ValueError, match="one entry per candidate"):
        df_score(["a", "b"], np.array([0], i64))
    with pytest.raises(ValueError, match="out must have size 1"):
        df_score(["a"], np.array([0], i64), out=np.zeros(2))
    # The log table must be the one of the table's size (documents added behind CiderD's back are refused).
    with pytest.raises(ValueError, match="holds 1 documents .* made for 2 documents"):
        df_score(["a"], np.array([0], i64), num_docs=2)
    with pytest.raises(ValueError, match="largest df 1.* df < 1"):
        df_score(["a"], np.array([0], i64), logdf=np.zeros(1))
    # Arrays go through vlk::TensorArg: dtype, rank and layout checked, the argument named.
    with pytest.raises(ValueError, match="ref_off"):
        df.add_documents(["a b"], np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="ref_index"):
        df_score(["a"], np.array([[0]], i64))
    with pytest.raises(ValueError, match="logdf .*contiguous"):
        score({1: ["a"]}, {1: ["a"]}, logdf=np.zeros(4)[::2])
    with pytest.raises(ValueError, match=r"outside \[0, num_docs = 2\]"):
        C.CapCiderDf.from_items(4, ["a"], np.array([3], i64), 2)


def test_files_binding_sizes_its_outputs_and_scores_once(tmp_path):
    # The two phases of the files path: the prepared files size the outputs (checked), and score consumes the text.
    import json

    import numpy as np

    from vlkernels import _ext
    from vlkernels.captioning._common import image_scores, log_table

    refs, preds = tmp_path / "refs.json", tmp_path / "preds.json"
    refs.write_text(json.dumps([{"image_id": 7, "caption": "a dog"}, {"image_id": "x", "caption": "a cat"}]))
    preds.write_text(json.dumps([{"image_id": "x", "caption": "a cat"}, {"image_id": 7, "caption": "a dog"}]))
    files = _ext.load().cap_files_prepare(str(refs), str(preds), False, 1000)
    assert files.num_images == 2
    outs = list(image_scores(2).values())
    with pytest.raises(ValueError, match="logdf must have size 3"):
        files.score(log_table(1), 0.0, *outs)
    with pytest.raises(ValueError, match="cider must have size 2"):
        files.score(log_table(2), 0.0, np.zeros(3), *outs[1:])
    # The images in the references' order (their captions' first appearance), not the results'.
    assert files.score(log_table(2), float(np.log(2.0)), *outs) == (True, [b"i7", b"sx"])
    assert outs[3].tolist() == [1.0, 1.0]  # ROUGE-L of identical captions
    with pytest.raises(ValueError, match="scored already"):
        files.score(log_table(2), 0.0, *outs)


@pytest.mark.slow
def test_cli_ctrl_c_while_scoring_files_subprocess(tmp_path):
    # Ctrl-C on the file path: reading, tokenizing and the per-length CIDEr-D passes all poll Ctrl-C, so
    # SIGINT 1 s into a multi-second evaluation of files is a KeyboardInterrupt within 0.5 s, and the next call works.
    from vlkernels.testing import check_interrupts

    refs, preds = _write_big(tmp_path, 40_000, random_words=True)
    tiny = '[{"image_id": 1, "caption": "a dog"}]'
    warm = f"evaluate_captions(json.loads({tiny!r}), json.loads({tiny!r}))"
    setup = f"import json\nfrom vlkernels.captioning import evaluate_captions\n{warm}"
    call = f"evaluate_captions({str(refs)!r}, {str(preds)!r}, tokenize=True)"
    after = f"{warm}['CIDEr'] >= 0"
    check_interrupts(setup, after, [(call, 1.0)], bound=0.5)
