"""PTB tokenization of captions, identical to pycocoevalcap 1.2's ``PTBTokenizer`` and without Java.

pycocoevalcap runs Stanford CoreNLP 3.4.1's PTBTokenizer (``-preserveLines -lowerCase``) on all captions written to
one file, one per line, then drops the tokens in its ``PUNCTUATIONS`` list. :func:`ptb_tokenize` does the same work
in C++ (multithreaded, GIL released). Conventions and the one deliberate difference (line breaks inside a caption)
are documented in ``vlkernels/captioning/README_tokenizer.md``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from vlkernels import _ext

# pycocoevalcap 1.2 ptbtokenizer.PUNCTUATIONS, kept here for reference and for tests.
PUNCTUATIONS = (
    "''",
    "'",
    "``",
    "`",
    "-LRB-",
    "-RRB-",
    "-LCB-",
    "-RCB-",
    ".",
    "?",
    "!",
    ",",
    ":",
    "-",
    "--",
    "...",
    ";",
)


# Longest caption the C++ lexer takes, in UTF-16 code units (kMaxCaptionUnits in csrc/captioning/ptb_tokenizer.h:
# it indexes one caption plus 256 units of trailing context with a 32-bit int).
MAX_CAPTION_UNITS = 2**31 - 1 - 256 - 1


def _utf16_units(caption: str | bytes, utf8: bytes) -> int:
    """UTF-16 code units of a valid caption, exact only above MAX_CAPTION_UNITS (code points <= units <= bytes)."""
    if len(utf8) <= MAX_CAPTION_UNITS:
        return len(utf8)
    text = caption if isinstance(caption, str) else caption.decode("utf-8")
    return len(text) if len(text) > MAX_CAPTION_UNITS else len(text.encode("utf-16-le")) // 2


def _encode(captions: Sequence[str | bytes], what: str) -> list[bytes]:
    if isinstance(captions, (str, bytes)) or not isinstance(captions, Sequence):
        raise ValueError(f"{what} must be a sequence of strings, got {type(captions).__name__}")
    out = []
    for i, c in enumerate(captions):
        if isinstance(c, str):
            try:
                out.append(c.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise ValueError(f"{what}[{i}] is not valid Unicode text ({e.reason} at index {e.start})") from None
        elif isinstance(c, bytes):
            try:
                c.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{what}[{i}] is not valid UTF-8 ({e.reason} at byte {e.start})") from None
            out.append(c)
        else:
            raise ValueError(f"{what}[{i}] must be a str (or UTF-8 bytes), got {type(c).__name__}")
        units = _utf16_units(c, out[-1])
        if units > MAX_CAPTION_UNITS:
            raise ValueError(
                f"{what}[{i}] has {units} UTF-16 code units; the PTB tokenizer takes at most {MAX_CAPTION_UNITS} "
                "per caption"
            )
    return out


def ptb_tokenize(captions: Sequence[str | bytes]) -> list[str]:
    """Tokenize captions exactly as pycocoevalcap 1.2's ``PTBTokenizer`` does, in C++.

    For each caption: Stanford PTB tokenization (CoreNLP 3.4.1 rules: ``n't``/``'s`` split off, quotes to
    ````/''``, brackets to ``-lrb-``/``-rrb-``/``-lsb-``..., abbreviations such as ``mr.`` kept whole, ...),
    lower-casing, then removal of the tokens in pycocoevalcap's ``PUNCTUATIONS``; the kept tokens joined by one
    space. ``-lrb-``-style tokens are kept, as in pycocoevalcap (its list holds only the upper-case forms).

    .. math::
        \\mathrm{out}_i = \\mathrm{join}(\\{t \\in \\mathrm{PTB}_{3.4.1}(\\mathrm{lower}(c_i)) : t \\notin P\\})

    Args:
        captions: ``N`` captions (``str``, or ``bytes`` holding UTF-8). Their order matters the way it does in
            pycocoevalcap: a caption is read with the start of the next ones as trailing context (e.g. a final
            ``"P."`` loses its period when the next caption starts with ``"A "``).

    Returns:
        ``N`` tokenized captions (``str``), one per input, in order.

    Raises:
        ValueError: ``captions`` is not a sequence, an item is not ``str``/``bytes``, a ``str`` holds lone
            surrogates, a ``bytes`` item is not valid UTF-8, or a caption is longer than ``MAX_CAPTION_UNITS``
            (2**31 - 258) UTF-16 code units -- the message names the item index.

    Note:
        CPU only, deterministic, multithreaded over captions (``vlkernels.set_num_threads``). Unlike pycocoevalcap,
        a line break inside a caption (``\\r``, U+2028, U+2029, U+000B, U+000C) acts as a space: pycocoevalcap
        treats it as a caption boundary and shifts every later caption to the wrong image.

    Example:
        >>> ptb_tokenize(["A man's dog isn't \\"happy\\" (really)."])
        ["a man 's dog is n't happy -lrb- really -rrb-"]
    """
    if isinstance(captions, (str, bytes)) or not isinstance(captions, Sequence):
        raise ValueError(f"captions must be a sequence of strings, got {type(captions).__name__}")
    c = _ext.load()
    # The C++ side reads lists/tuples of str/bytes directly and answers None for anything it does not take (another
    # sequence type, a bad item); _encode() then converts, or names the bad item.
    out = c.ptb_tokenize(captions)
    if out is None:
        out = c.ptb_tokenize(_encode(captions, "captions"))
        if out is None:  # _encode() validated every item; C++ agreeing is checked by the tests
            raise AssertionError("ptb_tokenize rejected captions that _encode() accepted")
    return out


def ptb_tokens(caption: str, following: str = "") -> list[str]:
    """Raw PTBTokenizer tokens of one caption (lower-cased, before the punctuation filter); for tests/debugging.

    ``following`` is read only as trailing context (what follows the caption in pycocoevalcap's input file, e.g.
    ``"\\nA dog ..."``).
    """
    (c, f) = _encode([caption, following], "caption/following")
    return _ext.load().ptb_tokens(c, f)


class PTBTokenizer:
    """Drop-in replacement for ``pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer`` (no Java).

    Example:
        >>> PTBTokenizer().tokenize({1: [{"caption": "A dog."}, {"caption": "Two cats!"}]})
        {1: ['a dog', 'two cats']}
    """

    def tokenize(self, captions_for_image: Mapping[Hashable, Sequence[Mapping[str, str]]]) -> dict:
        """``{image_id: [{"caption": str}, ...]}`` -> ``{image_id: [tokenized str, ...]}``, in the input order.

        Raises:
            ValueError: the input is not a mapping of lists of ``{"caption": str}`` dicts; the message names the
                image id and position.
        """
        if not isinstance(captions_for_image, Mapping):
            raise ValueError(f"captions_for_image must be a dict, got {type(captions_for_image).__name__}")
        # One C++ call for a plain dict of lists/tuples of {"caption": str} dicts; None sends anything else (and
        # every error) down the general path below, which names the problem.
        out = _ext.load().ptb_tokenize_dict(captions_for_image, allow_str=False, drop_empty=True)
        if out is not None:
            return out
        keys, texts = [], []
        for k, v in captions_for_image.items():
            if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
                raise ValueError(f"captions_for_image[{k!r}] must be a list of {{'caption': str}} dicts")
            for j, c in enumerate(v):
                if not isinstance(c, Mapping) or "caption" not in c:
                    raise ValueError(f"captions_for_image[{k!r}][{j}] must be a dict with a 'caption' key")
                cap = c["caption"]
                if not isinstance(cap, str):
                    raise ValueError(
                        f"captions_for_image[{k!r}][{j}]['caption'] must be a str, got {type(cap).__name__}"
                    )
                keys.append(k)
                texts.append(cap)
        try:
            out = ptb_tokenize(texts)
        except ValueError as e:
            raise ValueError(f"captions_for_image: {e}") from None
        result: dict = {}
        for k, t in zip(keys, out):
            result.setdefault(k, []).append(t)
        # Images with an empty caption list are absent from pycocoevalcap's output too.
        return result
