"""atheris target: the PTB tokenizer on arbitrary text (crashes, sanitizer reports, contract violations).

    python fuzz/fuzz_ptb_tokenizer.py -runs=100000        # plain
    (under the sanitizer build: LD_PRELOAD the ASan runtime, as the fuzz README describes)

Each input is split into captions at byte 0x1E. Checked per call: one output str per caption, no ASCII space at
either end or doubled inside, no token of pycocoevalcap's PUNCTUATIONS list kept, the same output with every
C++ shortcut disabled (``_fast_paths=False``: every rule at every position), and invalid text refused with a
``ValueError`` rather than a crash.
"""

import sys

import atheris

with atheris.instrument_imports():
    from vlkernels import _ext
    from vlkernels.captioning import ptb_tokenize
    from vlkernels.captioning.tokenizer import PUNCTUATIONS

_C = _ext.load()
_PUNCT = set(PUNCTUATIONS)


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    as_str = fdp.ConsumeBool()
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    parts = raw.split(b"\x1e")
    if as_str:
        caps = [p.decode("utf-8", "replace") for p in parts]
    else:
        caps = parts  # bytes: possibly invalid UTF-8
    try:
        out = ptb_tokenize(caps)
    except ValueError:
        for p in caps:  # refused only when some item really is invalid UTF-8
            if isinstance(p, bytes):
                try:
                    p.decode("utf-8")
                except UnicodeDecodeError:
                    return
        raise
    assert len(out) == len(caps), (len(out), len(caps))
    for line in out:
        assert isinstance(line, str)
        if line:
            assert line == line.strip(" ") and "  " not in line, repr(line)
            assert not any(t in _PUNCT for t in line.split(" ")), repr(line)
    if all(isinstance(p, str) for p in caps):
        assert _C.ptb_tokenize(caps, _fast_paths=False) == out


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
