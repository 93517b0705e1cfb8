"""PTB tokenizer vs pycocoevalcap 1.2's Java PTBTokenizer (CoreNLP 3.4.1): the committed corpus, a live
differential run, the million-string run (slow), the caption length limit, and linear time on long runs."""

import importlib.util
import json
import shutil
import time
from pathlib import Path

import pytest

from vlkernels.captioning import ptb_tokenize
from vlkernels.captioning.tokenizer import MAX_CAPTION_UNITS, _utf16_units

REPO = Path(__file__).resolve().parents[1]
# (input, Java output) pairs written by tools/ptb_differential.py --write-corpus from the Java tokenizer itself
# (HARD_CASES, then 3,000 generated strings of seed 12345); read in order, as the cross-caption context matters.
CORPUS = REPO / "tests" / "data" / "ptb_java_corpus.json"
HAS_JAVA = shutil.which("java") is not None and importlib.util.find_spec("pycocoevalcap") is not None
needs_java = pytest.mark.skipif(not HAS_JAVA, reason="java or pycocoevalcap not found")


# Known residual differences (README_tokenizer.md): Java keeps "o'o" whole with any apostrophe, which none of
# the 3.4.1 rules we know explains. Pinned so that a change of either side shows up.
KNOWN_RESIDUALS = {"o\u2019o", "o`o"}


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
    """Every committed case (the issues' backtick apostrophes, Asian smileys, file names, final sigma, SGML
    self-closing tags, URLs after non-ASCII spaces, ... and 3,000 generated strings) as the Java tokenizer gave it."""
    pairs = json.loads(CORPUS.read_text(encoding="utf-8"))
    raw = [p[0] for p in pairs]
    got = ptb_tokenize(raw)
    bad = [(r, w, g) for (r, w), g in zip(pairs, got) if w != g]
    assert len(pairs) > 3000
    assert {r for r, _, _ in bad} == KNOWN_RESIDUALS, _report(bad, len(pairs))


def test_ptb_tokenize_issue_cases():
    """The cases named in the issues, each as Java prints it (read off the corpus, i.e. from Java)."""
    java = dict(json.loads(CORPUS.read_text(encoding="utf-8")))
    for raw in ["don`t", "ma`am", "o`clock", "O`Neil", "^_^", "-_-", ">_<", "=_=", "file 1.txt", "1.c", "9b.x",
                "Mr.\u03a3", "A`Xb", "Z'_--", "0.X.a"]:  # fmt: skip
        assert ptb_tokenize([raw]) == [java[raw]], raw
    assert java["don`t"] == "do n`t" and java["^_^"] == "^_^"  # the corpus holds what the issues report


@needs_java
def test_ptb_tokenize_matches_java_live():
    """20,000 fresh generated strings (another seed each day the corpus is not regenerated) through one JVM."""
    n, bad = _differential().run(20000, seed=2026, batch=20000, show=0)
    # Residual rate of the million-string run (README_tokenizer.md): ~0.02 %; the bound is 2.5x that.
    assert len(bad) <= n // 2000, _report(bad, n)


@needs_java
@pytest.mark.slow
def test_ptb_tokenize_matches_java_million():
    n, bad = _differential().run(1_000_000, seed=0, show=0)
    assert len(bad) <= n // 2000, _report(bad, n)


def test_caption_length_limit_helpers():
    """The lexer indexes a caption with int: the limit and the UTF-16 length count used to enforce it."""
    assert MAX_CAPTION_UNITS == 2**31 - 258
    assert _utf16_units("abc", b"abc") == 3
    s = "\U0001f600" * 3  # 3 code points, 6 UTF-16 units, 12 UTF-8 bytes: below the limit, the byte bound is used
    assert _utf16_units(s, s.encode()) == 12


@pytest.mark.slow
def test_caption_longer_than_2_31_units_is_refused():
    """Before: "" for 2**31 code points, the tokens of len mod 2**32 units above. Now a ValueError naming it."""
    big = "a" * (2**31)  # 2 GiB str (+ 2 GiB UTF-8 copy in the error path)
    try:
        with pytest.raises(ValueError, match=r"captions\[1\] has 2147483648 UTF-16 code units"):
            ptb_tokenize(["ok", big])
    finally:
        del big


def _min_time(f, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


# Still quadratic (not yet fixed): chains such as "a.a.a..." and "%.%.%..." (LIKELYURL's domain chain, ACRONYM).
@pytest.mark.parametrize("ch", ["%", ".", "*", "-", "a", "\U0001f600", "'", "_", "=", "@", "1", "1%"])
def test_ptb_tokenize_linear_on_runs(ch):
    """A 4x longer run of one character (class) takes at most ~5x the time (before: quadratic, 160 KiB of '%'
    12.8 s)."""
    small, big = ch * (100000 // len(ch)), ch * (400000 // len(ch))
    t1 = _min_time(lambda: ptb_tokenize([small]), 5)
    t4 = _min_time(lambda: ptb_tokenize([big]), 5)
    # Linear is 4x, quadratic 16x: 7x (+ 20 ms of scheduler noise) separates them on a loaded 2-core machine, where
    # the 4x run of a 4-byte character also leaves the L2 cache (measured up to 6.4x).
    assert t4 <= 7 * t1 + 0.02, (ch, t1, t4)
