"""evaluate_stream: both sides read from disk (images in blocks, texts past each block) give the exact brute-force
metrics and top-k, with memory bounded by a block whatever the file size, and Ctrl-C honoured."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vlkernels.cli import main as cli_main
from vlkernels.retrieval import Positives, evaluate
from vlkernels.retrieval.metrics import metrics_from_ranks
from vlkernels.retrieval.reference import evaluate_ref, exact_scores_ref, ranks_ref, topk_ref
from vlkernels.retrieval.stream import evaluate_stream
from vlkernels.testing import check_interrupts, sigint_as_from_a_shell


def _data(n_img=31, per=5, d=12, seed=0):
    """5 captions per image, with exact ties that straddle image blocks: two pairs of duplicated images far apart,
    and captions on a coarse grid so that scores repeat."""
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(-3, 4, (n_img, d), generator=g).float()
    img[29], img[17] = img[2], img[4]
    lab = np.repeat(np.arange(n_img), per)
    txt = img[torch.from_numpy(lab)] + torch.randint(-4, 5, (n_img * per, d), generator=g).float()
    return img, txt, lab


def _save(tmp_path, name: str, x: torch.Tensor, fmt: str):
    if fmt == "npy":
        np.save(tmp_path / f"{name}.npy", x.numpy())
        return tmp_path / f"{name}.npy"
    save_file({"emb": x}, str(tmp_path / f"{name}.safetensors"))
    return tmp_path / f"{name}.safetensors"


@pytest.mark.parametrize("block", [1, 7, 31, None])
@pytest.mark.parametrize(
    ("fmt", "dtype"), [("npy", torch.float16), ("npy", torch.float32), ("safetensors", torch.bfloat16)]
)
def test_evaluate_stream_equals_the_exact_brute_force(tmp_path, block, fmt, dtype):
    img, txt, lab = _data()
    img, txt = img.to(dtype), txt.to(dtype)
    files = _save(tmp_path, "img", img, fmt), _save(tmp_path, "txt", txt, fmt)
    got = evaluate_stream(*files, lab, block_images=block, chunk_rows=16, chunk_cols=5, text_topk=6)
    want = evaluate_ref(img.float(), txt.float(), lab)
    assert dict(got) == want
    # The in-memory engine on the same data: the same ranks, pair by pair.
    mem = evaluate(img, txt, lab)
    for d in mem.ranks:
        assert np.array_equal(got.ranks[d].ranks, mem.ranks[d].ranks)
    v, i = got.text_topk
    rv, ri = topk_ref(txt.float(), img.float(), 6)
    assert torch.equal(i, ri)  # ties (duplicated images, grid scores) to the lower index, across blocks
    assert torch.equal(v, rv.float())
    assert got.meta["blocks"] == -(-31 // (block or 31)) and got.meta["rechecked_fraction"] >= 0.0


def test_evaluate_stream_general_positives_and_cuts(tmp_path):
    """Several positives per query, few evaluated images (the engine's sparse column path), top_k cut."""
    img, txt, lab = _data(n_img=40, per=3, d=10, seed=1)
    n_txt = len(lab)
    rng = np.random.default_rng(0)
    tq = np.repeat(np.arange(n_txt), 2)
    t2i = Positives.from_pairs(
        tq, np.concatenate([lab[:, None], rng.integers(0, 40, (n_txt, 1))], 1).ravel(), n_txt, 40
    )
    i2t = Positives.from_pairs([3, 3, 3, 38, 21], [9, 10, 100, 114, 7], 40, n_txt, queries=[3, 21, 38])
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    got = evaluate_stream(
        tmp_path / "img.npy", tmp_path / "txt.npy", ks=(1, 4), t2i=t2i, i2t=i2t, top_k=5, block_images=9, chunk_cols=4
    )
    s = exact_scores_ref(txt, img)
    assert got["text_to_image"] == metrics_from_ranks(ranks_ref(s, t2i), (1, 4), 5)
    assert got["image_to_text"] == metrics_from_ranks(ranks_ref(s.T, i2t), (1, 4), 5)


def test_evaluate_stream_rejects_bad_input(tmp_path):
    img, txt, lab = _data()
    cases = [
        ({"block_images": 0}, "block_images must be a positive integer"),
        ({"block_images": True}, "block_images must be a positive integer"),
        ({"text_topk": -1}, "text_topk must be a non-negative integer"),
        ({"text_topk": 2.5}, "text_topk must be a non-negative integer"),
        ({"chunk_cols": 0}, "chunk_cols must be a positive integer"),
        ({"ks": (0,)}, "ks must be positive"),
        ({"empty": "maybe"}, "empty must be one of"),
        ({"screen": "int4"}, "screen must be one of"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            evaluate_stream(img, txt, lab, **kwargs)
    with pytest.raises(ValueError, match="embedding dims differ"):
        evaluate_stream(img, txt[:, :5], lab)
    with pytest.raises(ValueError, match="empty input"):
        evaluate_stream(img[:0], txt, lab)
    with pytest.raises(ValueError, match="text_to_image has shape"):
        evaluate_stream(img, txt, lab[:-1])
    with pytest.raises(ValueError, match="does not exist"):
        evaluate_stream(tmp_path / "missing.npy", txt, lab)
    bad = txt.clone()
    bad[7, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN/Inf"):
        evaluate_stream(img, bad, lab)


def test_cli_streams_metrics_and_topk(tmp_path, capsys):
    img, txt, lab = _data()
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.half().numpy())
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": lab.tolist()}))
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    argv += ["--gt", str(tmp_path / "gt.json"), "--block-images", "6"]
    out, top = tmp_path / "m.json", tmp_path / "top"
    assert cli_main([*argv, "--text-topk", "4", "--topk-out", str(top), "--json", str(out)]) == 0
    assert "re-checked" in capsys.readouterr().out
    assert json.loads(out.read_text()) == evaluate_ref(img, txt.half().float(), lab)
    with np.load(top) as z:  # written to the path as given (no ".npz" appended)
        rv, ri = topk_ref(txt.half().float(), img, 4)
        assert np.array_equal(z["indices"], ri.numpy()) and np.array_equal(z["values"], rv.float().numpy())
    for extra, match in [
        (["--topk-out", str(top)], "--topk-out needs --text-topk"),
        (["--text-topk", "0"], "--text-topk must be a positive integer"),
        (["--block-images", "0"], "block_images must be a positive integer"),
        (["--text-topk", "2", "--topk-out", str(tmp_path)], "is a directory"),
        (["--text-topk", "2"], "--text-topk K needs --topk-out"),
        (["--images-key", "emb"], "--images-key names a tensor of a .safetensors file"),
    ]:
        assert cli_main([*argv, *extra]) == 2
        assert match in capsys.readouterr().err


def test_chunks_keep_copy_on_write_changes(tmp_path):
    """Pages are released only on shared mappings: a copy-on-write memmap (mode "c") keeps the caller's in-memory
    changes across repeated chunk reads (releasing its pages would bring back the file's values)."""
    from vlkernels.retrieval.io import Embeddings

    np.save(tmp_path / "x.npy", np.zeros((5000, 16), dtype=np.float32))
    m = np.load(tmp_path / "x.npy", mmap_mode="c")
    m[:] = 3.0
    e = Embeddings(m)
    for _ in range(2):
        assert all(bool((e.chunk(a, a + 1000) == 3.0).all()) for a in range(0, 5000, 1000))
    r = Embeddings(np.load(tmp_path / "x.npy", mmap_mode="r")[1000:])  # a slice of a read-only mapping
    assert bool((r.chunk(0, 4000) == 0.0).all()) and bool((r.chunk(3990, 4000) == 0.0).all())


_RSS_CHILD = """
import ctypes, gc, json, sys
from pathlib import Path
import numpy as np
from vlkernels.retrieval import Positives
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.stream import evaluate_stream

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))

def growth(fn):
    # Peak RSS over the call above the RSS before it (freed heap returned first, the kernel's peak mark reset).
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    base = status("VmRSS")
    fn()
    return status("VmHWM") - base

big, small = sys.argv[1], sys.argv[2]
n_big, n_small = np.load(big, mmap_mode="r").shape[0], np.load(small, mmap_mode="r").shape[0]
lab = np.arange(n_small) * 7 % n_big
t2i = Positives.from_labels(lab, n_big)
i2t = Positives.from_pairs(lab[:50], np.arange(50), n_big, n_small, queries=lab[:50])
run = lambda: evaluate_stream(big, small, t2i=t2i, i2t=i2t, block_images=32768, text_topk=5)
# Warm-up on a small in-memory set of the same dtypes: imports, the extension, torch's first allocations.
warm = np.load(big, mmap_mode="r")[:4096].copy()
evaluate_stream(warm, np.load(small), lab % 4096, empty="skip", block_images=1024, text_topk=5)
del warm
out = {"stream": growth(run)}

def read_all():
    e = Embeddings(big)
    for a in range(0, n_big, 8192):
        e.chunk(a, min(n_big, a + 8192))

out["chunks"] = growth(read_all)
out["loaded"] = growth(lambda: np.load(big).sum())  # control: the measurement sees a whole file
print(json.dumps(out))
"""


def test_memory_stays_bounded_by_a_block(tmp_path):
    """Peak RSS growth of a run over a 150 MiB image file (measured in a fresh interpreter) stays well below the
    file (the engine alone would hold all of it), and a pass through ``Embeddings.chunk`` a small fraction of it;
    loading the file whole grows RSS by its size. Costs ~20 s on the loaded 2-core machine (19 blocks, twice)."""
    n_big, d = 600_000, 64
    mm = np.lib.format.open_memmap(tmp_path / "img.npy", mode="w+", dtype=np.float32, shape=(n_big, d))
    rng = np.random.default_rng(0)
    for a in range(0, n_big, 100_000):
        mm[a : a + 100_000] = rng.standard_normal((100_000, d), dtype=np.float32)
    mm.flush()
    del mm
    np.save(tmp_path / "txt.npy", rng.standard_normal((200, d), dtype=np.float32))
    size = n_big * d * 4
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_RSS_CHILD), str(tmp_path / "img.npy"), str(tmp_path / "txt.npy")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    print({k: f"{v / 2**20:.0f} MiB" for k, v in got.items()}, f"file {size / 2**20:.0f} MiB")
    assert got["loaded"] > 0.9 * size
    assert got["chunks"] < 0.1 * size
    assert got["stream"] < 0.5 * size


_SIGINT_SETUP = """
import tempfile
import numpy as np
from vlkernels.retrieval.stream import evaluate_stream
from vlkernels.retrieval.reference import evaluate_ref
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(0)
img = rng.standard_normal((60_000, 64), dtype=np.float32)
np.save(tmp + "/img.npy", img)
np.save(tmp + "/txt.npy", img + rng.standard_normal((60_000, 64), dtype=np.float32))
lab = np.arange(60_000)
small = (rng.standard_normal((30, 8)), rng.standard_normal((60, 8)), np.arange(60) % 30)
evaluate_stream(*small)
"""


def test_sigint_stops_a_streamed_run():
    """Ctrl-C at the start (thresholds), in the first block's tiles and later: KeyboardInterrupt within 0.5 s
    (loaded 2-core CI), and the next call is right. The call would run for minutes."""
    call = 'evaluate_stream(tmp + "/img.npy", tmp + "/txt.npy", lab, block_images=8192, text_topk=10)'
    rounds = [(call, wait) for wait in (0.05, 0.5, 1.5)]
    check_interrupts(_SIGINT_SETUP, "evaluate_stream(*small) == evaluate_ref(*small)", rounds, bound=0.5)


def test_cli_ctrl_c_exits_130(tmp_path):
    """The CLI run stops on SIGINT once its progress bar is up: "interrupted" within a second (loaded 2-core CI),
    then exit status 130 (the interpreter's own teardown after that is not timed). Costs ~30 s (a fresh interpreter
    importing torch)."""
    import signal
    import time

    rng = np.random.default_rng(0)
    img = rng.standard_normal((60_000, 64), dtype=np.float32)
    np.save(tmp_path / "img.npy", img)
    np.save(tmp_path / "txt.npy", img + rng.standard_normal((60_000, 64), dtype=np.float32))
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": list(range(60_000))}))
    argv = [sys.executable, "-m", "vlkernels.cli", "retrieval", "--images", str(tmp_path / "img.npy")]
    argv += ["--texts", str(tmp_path / "txt.npy"), "--gt", str(tmp_path / "gt.json"), "--progress"]
    proc = subprocess.Popen(
        [*argv, "--block-images", "8192"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=sigint_as_from_a_shell,
    )
    try:

        def read_until(marker: bytes, seen: bytes = b"") -> bytes:
            while marker not in seen:
                chunk = proc.stderr.read1(4096)
                assert chunk, f"the run ended before {marker!r}: {seen.decode()[-2000:]}"
                seen += chunk
            return seen

        read_until(b"tile")  # tqdm writes its first line when the tiles start
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        read_until(b"interrupted")
        latency = time.monotonic() - sent
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"CLI printed 'interrupted' {latency * 1000:.0f} ms after SIGINT")
    assert proc.returncode == 130
    assert latency < 1.0
