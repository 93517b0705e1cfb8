"""Caption metrics: validation errors, COCO-format evaluation, the CLI."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vlkernels.captioning import Bleu, Cider, CiderD, CiderOriginal, Rouge, evaluate_captions

REPO = Path(__file__).resolve().parent.parent
SCORERS = [Cider(), CiderOriginal(), Rouge(), Bleu()]
GTS = {1: ["a dog runs", "a dog"], 2: ["a cat sits"]}
RES = {1: ["a dog"], 2: ["a cat"]}


def _score(scorer, gts, res):
    if isinstance(scorer, Bleu):
        return scorer.compute_score(gts, res, verbose=0)
    return scorer.compute_score(gts, res)


@pytest.mark.parametrize("scorer", SCORERS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(
    "gts,res,match",
    [
        ({1: ["a"], 2: ["b"]}, {1: ["a"], 3: ["b"]}, "same image ids"),
        ({1: ["a"], 2: []}, {1: ["a"], 2: ["b"]}, r"image 2 references: no reference"),
        ({1: ["a"]}, {1: ["a", "b"]}, r"image 1 candidate: candidate list must hold exactly one"),
        ({1: ["a"]}, {1: []}, "exactly one caption, got 0"),
        ({1: ["a"]}, {1: "a"}, r"image 1 candidate: candidate must be a list, got str"),
        ({1: "a"}, {1: ["a"]}, r"references must be a list"),
        ({1: ["a", 5]}, {1: ["a"]}, r"image 1 reference 1: expected str, got int"),
        ({1: ["a"]}, {1: [b"a"]}, r"image 1 candidate: expected str, got bytes"),
        ({1: ["a"]}, {1: [None]}, r"expected str, got NoneType"),
        ({"x": ["a \ud800 b"]}, {"x": ["a"]}, r"image 'x' reference 0: not valid UTF-8"),
    ],
)
def test_bad_input_names_the_image(scorer, gts, res, match):
    with pytest.raises(ValueError, match=match):
        _score(scorer, gts, res)


def test_bad_input_containers_and_parameters():
    with pytest.raises(ValueError, match="must be dicts"):
        Cider().compute_score([["a"]], [["a"]])
    with pytest.raises(ValueError, match="empty"):
        Cider().compute_score({}, {})
    with pytest.raises(ValueError, match="every reference caption is empty"):
        Cider().compute_score({1: [""], 2: [" "]}, {1: ["a"], 2: ["b"]})
    for bad in (0, 5, 2.0, True):  # Bleu(n=True) passed and failed later with a bare TypeError
        with pytest.raises(ValueError, match="n must be an int"):
            Cider(n=bad)
        with pytest.raises(ValueError, match="n must be an int"):
            Bleu(bad)
        with pytest.raises(ValueError, match="n must be an int"):
            CiderD(n=bad)


def test_scores_in_gts_key_order_never_misaligned():
    gts = {3: ["a b c"], 1: ["x y z"], 2: ["p q r"]}
    res = {1: ["x y z"], 2: ["nothing"], 3: ["a b"]}
    _, scores = Rouge().compute_score(gts, res)
    assert scores[1] == 1.0 and scores[2] == 0.0 and 0 < scores[0] < 1


def test_ciderd_add_documents_equals_one_corpus():
    # Documents added later (to a built or an empty table, or to one loaded from document frequencies) give the
    # scores of the corpus built at once: the table's counts, num_docs and the logarithms passed in stay in step.
    rng = np.random.default_rng(5)
    words = "a dog cat runs sits on the mat red ball".split()
    docs = [[" ".join(rng.choice(words, 5)) for _ in range(2)] for _ in range(30)]
    cands = [" ".join(rng.choice(words, 4)) for _ in range(10)]
    refs = docs[:10]
    want = CiderD(docs).score(cands, refs)
    grown = CiderD(docs[:7])
    grown.score(cands, refs)  # logarithms made for 7 documents, then the table grows
    grown.add_documents(docs[7:20])
    grown.add_documents({k: d for k, d in enumerate(docs[20:])})
    empty = CiderD()
    empty.add_documents(docs)
    loaded = CiderD.from_document_frequency(CiderD(docs[:12]).document_frequency(), 12)
    loaded.add_documents(docs[12:])
    for scorer in (grown, empty, loaded):
        assert scorer.num_docs == 30
        np.testing.assert_array_equal(scorer.score(cands, refs), want)
    with pytest.raises(ValueError, match=r"refs\[1\]: no reference captions"):
        empty.add_documents([["a"], []])
    assert empty.num_docs == 30


def test_ciderd_bad_input():
    scorer = CiderD([["a dog runs", "a dog"], ["a cat"]])
    refs = [["a dog"], ["a cat"]]
    with pytest.raises(ValueError, match="3 candidates but 2 reference groups"):
        scorer.score(["a", "b", "c"], refs)
    with pytest.raises(ValueError, match="ref_index has 1 entries for 2"):
        scorer.score(["a", "b"], refs, ref_index=[0])
    with pytest.raises(ValueError, match=r"ref_index values must be in \[0, 2\)"):
        scorer.score(["a", "b"], refs, ref_index=[0, 2])
    with pytest.raises(ValueError, match=r"refs\[1\]: no reference captions"):
        scorer.score(["a", "b"], [["a"], []])
    # Every group empty: read as token ids, each was one empty caption ([0.] and a document added).
    with pytest.raises(ValueError, match=r"refs\[0\]: no reference captions"):
        scorer.score(["a dog runs"], [[]])
    with pytest.raises(ValueError, match=r"refs\[0\]: no reference captions"):
        CiderD([[], []])
    with pytest.raises(ValueError, match=r"refs\[0\]: no reference captions"):
        scorer.add_documents([[]])
    assert scorer.num_docs == 2
    # Group indices must be integers (1.99 was read as 1, True as 1).
    for bad in ([1.99, 0.5], np.array([True, False])):
        with pytest.raises(ValueError, match="ref_index must hold integers"):
            scorer.score(["a", "b"], refs, ref_index=bad)
    with pytest.raises(ValueError, match=r"candidates\[1\]: expected str, got int"):
        scorer.score(["a", 3], refs)
    with pytest.raises(ValueError, match=r"candidates\[1\]: not valid UTF-8"):
        scorer.score(["a", "\udcff"], refs)
    with pytest.raises(ValueError, match=r"refs\[1\]\[0\]: not valid UTF-8"):
        scorer.score(["a", "b"], [["a"], ["\udcff"]])
    with pytest.raises(ValueError, match="2-D integer array"):
        scorer.score(np.zeros((2, 3), np.float32), refs)
    with pytest.raises(ValueError, match=r"refs\[0\]\[1\]: expected str, got int"):
        scorer.score(["a", "b"], [["a", 1], ["b"]])
    with pytest.raises(ValueError, match="no document frequencies"):
        CiderD().score(["a"], [["a"]])
    with pytest.raises(ValueError, match="refs is empty"):
        CiderD([])


def test_ciderd_load_bad_files(tmp_path):
    cases = {
        "broken.json": b'{"format": ',
        "latin1.json": b'{"format": "\xe9"}',
        "other.json": b'{"format": "pickle"}',
        "fields.json": json.dumps({"format": "vlkernels.cider_document_frequency", "n": 4}).encode(),
    }
    msgs = {
        "broken.json": "malformed JSON",
        "latin1.json": "invalid UTF-8 at byte 12",
        "other.json": "not a vlkernels document-frequency",
        "fields.json": "field 'num_docs'",
    }
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(ValueError, match=msgs[name]):
            CiderD.load(tmp_path / name)
    with pytest.raises(ValueError, match="cannot read"):
        CiderD.load(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="expected a whole number in"):
        CiderD.from_document_frequency({"a": 1.5}, 3)
    with pytest.raises(ValueError, match="num_docs must be an int in"):
        CiderD.from_document_frequency({"a": 1}, 0)
    with pytest.raises(ValueError, match="n-gram must hold 1 to 4 words"):
        CiderD.from_document_frequency({"a b c d e": 1}, 3)
    # Layouts that would raise TypeError / OverflowError, or load as something else, are named.
    fmt = "vlkernels.cider_document_frequency"
    for doc, match in [
        ({"n": 4, "num_docs": 3, "ngrams": [["a", "b"]], "df": [1]}, "expected space-joined n-gram strings"),
        ({"n": 4, "num_docs": 3, "ngrams": ["a"], "df": [float("inf")]}, "expected a whole number"),
        ({"n": True, "num_docs": 3, "ngrams": ["a"], "df": [1]}, "n must be an int"),
        ({"n": 4, "num_docs": 3, "ngrams": ["a b", "a  b"], "df": [1, 2]}, "are the same n-gram"),
        ({"n": 4, "num_docs": 3, "ngrams": ["a", "a"], "df": [1, 2]}, "more than once"),
    ]:
        (tmp_path / "bad.json").write_text(json.dumps(dict(doc, format=fmt)))
        with pytest.raises(ValueError, match=match):
            CiderD.load(tmp_path / "bad.json")


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj), encoding="utf-8")
    return p


def test_evaluate_captions_pretokenized_matches_scorers(tmp_path):
    anns = {"annotations": [{"image_id": i, "caption": c} for i, v in GTS.items() for c in v]}
    results = [{"image_id": i, "caption": v[0]} for i, v in RES.items()]
    out = evaluate_captions(_write(tmp_path, "a.json", anns), _write(tmp_path, "r.json", results), tokenize=False)
    assert out["CIDEr"] == float(Cider().compute_score(GTS, RES)[0])
    assert out["ROUGE_L"] == float(Rouge().compute_score(GTS, RES)[0])
    assert out["Bleu_4"] == Bleu().compute_score(GTS, RES, verbose=0)[0][3]
    assert set(out["per_image"]) == {1, 2}


def test_evaluate_captions_bad_input(tmp_path):
    anns = [{"image_id": 1, "caption": "a dog"}]
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"[{")
    with pytest.raises(ValueError, match="bad.json: malformed JSON"):
        evaluate_captions(anns, bad, tokenize=False)
    bad.write_bytes(b'[{"image_id": 1, "caption": "\xff"}]')
    with pytest.raises(ValueError, match="invalid UTF-8"):
        evaluate_captions(bad, anns, tokenize=False)
    with pytest.raises(ValueError, match=r"results\[0\]: record must be a dict"):
        evaluate_captions(anns, [{"caption": "a"}], tokenize=False)
    with pytest.raises(ValueError, match=r"caption must be str, got int"):
        evaluate_captions(anns, [{"image_id": 1, "caption": 3}], tokenize=False)
    with pytest.raises(ValueError, match="image 1 has more than one caption"):
        evaluate_captions(anns, [{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}], tokenize=False)
    with pytest.raises(ValueError, match="image 7 has no reference caption"):
        evaluate_captions(anns, [{"image_id": 7, "caption": "a"}], tokenize=False)
    with pytest.raises(ValueError, match="results is empty"):
        evaluate_captions(anns, [], tokenize=False)
    with pytest.raises(ValueError, match="needs an 'annotations' list"):
        evaluate_captions({"images": []}, [], tokenize=False)


@pytest.mark.skipif(shutil.which("java") is None, reason="pycocoevalcap's PTBTokenizer needs Java")
def test_evaluate_captions_takes_cocoevalcap_image_order(tmp_path):
    """Results listed in another order than the annotation file's images: COCOEvalCap's example flow evaluates in the
    images' order (loadRes keeps it), and the PTB tokenizer reads each caption with the next as context ("by P."
    ends a caption here), so both paths take that order and give its scores."""
    import contextlib
    import io

    from pycocoevalcap.rouge.rouge import Rouge as PcRouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
    from pycocotools.coco import COCO

    caps = ["a photo taken by P.", "A dog on the grass", "a cat on a mat", "Two men. On a boat"]
    anns = {
        "info": {},
        "licenses": [],
        "type": "captions",
        "images": [{"id": i} for i in (3, 1, 4, 2)],
        "annotations": [{"image_id": i + 1, "id": i + 1, "caption": c} for i, c in enumerate(caps)],
    }
    res = [{"image_id": i, "caption": c} for i, c in ((2, "a dog on grass"), (4, "two men on a boat"), (1, "by p"))]
    a, r = _write(tmp_path, "ann.json", anns), _write(tmp_path, "res.json", res)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        coco = COCO(str(a))
        cres = coco.loadRes(str(r))
        ids = cres.getImgIds()
        gts = PTBTokenizer().tokenize({i: coco.imgToAnns[i] for i in ids})
        rs = PTBTokenizer().tokenize({i: cres.imgToAnns[i] for i in ids})
    assert ids == [1, 4, 2]
    bleu = pc_bleu_scores(gts, rs)
    want = {
        "Bleu_4": bleu[3],
        "ROUGE_L": PcRouge().compute_score(gts, rs)[0],
        "CIDEr": Cider().compute_score(gts, rs)[0],
    }
    for got in (evaluate_captions(a, r), evaluate_captions(anns, res)):
        assert list(got["per_image"]) == ids
        for k, v in want.items():
            assert got[k] == float(v), k


def pc_bleu_scores(gts, res):
    from pycocoevalcap.bleu.bleu import Bleu as PcBleu

    return PcBleu(4).compute_score(gts, res, verbose=0)[0]


@pytest.mark.slow
def test_evaluate_captions_official_demo(shared_data, tmp_path):
    # The coco-caption demo: fakecap results against every val2014 caption print CIDEr 0.600 and BLEU counts
    # testlen 9893 / reflen 9855; raw captions, tokenized by the PTB tokenizer.
    import gzip

    cap = shared_data / "captions"
    results = json.loads((cap / "tylin_coco_caption" / "captions_val2014_fakecap_results.json").read_text())
    with gzip.open(cap / "golden" / "coco_val2014_captions_reconstructed.json.gz", "rt") as f:
        raw = json.load(f)
    ids = {str(r["image_id"]) for r in results}
    anns = [{"image_id": int(k), "caption": c} for k in ids for c in raw[k]]
    out = evaluate_captions(anns, results)
    assert abs(out["CIDEr"] - 0.5997905185184199) <= 1e-12


def test_cli_captions(tmp_path, capsys):
    from vlkernels.cli import main

    anns = _write(tmp_path, "refs.json", [{"image_id": i, "caption": c} for i, v in GTS.items() for c in v])
    preds = _write(tmp_path, "preds.json", [{"image_id": i, "caption": v[0]} for i, v in RES.items()])
    args = ["captions", str(anns), str(preds), "--pretokenized"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "CIDEr-D" in out and "BLEU-4" in out and "ROUGE-L" in out
    assert main([*args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["CIDEr"]
    assert got == pytest.approx(float(Cider().compute_score(GTS, RES)[0]), abs=1e-12)
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    assert main(["captions", str(anns), str(tmp_path / "bad.json")]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_cli_captions_subprocess(tmp_path):
    # The installed entry point wires the subcommand (one process start).
    anns = _write(tmp_path, "refs.json", [{"image_id": 1, "caption": "a dog"}])
    cmd = [sys.executable, "-m", "vlkernels.cli", "captions", str(anns), str(anns), "--pretokenized", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ROUGE_L"] == 1.0


@pytest.mark.parametrize(
    "gts,res,match",
    [
        ({1: [{"caption": "A dog."}]}, {1: [{"caption": "a"}, {"caption": "b"}]}, "image 1 candidate: .*exactly one"),
        ({1: ["A dog."], 2: ["x"]}, {1: ["a"]}, "same image ids"),
        ({1: [{"caption": 3}]}, {1: ["a"]}, r"image 1 reference 0: caption must be str, got int"),
        ({1: []}, {1: ["a"]}, "image 1 references: no reference captions"),
        ({1: ["..."], 2: ["!"]}, {1: ["a"], 2: ["b"]}, "every reference caption is empty"),
        ({1: [{"text": "a"}]}, {1: ["a"]}, r"image 1 reference 0: annotation dict has no 'caption' field"),
        ({1: ("a",)}, {1: ["a"]}, r"image 1 references: references must be a list, got tuple"),
        ({1: ["a"]}, {1: [{"caption": "\ud800"}]}, r"image 1 candidate: not valid UTF-8"),
    ],
)
def test_cider_raw_captions_errors(gts, res, match):
    # The one C++ reader names the image and the caption of every problem in raw input too.
    with pytest.raises(ValueError, match=match):
        Cider(tokenize=True).compute_score(gts, res)


def test_cider_raw_captions_small():
    # Raw captions: tokenized by the PTB rules (case, punctuation, "'s" split) before scoring, same as pre-tokenized.
    gts = {1: ["A dog's running.", "a dog"], 2: ["Cats!"]}
    res = {2: ["cats"], 1: [{"caption": "A DOG."}]}
    tok_gts = {1: ["a dog 's running", "a dog"], 2: ["cats"]}
    tok_res = {1: ["a dog"], 2: ["cats"]}
    got = Cider(tokenize=True).compute_score(gts, res)
    want = Cider().compute_score(tok_gts, tok_res)
    assert np.array_equal(got[1], want[1])


class _Counting:
    """vlkernels._C seen through a recorder: each entry into C++ (a module function, a class or static method, a
    method or property of an object C++ made) is appended to `calls`. Module constants are plain values."""

    def __init__(self, target, calls, name, module=False):
        self._target, self._calls, self._name, self._module = target, calls, name, module

    def __getattr__(self, attr):
        value = getattr(self._target, attr)
        if self._module and isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, type):
            return _Counting(value, self._calls, attr)  # its constructor and static methods count
        self._calls.append(f"{self._name}.{attr}")
        if not callable(value):
            return value  # a property read runs C++ once
        return lambda *a, **k: self._wrap(value(*a, **k), attr)

    def __call__(self, *a, **k):
        self._calls.append(f"{self._name}()")
        return self._wrap(self._target(*a, **k), self._name)

    def __len__(self):
        self._calls.append(f"{self._name}.__len__")
        return len(self._target)

    def _wrap(self, out, name):
        return _Counting(out, self._calls, name) if type(out).__module__ == "vlkernels._C" else out


@pytest.fixture
def crossings(monkeypatch):
    from vlkernels import _ext

    calls = []
    counted = _Counting(_ext.load(), calls, "_C", module=True)
    monkeypatch.setattr(_ext, "load", lambda: counted)
    return calls


def _public_calls(tmp_path):
    pytest.importorskip("nltk")
    raw_gts = {1: ["A dog runs.", {"caption": "Dogs running!"}], 2: ["a cat sits on mats"]}
    raw_res = {2: [{"caption": "The cat, sitting."}], 1: ["a dog running"]}
    ids = np.array([[3, 4, 0, 9], [5, 6, 7, 0]])
    scorer = CiderD([["a dog runs", "a dog"], ["a cat sits"]])
    df_file = tmp_path / "df.json"
    scorer.save(df_file)
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps([{"image_id": k, "caption": c} for k, v in GTS.items() for c in v]))
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps([{"image_id": k, "caption": v[0]} for k, v in RES.items()]))
    return {
        "Cider": lambda: Cider().compute_score(GTS, RES),
        "Cider_tokenize": lambda: Cider(tokenize=True).compute_score(raw_gts, raw_res),
        "Cider_stem": lambda: Cider(stem=True).compute_score(GTS, RES),
        "Cider_tokenize_stem": lambda: Cider(tokenize=True, stem=True).compute_score(raw_gts, raw_res),
        "CiderOriginal_stem": lambda: CiderOriginal(stem=True).compute_score(GTS, RES),
        "Bleu": lambda: Bleu().compute_score(GTS, RES, verbose=0),
        "Bleu_tokenize": lambda: Bleu(tokenize=True).compute_score(raw_gts, raw_res, verbose=0),
        "Rouge": lambda: Rouge().compute_score(GTS, RES),
        "Rouge_tokenize": lambda: Rouge(tokenize=True).compute_score(raw_gts, raw_res),
        "evaluate_captions_objects": lambda: evaluate_captions(
            [{"image_id": 1, "caption": "a dog"}], [{"image_id": 1, "caption": "a dog"}]
        ),
        "evaluate_captions_files": lambda: evaluate_captions(refs, preds),
        "CiderD_refs": lambda: CiderD([["a dog runs", "a dog"], ["a cat sits"]]),
        "CiderD_ids": lambda: CiderD([ids, ids[::-1]]),
        "CiderD_empty": lambda: CiderD(),
        "CiderD.score": lambda: scorer.score(["a dog", "a cat"], [["a dog runs"], ["a cat"]]),
        "CiderD.score_ids": lambda: scorer.score(ids, [ids[:1], ids[1:]]),
        "CiderD.score_repeated": lambda: scorer.score(["a dog"] * 4, [["a dog runs"]], np.zeros(4, np.int64)),
        "CiderD.from_document_frequency": lambda: CiderD.from_document_frequency({("a",): 1, "a dog": 2}, 2),
        "CiderD.save": lambda: scorer.save(df_file),
        "CiderD.load": lambda: CiderD.load(df_file),
        "CiderD.document_frequency": lambda: scorer.document_frequency(),
        "CiderD.num_docs": lambda: scorer.num_docs,
        "CiderD.len": lambda: len(scorer),
    }


def test_one_cpp_call_per_public_operation(crossings, tmp_path):
    # Each public operation reads and checks its captions in one C++ call (no second entry to ask for
    # logarithms or a fallback path), stem=True and tokenize=True included. The files path has two phases, as
    # Python allocates the outputs and only the files tell their number of images: read, that number, score.
    files = ["_C.cap_files_prepare", "cap_files_prepare.num_images", "cap_files_prepare.score"]
    phases = {"evaluate_captions_files": files}
    for name, call in _public_calls(tmp_path).items():
        crossings.clear()
        call()
        if name in phases:
            assert crossings == phases[name], f"{name} entered C++ as {crossings}"
        else:
            assert len(crossings) == 1, f"{name} entered C++ {len(crossings)} times: {crossings}"


def test_one_cpp_call_also_when_the_input_is_bad(crossings):
    # A bad caption is found by the one reader (no Python pre-check, no retry on another path).
    for scorer in (Cider(stem=True), Cider(tokenize=True), Bleu(), Rouge()):
        crossings.clear()
        with pytest.raises(ValueError, match=r"image 2 reference 0: (expected str|caption must be str), got int"):
            _score(scorer, {1: ["a b"], 2: [5]}, {1: ["a"], 2: ["b"]})
        assert len(crossings) == 1, crossings
