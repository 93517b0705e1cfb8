"""The benchmark report a person reads: labels, speedup against the named anchor, skipped lines, quiet anchors, the
per-family PNG, the CPU recorded; and the caption set shipped in the package that the main job runs on."""

import json
import os
from pathlib import Path

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


def _spin(seconds: float) -> int:
    """CPU-bound work for about `seconds` of one core (a Python loop: holds its core, as a kernel would)."""
    end, n = __import__("time").thread_time() + seconds, 0
    while __import__("time").thread_time() < end:
        n += 1
    return 1


def test_bench_under_load_times_quiet_and_loaded(harness, tmp_path):
    import multiprocessing

    seen = []

    def ours():
        seen.append(len(multiprocessing.active_children()))
        return _spin(0.01)

    @harness.register("fake", "loaded", quick={"n": 1})
    def _(n, device):
        return harness.Bench(providers={"vlkernels": ours, "anchor": lambda: _spin(0.01)}, baseline="anchor", repeats=2)

    lines = []
    js = tmp_path / "r.jsonl"
    assert harness.run(["fake"], "cpu", True, js, None, echo=lines.append, load=2, rounds=2) == 0
    row = json.loads(js.read_text())
    assert row["load"] == {"busy_processes": 2, "rounds": 2}
    for name in ("vlkernels", "anchor"):
        r = row["results"][name]
        assert r["runs"] == r["loaded"]["runs"] == 4  # 2 rounds x 2 repeats, quiet and loaded
        assert r["slowdown"] == pytest.approx(r["loaded"]["median_s"] / r["median_s"])
    assert "speedup_vs_baseline" in row["results"]["vlkernels"]["loaded"]
    # The check run, the quiet runs and the memory run saw no busy process; the loaded runs (warm-up included) both.
    assert seen.count(2) == 2 * (1 + 2) and seen.count(0) == 1 + 2 * (1 + 2) + 1
    assert multiprocessing.active_children() == []
    assert "loaded" in "\n".join(lines) and "slowdown" in "\n".join(lines)


def test_bench_load_rejects_bad_counts(harness):
    with pytest.raises(ValueError, match="busy processes >= 0"):
        harness.run(["fake"], "cpu", True, None, None, load=-1)
    with pytest.raises(ValueError, match="--rounds a count >= 1"):
        harness.run(["fake"], "cpu", True, None, None, load=1, rounds=0)


@pytest.mark.parametrize("case", ["cider_val2014", "coco_files", "ptb_tokenize", "ptb_tokenize_karpathy"])
def test_main_job_caption_cases_run_on_shipped_data(harness, monkeypatch, tmp_path, case):
    """The main job's caption cases build their rows from the package's data alone (no data folder beside it)."""
    pytest.importorskip("pycocoevalcap")
    monkeypatch.setenv("VLKERNELS_SHARED_DATA", str(tmp_path / "absent"))
    c = harness.REGISTRY["captioning"][case]
    benches = c.fn(**c.quick, device="cpu")
    benches = benches if isinstance(benches, list) else [benches]
    assert benches and all("vlkernels" in b.providers for b in benches)
    assert not any("shared" in b.notes for b in benches)


def test_generated_val2014_captions_follow_the_shipped_statistics(harness):
    """The val2014-sized CIDEr case's captions: the bigram model of the shipped captions reproduces their caption
    lengths and word frequencies (mean length within 0.3 tokens; each of the 20 most frequent words within 10% of
    its shipped frequency: ~100k generated tokens put a 2%-word's sampling error near 2%)."""
    import importlib
    from collections import Counter

    from vlkernels.captioning import ptb_tokenize
    from vlkernels.data import karpathy_test_captions

    generated_captions = importlib.import_module(harness.__package__ + ".bench_captioning").generated_captions
    shipped = [t.split() for t in ptb_tokenize([c for v in karpathy_test_captions().values() for c in v])]
    gen = generated_captions(2000)
    assert len(gen) == 2000 and all(len(v) == 5 for v in gen.values())
    made = [c.split() for v in gen.values() for c in v]
    mean = lambda caps: sum(map(len, caps)) / len(caps)
    assert abs(mean(made) - mean(shipped)) < 0.3
    freq = lambda caps: Counter(w for c in caps for w in c)
    f_made, f_shipped = freq(made), freq(shipped)
    n_made, n_shipped = f_made.total(), f_shipped.total()
    for w, count in f_shipped.most_common(20):
        assert f_made[w] / n_made == pytest.approx(count / n_shipped, rel=0.1), w
    assert generated_captions(2000) == gen  # deterministic


@pytest.mark.skipif(not os.path.exists("/dev/full") or not os.path.isdir("/proc"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("which", ["json", "plot"])
def test_bench_write_failure_is_one_error_line(harness, which, capsys):
    """A results file or chart that cannot be written (a full disk; a folder where no file can be made, whoever
    runs) ends the run with one error line and exit 2, not a traceback."""
    if which == "plot":
        pytest.importorskip("matplotlib")
    _register_fake(harness)
    lines = []
    path = Path("/dev/full") if which == "json" else Path("/proc/vlkernels-bench.png")
    paths = (path, None) if which == "json" else (None, path)
    assert harness.run(["fake"], "cpu", True, *paths, echo=lines.append) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot write {path}: ")


def test_bench_provider_errors_and_skips_are_rows_and_the_run_goes_on(harness, tmp_path, capsys):
    """A provider that cannot run here (Skip, e.g. no Java) is a skipped row; one that raises is an error row and the
    exit code 1; neither stops the other cases. A --plot with no anchor time to draw is an error, not silence."""

    def no_java():
        raise harness.Skip("needs Java 8+ on PATH")

    def broken():
        raise FileNotFoundError("java")

    @harness.register("fake", "mixed", quick={"n": 1})
    def _(n, device):
        return [
            harness.Bench(providers={"vlkernels": lambda: 1, "anchor": no_java}, baseline="anchor", label="skips"),
            harness.Bench(providers={"vlkernels": lambda: 1, "anchor": broken}, baseline="anchor", label="breaks"),
        ]

    @harness.register("fake", "after", quick={"n": 1})
    def _(n, device):
        return harness.Bench(providers={"vlkernels": lambda: 1}, baseline=None, label="still runs")

    lines = []
    js = tmp_path / "r.jsonl"
    png = tmp_path / "r.png"
    assert harness.run(["fake"], "cpu", True, js, png, echo=lines.append) == 1
    status = {r["label"]: r["status"] for r in map(json.loads, js.read_text().splitlines())}
    assert status == {
        "skips": "skipped: needs Java 8+ on PATH",
        "breaks": "error: FileNotFoundError: java",
        "still runs": "ok",
    }
    assert not png.exists() and "--plot" in capsys.readouterr().err


def test_bench_interrupt_is_one_line(harness, tmp_path, capsys):
    def interrupted():
        raise KeyboardInterrupt

    @harness.register("fake", "first", quick={"n": 1})
    def _(n, device):
        return harness.Bench(providers={"vlkernels": lambda: 1}, baseline=None, label="done")

    @harness.register("fake", "second", quick={"n": 1})
    def _(n, device):
        return harness.Bench(providers={"vlkernels": interrupted}, baseline=None, label="stopped")

    js = tmp_path / "r.jsonl"
    assert harness.run(["fake"], "cpu", True, js, None, echo=lambda s: None) == 130
    assert f"interrupted: 1 rows finished, written to {js}" in capsys.readouterr().err
    assert len(js.read_text().splitlines()) == 1


def test_bench_rows_name_the_anchor_versions():
    """The versions a row records (read from package metadata) against each module's own __version__, and the
    contrastive anchor (open_clip's loss.py, loaded by path, not importable as a package here) named when present."""
    from vlkernels._environment import environment
    from vlkernels.testing import open_clip_loss_module

    v = environment("cpu")["versions"]
    for name in ("numpy", "torchmetrics", "matplotlib"):
        assert v[name] == pytest.importorskip(name).__version__, name
    assert (v["open_clip"] is not None) == (open_clip_loss_module() is not None)
