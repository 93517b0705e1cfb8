"""Caption metrics against the golden pycocoevalcap / ruotianluo scores and live against pycocoevalcap itself."""

import gzip
import json
import lzma
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import vlkernels
from vlkernels.captioning import Bleu, Cider, CiderD, CiderOriginal, Rouge
from vlkernels.captioning.reference import ciderd_ref, document_frequency_ref

pc_cider = pytest.importorskip("pycocoevalcap.cider.cider")
pc_bleu = pytest.importorskip("pycocoevalcap.bleu.bleu")
pc_rouge = pytest.importorskip("pycocoevalcap.rouge.rouge")

TOL = 1e-12  # the golden files come from numpy 1.26 (its np.log differs from 2.x in the last bit)
KARPATHY_SETS = [
    "ersan_vis",
    "transformer_cil_vis",
    "magic__magic_result",
    "magic__zerocap_result",
    "magic__mscoco_in_domain_clipretrieval",
    "magic__contrastive_result",
    "magic__top_k_result_run_1",
    "magic__nucleus_result_run_1",
]


# Committed with the tests (sources and licences in its README): the Karpathy-test references, one MIT-licensed
# prediction set with its pycocoevalcap per-image scores, the PTB edge cases. The shared data folder adds the rest.
COMMITTED = Path(__file__).resolve().parent / "data" / "golden"
COMMITTED_SETS = ["transformer_cil_vis"]


def _json(path):
    path = Path(path)
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _committed(name):
    """A golden file committed under tests/data/golden (xz-compressed where large)."""
    for path in (COMMITTED / name, COMMITTED / f"{name}.xz"):
        if path.exists():
            return _json(path)
    raise FileNotFoundError(name)


@pytest.fixture(scope="module")
def golden(shared_data):
    return shared_data / "captions" / "golden"


@pytest.fixture(scope="module")
def karpathy_refs():
    return _committed("karpathy_test_refs_ptb.json")


def _karpathy_set(name, request):
    """A Karpathy-test golden prediction set: committed ones on every checkout, the others from the shared data."""
    if name in COMMITTED_SETS:
        return _committed(f"karpathy_test__{name}.json")
    return _json(request.getfixturevalue("golden") / f"karpathy_test__{name}.json")


@pytest.fixture(scope="module")
def val2014_ptb(golden):
    return _json(golden / "coco_val2014_captions_ptb.json.gz")


def _check_golden(d, refs, scorer=None):
    ids = d["image_ids_in_scorer_order"]
    gts = {k: refs[k] for k in ids}
    res = {k: [d["candidates_ptb"][k]] for k in ids}
    mean, scores = (scorer or Cider()).compute_score(gts, res)
    want = np.array([d["per_image_cider"][k] for k in ids])
    assert scores.shape == want.shape and scores.dtype == np.float64
    np.testing.assert_allclose(scores, want, rtol=0, atol=TOL)
    assert abs(mean - d["corpus_cider"]) <= TOL
    return mean


@pytest.mark.parametrize("name", KARPATHY_SETS)
def test_cider_golden_karpathy(request, karpathy_refs, name):
    d = _karpathy_set(name, request)
    mean = _check_golden(d, karpathy_refs)
    if name == "magic__magic_result":
        assert abs(mean - 0.4928873510252646) <= TOL and round(mean, 3) == 0.493  # MAGIC's reported figure


def test_cider_original_golden(golden, karpathy_refs):
    d = _json(golden / "karpathy_test__ersan_vis__cider_original.json")
    d["candidates_ptb"] = _json(golden / "karpathy_test__ersan_vis.json")["candidates_ptb"]
    _check_golden(d, karpathy_refs, CiderOriginal())


def test_cider_golden_fakecap_demo(golden, val2014_ptb):
    d = _json(golden / "val2014_fakecap_1000.json")
    mean = _check_golden(d, val2014_ptb)
    assert f"{mean:.3f}" == "0.600" and abs(mean - 0.5997905185184199) <= TOL
    # The demo notebook's BLEU counts: testlen 9893, reflen 9855.
    ids = d["image_ids_in_scorer_order"]
    gts = {k: val2014_ptb[k] for k in ids}
    res = {k: [d["candidates_ptb"][k]] for k in ids}
    ours = Bleu(4).compute_score(gts, res, verbose=0)
    theirs = pc_bleu.Bleu(4).compute_score(gts, res, verbose=0)
    assert ours[0] == theirs[0] and ours[1] == theirs[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java for pycocoevalcap's PTBTokenizer")
def test_cider_golden_heldout_40504(shared_data, golden):
    # The references of this golden file were PTB-tokenized on their own (the tokenizer is context dependent),
    # so they are re-tokenized here with pycocoevalcap's own Java tokenizer from the raw codalab file.
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    with zipfile.ZipFile(shared_data / "captions" / "tylin_coco_caption" / "codalab_reference_reference.zip") as z:
        answer = json.loads(z.read("answer.json"))
    refs = PTBTokenizer().tokenize({k: [{"caption": c} for c in v[0]] for k, v in answer.items()})
    d = _json(golden / "val2014_human_heldout_40504.json.gz")
    assert d["n_images"] == 40504
    _check_golden(d, refs)


def test_scst_golden_ruotianluo(golden, val2014_ptb, karpathy_refs):
    data = _json(golden / "scst_batches__ciderD_val2014df.json")
    scorer = CiderD(list(val2014_ptb.values()))
    assert scorer.num_docs == 40504
    for b in data["batches"]:
        groups = [karpathy_refs[k] for k in b["image_ids"]]
        samples = scorer.score(b["samples_ptb"], groups, np.repeat(np.arange(len(groups)), 5))
        greedy = scorer.score(b["greedy_ptb"], groups)
        np.testing.assert_allclose(samples, b["ciderD_samples"], rtol=0, atol=TOL)
        np.testing.assert_allclose(greedy, b["ciderD_greedy"], rtol=0, atol=TOL)
        adv = samples - np.repeat(greedy, 5)
        np.testing.assert_allclose(adv, b["scst_advantage"], rtol=0, atol=2 * TOL)


def _subset(golden, karpathy_refs, name, size, seed):
    d = (
        _committed(f"karpathy_test__{name}.json")
        if name in COMMITTED_SETS
        else _json(golden / f"karpathy_test__{name}.json")
    )
    rng = np.random.default_rng(seed)
    ids = list(rng.choice(d["image_ids_in_scorer_order"], size=size, replace=False))
    return {k: karpathy_refs[k] for k in ids}, {k: [d["candidates_ptb"][k]] for k in ids}


@pytest.mark.parametrize(
    "size,n", [(1, 4), (37, 4), (257, 3), pytest.param(1000, 4, marks=pytest.mark.slow), (60, 1), (60, 2)]
)
def test_live_equal_to_pycocoevalcap(golden, karpathy_refs, size, n, monkeypatch):
    gts, res = _subset(golden, karpathy_refs, "magic__zerocap_result", size, seed=size + n)
    if n != 4:
        # pycocoevalcap's cook_refs/cook_test ignore the scorer's n (always 4-grams) and crash for n < 4;
        # patch them to pass n through so the rest of its arithmetic is the reference.
        from pycocoevalcap.bleu import bleu_scorer
        from pycocoevalcap.cider import cider_scorer

        c_refs, c_test, b_refs, b_test = (
            cider_scorer.cook_refs,
            cider_scorer.cook_test,
            bleu_scorer.cook_refs,
            bleu_scorer.cook_test,
        )
        monkeypatch.setattr(cider_scorer, "cook_refs", lambda refs, _n=4: c_refs(refs, n))
        monkeypatch.setattr(cider_scorer, "cook_test", lambda test, _n=4: c_test(test, n))
        monkeypatch.setattr(bleu_scorer, "cook_refs", lambda refs, eff=None, _n=4: b_refs(refs, eff, n))
        monkeypatch.setattr(bleu_scorer, "cook_test", lambda test, refs, eff=None, _n=4: b_test(test, refs, eff, n))
    ours, theirs = Cider(n=n).compute_score(gts, res), pc_cider.Cider(n=n).compute_score(gts, res)
    np.testing.assert_array_equal(ours[1], theirs[1])  # bit for bit, same numpy
    assert ours[0] == theirs[0]
    ours, theirs = Bleu(n).compute_score(gts, res, verbose=0), pc_bleu.Bleu(n).compute_score(gts, res, verbose=0)
    assert ours[0] == theirs[0] and ours[1] == theirs[1]
    ours, theirs = Rouge().compute_score(gts, res), pc_rouge.Rouge().compute_score(gts, res)
    np.testing.assert_array_equal(ours[1], theirs[1])


def _random_corpus(rng, n_img, vocab=6, maxlen=9, spaces=(" ",)):
    words = [f"w{i}" for i in range(vocab)] + ["ü", "日本", "a"]

    def cap():
        k = int(rng.integers(0, maxlen + 1))
        toks = [words[int(i)] for i in rng.integers(0, len(words), size=k)]
        out = ""
        for j, t in enumerate(toks):
            out += (spaces[int(rng.integers(0, len(spaces)))] if j else "") + t
        return out

    gts = {f"i{i}": [cap() or "w0" for _ in range(int(rng.integers(1, 7)))] for i in range(n_img)}
    res = {k: [cap()] for k in gts}
    return gts, res


@pytest.mark.parametrize("seed", range(4))
def test_live_random_repetitive_captions(seed):
    # Tiny vocabulary: repeated n-grams exercise clipping, max-count BLEU clipping and ties in closest length;
    # Unicode whitespace and double spaces exercise str.split() vs split(" ") (ROUGE-L).
    rng = np.random.default_rng(seed)
    spaces = (" ",) if seed < 2 else (" ", "  ", "\t", "\u3000", "\xa0", "\u2028")
    gts, res = _random_corpus(rng, 120, spaces=spaces)
    for ours, theirs in ((Cider(), pc_cider.Cider()), (Rouge(), pc_rouge.Rouge())):
        a, b = ours.compute_score(gts, res), theirs.compute_score(gts, res)
        np.testing.assert_array_equal(a[1], b[1])
    a, b = Bleu().compute_score(gts, res, verbose=0), pc_bleu.Bleu().compute_score(gts, res, verbose=0)
    assert a == b


def test_norms_square_with_pow_as_pycocoevalcap():
    """pycocoevalcap squares each TF-IDF weight with pow(v, 2), which is not always v * v: here "the" (tf 3, df 8 of
    10 images) weighs v = 3 (log 10 - log 8) with pow(v, 2) one unit in the last place from v * v, and image 5's
    score shows it. Cider and the SCST CiderD (on pycocoevalcap's scorer with fixed df) equal it bit for bit."""
    gts = {
        0: ["on the z a y dog cat"], 1: ["on a b the 1 y dog cat"], 2: [""], 3: ["on", "cat", "a 1 z b y dog the"],
        4: ["1 cat a y", "dog", "z on", "b the"], 5: ["z y b cat on the the on the on 1 cat a dog"], 6: ["on dog"],
        7: ["the dog on a y 1", "b"], 8: ["z on the 1 a b dog", "y"], 9: ["the a on y cat b"],
    }  # fmt: skip
    res = {k: [""] for k in gts}
    res[5] = ["z"]
    v = np.float64(3) * (np.log(10.0) - np.log(8.0))
    if pow(v, 2) == v * v:
        pytest.skip("this C library's pow squares v exactly: the case shows nothing here")
    ours, theirs = Cider().compute_score(gts, res), pc_cider.Cider().compute_score(gts, res)
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert ours[0] == theirs[0]
    refs, cands = list(gts.values()), [r[0] for r in res.values()]
    want = ciderd_ref(cands, refs, document_frequency_ref(refs), len(refs))
    np.testing.assert_array_equal(CiderD(refs).score(cands, refs), want)


def test_empty_candidate_scores_zero_like_pycocoevalcap():
    gts = {1: ["a dog runs", "a dog"], 2: ["a cat"], 3: ["the bird"]}
    res = {1: [""], 2: ["a cat"], 3: ["bird"]}
    for ours, theirs in ((Cider(), pc_cider.Cider()), (Rouge(), pc_rouge.Rouge())):
        a, b = ours.compute_score(gts, res), theirs.compute_score(gts, res)
        np.testing.assert_array_equal(a[1], b[1])
    assert Cider().compute_score(gts, res)[1][0] == 0.0
    assert Bleu().compute_score(gts, res, verbose=0) == pc_bleu.Bleu().compute_score(gts, res, verbose=0)


def test_whitespace_split_matches_python():
    C = vlkernels._ext.load()
    seps = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())
    text = "a" + seps.join("bcdefghijklmnopqrstuvwxyz0123456789") + " " + "\u200b" + "x\x00y" + seps
    assert C.cap_split_words(text, False) == text.split()
    assert C.cap_split_words(" a  b ", True) == " a  b ".split(" ")
    assert C.cap_split_words("", True) == [""]


def test_threads_agree(karpathy_refs):
    gts, res = _subset(None, karpathy_refs, "transformer_cil_vis", 500, seed=1)
    from vlkernels.core.threads import limit

    with limit(1):
        one = Cider().compute_score(gts, res)[1]
    np.testing.assert_array_equal(one, Cider().compute_score(gts, res)[1])  # the process default: every core


@pytest.mark.slow  # NLTK's stemmer and pycocoevalcap in Python are most of its time
def test_stemming_matches_nltk_then_pycocoevalcap(karpathy_refs):
    porter = pytest.importorskip("nltk.stem.porter")
    stemmer = porter.PorterStemmer()
    gts, res = _subset(None, karpathy_refs, "transformer_cil_vis", 200, seed=3)

    def stem(d):
        return {k: [" ".join(stemmer.stem(w) for w in c.split()) for c in v] for k, v in d.items()}

    ours = Cider(stem=True).compute_score(gts, res)
    theirs = pc_cider.Cider().compute_score(stem(gts), stem(res))
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert not np.array_equal(ours[1], Cider().compute_score(gts, res)[1])


@pytest.mark.parametrize("size", [1, 37, 300])
def test_ciderd_live_against_python_reference(golden, karpathy_refs, size):
    gts, res = _subset(golden, karpathy_refs, "magic__top_k_result_run_1" if size > 1 else "ersan_vis", 300, seed=5)
    corpus = list(gts.values())
    df = document_frequency_ref(corpus)
    scorer = CiderD(corpus)
    assert scorer.document_frequency() == {" ".join(k): int(v) for k, v in df.items()}
    keys = list(gts)[:size]
    cands = [res[k][0] for k in keys]
    refs = [gts[k] for k in keys]
    np.testing.assert_allclose(scorer.score(cands, refs), ciderd_ref(cands, refs, df, len(corpus)), rtol=0, atol=TOL)


def test_ciderd_token_ids_follow_ruotianluo_eos(golden, karpathy_refs):
    # ruotianluo's array_to_str keeps ids up to and including the first 0 (EOS) and drops the padding after it.
    gts, res = _subset(golden, karpathy_refs, "magic__magic_result", 40, seed=7)
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for v in gts.values() for c in v for w in c.split()}))}
    unk = len(vocab) + 1

    def ids(c, width=24):
        row = [*[vocab.get(w, unk) for w in c.split()][: width - 1], 0]
        return row + [0] * (width - len(row))

    def text(c):
        return " ".join(str(vocab.get(w, unk)) for w in c.split()[:23]) + " 0"

    ref_arrays = [np.array([ids(c) for c in v]) for v in gts.values()]
    ref_texts = [[text(c) for c in v] for v in gts.values()]
    scorer = CiderD(ref_arrays)
    cands = np.array([ids(res[k][0]) for k in gts])
    got = scorer.score(cands, ref_arrays)
    df = document_frequency_ref(ref_texts)
    want = ciderd_ref([text(res[k][0]) for k in gts], ref_texts, df, len(ref_texts))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(scorer.score(torch.from_numpy(cands), ref_arrays), got)
    # Strings of the same ids score the same (ids are words spelled by their digits).
    np.testing.assert_array_equal(scorer.score([text(res[k][0]) for k in gts], ref_texts), got)


def test_ciderd_save_load_roundtrip(tmp_path, karpathy_refs):
    corpus = list(karpathy_refs.values())[:200]
    scorer = CiderD(corpus)
    path = tmp_path / "df.json"
    scorer.save(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == "vlkernels.cider_document_frequency" and doc["num_docs"] == 200
    loaded = CiderD.load(path)
    cands = [v[0] for v in corpus[:50]]
    refs = [v[1:] for v in corpus[:50]]
    np.testing.assert_array_equal(loaded.score(cands, refs), scorer.score(cands, refs))
    # ruotianluo's pickled layout ({tuple of words: df}, ref_len = number of images), converted by the user.
    df = document_frequency_ref(corpus)
    from_dict = CiderD.from_document_frequency(df, 200)
    np.testing.assert_array_equal(from_dict.score(cands, refs), scorer.score(cands, refs))


@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java for pycocoevalcap's PTBTokenizer")
def test_cider_from_raw_captions_matches_pycocoevalcap_java(golden):
    # Cider(tokenize=True) on raw dicts (one C++ call: PTB tokenizer + scorer) against pycocoevalcap's evaluation
    # path: its Java PTBTokenizer on each dict, then its Cider. The candidates' dict is in another key order, as
    # COCOEvalCap builds it from the results file.
    from pycocoevalcap.cider.cider import Cider as PCider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    refs = _json(golden / "karpathy_test_refs_raw.json")
    d = _json(golden / "karpathy_test__ersan_vis.json")
    ids = d["image_ids_in_scorer_order"][:400]
    gts = {k: [{"caption": c} for c in refs[k]] for k in ids}
    res = {k: [{"caption": d["candidates_raw"][k]}] for k in reversed(ids)}
    tok = PTBTokenizer()
    tok_res = tok.tokenize(res)
    want = PCider().compute_score(tok.tokenize(gts), {k: tok_res[k] for k in ids})
    got = Cider(tokenize=True).compute_score(gts, res)
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=TOL)
    assert got[0] == pytest.approx(want[0], abs=TOL)


@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java for pycocoevalcap's PTBTokenizer")
def test_cider_tokenize_and_stem_match_java_nltk_pycocoevalcap(golden):
    # Cider(tokenize=True, stem=True): PTB tokenizer, stemmer and scorer in one C++ call (nltk called back with the
    # distinct words) against pycocoevalcap's Java PTBTokenizer, nltk's PorterStemmer per token, pycocoevalcap's
    # Cider.
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    porter = pytest.importorskip("nltk.stem.porter").PorterStemmer()
    refs = _json(golden / "karpathy_test_refs_raw.json")
    d = _json(golden / "karpathy_test__ersan_vis.json")
    ids = d["image_ids_in_scorer_order"][:300]
    gts = {k: [{"caption": c} for c in refs[k]] for k in ids}
    res = {k: [{"caption": d["candidates_raw"][k]}] for k in reversed(ids)}
    tok = PTBTokenizer()
    tok_gts, tok_res = tok.tokenize(gts), tok.tokenize(res)

    def stem(caps):
        return [" ".join(porter.stem(w) for w in c.split()) for c in caps]

    want = pc_cider.Cider().compute_score({k: stem(tok_gts[k]) for k in ids}, {k: stem(tok_res[k]) for k in ids})
    got = Cider(tokenize=True, stem=True).compute_score(gts, res)
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0] == want[0]


def test_cider_raw_plain_dicts_equal_dict_subclasses(golden):
    # Plain dicts and dict subclasses (copied to plain dicts first) agree bit for bit, with str and
    # {"caption": str} captions mixed and the candidates in another key order.
    refs = _json(golden / "karpathy_test_refs_raw.json")
    d = _json(golden / "karpathy_test__ersan_vis.json")
    ids = d["image_ids_in_scorer_order"][:1000]
    gts = {k: [c if i % 2 else {"caption": c} for i, c in enumerate(refs[k])] for k in ids}
    res = {k: [d["candidates_raw"][k]] for k in sorted(ids)}

    class Plain(dict):
        pass

    fast = Cider(tokenize=True).compute_score(gts, res)
    general = Cider(tokenize=True).compute_score(Plain(gts), Plain(res))
    assert np.array_equal(fast[1], general[1]) and fast[0] == general[0]


def test_committed_golden_from_raw_captions():
    """On every checkout: the shipped raw Karpathy-test references and the committed raw predictions, PTB-tokenized
    and scored in one call, give pycocoevalcap 1.2's per-image CIDEr-D; the tokenized references equal the Java
    tokenizer's (25,010 captions)."""
    from vlkernels.captioning import ptb_tokenize
    from vlkernels.data import karpathy_test_captions

    raw_refs = {str(k): v for k, v in karpathy_test_captions().items()}
    java_refs = _committed("karpathy_test_refs_ptb.json")
    assert raw_refs.keys() == java_refs.keys()
    ids = list(java_refs)
    flat = ptb_tokenize([c for k in ids for c in raw_refs[k]])
    assert flat == [c for k in ids for c in java_refs[k]]
    d = _committed("karpathy_test__transformer_cil_vis.json")
    order = d["image_ids_in_scorer_order"]
    assert ptb_tokenize([d["candidates_raw"][k] for k in order]) == [d["candidates_ptb"][k] for k in order]
    mean, scores = Cider(tokenize=True).compute_score(
        {k: raw_refs[k] for k in order}, {k: [d["candidates_raw"][k]] for k in order}
    )
    want = np.array([d["per_image_cider"][k] for k in order])
    np.testing.assert_allclose(scores, want, rtol=0, atol=TOL)
    assert abs(mean - d["corpus_cider"]) <= TOL
