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


# Longest caption the C++ lexer takes, in UTF-16 code units (kMaxCaptionUnits in
# csrc/captioning/ptb/ptb_tokenizer.h: it indexes one caption plus 256 units of trailing context with a 32-bit int).
MAX_CAPTION_UNITS = 2**31 - 1 - 256 - 1


def _as_list(captions: Sequence[str | bytes], what: str) -> list | tuple:
    if isinstance(captions, (str, bytes)) or not isinstance(captions, Sequence):
        raise ValueError(f"{what} must be a sequence of strings, got {type(captions).__name__}")
    return captions if isinstance(captions, (list, tuple)) else list(captions)


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
    # C++ checks every item and raises the ValueError naming it.
    return _ext.load().ptb_tokenize(_as_list(captions, "captions"))


def ptb_tokens(caption: str, following: str = "") -> list[str]:
    """Raw PTBTokenizer tokens of one caption (lower-cased, before the punctuation filter); for tests/debugging.

    ``following`` is read only as trailing context (what follows the caption in pycocoevalcap's input file, e.g.
    ``"\\nA dog ..."``).
    """
    for what, s in (("caption", caption), ("following", following)):
        if not isinstance(s, str):
            raise ValueError(f"{what} must be a str, got {type(s).__name__}")
    try:
        c, f = caption.encode("utf-8"), following.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"caption/following is not valid Unicode text ({e.reason} at index {e.start})") from None
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
        # One C++ call; it checks every value and caption and raises the ValueError naming the image and position.
        d = captions_for_image if isinstance(captions_for_image, dict) else dict(captions_for_image)
        return _ext.load().ptb_tokenize_dict(d, allow_str=False, drop_empty=True, name="captions_for_image")
