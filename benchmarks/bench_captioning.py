"""Caption metrics: vlkernels' C++ CIDEr-D / SCST rewards against pycocoevalcap (Python) on real COCO captions.

The Karpathy-test cases run on the COCO captions shipped in the package (vlkernels.data); the 40,504-image val2014
case needs the shared caption data (../shared/data/captions or VLKERNELS_SHARED_DATA) and is skipped without it.
The raw-caption case times the whole path from strings: vlkernels' C++ PTB tokenizer + scorer against
pycocoevalcap's Java PTBTokenizer + Python scorer.
"""

import gzip
import json
from functools import cache
from pathlib import Path

import numpy as np

from vlkernels.testing import shared_data_dir

from .harness import Bench, Skip, register

TOL = 1e-12


@cache
def _golden(name: str):
    root = shared_data_dir()
    p = None if root is None else root / "captions" / "golden" / name
    if p is None or not p.exists():
        return None
    opener = gzip.open if name.endswith(".gz") else open
    with opener(p, "rt", encoding="utf-8") as f:
        return json.load(f)


def _karpathy(images: int, raw: bool):
    """Karpathy-test references and a human leave-one-out candidate per image, from the captions shipped in the
    package (CC BY 4.0), so the headline case runs on any machine. Tokenized input is made once, outside the timing,
    by vlkernels' PTB tokenizer (held equal to pycocoevalcap's Java tokenizer by the tests)."""
    from vlkernels.captioning import ptb_tokenize
    from vlkernels.data import karpathy_test_captions, leave_one_out

    caps = karpathy_test_captions()
    refs, cands = leave_one_out({k: caps[k] for k in list(caps)[:images]})
    if raw:
        return refs, cands
    return {k: ptb_tokenize(v) for k, v in refs.items()}, {k: ptb_tokenize(v) for k, v in cands.items()}


def _check_scores(out):
    ref = next(v for k, v in out.items() if k != "vlkernels")
    got = out["vlkernels"]
    if np.asarray(got[1]).shape != np.asarray(ref[1]).shape or np.abs(np.asarray(got[1]) - ref[1]).max() > TOL:
        raise AssertionError("per-image CIDEr-D differs from pycocoevalcap")


def _tokenized_bench(gts: dict, res: dict, **fields) -> Bench:
    """CIDEr-D of tokenized captions, vlkernels against pycocoevalcap, checked to TOL per image."""
    from pycocoevalcap.cider.cider import Cider as PCider

    from vlkernels.captioning import Cider

    return Bench(
        providers={
            "vlkernels": lambda: Cider().compute_score(gts, res),
            "pycocoevalcap": lambda: PCider().compute_score(gts, res),
        },
        baseline="pycocoevalcap",
        check=_check_scores,
        **fields,
    )


@register("captioning", "cider_karpathy", quick={"images": 500}, full={"images": 5000}, devices=("cpu",))
def _cider_karpathy(images: int, device: str):
    from pycocoevalcap.cider.cider import Cider as PCider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    from vlkernels.captioning import Cider

    gts, res = _karpathy(images, raw=False)
    raw = _karpathy(images, raw=True)
    gts_raw = {k: [{"caption": c} for c in v] for k, v in raw[0].items()}
    res_raw = {k: [{"caption": c} for c in v] for k, v in raw[1].items()}

    def pyc_raw():
        t = PTBTokenizer()
        return PCider().compute_score(t.tokenize(gts_raw), t.tokenize(res_raw))

    return [
        _tokenized_bench(
            gts,
            res,
            repeats=3,
            label="CIDEr-D Karpathy test, tokenized input",
            notes=f"{images} Karpathy-test images, human leave-one-out (4 refs, 1 candidate), tokenized input",
        ),
        Bench(
            providers={
                "vlkernels": lambda: Cider(tokenize=True).compute_score(gts_raw, res_raw),
                "pycocoevalcap": pyc_raw,
            },
            baseline="pycocoevalcap",
            check=_check_scores,
            repeats=3,
            mode="raw",
            label="CIDEr-D Karpathy test, raw strings (PTB tokenizer + scorer)",
            notes="raw captions: PTB tokenizer + scorer on both sides (C++ vs Java + Python)",
        ),
    ]


@register("captioning", "cider_val2014", quick={"images": 5000}, full={"images": 40504}, devices=("cpu",))
def _cider_val2014(images: int, device: str):

    allp = _golden("coco_val2014_captions_ptb.json.gz")
    if allp is None:
        raise Skip("needs the COCO val2014 captions of ../shared/data/captions (or VLKERNELS_SHARED_DATA)")
    ids = list(allp)[:images]
    # Held-out protocol: the last caption of each image is the candidate, the others the references.
    gts = {k: allp[k][:-1] for k in ids}
    res = {k: [allp[k][-1]] for k in ids}
    return _tokenized_bench(
        gts,
        res,
        repeats=1,
        label="CIDEr-D val2014 held-out human caption",
        notes=f"{images} val2014 images x 4-5 refs, tokenized input",
    )


@register(
    "captioning",
    "scst_rewards",
    quick={"images": 100, "samples": 5},
    full={"images": 1000, "samples": 5},
    devices=("cpu",),
)
def _scst(images: int, samples: int, device: str):
    from vlkernels.captioning import CiderD
    from vlkernels.captioning.reference import ciderd_ref

    # Document frequencies over all 5,000 Karpathy-test images (shipped captions, tokenized once outside the timing).
    all_refs, _ = _karpathy(5000, raw=False)
    scorer = CiderD(list(all_refs.values()))
    df = scorer.document_frequency()
    df_tuples = {tuple(k.split()): v for k, v in df.items()}
    groups = [all_refs[k] for k in list(all_refs)[:images]]
    # "Samples": other images' references stand in for sampled captions (varied lengths and overlaps).
    rng = np.random.default_rng(0)
    pool = [c for g in all_refs.values() for c in g]
    cands = [pool[int(i)] for i in rng.integers(0, len(pool), size=images * samples)]
    index = np.repeat(np.arange(images), samples)
    per_cand_refs = [groups[i] for i in index]

    def check(out):
        if np.abs(out["vlkernels"] - out["python_ciderD"]).max() > TOL:
            raise AssertionError("rewards differ from the Python CiderD reference")

    return Bench(
        providers={
            "vlkernels": lambda: scorer.score(cands, groups, index),
            "python_ciderD": lambda: ciderd_ref(cands, per_cand_refs, df_tuples, scorer.num_docs),
        },
        baseline="python_ciderD",
        check=check,
        repeats=2,
        label="SCST CiderD rewards, fixed df",
        notes=f"{images * samples} candidates/call ({images} images x {samples} samples), Karpathy-test df; "
        "candidates/s = this count / median",
    )


@register("captioning", "coco_files", quick={"images": 1000}, full={"images": 40504}, devices=("cpu",))
def _coco_files(images: int, device: str):
    """`vlkernels captions` from files (C++ reader, blocked tokenizer and df) against the same from Python objects."""
    import tempfile

    from vlkernels.captioning import evaluate_captions

    raw = _golden("coco_val2014_captions_reconstructed.json.gz")
    if raw is None:
        return []
    ids = list(raw)[:images]
    anns = {"annotations": [{"image_id": int(k), "id": j, "caption": c} for k in ids for j, c in enumerate(raw[k][1:])]}
    results = [{"image_id": int(k), "caption": raw[k][0]} for k in ids]
    tmp = Path(tempfile.mkdtemp(prefix="bench_coco_files_"))
    (tmp / "anns.json").write_text(json.dumps(anns), encoding="utf-8")
    (tmp / "results.json").write_text(json.dumps(results), encoding="utf-8")

    def from_objects():
        with open(tmp / "anns.json", encoding="utf-8") as f:
            a = json.load(f)
        with open(tmp / "results.json", encoding="utf-8") as f:
            r = json.load(f)
        return evaluate_captions(a, r, per_image=False)

    def check(out):
        if out["vlkernels"] != out["python_objects"]:
            raise AssertionError("the file path and the object path differ")

    return Bench(
        providers={
            "vlkernels": lambda: evaluate_captions(tmp / "anns.json", tmp / "results.json", per_image=False),
            "python_objects": from_objects,
        },
        baseline="python_objects",
        check=check,
        repeats=3,
        mode="files",
        notes=f"{images} val2014 images, raw captions (held-out protocol): json.load + one C++ call vs C++ file reader",
    )
