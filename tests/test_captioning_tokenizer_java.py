"""PTB tokenizer vs pycocoevalcap 1.2's Java PTBTokenizer (CoreNLP 3.4.1): the committed corpus, a live
differential run, the million-string run (slow). Time and length limits: test_captioning_tokenizer_limits.py."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from vlkernels.captioning import ptb_tokenize

REPO = Path(__file__).resolve().parents[1]
# (input, Java output) pairs written by tools/ptb_differential.py --write-corpus from the Java tokenizer itself:
# "in_order" (HARD_CASES, then 3,000 generated strings of seed 12345) read as one list, in order, as the
# cross-caption context matters; "alone" (ALONE_CASES, then every 50th of those strings) each the whole file, as the
# end-of-file trailing context matters.
CORPUS = REPO / "tests" / "data" / "ptb_java_corpus.json"
HAS_JAVA = shutil.which("java") is not None and importlib.util.find_spec("pycocoevalcap") is not None
needs_java = pytest.mark.skipif(not HAS_JAVA, reason="java or pycocoevalcap not found")


def _differential():
    spec = importlib.util.spec_from_file_location("ptb_differential", REPO / "tools" / "ptb_differential.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _report(bad, n, limit=20):
    return "\n".join(
        [f"{len(bad)} of {n} differ"] + [f"{r!r}\n  java      {w!r}\n  vlkernels {g!r}" for r, w, g in bad[:limit]]
    )


def test_ptb_tokenize_matches_java_corpus():
    """Every committed case (backtick apostrophes, o'o, Asian smileys, file names, final sigma, SGML
    self-closing tags, URLs after non-ASCII spaces, ... and 3,000 generated strings) as the Java tokenizer gave it."""
    pairs = json.loads(CORPUS.read_text(encoding="utf-8"))["in_order"]
    raw = [p[0] for p in pairs]
    got = ptb_tokenize(raw)
    bad = [(r, w, g) for (r, w), g in zip(pairs, got) if w != g]
    assert len(pairs) > 3000
    assert not bad, _report(bad, len(pairs))


def test_code_points_the_java_lexer_classes_apart_from_unicode_14():
    """Letters and digits assigned since the jar's lexer tables were made (deleted by Java as untokenizable) and the
    two Mongolian letters Unicode 9.0 made marks, each inside a word, alone and between digits, as Java tokenized
    them (tests/data/ptb_java_code_points.json, written by tools/ptb_differential.py --write-code-points)."""
    pairs = json.loads((REPO / "tests" / "data" / "ptb_java_code_points.json").read_text(encoding="utf-8"))
    got = ptb_tokenize([p[0] for p in pairs])
    bad = [(r, w, g) for (r, w), g in zip(pairs, got) if w != g]
    assert len(pairs) > 500
    assert not bad, _report(bad, len(pairs))


@needs_java
def test_every_bmp_code_point_matches_java_live():
    """Every BMP code point (surrogates and line breaks aside) inside a word, alone and between digits, against the
    Java tokenizer run now: the lexer's character classes, which are not Unicode 14's everywhere."""
    diff = _differential()
    cases = diff.code_point_cases(diff.bmp_code_points())
    want, got = diff.java_tokenize(cases), ptb_tokenize(cases)
    bad = [(r, w, g) for r, w, g in zip(cases, want, got) if w != g]
    assert not bad, _report(bad, len(cases))


@pytest.mark.parametrize("text", ["1.c", "file 1.txt"])
def test_number_dot_letters_and_file_names_in_every_context(text):
    """A number, a dot and letters and a file name, as Java tokenizes them in the committed corpus: followed by
    another caption (kept whole: the file-name rule sees the line break), with a space or '.' after it inside the
    caption, and as the last caption of the file (end of file: no trailing character, so "1.c" is "1 c")."""
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    in_order = corpus["in_order"]
    raw = [r for r, _ in in_order]
    got = dict(zip(raw, ptb_tokenize(raw)))
    followed = [(r, w) for r, w in in_order if r.strip(" .") == text.strip()]
    alone = [(r, w) for r, w in corpus["alone"] if r == text]
    assert followed and alone, f"{text!r} is missing from the committed corpus"
    for r, w in followed:
        assert got[r] == w, (r, w, got[r])
    for r, w in alone:
        assert ptb_tokenize([r])[0] == w, (r, w)


def test_ptb_tokenize_matches_java_corpus_alone():
    """Each caption as the whole file (Java's end-of-file rules: a final "sq.2" is "sq. .2", a final "1.txt" is
    split, a final "we'll" loses its apostrophe), as the Java tokenizer gave it."""
    pairs = json.loads(CORPUS.read_text(encoding="utf-8"))["alone"]
    bad = [(r, w, g) for r, w in pairs if w != (g := ptb_tokenize([r])[0])]
    assert len(pairs) > 60
    assert not bad, _report(bad, len(pairs))


def test_ptb_tokenize_reported_cases():
    """The cases reported against earlier versions, each as Java prints it (read off the corpus, i.e. from Java),
    with the corpus's next caption after it (the trailing context it had there)."""
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    pairs = corpus["in_order"]
    index = {r: k for k, (r, _) in enumerate(pairs)}
    for raw in ["don`t", "ma`am", "o`clock", "O`Neil", "^_^", "-_-", ">_<", "=_=", "file 1.txt", "1.c", "9b.x",
                "Mr.\u03a3", "A`Xb", "Z'_--", "0.X.a", "n@b_\u0301\u03a31", "MFG. <b> x"]:  # fmt: skip
        k = index[raw]
        assert ptb_tokenize([raw, pairs[k + 1][0]])[0] == pairs[k][1], raw
    java, alone = dict(pairs), dict(corpus["alone"])
    assert java["don`t"] == "do n`t" and java["^_^"] == "^_^"  # the corpus holds what was reported
    assert alone["sq.2"] == "sq. .2" and ptb_tokenize(["sq.2"]) == ["sq. .2"]


@needs_java
def test_ptb_tokenize_matches_java_live():
    """20,000 fresh generated strings (another seed each day the corpus is not regenerated) through one JVM."""
    n, bad = _differential().run(20000, seed=2026, batch=20000, show=0)
    # The million-string run (README_tokenizer.md) found 0 differences.
    assert not bad, _report(bad, n)


@needs_java
@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("VLKERNELS_LONG_TESTS") != "1",
    reason="the million-string Java differential takes ~2 CPU-minutes: VLKERNELS_LONG_TESTS=1 runs it (CI runs the "
    "corpus and the 20,000-string live test)",
)
def test_ptb_tokenize_matches_java_million():
    n, bad = _differential().run(1_000_000, seed=0, show=0)
    assert not bad, _report(bad, n)  # measured: 0 (README_tokenizer.md)
