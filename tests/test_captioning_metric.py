"""CiderMetric (update / compute / reset / forward) against pycocoevalcap on the same pairs, in one process and
gathered over a real 2-process gloo group."""

import json
import os

import numpy as np
import pytest
import torch
from gloo_ranks import run_ranks

from vlkernels.captioning import CiderMetric

pc_cider = pytest.importorskip("pycocoevalcap.cider.cider")
WORDS = ["a", "dog", "runs", "on", "the", "grass", "cat", "sits", "red", "ball", "ü", "日本"]


def _samples(n, seed=0):
    rng = np.random.default_rng(seed)

    def cap():
        return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), size=int(rng.integers(1, 12))))

    return [cap() for _ in range(n)], [[cap() for _ in range(int(rng.integers(1, 6)))] for _ in range(n)]


def _pycoco(preds, target):
    return pc_cider.Cider().compute_score({i: t for i, t in enumerate(target)}, {i: [p] for i, p in enumerate(preds)})


def test_batches_accumulate_to_the_corpus_score():
    preds, target = _samples(103)
    m = CiderMetric()
    for lo in range(0, 103, 16):
        m.update(preds[lo : lo + 16], target[lo : lo + 16])
    got = m.compute()
    want_mean, want = _pycoco(preds, target)
    assert got.dtype == torch.float64 and float(got) == float(want_mean)
    np.testing.assert_array_equal(m.scores, want)
    m.reset()
    with pytest.raises(ValueError, match="before any update"):
        m.compute()


def test_forward_returns_the_batch_score_and_accumulates():
    preds, target = _samples(40, seed=1)
    m = CiderMetric()
    batch = m(preds[:20], target[:20])
    assert float(batch) == float(_pycoco(preds[:20], target[:20])[0])
    m(preds[20:], target[20:])
    assert float(m.compute()) == float(_pycoco(preds, target)[0])


def test_update_checks_its_batch():
    m = CiderMetric()
    with pytest.raises(ValueError, match="preds has 2 captions but target has 1"):
        m.update(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match=r"target\[0\]: no reference captions"):
        m.update(["a"], [[]])
    m.update("a dog", ["a dog", "the dog"])  # one sample given bare
    m.update(["a cat"], [["a cat"]])
    # Captions that would fail compute() (or, across ranks, the gather) are refused with their batch.
    for preds, target, match in [
        (["x", "y"], [["x"], [3]], r"target\[1\]\[0\]: expected a str, got int"),
        (["x"], [b"a dog"], r"target\[0\]\[0\]: expected a str, got bytes"),
        ([None], [["x"]], r"preds\[0\]: expected a str, got NoneType"),
        (["a \ud800 dog"], [["x"]], r"preds\[0\]: not valid UTF-8"),
        ([{"caption": "x"}], [["x"]], r"preds\[0\]: expected a str, got dict"),
    ]:
        with pytest.raises(ValueError, match=match):
            m.update(preds, target)
    assert len(m.preds) == 2 and float(m.compute()) == float(
        _pycoco(["a dog", "a cat"], [["a dog", "the dog"], ["a cat"]])[0]
    )


def _worker(rank, world, port, out_dir):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        preds, target = _samples(57, seed=2)
        m = CiderMetric()
        # A DistributedSampler-like split: rank r gets samples r, r + world, ... in batches of 5.
        mine = list(range(rank, len(preds), world))
        for lo in range(0, len(mine), 5):
            idx = mine[lo : lo + 5]
            m.update([preds[i] for i in idx], [target[i] for i in idx])
        value = float(m.compute())
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"value": value, "scores": m.scores.tolist(), "local": len(m.preds)}, f)
    finally:
        dist.destroy_process_group()


def test_compute_gathers_across_gloo_ranks(tmp_path):
    world = 2
    run_ranks(_worker, world, str(tmp_path))
    preds, target = _samples(57, seed=2)
    want_mean, want = _pycoco(preds, target)
    order = [i for r in range(world) for i in range(r, len(preds), world)]  # gathered order: rank 0's, rank 1's
    outs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    assert [o["local"] for o in outs] == [29, 28]
    for o in outs:
        np.testing.assert_array_equal(o["scores"], want[order])  # per-sample: exact, whatever the sharding
        assert o["value"] == float(np.mean(want[order]))
        # Another summation order of 57 non-negative terms (np.mean sums pairwise: error <= log2(n) eps each).
        bound = 2 * np.ceil(np.log2(len(preds))) * np.finfo(np.float64).eps
        assert o["value"] == pytest.approx(float(want_mean), rel=bound)
