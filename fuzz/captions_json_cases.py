"""Generated and mutated captions files, and the differential check of the C++ captions reader against json.load
and the Python reader. Shared by the fuzz target `fuzz_captions_json.py` and `tests/test_captioning_files.py`.

The C++ reader (`evaluate_captions(path, path)`) must agree with the Python path (`json.loads` of the bytes, then
`evaluate_captions(obj, obj)`): both accept with equal results (every score and per-image value, image ids exact),
or both refuse with a ValueError. Deliberate rules of both readers, checked too: a UTF-8 byte order mark is skipped
(as `json.loads` does with bytes); UTF-16/UTF-32 text is refused (`json.loads` of bytes would decode it).
"""

from __future__ import annotations

import codecs
import json
import os
import random
import tempfile
from typing import Any

from vlkernels.captioning import evaluate_captions

WORDS = ["a", "dog", "cat", "runs", "on", "the", "grass", "ü", "日本", "\\u00e9", "\\ud83d\\ude00", "x\\ty", "\\\\"]
# Ids at the edges of the integer widths a reader might use (int32, float64's exact range, int64, beyond).
EDGE_IDS = [0, -0, 1, -1, 2**31 - 1, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 + 1, 10**30]


def _caption(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))


def _id_text(rng: random.Random, ids: list) -> str:
    i = rng.choice(ids)
    return f'"{i}"' if isinstance(i, str) else str(i)


def generate(rng: random.Random) -> tuple[bytes, bytes]:
    """A (references, results) pair of JSON documents, valid or nearly so, in one of the three layouts."""
    ids: list = rng.sample(EDGE_IDS, rng.randint(1, 4)) + [rng.randint(-5, 5) for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.2:
        ids = [str(i) for i in ids]
    ids = list(dict.fromkeys(ids))
    layout = rng.choice(["records", "coco", "dict"])
    recs = [f'{{"image_id": {_id_text(rng, ids)}, "caption": "{_caption(rng)}"}}' for _ in range(rng.randint(1, 8))]
    if layout == "records":
        refs = "[" + ", ".join(recs) + "]"
    elif layout == "coco":
        extra = rng.choice(['"info": {}, ', '"images": [], ', ""])
        refs = "{" + extra + '"annotations": [' + ", ".join(recs) + "]}"
    else:
        ids = [str(i) for i in ids]
        refs = "{" + ", ".join(f'"{i}": ["{_caption(rng)}", "{_caption(rng)}"]' for i in ids) + "}"
    pred_ids = rng.sample(ids, rng.randint(1, len(ids)))
    preds = "[" + ", ".join(f'{{"image_id": {_id_text(rng, [i])}, "caption": "{_caption(rng)}"}}' for i in pred_ids)
    return refs.encode(), (preds + "]").encode()


def _duplicate_key(rng: random.Random, text: str) -> str:
    """Repeats one member of an object with another value (json.load keeps the last)."""
    for _ in range(5 if text else 0):
        at = text.find('"', rng.randrange(len(text)))
        if at < 0:
            return text
        end = text.find('": ', at + 1)
        if end < 0 or end - at > 40 or text[at - 1] not in "{, ":
            continue
        key = text[at : end + 1]
        value = rng.choice(['"a dog"', "[]", '["a cat", "x"]', "5", "null", "1.5", "[" + text[:0] + '"b"]', "{}"])
        return text[:at] + key + ": " + value + ", " + text[at:]
    return text


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One of: duplicate keys, a byte order mark, another encoding, deep nesting, huge numbers, id edge values,
    truncation, a flipped byte."""
    kind = rng.randrange(9)
    text = data.decode("utf-8", "surrogateescape")  # earlier mutations may have broken the UTF-8
    enc = lambda s: s.encode("utf-8", "surrogateescape")
    if kind == 0:
        return enc(_duplicate_key(rng, text))
    if kind == 1:
        return codecs.BOM_UTF8 + data
    if kind == 2:
        return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]), "surrogatepass")
    if kind == 3:
        depth = rng.choice([3, 50, 2000, 20000])
        nested = "[" * depth + "1" + "]" * depth
        return enc(text.replace('"caption": ', '"x": ' + nested + ', "caption": ', 1))
    if kind == 4:
        big = rng.choice(["1" + "0" * 400, "1e400", "-1e-400", "123456789012345678901234567890.5", "1E2"])
        return enc(text.replace('"image_id": ', '"image_id": ' + big + ', "image_id": ', 1))
    if kind == 5:
        return enc(text.replace('"image_id": ', f'"image_id": {rng.choice(EDGE_IDS)}, "image_id": ', 1))
    if kind == 6:
        return data[: rng.randrange(len(data) + 1)]
    if kind == 7 and data:
        b = bytearray(data)
        b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    return data


def _python_path(refs: bytes, preds: bytes, tokenize: bool) -> Any:
    objs = []  # json.loads(bytes) skips a UTF-8 byte order mark itself
    for raw in (refs, preds):
        if raw[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) or raw[:1] == b"\0" or raw[1:2] == b"\0":
            raise ValueError("captions files must be UTF-8")  # json.loads would decode UTF-16/32: refused by rule
        try:
            objs.append(json.loads(raw))
        except RecursionError:
            raise ValueError("nested too deeply") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(str(e)) from None
    return evaluate_captions(objs[0], objs[1], tokenize=tokenize)


def _outcome(f, *args, **kwargs) -> tuple[str, Any]:
    try:
        return "ok", f(*args, **kwargs)
    except ValueError as e:
        return "ValueError", str(e)


class Differential:
    """Writes each pair to two files in a private folder and compares the readers."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="vlk_captions_json_")
        self.refs = os.path.join(self._dir, "refs.json")
        self.preds = os.path.join(self._dir, "preds.json")

    def check(self, refs: bytes, preds: bytes, tokenize: bool = False) -> str:
        """Raises AssertionError when the C++ reader and the Python path disagree; returns the common outcome."""
        with open(self.refs, "wb") as f:
            f.write(refs)
        with open(self.preds, "wb") as f:
            f.write(preds)
        cpp = _outcome(evaluate_captions, self.refs, self.preds, tokenize=tokenize)
        py = _outcome(_python_path, refs, preds, tokenize)
        assert cpp[0] == py[0], f"C++ reader: {cpp}\nPython path: {py}\nrefs={refs[:300]!r}\npreds={preds[:300]!r}"
        if cpp[0] == "ok":
            assert cpp[1] == py[1], f"scores differ\nC++: {cpp[1]}\nPython: {py[1]}\nrefs={refs[:300]!r}"
        elif cpp[1] != py[1] and not any(name in cpp[1] for name in ("refs.json", "preds.json", "results")):
            # (an error about the content as a whole, e.g. no reference word at all, is the same on both paths)
            raise AssertionError(f"the C++ reader's error does not name the file: {cpp[1]}")
        return cpp[0]
