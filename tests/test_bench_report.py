"""The benchmark report a person reads: labels, speedup against the named anchor, skipped lines, quiet anchors, the
per-family PNG, the CPU recorded; and the caption set shipped in the package that the main job runs on."""

import json
import os

import pytest

from vlkernels.cli import _benchmarks


@pytest.fixture
def harness(monkeypatch):
    h = _benchmarks()
    h.discover()
    monkeypatch.setitem(h.REGISTRY, "fake", {})
    monkeypatch.setitem(h.REGISTRY, "fake2", {})
    return h


def _register_fake(h):
    def chatty_anchor():
        # An anchor that prints on both streams from a child process, as pycocoevalcap's Java tokenizer does.
        os.system("echo CHATTER-OUT; echo CHATTER-ERR 1>&2")
        print("CHATTER-PY")
        return 1

    @h.register("fake", "two_rows", quick={"n": 3})
    def _(n, device):
        return [
            h.Bench(providers={"vlkernels": lambda: 1, "anchor": chatty_anchor}, baseline="anchor", label=f"alpha {k}")
            for k in ("one", "two")
        ]

    @h.register("fake2", "needs_data", quick={"n": 1})
    def _(n, device):
        raise h.Skip("needs the data of somewhere (set SOMEWHERE)")

    @h.register("fake2", "built_nothing", quick={"n": 1})
    def _(n, device):
        return []


def test_bench_report_labels_speedups_and_skips(harness, tmp_path, capfd):
    _register_fake(harness)
    lines = []
    js = tmp_path / "r.jsonl"
    png = tmp_path / "r.png"
    assert harness.run(["fake", "fake2"], "cpu", True, js, png, echo=lines.append) == 0
    text = "\n".join(lines)
    assert "fake · alpha one (n=3)" in text and "fake · alpha two (n=3)" in text
    assert "x vs anchor" in text and "anchor (anchor)" in text
    assert "fake2 · needs_data (n=1): skipped: needs the data of somewhere (set SOMEWHERE)" in text
    assert "built_nothing (n=1): skipped:" in text
    out = capfd.readouterr()
    assert "CHATTER" not in out.out + out.err
    rows = [json.loads(line) for line in js.read_text().splitlines()]
    assert {r["label"] for r in rows} >= {"alpha one", "alpha two"}
    assert all(r["cpu"]["model"] and isinstance(r["cpu"]["isa"], list) for r in rows)
    if pytest.importorskip("matplotlib"):
        assert png.stat().st_size > 1000


def test_shipped_karpathy_captions_score_like_pycocoevalcap():
    """The main job's caption set: 5,000 COCO Karpathy-test images; its leave-one-out CIDEr-D equals pycocoevalcap."""
    PCider = pytest.importorskip("pycocoevalcap.cider.cider").Cider
    from vlkernels.captioning import Cider, ptb_tokenize
    from vlkernels.data import karpathy_test_captions, leave_one_out

    caps = karpathy_test_captions()
    assert len(caps) == 5000 and all(len(v) in (5, 6) for v in caps.values())
    refs, cands = leave_one_out({k: caps[k] for k in list(caps)[:300]})
    refs = {k: ptb_tokenize(v) for k, v in refs.items()}
    cands = {k: ptb_tokenize(v) for k, v in cands.items()}
    ours = Cider().compute_score(refs, cands)
    theirs = PCider().compute_score(refs, cands)
    assert abs(ours[0] - theirs[0]) <= 1e-12
    assert max(abs(a - b) for a, b in zip(ours[1], theirs[1])) <= 1e-12
