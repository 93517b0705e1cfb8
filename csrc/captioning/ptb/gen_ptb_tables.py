"""Generates ptb_tables.h: BMP code point classes used by the PTB tokenizer (csrc/captioning/ptb/ptb_text.cpp).

Run from the repository root: `python csrc/captioning/ptb/gen_ptb_tables.py`. The classes come from Python's unicodedata
and are written once, as one table of ranges each with the set of classes its code points are in (a code point is
often in several: written per class, the letter and cased-letter tables repeated long runs):
- letter: general category L* (what java.lang.Character.isLetter and JFlex's [:letter:] test),
- digit: category Nd (Character.isDigit, JFlex's [:digit:]),
- cased: categories Lu, Ll, Lt (the letters java.lang.ConditionalSpecialCasing calls cased, for the final-sigma
  rule; its few Other_Lowercase/Other_Uppercase additions are listed in code),
- spacing mark: category Mc (letters for the JDK's word boundaries, which the final-sigma rule uses),
- ignorable: categories Mn, Me, Cf (transparent to the JDK's word boundaries) but U+00AD, which the JDK's word rules
  list as a mid-word character,
- format: category Cf but U+00AD (transparent also right after a mid-word character, where a mark is not),
- numeric: categories Nd, Nl, No (numbers for the JDK's word boundaries);
and the lower-case map: one-to-one str.lower() mappings (java.lang.String.toLowerCase; the two context/length
special cases, U+0130 and final sigma, are handled in code).
Only the Basic Multilingual Plane is tabulated: the Java lexer reads UTF-16 units, so a supplementary code point
reaches it as two surrogates, which it never puts in a token.

The lexer's own letter and digit classes were generated (by JFlex, into the jar) from a Unicode older than 7.0, so
two lists below override Unicode 14 for them, both measured by running pycocoevalcap's Java tokenizer on every BMP
code point in three contexts (inside a word, alone, between digits; tests/test_captioning_tokenizer_java.py):
JAVA_UNKNOWN, letters and digits assigned since, which the lexer does not know (untokenizable: deleted), and
JAVA_LETTERS, letters then that Unicode 9.0 made non-spacing marks.
"""

import sys
import unicodedata
from pathlib import Path

# (class bit name, test), in bit order.
CLASSES = [
    ("kLetter", lambda cat, ch: cat.startswith("L")),
    ("kDigit", lambda cat, ch: cat == "Nd"),
    ("kCased", lambda cat, ch: cat in ("Lu", "Ll", "Lt")),
    ("kSpacingMark", lambda cat, ch: cat == "Mc"),
    ("kIgnorable", lambda cat, ch: cat in ("Mn", "Me", "Cf") and ch != "\u00ad"),
    ("kFormat", lambda cat, ch: cat == "Cf" and ch != "\u00ad"),
    ("kNumeric", lambda cat, ch: cat in ("Nd", "Nl", "No")),
]


# (first, last) code points, inclusive.
JAVA_UNKNOWN = [
    (0x037F, 0x037F), (0x0528, 0x052F), (0x0560, 0x0560), (0x0588, 0x0588), (0x05EF, 0x05EF), (0x0860, 0x086A),
    (0x0870, 0x0887), (0x0889, 0x088E), (0x08A1, 0x08A1), (0x08AD, 0x08C9), (0x0978, 0x0978), (0x0980, 0x0980),
    (0x09FC, 0x09FC), (0x0AF9, 0x0AF9), (0x0C34, 0x0C34), (0x0C5A, 0x0C5A), (0x0C5D, 0x0C5D), (0x0C80, 0x0C80),
    (0x0CDD, 0x0CDD), (0x0D04, 0x0D04), (0x0D54, 0x0D56), (0x0D5F, 0x0D5F), (0x0DE6, 0x0DEF), (0x0E86, 0x0E86),
    (0x0E89, 0x0E89), (0x0E8C, 0x0E8C), (0x0E8E, 0x0E93), (0x0E98, 0x0E98), (0x0EA0, 0x0EA0), (0x0EA8, 0x0EA9),
    (0x0EAC, 0x0EAC), (0x13F5, 0x13F5), (0x13F8, 0x13FD), (0x16F1, 0x16F8), (0x170D, 0x170D), (0x171F, 0x171F),
    (0x1878, 0x1878), (0x191D, 0x191E), (0x19B0, 0x19C0), (0x19C8, 0x19C9), (0x1B4C, 0x1B4C), (0x1C80, 0x1C88),
    (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1CF2, 0x1CF3), (0x1CFA, 0x1CFA), (0x2C2F, 0x2C2F), (0x2C5F, 0x2C5F),
    (0x312E, 0x312F), (0x31BB, 0x31BF), (0x4DB6, 0x4DBF), (0x9FCD, 0x9FFF), (0xA698, 0xA69D), (0xA78F, 0xA78F),
    (0xA794, 0xA79F), (0xA7AB, 0xA7CA), (0xA7D0, 0xA7D1), (0xA7D3, 0xA7D3), (0xA7D5, 0xA7D9), (0xA7F2, 0xA7F7),
    (0xA8FD, 0xA8FE), (0xA9E0, 0xA9E4), (0xA9E6, 0xA9FE), (0xAA7E, 0xAA7F), (0xAB30, 0xAB5A), (0xAB5C, 0xAB69),
    (0xAB70, 0xABBF),
]  # fmt: skip
JAVA_LETTERS = [(0x1885, 0x1886)]


def _in(c: int, ranges) -> bool:
    return any(a <= c <= b for a, b in ranges)


def class_ranges():
    """[(lo, hi, bits)]: maximal runs of BMP code points (surrogates excluded) with the same non-empty class set."""
    out = []
    for c in range(0x10000):
        ch = chr(c)
        cat = unicodedata.category(ch)
        if 0xD800 <= c <= 0xDFFF or _in(c, JAVA_UNKNOWN):
            bits = 0
        elif _in(c, JAVA_LETTERS):
            bits = 1  # kLetter (not cased)
        else:
            bits = sum(1 << k for k, (_, test) in enumerate(CLASSES) if test(cat, ch))
        if out and bits and out[-1][2] == bits and out[-1][1] == c - 1:
            out[-1][1] = c
        elif bits:
            out.append([c, c, bits])
    return out


def rows_text(rows, per_line):
    return ",\n".join("  " + ", ".join(rows[k : k + per_line]) for k in range(0, len(rows), per_line)) + "\n};\n"


def main() -> None:
    lower = []
    for c in range(0x10000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        lo = chr(c).lower()
        if len(lo) == 1 and ord(lo) != c:
            lower.append((c, ord(lo)))
    bits = "".join(f"  {name} = {1 << k},\n" for k, (name, _) in enumerate(CLASSES))
    rows = [f"{{0x{a:04X}, 0x{b:04X}, {f}}}" for a, b, f in class_ranges()]
    pairs = [f"{{0x{a:04X}, 0x{b:04X}}}" for a, b in lower]
    text = (
        f"// Generated by gen_ptb_tables.py from Python {sys.version.split()[0]} unicodedata "
        f"{unicodedata.unidata_version}; do not edit.\n"
        + "enum CpClass : uint8_t {\n"
        + bits
        + "};\n"
        + "// Sorted, disjoint ranges and the CpClass bits of their code points (none: in no class).\n"
        + "static const CpClassRange kClassRanges[] = {\n"
        + rows_text(rows, 5)
        + "// Code point -> its lower case (lo -> hi), sorted by code point.\n"
        + "static const CpRange kLowerMap[] = {\n"
        + rows_text(pairs, 6)
    )
    Path(__file__).with_name("ptb_tables.h").write_text(text)


if __name__ == "__main__":
    main()
