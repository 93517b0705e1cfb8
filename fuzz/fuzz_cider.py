"""Fuzz target: the caption scorers (Cider, CiderOriginal, Bleu, Rouge, CiderD) and the COCO caption-file reader.

Each input builds, from a fuzzed byte stream, either a pycocoevalcap-layout pair of dicts (small vocabulary so
n-grams repeat; empty captions, Unicode whitespace, lone surrogates, non-str objects, wrong list shapes), a CiderD
corpus of str or token-id captions (ids anywhere in int64, mixed kinds), or raw bytes given to the file reader as a
results file. Valid pre-tokenized input must score exactly as pycocoevalcap 1.2 (the oracle); invalid input must
raise ValueError or TypeError. Any other exception, a sanitizer report or a crash is a finding.

    python fuzz/run.py --seconds 600 cider
"""

import os
import tempfile
import warnings

import atheris
import numpy as np

from vlkernels.captioning import Bleu, Cider, CiderD, CiderOriginal, Rouge, evaluate_captions

warnings.simplefilter("ignore")  # np.mean of an empty array in Rouge: pycocoevalcap warns too
WORDS = ["a", "b", "dog", "ü", "日本", "x y", "", " ", "\u3000", "\t", "\ud800", "a\x00b"]
_TMP = tempfile.mkdtemp(prefix="fuzz_cider_")
_REFS = os.path.join(_TMP, "refs.json")
with open(_REFS, "w", encoding="utf-8") as f:
    f.write('[{"image_id": 1, "caption": "a dog"}, {"image_id": "1", "caption": "a cat"}]')

try:
    from pycocoevalcap.bleu.bleu import Bleu as PBleu
    from pycocoevalcap.cider.cider import Cider as PCider
    from pycocoevalcap.rouge.rouge import Rouge as PRouge
except ImportError:  # the oracle is optional; crashes and error types are still checked
    PBleu = PCider = PRouge = None


def _caption(fdp: atheris.FuzzedDataProvider):
    kind = fdp.ConsumeIntInRange(0, 40)
    if kind == 0:
        return fdp.ConsumeIntInRange(-3, 3)  # not a str
    if kind == 1:
        return None
    if kind == 2:
        return fdp.ConsumeUnicode(12)
    return " ".join(WORDS[fdp.ConsumeIntInRange(0, len(WORDS) - 1)] for _ in range(fdp.ConsumeIntInRange(0, 9)))


def _dicts(fdp: atheris.FuzzedDataProvider):
    gts, res = {}, {}
    for i in range(fdp.ConsumeIntInRange(0, 6)):
        refs = [_caption(fdp) for _ in range(fdp.ConsumeIntInRange(0, 4))]
        cands = [_caption(fdp) for _ in range(1 if fdp.ConsumeIntInRange(0, 20) else fdp.ConsumeIntInRange(0, 2))]
        gts[i] = refs if fdp.ConsumeIntInRange(0, 30) else tuple(refs)
        res[i] = cands
    if fdp.ConsumeIntInRange(0, 30) == 0:
        res[99] = ["a"]
    return gts, res


def _plain(gts, res) -> bool:
    """Whether pycocoevalcap accepts the input as is (its asserts and str.split on valid str captions)."""
    if gts.keys() != res.keys() or not gts:
        return False
    for k in gts:
        if not isinstance(gts[k], list) or not gts[k] or not isinstance(res[k], list) or len(res[k]) != 1:
            return False
        for c in gts[k] + res[k]:
            if not isinstance(c, str):
                return False
            try:
                c.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return any(c.split() for v in gts.values() for c in v)


def _scorers(fdp, gts, res):
    plain = _plain(gts, res)
    for ours, theirs in ((Cider(), PCider), (CiderOriginal(), None), (Rouge(), PRouge)):
        try:
            got = ours.compute_score(gts, res)
        except (ValueError, TypeError):
            if plain and theirs is not None:
                raise
            continue
        if plain and theirs is not None:
            want = theirs().compute_score(gts, res)
            assert np.array_equal(np.asarray(got[1]), np.asarray(want[1]), equal_nan=True), (gts, res)
    try:
        got = Bleu().compute_score(gts, res, verbose=0)
    except (ValueError, TypeError):
        if plain:
            raise
        return
    if plain and PBleu is not None:
        assert got == PBleu().compute_score(gts, res, verbose=0), (gts, res)


def _ids(fdp: atheris.FuzzedDataProvider, rows: int) -> np.ndarray:
    width = fdp.ConsumeIntInRange(0, 6)
    vals = [fdp.ConsumeIntInRange(-(2**63), 2**63 - 1) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 5)]
    vals += [fdp.ConsumeIntInRange(0, 5) for _ in range(rows * width)]
    return np.asarray(vals[: rows * width], dtype=np.int64).reshape(rows, width)


def _ciderd(fdp: atheris.FuzzedDataProvider):
    groups = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        if fdp.ConsumeBool():
            groups.append([_caption(fdp) for _ in range(fdp.ConsumeIntInRange(0, 3))])
        else:
            groups.append(_ids(fdp, fdp.ConsumeIntInRange(0, 3)))
    try:
        scorer = CiderD(groups, eos=fdp.ConsumeIntInRange(0, 2) if fdp.ConsumeBool() else None)
        cands = [_caption(fdp) for _ in groups] if fdp.ConsumeBool() else _ids(fdp, len(groups))
        out = scorer.score(cands, groups)
        assert out.shape == (len(groups),)
    except (ValueError, TypeError):
        pass


def _file(data: bytes):
    path = os.path.join(_TMP, "results.json")
    with open(path, "wb") as f:
        f.write(data)
    try:
        evaluate_captions(_REFS, path, tokenize=False, per_image=False)
    except ValueError:
        pass


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    which = fdp.ConsumeIntInRange(0, 3)
    if which == 0:
        _scorers(fdp, *_dicts(fdp))
    elif which == 1:
        _ciderd(fdp)
    else:
        _file(fdp.ConsumeBytes(fdp.remaining_bytes()))
