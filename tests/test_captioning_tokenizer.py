"""PTB tokenizer: token equality with pycocoevalcap 1.2's Java PTBTokenizer (golden COCO data, edge cases, live)."""

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

from vlkernels.captioning import PTBTokenizer, ptb_tokenize
from vlkernels.captioning.tokenizer import PUNCTUATIONS, ptb_tokens

HAS_JAVA = shutil.which("java") is not None
needs_java = pytest.mark.skipif(not HAS_JAVA, reason="java not found: pycocoevalcap's PTBTokenizer needs it")


def _java_tokenize(captions):
    """The anchor: pycocoevalcap's PTBTokenizer (Stanford CoreNLP 3.4.1 jar), one image per caption, in order."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer as JavaPTBTokenizer

    out = JavaPTBTokenizer().tokenize({i: [{"caption": c}] for i, c in enumerate(captions)})
    return [out[i][0] for i in range(len(captions))]


def _report(raw, want, got, limit=20):
    bad = [(i, raw[i], want[i], got[i]) for i in range(len(raw)) if want[i] != got[i]]
    lines = [f"{len(bad)} of {len(raw)} differ"] + [
        f"[{i}] {r!r}\n  pycocoevalcap {w!r}\n  vlkernels     {g!r}" for i, r, w, g in bad[:limit]
    ]
    return bad, "\n".join(lines)


@pytest.mark.slow
def test_ptb_tokenize_coco_val2014_golden(shared_data):
    """All 202,654 COCO val2014 captions, in the order pycocoevalcap tokenized them for the golden file."""
    golden = shared_data / "captions" / "golden"
    raw = json.load(gzip.open(golden / "coco_val2014_captions_reconstructed.json.gz"))
    ptb = json.load(gzip.open(golden / "coco_val2014_captions_ptb.json.gz"))
    assert list(raw) == list(ptb)
    caps = [c for v in raw.values() for c in v]
    want = [c for v in ptb.values() for c in v]
    assert len(caps) == 202654
    got = ptb_tokenize(caps)
    bad, msg = _report(caps, want, got)
    assert not bad, msg


def test_ptb_tokenize_edge_cases():
    """The 88 tricky strings (quotes, brackets, contractions, abbreviations, Unicode ...), tokenized as one batch
    (committed under tests/data/golden: runs on every checkout)."""
    data = json.load(open(Path(__file__).resolve().parent / "data" / "golden" / "ptb_tokenizer_edge_cases.json"))
    assert data["punctuations_removed"] == list(PUNCTUATIONS)
    cases = data["cases"]
    assert len(cases) == 88
    raw = [c["raw"] for c in cases]
    got = ptb_tokenize(raw)
    bad, msg = _report(raw, [c["pycocoevalcap"] for c in cases], got)
    assert not bad, msg
    # The raw PTB line (before the punctuation filter) matches too; the context is the next case, as in the batch.
    for k, c in enumerate(cases):
        following = "\n" + "\n".join(raw[k + 1 :])
        assert " ".join(ptb_tokens(c["raw"], following)) == c["ptb_line"], c["raw"]


# Fragments for generated captions: words, contractions, abbreviations, quotes, brackets, numbers, URLs, Unicode.
_FRAGMENTS = [
    "a", "A", "man", "Dog", "dogs", "isn't", "can't", "won't", "I'm", "we'll", "they've", "it's", "'s", "'", '"',
    "``", "''", "(", ")", "[", "]", "{", "}", "<", ">", ".", "..", "...", "....", ",", ";", ":", "?", "!", "?!", "-",
    "--", "---", "&", "&amp;", "$", "5", "3.5", "1,000", "10:30", "1/2", "3 1/2", "12-15-2001", "%", "#", "@", "*",
    "/", "\\", "+", "=", "_", "~", "Mr.", "Dr.", "St.", "U.S.", "e.g.", "i.e.", "etc.", "vs.", "No.", "p.m.", "P.",
    "I.", "x-ray", "T-shirt", "3-year-old", "well-known", "o'clock", "rock'n'roll", "'90s", "gonna", "cannot",
    "wanna", "café", "naïve", "Zürich", "“", "”", "‘", "’", "—", "–", "…", "½", "°F", "©", "™", "é", "\u00a0", "\t",
    "  ", "AT&T", "R&D", "www.x.com", "foo@bar.com", "http://x.org/a", ":)", "c++", "ΟΔΟΣ", "İ", "ß", "😀",
    "O'Neil", "y'all", "ol'", "'em", "'tis", "don'ts", "Inc.", "Ct.", "ca.", "Fig.", "x.", "The", "An", "Ave", "ft.",
    "2nd", "US$", "€", "£", "¢", "<b>", "</b>", "co-op", "e-mail", "a.b.c", "hi!there", "3pm", "-5", "+3", ".5", "5.",
    "A.B", "S&P-500", "-LRB-", "'n'", "&quot;", "&lt;", "\u0085", "Mass.", "Pa.",
]  # fmt: skip


def _generated(rng, n):
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 10)):
            parts += [rng.choice(_FRAGMENTS), rng.choice([" ", " ", " ", "", ", "])]
        out.append("".join(parts))
    return out


@needs_java
def test_ptb_tokenize_matches_java_live(shared_data):
    """Live comparison with pycocoevalcap's Java tokenizer: random real captions and generated tricky strings."""
    rng = random.Random(1234)
    raw = json.load(gzip.open(shared_data / "captions" / "golden" / "coco_val2014_captions_reconstructed.json.gz"))
    real = rng.sample([c for v in raw.values() for c in v], 3000)
    bad, msg = _report(real, _java_tokenize(real), ptb_tokenize(real))
    assert not bad, msg
    # Adversarial strings stack rare rules (SGML tags, e-mail/URL, abbreviations glued to symbols) far beyond
    # anything in real captions; a handful of known differences remain there (README_tokenizer.md, "Residual
    # differences"). Keep them visible and bounded.
    gen = _generated(rng, 3000)
    bad, msg = _report(gen, _java_tokenize(gen), ptb_tokenize(gen))
    assert len(bad) <= 0.005 * len(gen), msg


@needs_java
def test_ptbtokenizer_dict_api_matches_pycocoevalcap():
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer as JavaPTBTokenizer

    data = {
        "img1": [{"caption": "A man's dog isn't \"happy\" (really)."}, {"caption": "Two cats on a mat..."}],
        42: [{"caption": "U.S. flag at the U.N. building"}, {"caption": ""}, {"caption": "Mr. Smith's café!"}],
        7: [{"caption": "A sign with a P."}],
    }
    assert PTBTokenizer().tokenize(data) == JavaPTBTokenizer().tokenize(data)


@needs_java
def test_ptb_tokenize_line_breaks_inside_a_caption():
    """pycocoevalcap turns a line break inside a caption into a caption boundary and shifts the later captions;
    vlkernels tokenizes each caption on its own (a line break acts as a space)."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer as JavaPTBTokenizer

    data = {1: [{"caption": "a dog\ron grass"}], 2: [{"caption": "a cat"}], 3: [{"caption": "a bird"}]}
    assert JavaPTBTokenizer().tokenize(data) == {1: ["a dog"], 2: ["on grass"], 3: ["a cat"]}  # the shift
    assert PTBTokenizer().tokenize(data) == {1: ["a dog on grass"], 2: ["a cat"], 3: ["a bird"]}
    for brk in ["\r", "\r\n", "\u2028", "\u2029", "\x0b", "\x0c", "\n"]:
        caps = [f"Two dogs{brk}on the grass.", "A cat."]
        spaced = [c.replace(brk, " ") for c in caps]
        assert ptb_tokenize(caps) == _java_tokenize(spaced) == ["two dogs on the grass", "a cat"]


@needs_java
def test_ptb_tokenize_word_before_unicode_space_matches_java():
    """EMAIL and LIKELYURL read on through U+00A0, U+2000..U+200A, U+3000, U+000B and U+2028/9 after a word: one
    token, as in Java (no line shift either: the break is inside the token)."""
    caps = [
        "a foo\u00a0bar.com dog",
        "a foo\u2002bar.com dog",
        "a foo\x0bbar@x.com dog",
        "a foo\u2028bar.com dog",
        "a foo\u3000bar.net dog",
        "a foo\u2029bar@x.com dog",
        "A dog\u00a0on grass",
        "a foo\u00a0bar@x.com",
    ]
    assert ptb_tokenize(caps) == _java_tokenize(caps)


def test_ptb_tokenize_context_from_next_caption():
    """Trailing-context rules see the next caption, as in pycocoevalcap's single input file."""
    assert ptb_tokenize(["A stop sign with a P.", "A dog."]) == ["a stop sign with a p", "a dog"]
    assert ptb_tokenize(["A stop sign with a P.", "two dogs."]) == ["a stop sign with a p.", "two dogs"]
    assert ptb_tokenize(["A stop sign with a P."]) == ["a stop sign with a p."]


def test_ptb_tokenize_basics():
    assert ptb_tokenize([]) == []
    assert ptb_tokenize([""]) == [""]
    assert ptb_tokenize(["...", "  ", "a"]) == ["", "", "a"]
    assert ptb_tokenize([b"caf\xc3\xa9 (ok)."]) == ["café -lrb- ok -rrb-"]
    assert ptb_tokenize(("tuple", "input")) == ["tuple", "input"]


def test_ptb_tokenize_threads_deterministic():
    from vlkernels.core.threads import limit

    caps = _generated(random.Random(7), 2000)
    with limit(1):
        one = ptb_tokenize(caps)
    assert one == ptb_tokenize(caps)  # the process default: every core


# Neighbours that decide whether one of the C++ shortcuts applies: Unicode spaces and line breaks after a word
# (EMAIL/URL read on through them), '.'/',' before whitespace, abbreviations, assimilations, one-letter acronyms,
# e-mail/URL tails, and text of each str width (Latin-1, UCS-2, UCS-4).
_SHORTCUT_EDGES = [
    "\u2028", "\u2029", "\r", "\r\n", "\n", "\x0b", "\x0c", "\u2002", "\u3000", "\u00a0", "\u200b", "\ufeff",
    "\x1c", "@x.com", "bar.com", ".net", "@", ". ", ", ", ".\n", ",\t", ". . .", ".5", ",5", "..", "gonna.", "Cannot,",
    "mr.", "Miss.", "miss.", "Pt.", "pt. 5", "No. 5", "fig.3", "Jan.", "ark.", "Ark.", "A.", "P.", "a.k.a.", "non-U.S.",
    "http://a.b/", "www.x", "日本", "١٢٣", "ΣΑΣ", "x-", "n't", "ain't", "\\/", "/", "dog", "Dogs", "ok.", "ok,",
]  # fmt: skip


def _adversarial(rng, n):
    pool = _FRAGMENTS + _SHORTCUT_EDGES
    chars = list(" .,;:!?'\"`()[]{}<>-_/\\@#$%&*+=|~019abxyzAPST\n\t\r\u00a0é😀’—…\u2028\u3000")
    out = []
    for _ in range(n):
        if rng.random() < 0.7:
            parts = []
            for _ in range(rng.randint(1, 12)):
                parts += [rng.choice(pool), rng.choice([" ", " ", "", ", ", ". ", "\n", "-", "'", "."])]
            out.append("".join(parts))
        else:
            out.append("".join(rng.choice(chars) for _ in range(rng.randint(0, 24))))
    return out


def test_ptb_tokenize_shortcuts_match_every_rule(shared_data):
    """The C++ shortcuts for common tokens (ASCII words, 'word.', 'word,', '.', ','), its direct filtered output and
    its one-byte-per-character reading of Latin-1 batches give exactly what trying every rule at every position of
    the UTF-16 text and filtering the Java line afterwards gives."""
    from vlkernels import _ext

    c = _ext.load()
    caps = _adversarial(random.Random(99), 40000)
    bad, msg = _report(caps, c.ptb_tokenize(caps, _fast_paths=False), c.ptb_tokenize(caps))
    assert not bad, msg
    # All-Latin-1 batches are read one byte per character (the reference reads UTF-16).
    latin1 = ["".join(ch for ch in cap if ord(ch) < 0x100) for cap in _adversarial(random.Random(98), 40000)]
    bad, msg = _report(latin1, c.ptb_tokenize(latin1, _fast_paths=False), c.ptb_tokenize(latin1))
    assert not bad, msg
    raw = json.load(open(shared_data / "captions" / "golden" / "karpathy_test_refs_raw.json"))
    real = [c for v in raw.values() for c in v]
    assert c.ptb_tokenize(real) == c.ptb_tokenize(real, _fast_paths=False)


@pytest.mark.parametrize(
    "captions, match",
    [
        (["ok", 3], r"captions\[1\] must be a str"),
        (["ok", None], r"captions\[1\] must be a str"),
        ("a string", "must be a sequence of strings"),
        (42, "must be a sequence of strings"),
        (["ok", "bad \ud800 surrogate"], r"captions\[1\] is not valid Unicode"),
        (["ok", b"\xff\xfe"], r"captions\[1\] is not valid UTF-8"),
        ([b"\xc0\xaf"], r"captions\[0\] is not valid UTF-8"),
        ([b"\xed\xa0\x80"], r"captions\[0\] is not valid UTF-8"),
        ([b"abc\xe2\x82"], r"captions\[0\] is not valid UTF-8"),
    ],
)
def test_ptb_tokenize_invalid_input(captions, match):
    with pytest.raises(ValueError, match=match):
        ptb_tokenize(captions)


@pytest.mark.parametrize(
    "data, match",
    [
        ([{"caption": "x"}], "must be a dict"),
        ({1: "x"}, r"\[1\] must be a list"),
        ({1: [{"text": "x"}]}, r"\[1\]\[0\] must be a dict with a 'caption' key"),
        ({1: [{"caption": 5}]}, r"\[1\]\[0\]\['caption'\] must be a str"),
        ({1: [{"caption": "ok"}, {"caption": "\udcff"}]}, r"captions_for_image\[1\]\[1\] is not valid Unicode"),
        ({1: [{"caption": "ok"}], 2: [{"caption": "x"}, {"caption": "\ud800"}]}, r"\[2\]\[1\] is not valid Unicode"),
        ({1: [{"caption": "ok"}, "a str"]}, r"\[1\]\[1\] must be a dict with a 'caption' key, got str"),
        ({1: b"x"}, r"\[1\] must be a list of captions, got bytes"),
    ],
)
def test_ptbtokenizer_invalid_input(data, match):
    with pytest.raises(ValueError, match=match):
        PTBTokenizer().tokenize(data)


def test_cpp_utf8_validation_matches_python():
    """The C++ check of UTF-8 agrees with Python's strict decoder on random bytes, and its ValueError names the item
    and gives the decoder's reason and byte offset."""
    from vlkernels import _ext

    c = _ext.load()
    rng = random.Random(3)
    pool = [
        b"a",
        b"\xc3\xa9",
        b"\xe2\x80\x9c",
        b"\xf0\x9f\x98\x80",
        b"\xff",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\x80",
        b"\xe2\x82",
        b"\xf4\x90\x80\x80",
    ]
    for _ in range(500):
        data = b"".join(rng.choice(pool) for _ in range(rng.randint(0, 6)))
        try:
            data.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        if valid:
            assert c.ptb_tokenize([b"x", data]) == ptb_tokenize([b"x", data]) == ptb_tokenize(["x", data.decode()])
        else:
            with pytest.raises(UnicodeDecodeError) as e:
                data.decode("utf-8")
            message = rf"captions\[1\] is not valid UTF-8 \({e.value.reason} at byte {e.value.start}\)"
            with pytest.raises(ValueError, match=message):
                c.ptb_tokenize([b"x", data])
            with pytest.raises(ValueError, match=message):
                ptb_tokenize([b"x", data])
