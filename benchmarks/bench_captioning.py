"""Caption metrics: vlkernels' C++ CIDEr-D / SCST rewards against pycocoevalcap (Python) on real COCO captions.

Every case runs on the COCO Karpathy-test captions shipped in the package (vlkernels.data) or on captions generated
from them: the val2014-sized case (40,504 images) scores captions drawn from a bigram model of the shipped ones, so
it has COCO's caption lengths and word frequencies with nothing to download. The raw-caption case times the whole
path from strings: vlkernels' C++ PTB tokenizer + scorer against pycocoevalcap's Java PTBTokenizer + Python scorer.
"""

import json
from functools import cache
from pathlib import Path

import numpy as np

from .harness import Bench, register, require_java

TOL = 1e-12
_MAX_WORDS = 50  # a generated caption stops here if the chain has not ended it (COCO's longest are ~50 tokens)


@cache
def generated_captions(images: int, per_image: int = 5, seed: int = 0) -> dict[str, list[str]]:
    """``{id: [per_image tokenized captions]}`` drawn from a bigram model of the shipped Karpathy-test captions
    (PTB-tokenized): each caption starts, continues and ends with the shipped captions' bigram frequencies, so
    lengths, word frequencies and n-gram reuse follow COCO's. Deterministic for a seed; vectorized (about a second
    for val2014's 202,520 captions)."""
    from vlkernels.captioning import ptb_tokenize
    from vlkernels.data import karpathy_test_captions

    toks = [t.split() for t in ptb_tokenize([c for v in karpathy_test_captions().values() for c in v])]
    vocab = ["", *sorted({w for t in toks for w in t})]  # id 0: the caption boundary (start and end)
    index = {w: i for i, w in enumerate(vocab)}
    seqs = [[0, *(index[w] for w in t), 0] for t in toks]
    prev = np.fromiter((a for s in seqs for a in s[:-1]), dtype=np.int64)
    nxt = np.fromiter((b for s in seqs for b in s[1:]), dtype=np.int64)
    pairs, counts = np.unique(prev * len(vocab) + nxt, return_counts=True)
    pair_prev, pair_next = pairs // len(vocab), pairs % len(vocab)
    cum = np.cumsum(counts)
    row_end = cum[np.searchsorted(pair_prev, np.arange(len(vocab)), side="right") - 1]
    row_begin = row_end - np.bincount(pair_prev, weights=counts, minlength=len(vocab)).astype(np.int64)
    rng = np.random.default_rng(seed)
    n = images * per_image
    words = np.zeros((n, _MAX_WORDS), dtype=np.int64)
    state, alive = np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    for step in range(_MAX_WORDS):
        live = np.flatnonzero(alive)
        if live.size == 0:
            break
        s = state[live]
        target = row_begin[s] + rng.integers(0, row_end[s] - row_begin[s])
        w = pair_next[np.searchsorted(cum, target, side="right")]
        words[live, step] = w
        state[live] = w
        alive[live[w == 0]] = False
    names = np.array(vocab, dtype=object)
    caps = [" ".join(names[row[row != 0]]) for row in words]
    return {str(i): caps[i * per_image : (i + 1) * per_image] for i in range(images)}


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
        require_java()
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
    from vlkernels.data import leave_one_out

    # Held-out protocol: the last caption of each image is the candidate, the other four the references.
    gts, res = leave_one_out(generated_captions(images))
    return _tokenized_bench(
        gts,
        res,
        repeats=1,
        label="CIDEr-D val2014-sized, generated captions",
        notes=f"{images} images x 4 refs + 1 candidate, tokenized captions generated from a bigram model of the "
        "shipped Karpathy-test captions (val2014's size and word statistics)",
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


@register("captioning", "coco_files", quick={"images": 1000}, full={"images": 5000}, devices=("cpu",))
def _coco_files(images: int, device: str):
    """`vlkernels captions` from files (C++ reader, blocked tokenizer and df) against the same from Python objects."""
    import tempfile

    from vlkernels.captioning import evaluate_captions
    from vlkernels.data import karpathy_test_captions

    raw = karpathy_test_captions()
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
        notes=f"{images} Karpathy-test images (shipped), raw captions, first caption held out: "
        "json.load + one C++ call vs C++ file reader",
    )
