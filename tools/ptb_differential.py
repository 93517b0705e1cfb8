"""Differential run: vlkernels' PTB tokenizer against pycocoevalcap 1.2's Java PTBTokenizer (CoreNLP 3.4.1).

Generates seeded, reproducible strings biased towards the trigger characters of every PTBLexer rule, runs the Java
tokenizer exactly as pycocoevalcap does (``-preserveLines -lowerCase``, captions joined by ``'\\n'``) in one JVM per
batch, applies pycocoevalcap's punctuation filter, and compares with ``vlkernels.captioning.ptb_tokenize`` on the
same list (same order, so the cross-caption context is the same).

    python tools/ptb_differential.py --n 1000000 --seed 0          # the million-string run
    python tools/ptb_differential.py --n 20000 --write-corpus F    # also write (input, java_output) pairs as JSON

Rules with trailing context read past a caption into the next one, and behave differently at the end of the file
(``{ABBREV1}`` pushes its period back there: a final ``sq.2`` is ``sq. .2``): besides the batches, every 50th string
is also tokenized alone, as the whole file, by the jar's own ``PTBTokenizer.main`` called once per file in one JVM
(a small harness compiled on the fly; the command line stops after its first file).

Characters that start a new line in Java's ``-preserveLines`` mode (``\\r``, U+000B, U+000C, U+2028, U+2029) are
not generated: pycocoevalcap misaligns the captions after them, a documented deliberate difference.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time

# Run from a checkout: import this tree's vlkernels (the script directory, tools/, is sys.path[0]).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Fragments per rule family (words, contractions with every apostrophe, quotes, emoticons, URLs, e-mails, numbers,
# abbreviations, SGML, entities, Unicode letters/marks/punctuation, symbols, control characters).
APOSTROPHES = ["'", "`", "\u2019", "\u2018", "\u201b", "\u0092", "\u0091", "\u00b4", "\u2032", "\u02bc", "&apos;"]
QUOTES = ['"', "\u201c", "\u201d", "\u201e", "\u00ab", "\u00bb", "\u2039", "\u203a", "\u2033", "&quot;", "``", "''"]
FRAGMENTS = [
    "don't", "can't", "won't", "I'm", "it's", "we'll", "they're", "I've", "he'd", "ain't", "n't", "'s", "'ll",
    "ma'am", "o'clock", "O'Neil", "rock'n'roll", "y'all", "ol'", "'90s", "'em", "'til", "'cause", "c'mon", "li'l",
    "cont'd", "nor'easter", "'twas", "'tis", "Cap'n", "c'est", "d'Alembert", "l'amour", "Dunkin'", "somethin'",
    "cannot", "gonna", "gotta", "lemme", "gimme", "wanna",
    ":)", ":-)", ";-)", ":(", ":P", ":-P", ":D", "=)", "<:)", ">:(", ":'(", ":o)", ":*", ":|", ":[", ":]", ":\\", ":{",
    ":@", "^_^", "-_-", ">_<", "=_=", "o_O", "^.^", "x_x", "~_~", "'_'", "(^_^)", "(-_-)", "(^^)", "(^.^)", "<3",
    "http://a.b/c?d=1", "https://x.org/", "www.example.com", "foo.com", "a.b.net/x", "bar.edu", "x.de", "x.cat",
    "user@example.com", "a.b@c.d", "@name", "#tag", "#1", "@_x",
    "1,000", "3.5", "10:30", ".5", "-3", "+4", "1.000.000", "12-15-2001", "3/4", "3 1/2", "1\u00a01/2", "2\u20443",
    "(555) 123-4567", "555-1234", "+1 800 555 1234", "12.34.567.890", "\u00bd", "\u2153", "\u00b2", "\u2082",
    "1.txt", "file.c", "9b.x", "0.X.a", "5.x.", "2nda.b.c", "v1.2.3", "1st", "2nd", "3-year-old", "x-ray", "t-shirt",
    "AT&T", "S&P-500", "S&Ls", "R&D", "c++", "C#", "F#", "\\/", "\\*", "**", "***", "--", "---", "----", "-",
    "...", ". . .", "....", "\u2026", "\u0085", "!!", "?!", "??", "\u00a1", "\u00bf",
    "Mr.", "Mrs.", "Dr.", "St.", "U.S.", "U.S.A.", "e.g.", "i.e.", "etc.", "Inc.", "Corp.", "Jan.", "No.", "no. 5",
    "fig. 3", "ca. 5", "Ph.D.", "a.k.a.", "vs.", "Jr.", "Ark.", "Miss.", "non-U.S.", "U.S.-U.K.", "A.", "P.", "I.",
    "<b>", "</a>", "<br/>", "<a href=\"x\">", "&amp;", "&lt;", "&gt;", "&#39;", "&mdash;", "&eacute;", "&nbsp;",
    "-LRB-", "-RRB-", "-lrb-", "(", ")", "[", "]", "{", "}", "<", ">", "<<", ">>",
    "\u2013", "\u2014", "\u2015", "\u0096", "\u0097", "\u00ad", "soft\u00adhyphen", "\u20ac", "\u00a3", "\u00a2",
    "\u00a5", "$", "US$", "#", "%", "&", "*", "+", "=", "|", "~", "^", "_", "__", "\\", "/", "\u00a7", "\u00b0",
    "\u00e9t\u00e9", "na\u00efve", "stra\u00dfe", "\u03a3\u0391\u03a3", "\u039f\u0394\u039f\u03a3", "\u0130stanbul",
    "\u65e5\u672c", "\u0661\u0662\u0663", "\u0915\u094d\u0937", "e\u0301", "\u05e9\u05dc\u05d5\u05dd", "\u0416\u0416",
    "\U0001f600", "\U0001f44d\U0001f3fd", "\u2764\ufe0f", "\u200b", "\u200e", "\ufeff", "\u00a0", "\u2002", "\u3000",
    "\x00", "\x01", "\x1b", "\x1c", "\x7f", "\x80", "\x9f", "\t",
    "\u3001", "\u3002", "\u30fb", "\uff01", "\uff0c", "\u2022", "\u00b7", "\u2219", "\u203c", "\u2122", "\u00a9",
    "dog", "Dogs", "A", "a", "the", "The", "I", "x", "X", "Z", "n", "o", "O", "l", "d", "y", "Y",
]  # fmt: skip
# The non-ASCII characters JFlex's %caseless matches for an ASCII letter of a literal (see swap_caseless).
CASELESS = {"i": "\u0130", "I": "\u0131", "s": "\u017f", "k": "\u212a"}
SEPARATORS = [" ", " ", " ", "", "", "-", ".", ",", "'", "`", "_", ". ", ", ", "/", "@", ":", "\u00a0", "\u2019", "&"]
CHARS = (
    list(" .,;:!?'\"`()[]{}<>-_/\\@#$%&*+=|~^019abcdnotxyzACDIMNOPSTXZ\t")
    + APOSTROPHES[:-1]
    + list("\u201c\u201d\u00ab\u00bb\u00e9\u00c9\u03a3\u03c3\u0130\u00df\u0301\u2026\u2013\u2014\u00a0\u3000\u00ad")
    + ["\U0001f600", "\u65e5", "\u0661", "\x00", "\x1f", "\x7f", "\x85", "\u200b", "\u00bd", "\u20ac"]
    + list(CASELESS.values())
)
# Cases found by hand or by fuzzing, kept in the committed corpus ahead of the generated ones.
HARD_CASES = [
    "don`t", "ma`am", "o`clock", "O`Neil", "rock`n`roll", "o\u2019o", "o`o", "can`t", "it`s", "`n`", "ab`cd", "a`b",
    "^_^", "-_-", ">_<", "=_=", "a ^_^ b", "x^_^", "^.^", "(^_^)", "(^^)", "(^.^)", "(-_-)", "x.[^x=~<>]", "'_'",
    "x_x", "~_~", "<_>", "-_-x", "^_^a", "--_--", "'_-", "(xx)", "(=)", "(--)", "('')", "=_=)", ":-_-", "^_^^_^",
    "(^_^", "~_X", "-_X", "^_^3", "=_=1", "=_=n->",
    "file 1.txt", "1.c", "9b.x", "Mr.\u03a3", "A`Xb", "Z'_--", "0.X.a", "1.cd", "1.c.d", "1a.b.c", "5.x.", "2nda.b.c",
    "1.txt.gz", "1.c'", "1.c,", "1.c;", "1.C", "1.TXT", "1-a.c", "\u05e9\u05dc\u05d5\u05dd.2nda.b.c.", "1.\u00e9",
    "<br/>", "<br />", "<br / >", "<a/b>", "</br/>", "<br//>", "<a x=1/>", "<a x='1'/>", "<br/ >",
    "&gt;\u00a0bar.edu", "_\t\u00a0foo.com", "\x00\u00ad.bar.edu", "&apos;tis", "\u0092tis", "'tis",
    "\u03a3\u0391\u03a3_St.", "T\u03a3_Cx", "M1*\u02bc\u03a3\u201d", "0b\u00e9\u65e51\u03a3\u201db",
    # O{APOSETCETERA}o, "(" eye "-" eye ")" smileys, file names of {LETTER}s (marks, U+00AD, entities),
    # final sigma across marks, spacing marks and connectors.
    "o'o", "O'O", "o&apos;o", "o\u2019o a", "o'o'o", "O`o", "o\u2018o", "o\x91o\u201c,1", "10:30 we'll, O\u2019O'Neil_",
    "(^-^)", "(x-`)", "(=-=)", "('-')", "(<->)", "(--^)", "(`-^)", "(^-^",
    "lemme\u0915\u094d\u0937.9b.x", "1\u0301.c", "a\u00ad.c", "1\u00ad2.c", "\u00ad1.TXT.3-year-old.",
    "Cap'n\u00adi.e.c", "soft\u00adhyphenfile.c\u00a0", "\u00b7\u00adetc.x", "X----&\u00e9.9b.x ", "&EACUTE;.5.x.&",
    "a&eacute;.c", "1.c\u0301",
    "o\u03a3\u0301\u00e9", "\u00dfD\u0301\u03a3$", "a\u0301\u03a3-", "aX\u0301\u03a3", "a\u03a3\u0345", "a\u0903\u03a3",
    "\u0391\u03a3\u0903", "\u0391\u03a3_2a", "\u0391\u03a3_2", "a_1\u03a3", "a1_\u03a3", "ab_\u03a3", "1_a\u03a3",
    "Z\u00bd\u03a3", "\u03a3\u0391\u03a3\u00bdbar.edu", "a.b.net/x\u03a312.34.567.890M",
    "#1&\u039f\u0394\u039f\u03a3\u200b'Z@", "PC@A\u0301\u2014\u03a3", "\u2019Mrs. 2\u20443", "-3\u2019Mrs.1st", "rs. 2",
    "sec.2", "Pt. 2", "arts. 2", "approx. 5", "<Z_>", "<a_b c>", "</a_b>", "<a b_c='x'>", "<_a>",
    # Final sigma after a mid-word character and a mark, Hangul and non-kana ideographs, spacing marks,
    # U+00AD, a leading mark; M[ft]g's case; ABBREV1 before a sentence end.
    "\u2018>n@\u02bc\u2018\u00abo_!b\u02bc_\u0301\u03a31", "n@b_\u0301\u03a31", "n@b_\u200d\u03a3", "n@b-\u0301\u03a3",
    "a\u03a3_\u0301b", "n@b_\u200d\u0301\u03a3", "B\uac00\u03a3", "B\u30a2\u03a3", "B\u65e5\u03a3", "B\u9fa6\u03a3",
    "B\u3006\u03a3", "B\uff71\u03a3", "\u03a3\uac00b", "\u0345\u03a3", "x!\u0345\u03a3", "n@1\u0345\u03a3",
    "\u01c5x\u03a3\u0903\u094d\u0301.x", "www.\u03a3.\u0903\u04162.de", "Ab\u00ad.\u03a3&eacute;\u03a3",
    "\u0391\u03a3\u00ad.net", "www.\u00ad\u03a3\u00ab", "b_\u00ad\u03a3", "MFG. <b> x", "Mfg. x", "mFg. x", "MtG. x",
    "etc. The", "Inc. <b> x", "etc.\u00a0A", "etc.  . . .",
    # %caseless literals also match U+0130/U+0131 (i), U+017F (s), U+212A (k); ACRONYM's sentence start is followed by
    # a space or line break only (not "?"/"!").
    "--@won'tİSTANBUL@\u00a0.o_O-y`<<,1st&", "'t\u0130s", "'t\u0131s", "'ti\u017f", "\u0130nc. x", "a.\u212a.a. x",
    "M\u0131ss. x", "S\u0130NO-U.S. x", "1.g\u0130f x", "&mda\u017fh; x", "l\u0130'l x", "\u017f'mores x",
    "St._A. A!!\u2019^.^&", "we'll sq.  a", "A. A!! x", "A. <b>! x", "A. About? x", "x A. A x", "U.S. The! x",
    "&\u00c9*\u03a3=\x91z\u03a3-<b.", "</a>?\u00a7\u2014", "x b.", "<b>?x",
    # A number, a dot and letters, and file names, with what may follow them inside the caption (the file name
    # rule needs a space, a line end or one of .?!, after the extension).
    "1.c ", "1.c.", "1.c!", "1.c, x", "a 1.c", "file 1.txt ", "file 1.txt.", "see 1.c now", "12.ab", "3.5.c x",
    "911.c", "1.c\u00a0x", "file1.txt x", "a 1.TXT b", "1.cx y", "0.5c x", "1.c-2 x", "the file 1.txt is open",
]  # fmt: skip
# Cases whose Java output depends on being the last caption of the file (tokenized alone in the corpus).
ALONE_CASES = [
    "sq.2", "a sq.2", "Inc.2", "etc.5", "ph.d.2", "Mass.1", "etc.", "sq.", "etc.\u0661", "1.txt", "a 9b.x", "file 1.c",
    "we'll", "a P.", "Jan.a", "x Ph.D.", "sq. 2", "no.5", "fig.2", "Mr.2",
    "1.c", "file 1.txt", "a 911.c b", "1.c ", "file 1.txt ", "1.c.", "a 1.c", "x file.c", "Mr. 1.c",
]  # fmt: skip
# Characters that start a new output line under -preserveLines (documented deliberate difference).
LINE_BREAKS = "\r\x0b\x0c\u2028\u2029"

# Abbreviations of every 3.4.1 list (ABBREV1, its capital-first states, ABBREV2/4, ABBREV3, acronyms) and what may
# follow their period: digits (ABBREV3's number context, the ".2" a pushed-back period forms), sentence ends
# ({SENTEND}: spaces, a capital, an SGML tag), letters, punctuation.
ABBREVIATIONS = [
    "sq", "ft", "Inc", "etc", "Jan", "Sept", "Thurs", "Calif", "Mass", "mass", "Ark", "Ph.D", "Ed.D", "al", "seq",
    "Bldg", "Corp", "Ltd", "Jr", "Bros", "Esq", "est", "ext", "tel", "No", "Nos", "Prop", "fig", "figs", "ca", "art",
    "pp", "op", "Mr", "Mrs", "Dr", "St", "vs", "v", "cf", "a.k.a", "Alex", "Wm", "U.S", "e.g", "i.e", "p", "A",
    "Natl", "Mfg", "sec", "rs", "Pt", "approx",
]  # fmt: skip
AFTER_ABBREVIATION = [
    "2", "25", "5a", ".5", " 2", "\u00a02", "  2", " A", "  a", " <b>", " <b> x", "\u00a0A", "\t ", " ", "",
    ".", "..", "...", ". . .", ",", ",2", ";", "-2", "'s", "\u0661", "\u07c12", "\u0301", "\u03a3", "a", "x.com",
    "@x.org", "-year", "/2",
]  # fmt: skip
# Final sigma in every token kind: cased and uncased letters, marks (non-spacing, enclosing, spacing), format
# characters, connectors and mid-word characters, numbers, apostrophes, around U+03A3.
UNI = [
    "\u03a3", "\u03a3", "\u03a3", "\u03c3", "\u03c2", "\u0391", "\u039f", "a", "B", "x", "1", "2", "\u00e9", "\u00df",
    "\u0130", "\u01c5", "\u02bc", "\u02b0", "\u0345", "\u0301", "\u0301", "\u0488", "\u180b", "\u0903", "\u200d",
    "\u200b", "\u200e", "\ufeff", "\u00ad", "_", "_", "\u203f", "-", ".", ",", "'", "\u2019", "\u2018", "`", '"',
    "\u2027", "\u066b", "\u00bd", "\u2162", "\u0661", "\u65e5", "\u30a2", "\uac00", "\u05e9", "\u0416",
    "\u0915", "\u094d", "&eacute;", "!", "@", "#", "/", ":", "\u00ab", "\u2013", "\u2160", "\u0130", "\u0131",
    "\u017f", "\u212a",
]  # fmt: skip
TLDS = ["com", "org", "net", "edu", "de", "\u03a3\u03a3", "co.uk", "txt", "x"]


def _piece(rng: random.Random, lo: int = 1, hi: int = 6) -> str:
    return "".join(rng.choice(UNI) for _ in range(rng.randint(lo, hi)))


def unicode_token(rng: random.Random) -> str:
    """One token-like string of a random kind (word, e-mail, URL, hashtag, hyphenated, apostrophe word, file
    name, number, SGML tag, smiley neighbourhood) built of Unicode letters, marks and sigmas."""
    p = lambda lo=1, hi=6: _piece(rng, lo, hi)
    kind = rng.randrange(12)
    if kind == 0:
        return p()
    if kind == 1:
        return p() + "@" + p() + "." + rng.choice(TLDS)
    if kind == 2:
        return rng.choice(["<", "&lt;", ""]) + "a" + p() + "@" + p() + "." + p() + rng.choice([">", "&gt;", ""])
    if kind == 3:
        return rng.choice(["http://", "https://", "www."]) + p() + "." + rng.choice(TLDS) + "/" + p()
    if kind == 4:
        return p() + "." + rng.choice(TLDS) + rng.choice(["", "/" + p(), "/"])
    if kind == 5:
        return rng.choice("@#") + p()
    if kind == 6:
        return p() + rng.choice(["-", "\u2010", "_", "--"]) + p()
    if kind == 7:
        return p() + rng.choice(APOSTROPHES) + p()
    if kind == 8:
        return p() + "." + rng.choice(["txt", "c", "x", "pdf", "TXT"])
    if kind == 9:
        return rng.choice(["1", "12", "3.5", "1,000", ".5"]) + p()
    if kind == 10:
        return "<" + rng.choice(["a", "b", "x_"]) + p(0, 3) + rng.choice([">", "/>", " x=1>"])
    return rng.choice(ABBREVIATIONS) + "." + p(0, 3)


def abbreviation_case(rng: random.Random) -> str:
    """An abbreviation (any case) and what follows its period, with a word or two around."""
    a = rng.choice(ABBREVIATIONS)
    if rng.random() < 0.3:
        a = a.upper() if rng.random() < 0.5 else a.lower()
    if rng.random() < 0.1:
        a = "".join(CASELESS.get(ch, ch) for ch in a)
    s = a + "." + rng.choice(AFTER_ABBREVIATION)
    if rng.random() < 0.5:
        s = rng.choice(FRAGMENTS) + rng.choice([" ", "", "-", "\u00a0"]) + s
    return s


NUMBERS = ["1", "12", "911", "0", "3.5", "1,000", "07", "1st", "\u0661"]
EXTENSIONS = ["c", "txt", "TXT", "x", "pdf", "docx", "gz", "tar.gz", "cd", "c1", "ab", "h", "jpg"]
CAPTION_WORDS = ["a", "the", "dog", "Man", "A", "The", "sits", "on", "file", "see", "I"]


def shape_case(rng: random.Random) -> str:
    """A number, a dot and letters (``1.c``, ``12.ab.x``), a file name (``file 1.txt``, ``a.b.pdf``) or an
    abbreviation, at the start, in the middle or at the end of a caption, with what may follow it there."""
    kind = rng.randrange(3)
    if kind == 0:
        tok = rng.choice(NUMBERS) + "." + rng.choice([*EXTENSIONS, "a", "C", "e"]) + rng.choice(["", "", ".", "s", "2"])
    elif kind == 1:
        name = rng.choice(["file", "a", "x9", "my_file", "1", "12b", "IMG", "a.b", "\u00e9t\u00e9"])
        tok = name + rng.choice([" ", "", ".", "-"]) + rng.choice([*NUMBERS[:3], "9b", "a"]) + "."
        tok += rng.choice(EXTENSIONS)
    else:
        tok = rng.choice(ABBREVIATIONS) + "."
    words = [rng.choice(CAPTION_WORDS) for _ in range(rng.randint(0, 4))]
    at = rng.choice([0, len(words) // 2, len(words)])  # start, middle, end
    s = " ".join([*words[:at], tok, *words[at:]])
    return s + rng.choice(["", "", " ", ".", "!", "?", ",", " .", "\u00a0"])


def generate(seed: int, n: int) -> list[str]:
    """n strings, deterministic in (seed, n): fragment chains joined by rule-trigger separators, and character soup."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.06:
            s = shape_case(rng)
        elif r < 0.1:
            s = abbreviation_case(rng)
        elif r < 0.2:
            s = rng.choice([" ", "", "\u00a0"]).join(unicode_token(rng) for _ in range(rng.randint(1, 3)))
        elif r < 0.55:
            parts = []
            for _ in range(rng.randint(1, 8)):
                frag = rng.choice(FRAGMENTS)
                if rng.random() < 0.15:
                    frag = frag.upper() if rng.random() < 0.5 else frag.capitalize()
                if rng.random() < 0.15:  # swap the apostrophe / quote variant
                    frag = frag.replace("'", rng.choice(APOSTROPHES)).replace('"', rng.choice(QUOTES))
                if rng.random() < 0.05:  # a letter of a %caseless literal by its non-ASCII case partner
                    frag = "".join(CASELESS.get(ch, ch) if rng.random() < 0.5 else ch for ch in frag)
                parts += [frag, rng.choice(SEPARATORS)]
            s = "".join(parts)
        elif r < 0.85:
            s = "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 16)))
        else:  # a short fragment pair with one soup character in between: the boundary cases
            s = rng.choice(FRAGMENTS) + rng.choice(CHARS) + rng.choice(FRAGMENTS) + rng.choice(CHARS)
        out.append(s.translate({ord(c): " " for c in LINE_BREAKS + "\n"}))
    return out


def bmp_code_points() -> list[int]:
    """Every code point of the Basic Multilingual Plane but the surrogates and the line breaks (LINE_BREAKS, '\n')."""
    skip = set(map(ord, LINE_BREAKS + "\n"))
    return [c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF and c not in skip]


def code_point_cases(code_points: list[int]) -> list[str]:
    """Each code point inside a word, alone and between digits, one caption a code point, then a plain caption (so
    the last one has the trailing context of the others): the classes the Java lexer gives characters
    (csrc/captioning/ptb/gen_ptb_tables.py)."""
    return [f"a{chr(c)}b {chr(c)} 1{chr(c)}2 z" for c in code_points] + ["end"]


def overridden_code_points() -> list[int]:
    """The code points whose lexer class is not Unicode 14's (gen_ptb_tables.py's JAVA_UNKNOWN and JAVA_LETTERS)."""
    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "csrc", "captioning", "ptb", "gen_ptb_tables.py"
    )
    spec = importlib.util.spec_from_file_location("gen_ptb_tables", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [c for a, b in mod.JAVA_UNKNOWN + mod.JAVA_LETTERS for c in range(a, b + 1)]


def java_jar() -> str:
    import pycocoevalcap.tokenizer.ptbtokenizer as m

    return os.path.join(os.path.dirname(os.path.abspath(m.__file__)), "stanford-corenlp-3.4.1.jar")


def java_lines(captions: list[str]) -> list[str]:
    """Raw Java PTBTokenizer lines for captions joined by '\\n' (pycocoevalcap's command, one JVM)."""
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write("\n".join(captions).encode())
        path = f.name
    try:
        cmd = ["java", "-cp", java_jar(), "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines", "-lowerCase", path]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout.decode()
    finally:
        os.remove(path)
    return out.split("\n")


def java_tokenize(captions: list[str]) -> list[str]:
    """pycocoevalcap 1.2's tokenize() output per caption: Java lines, then its rstrip / split(' ') / filter."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS

    lines = java_lines(captions)
    if len(lines) < len(captions):
        raise RuntimeError(f"Java returned {len(lines)} lines for {len(captions)} captions")
    return [" ".join(w for w in line.rstrip().split(" ") if w not in PUNCTUATIONS) for line in lines[: len(captions)]]


# Calls the jar's PTBTokenizer.main once per listed file in one JVM, each file's output followed by "\x01\n".
HARNESS = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
public class PtbMainPerFile {
  public static void main(String[] a) throws Exception {
    PrintStream out = System.out;
    for (String path : Files.readAllLines(Paths.get(a[0]), StandardCharsets.UTF_8)) {
      ByteArrayOutputStream buf = new ByteArrayOutputStream();
      System.setOut(new PrintStream(buf, true, "UTF-8"));  // main closes its output
      edu.stanford.nlp.process.PTBTokenizer.main(new String[] {"-preserveLines", "-lowerCase", path});
      out.write(buf.toByteArray());
      out.write(new byte[] {1, 10});
    }
    out.flush();
  }
}
"""


def java_alone(captions: list[str]) -> list[str]:
    """pycocoevalcap's output for each caption tokenized alone (the whole file: end-of-file trailing context)."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "PtbMainPerFile.java"), "w") as f:
            f.write(HARNESS)
        subprocess.run(["javac", "-cp", java_jar(), "-d", d, f.name], check=True)
        paths = []
        for k, c in enumerate(captions):
            paths.append(os.path.join(d, f"{k}.txt"))
            with open(paths[-1], "wb") as f:
                f.write(c.encode())
        with open(os.path.join(d, "list.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(paths))
        cmd = ["java", "-cp", java_jar() + os.pathsep + d, "PtbMainPerFile", f.name]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout.decode()
    outs = out.split("\x01\n")[: len(captions)]
    if len(outs) < len(captions):
        raise RuntimeError(f"Java returned {len(outs)} files for {len(captions)}")
    return [" ".join(w for w in o.split("\n")[0].rstrip().split(" ") if w not in PUNCTUATIONS) for o in outs]


def run(
    n: int, seed: int, batch: int = 50000, show: int = 20, alone_every: int = 50
) -> tuple[int, list[tuple[str, str, str]]]:
    """Differences over n strings in batches, and over every alone_every-th string tokenized alone."""
    from vlkernels.captioning import ptb_tokenize

    caps = generate(seed, n)
    bad = []
    for b in range(0, n, batch):
        chunk = caps[b : b + batch]
        want, got = java_tokenize(chunk), ptb_tokenize(chunk)
        bad += [(chunk[i], want[i], got[i]) for i in range(len(chunk)) if want[i] != got[i]]
        alone = chunk[::alone_every] if alone_every else []
        want = java_alone(alone)
        got = [ptb_tokenize([c])[0] for c in alone]
        bad += [(alone[i] + "  [alone]", want[i], got[i]) for i in range(len(alone)) if want[i] != got[i]]
        print(f"{b + len(chunk)} / {n}: {len(bad)} differences", file=sys.stderr, flush=True)
    for raw, w, g in bad[:show]:
        print(f"{raw!r}\n  java      {w!r}\n  vlkernels {g!r}")
    return n, bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=50000)
    ap.add_argument(
        "--write-corpus",
        help="write {'in_order': [[input, java_output], ...] (HARD_CASES + generated), 'alone': [...] (ALONE_CASES + "
        "every 50th generated string, each the whole file)} as JSON",
    )
    ap.add_argument(
        "--write-code-points",
        help="write [[input, java_output], ...] of code_point_cases(overridden_code_points()) as JSON and exit",
    )
    args = ap.parse_args()
    if args.write_code_points:
        caps = code_point_cases(overridden_code_points())
        with open(args.write_code_points, "w", encoding="utf-8") as f:
            json.dump([[c, w] for c, w in zip(caps, java_tokenize(caps))], f, ensure_ascii=True, indent=0)
        return
    t0 = time.time()
    n, bad = run(args.n, args.seed, args.batch)
    java = subprocess.run(["java", "-version"], stderr=subprocess.PIPE, check=False).stderr.decode().splitlines()[0]
    print(
        f"{datetime.date.today()} seed={args.seed}: {n} strings, {len(bad)} differences, "
        f"{time.time() - t0:.0f} s, {java}, CoreNLP 3.4.1"
    )
    if args.write_corpus:
        caps = HARD_CASES + generate(args.seed, args.n)
        alone = ALONE_CASES + generate(args.seed, args.n)[::50]
        corpus = {
            "in_order": [[c, w] for c, w in zip(caps, java_tokenize(caps))],
            "alone": [[c, w] for c, w in zip(alone, java_alone(alone))],
        }
        with open(args.write_corpus, "w", encoding="utf-8") as f:
            json.dump(corpus, f, ensure_ascii=True, indent=0)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
