"""Retrieval: streamed exact metrics and top-K against the bare matrix product of the same shape (the physical
limit), the reference script's reference code, and faiss.

Families: ``retrieval`` (default run: COCO 5K on CPU, top-K, GPU cases on CUDA). Two long families are registered
only with ``VLKERNELS_BENCH_LONG=1`` so that a plain ``vlkernels bench`` stays short: ``retrieval_seed``
(the reference script at full COCO 5K size, ~1 min per call, 4 calls) and ``retrieval_200k`` (a 200k x 200k
gallery streamed from a memory-mapped fp16 .npy, minutes per call on 2 cores), e.g.
``VLKERNELS_BENCH_LONG=1 vlkernels bench retrieval_seed --json benchmarks/results/retrieval_cpu.jsonl``; one
200k x 200k run (the harness makes four calls): ``python -m benchmarks.bench_retrieval 200000``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from vlkernels.retrieval import evaluate, topk
from vlkernels.retrieval.seed_reference import evaluate_retrieval
from vlkernels.retrieval.stream import evaluate_stream
from vlkernels.testing import assert_topk_equal

from .harness import Bench, register


def _coco(n_img: int, per: int, d: int, device: str = "cpu", dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    img = torch.nn.functional.normalize(torch.randn(n_img, d, generator=g), dim=1)
    lab = np.repeat(np.arange(n_img), per)
    txt = torch.nn.functional.normalize(
        img[torch.from_numpy(lab)] + 0.06 * torch.randn(n_img * per, d, generator=g), dim=1
    )
    return img.to(device, dtype), txt.to(device, dtype), lab


def _seed_metrics(img: np.ndarray, txt: np.ndarray, lab: np.ndarray) -> dict:
    """The reference script's evaluate_retrieval on these embeddings (caption i belongs to image lab[i])."""
    return evaluate_retrieval(img, txt, list(range(img.shape[0])), list(lab))


def _check_seed_keys(out: dict) -> None:
    ref = out.get("numpy_script")
    if ref is None:
        return
    for d in ref:
        for k, v in ref[d].items():
            if abs(out["vlkernels"][d][k] - v) > 1e-9 * max(1.0, abs(v)):
                raise AssertionError(f"{d} {k}: vlkernels {out['vlkernels'][d][k]} != the numpy script {v}")


def _spot_check_ranks(img: torch.Tensor, txt: torch.Tensor, lab: np.ndarray, n: int = 200):
    """First text-to-image ranks of n sampled captions from full fp64 rows: equal, or off by one on a near-tie."""

    def check(out: dict) -> None:
        res = out["vlkernels"]
        sample = np.random.default_rng(0).choice(len(lab), size=min(n, len(lab)), replace=False)
        s = txt[torch.from_numpy(sample)].double().cpu() @ img.double().cpu().T
        gt = s[torch.arange(len(sample)), torch.from_numpy(lab[sample])]
        j = torch.arange(s.shape[1])
        want = 1 + (s > gt[:, None]).sum(1) + ((s == gt[:, None]) & (j < torch.from_numpy(lab[sample])[:, None])).sum(1)
        got = torch.from_numpy(res.ranks["text_to_image"].first[sample])
        diff = (got - want).abs()
        if int(diff.max()) > 1 or int((diff > 0).sum()) > max(1, n // 100):
            raise AssertionError(f"ranks differ from the fp64 reference on {int((diff > 0).sum())} of {n} queries")

    return check


@register(
    "retrieval",
    "coco5k_cpu",
    quick={"n_img": 1000, "per": 5, "d": 512},
    full={"n_img": 5000, "per": 5, "d": 512},
    devices=("cpu",),
)
def _coco5k(n_img: int, per: int, d: int, device: str) -> list[Bench]:
    img, txt, lab = _coco(n_img, per, d)
    img_h, txt_h = img.bfloat16(), txt.bfloat16()
    benches = [
        Bench(
            providers={
                "vlkernels": lambda: evaluate(img, txt, lab),
                "torch_matmul": lambda: txt @ img.T,
                "torch_matmul_bf16": lambda: txt_h @ img_h.T,
            },
            baseline="torch_matmul",
            check=_spot_check_ranks(img, txt, lab),
            flops=2.0 * n_img * per * n_img * d,
            notes="vlkernels: all metrics, both directions, streamed, exact by certificate (screen: "
            + _screen()
            + "); torch_matmul: the bare (texts x images) fp32 product; torch_matmul_bf16: the same in bf16",
        )
    ]
    if n_img <= 1000:  # the reference's code on COCO 1K size here; full size in the retrieval_seed family
        benches.append(_seed_bench(img, txt, lab, "compute_retrieval_metrics / evaluate_retrieval"))
    return benches


def _screen() -> str:
    from vlkernels.retrieval.screen import describe

    return describe()


def _seed_bench(img, txt, lab, notes: str) -> Bench:
    return Bench(
        providers={
            "vlkernels": lambda: evaluate(img, txt, lab),
            "numpy_script": lambda: _seed_metrics(img.numpy(), txt.numpy(), lab),
        },
        baseline="numpy_script",
        check=_check_seed_keys,
        repeats=1,
        notes=notes,
        label="COCO retrieval vs a numpy evaluation script",
    )


LONG = os.environ.get("VLKERNELS_BENCH_LONG", "0") == "1"
_long = register if LONG else (lambda *a, **k: lambda fn: fn)


@_long("retrieval_seed", "coco5k_seed_cpu", quick={"n_img": 1000}, full={"n_img": 5000}, devices=("cpu",))
def _coco5k_seed(n_img: int, device: str) -> Bench:
    img, txt, lab = _coco(n_img, 5, 512)
    return _seed_bench(img, txt, lab, "the reference script's reference at COCO 5K: about a minute per call on 2 cores")


def _check_topk(out):
    v, i = out["vlkernels"]
    tv, ti = out["torch"]
    assert_topk_equal(v, i, tv, ti, rtol=1e-4, atol=1e-4)


def _faiss_flat_ip(gal: torch.Tensor):
    """faiss's exact inner-product index over the gallery, or None without faiss."""
    try:
        import faiss
    except ImportError:
        return None
    index = faiss.IndexFlatIP(gal.shape[1])
    index.add(gal.numpy())
    return index


@register(
    "retrieval",
    "topk_cpu",
    quick={"n_q": 5000, "n_g": 5000, "d": 512, "k": 10},
    full={"n_q": 25000, "n_g": 5000, "d": 512, "k": 10},
    devices=("cpu",),
)
def _topk_cpu(n_q: int, n_g: int, d: int, k: int, device: str) -> list[Bench]:
    g = torch.Generator().manual_seed(1)
    q, gal = torch.randn(n_q, d, generator=g), torch.randn(n_g, d, generator=g)
    providers = {"vlkernels": lambda: topk(q, gal, k), "torch": lambda: torch.topk(q @ gal.T, k, dim=1)}
    index = _faiss_flat_ip(gal)
    if index is not None:
        providers["faiss"] = lambda: index.search(q.numpy(), k)

    check = _check_topk
    big_k = 4096  # past faiss-gpu's 2048 cap
    providers_100 = {"vlkernels": lambda: topk(q, gal, 100), "torch": lambda: torch.topk(q @ gal.T, 100, dim=1)}
    q_big = q[:2000]
    providers_big = {
        "vlkernels": lambda: topk(q_big, gal, big_k),
        "torch": lambda: torch.topk(q_big @ gal.T, big_k, dim=1),
    }
    if "faiss" in providers:
        providers_100["faiss"] = lambda: index.search(q.numpy(), 100)
        q_big_np = q_big.numpy()
        providers_big["faiss"] = lambda: index.search(q_big_np, big_k)
    return [
        Bench(providers=providers, baseline="torch", check=check, flops=2.0 * n_q * n_g * d, label=f"top-{k} search"),
        Bench(
            providers=providers_100,
            baseline="torch",
            check=check,
            flops=2.0 * n_q * n_g * d,
            params={"k": 100},
            label="top-100 search",
        ),
        Bench(
            providers=providers_big,
            baseline="torch",
            check=check,
            flops=2.0 * 2000 * n_g * d,
            notes=f"k={big_k}, 2,000 queries",
            params={"n_q": 2000, "k": big_k},
            label=f"top-{big_k} search (2,000 queries)",
        ),
    ]


@_long(
    "retrieval_midk",
    "topk_mid_k_cpu",
    quick={"n_q": 500, "n_g": 5000},
    full={"n_q": 2000, "n_g": 5000},
    devices=("cpu",),
)
def _topk_mid_k(n_q: int, n_g: int, device: str) -> list[Bench]:
    """Top-k with k from 6 % to 50 % of the gallery: the screened path's upper range and the dense path's lower,
    where each member needs its exact score and torch's matmul + topk is the peer to beat."""
    d = 512
    g = torch.Generator().manual_seed(1)
    q, gal = torch.randn(n_q, d, generator=g), torch.randn(n_g, d, generator=g)
    index = _faiss_flat_ip(gal)
    benches = []
    for k in (300, 600, 1000, 1250, 1500, 2500):
        providers = {"vlkernels": lambda k=k: topk(q, gal, k), "torch": lambda k=k: torch.topk(q @ gal.T, k, dim=1)}
        if index is not None:
            providers["faiss"] = lambda k=k: index.search(q.numpy(), k)
        benches.append(
            Bench(
                providers=providers,
                baseline="torch",
                check=_check_topk,
                flops=2.0 * n_q * n_g * d,
                params={"k": k},
                label=f"top-{k:,} of {n_g:,}",
            )
        )
    return benches


@_long("retrieval_200k", "streamed_200k_cpu", quick={"n": 20000}, full={"n": 200000}, devices=("cpu",))
def _streamed(n: int, device: str) -> Bench:
    d = 512
    tmp = Path(tempfile.mkdtemp(prefix="vlk_bench_"))
    g = torch.Generator().manual_seed(2)
    img = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=1)
    lab = np.arange(n)
    # n texts (one per image) written in blocks and memory-mapped: read chunk by chunk, never held whole.
    mm = np.lib.format.open_memmap(tmp / "texts.npy", mode="w+", dtype=np.float16, shape=(n, d))
    for a in range(0, n, 50000):
        b = min(n, a + 50000)
        t = img[a:b] + 0.06 * torch.randn(b - a, d, generator=g)
        mm[a:b] = torch.nn.functional.normalize(t, dim=1).half().numpy()
    mm.flush()
    del mm
    return Bench(
        providers={"vlkernels": lambda: evaluate(img, tmp / "texts.npy", lab)},
        check=lambda out: None,
        repeats=1,
        flops=2.0 * n * n * d,
        notes=f"{n} fp16 texts memory-mapped from .npy x {n} images; all metrics both directions",
    )


@register(
    "retrieval",
    "gpu_1m",
    quick={"n": 100_000, "d": 512},
    full={"n": 1_000_000, "d": 512},
    devices=("cuda",),
)
def _gpu(n: int, d: int, device: str) -> list[Bench]:
    g = torch.Generator(device="cuda").manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(n, d, device="cuda", generator=g), dim=1).half()
    txt = torch.nn.functional.normalize(img.float() + 0.06 * torch.randn(n, d, device="cuda", generator=g), dim=1)
    txt = txt.half()
    lab = np.arange(n)
    chunk = 16384
    buf = torch.empty(chunk, n, device="cuda", dtype=torch.float16)

    def gemm():
        # The same-shape product, chunked (the full N x M output would not fit): the GEMM limit.
        for a in range(0, n, chunk):
            torch.matmul(txt[a : a + chunk], img.T, out=buf[: min(chunk, n - a)])

    def ours():
        res = evaluate(img, txt, lab)
        return res, topk(txt, img, 10)

    providers = {"vlkernels": ours, "cublas_gemm": gemm}
    try:
        import faiss

        if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
            res = faiss.StandardGpuResources()
            index = faiss.GpuIndexFlatIP(res, d)
            index.add(img.float().cpu().numpy())
            q_np = txt.float().cpu().numpy()
            providers["faiss_gpu"] = lambda: index.search(q_np, 10)
    except ImportError:
        pass
    return Bench(
        providers=providers,
        baseline="cublas_gemm",
        repeats=3,
        flops=2.0 * n * n * d,
        notes="vlkernels: all metrics both directions + top-10 indices; fp16 embeddings",
    )


@register(
    "retrieval",
    "gpu_host_stream",
    quick={"n": 100_000, "d": 512, "chunk": 1 << 15},
    full={"n": 1_000_000, "d": 512, "chunk": 1 << 16},
    devices=("cuda",),
)
def _gpu_host_stream(n: int, d: int, chunk: int, device: str) -> Bench:
    """Texts memory-mapped from an fp16 .npy on the host, streamed to the GPU in ``chunk``-row chunks (the path of a
    gallery larger than device memory), beside the same run with both sets resident on the device."""
    tmp = Path(tempfile.mkdtemp(prefix="vlk_bench_"))
    g = torch.Generator().manual_seed(3)
    img = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=1).half()
    mm = np.lib.format.open_memmap(tmp / "texts.npy", mode="w+", dtype=np.float16, shape=(n, d))
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        t = img[a:b].float() + 0.06 * torch.randn(b - a, d, generator=g)
        mm[a:b] = torch.nn.functional.normalize(t, dim=1).half().numpy()
    mm.flush()
    del mm
    img_dev = img.cuda()
    txt_dev = torch.from_numpy(np.load(tmp / "texts.npy")).cuda()
    lab = np.arange(n)

    def streamed():
        return evaluate(img_dev, tmp / "texts.npy", lab, backend="triton", device_chunk=chunk)

    def resident():
        return evaluate(img_dev, txt_dev, lab, backend="triton")

    def check(out):
        assert out["streamed"] == out["resident"], "streamed and device-resident runs differ"

    return Bench(
        providers={"streamed": streamed, "resident": resident},
        baseline="resident",
        check=check,
        repeats=1,
        flops=2.0 * n * n * d,
        notes=f"{n} fp16 texts memory-mapped (host) x {n} fp16 images on the GPU; device_chunk={chunk}",
    )


def _clip_files(n: int, n_txt: int | None = None, d: int = 512, noise: float = 4.5, block: int = 50_000) -> Path:
    """n images and captions of the first n_txt (default n) of them (one each, CLIP-like: unit norm, caption =
    image + noise), fp16 .npy files written
    block by block, so generating them never holds a whole set in memory. ``noise`` 4.5 puts a positive's score near
    0.22, where the best of a million random negatives lies (D = 512): R@1 is neither 0 nor 100 % at these sizes and
    many candidates sit near each threshold, so the re-checked fraction is not that of easy data."""
    tmp = Path(tempfile.mkdtemp(prefix="vlk_bench_"))
    g = torch.Generator().manual_seed(4)
    mi = np.lib.format.open_memmap(tmp / "images.npy", mode="w+", dtype=np.float16, shape=(n, d))
    n_txt = n if n_txt is None else n_txt
    mt = np.lib.format.open_memmap(tmp / "texts.npy", mode="w+", dtype=np.float16, shape=(n_txt, d))
    for a in range(0, n, block):
        b = min(n, a + block)
        img = torch.nn.functional.normalize(torch.randn(b - a, d, generator=g), dim=1)
        mi[a:b] = img.half().numpy()
        txt = img + noise / d**0.5 * torch.randn(b - a, d, generator=g)
        if a < n_txt:
            mt[a : min(b, n_txt)] = torch.nn.functional.normalize(txt, dim=1)[: n_txt - a].half().numpy()
    mi.flush()
    mt.flush()
    del mi, mt
    return tmp


def million_run(tmp: Path, n: int, block_images: int | None = None, n_txt: int | None = None):
    """Exact metrics both directions and the top-10 of every text, CLIP-like fp16 files (``_clip_files``) streamed
    from disk: the images in blocks, the texts past each block, one pass of score tiles for both (tqdm bar with
    ETA). With fewer texts than images, image-to-text is over the captioned images. Returns the RetrievalResult
    (``.text_topk``: values and indices)."""
    n_txt = n if n_txt is None else n_txt
    return evaluate_stream(
        tmp / "images.npy",
        tmp / "texts.npy",
        np.arange(n_txt),
        empty="skip" if n_txt < n else "error",
        text_topk=10,
        block_images=block_images,
        progress=True,
    )


@_long("retrieval_1m", "clip_1m_cpu", quick={"n": 20_000}, full={"n": 1_000_000}, devices=("cpu",))
def _million(n: int, device: str) -> Bench:
    tmp = _clip_files(n)

    def check(out):
        res = out["vlkernels"]
        assert res.text_topk[1].shape == (n, 10) and res["text_to_image"]["R@10"] >= res["text_to_image"]["R@1"]

    return Bench(
        providers={"vlkernels": lambda: million_run(tmp, n)},
        check=check,
        repeats=1,
        flops=2.0 * n * n * 512,
        notes=f"{n} x {n} fp16 .npy files (CLIP-like, D=512) streamed (images in blocks, texts past each block): "
        "exact metrics both directions + top-10 of every text from one pass of score tiles; screen: " + _screen(),
    )


def _million_row(n: int, block_images: int | None, n_txt: int | None = None) -> dict:
    """One timed ``million_run`` in this process, as a result row: wall time, absolute peak RSS (VmHWM), the
    re-checked fractions, the machine and its load average before and after."""
    import time

    from .harness import _proc_status_bytes, environment

    n_txt = n if n_txt is None else n_txt
    tmp = _clip_files(n, n_txt)
    # Writing the files through a mapping counted their pages in this process: peak RSS from here on.
    Path("/proc/self/clear_refs").write_text("5")
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    res = million_run(tmp, n, block_images, n_txt)
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()
    row = {
        **environment("cpu"),
        "family": "retrieval_1m",
        "case": "clip_1m_cpu",
        "label": "clip_1m_cpu",
        "mode": "fwd",
        "params": {
            "n_images": n,
            "n_texts": n_txt,
            "d": 512,
            "block_images": res.meta["block_images"],
            "blocks": res.meta["blocks"],
        },
        "quick": False,
        "baseline": None,
        "status": "ok",
        "results": {
            "vlkernels": {
                "median_s": wall,
                "runs": 1,
                "peak_rss_bytes": _proc_status_bytes("VmHWM"),
                "tflops": 2.0 * n * n_txt * 512 / wall / 1e12,
                "rechecked_fraction": res.meta["rechecked_fraction"],
                "topk_rechecked_fraction": res.meta["topk_rechecked_fraction"],
                "metrics": dict(res),
            }
        },
        "notes": f"{n} images x {n_txt} texts, fp16 .npy files (CLIP-like, D=512, one caption per image) streamed with "
        "evaluate_stream: images in blocks, texts past each block; exact metrics both directions and the top-10 of "
        "every text from one pass of score tiles; peak_rss_bytes is the whole process (VmHWM); screen: " + _screen(),
        "machine_load": "load average (1, 5, 15 min) before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}; "
        "2 cores shared with other jobs".format(*load0, *load1),
    }
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return row


if __name__ == "__main__":
    # One timed run (the harness would call it several times):
    #   python -m benchmarks.bench_retrieval [n]                  200k x 200k, memory-mapped fp16 texts
    #   python -m benchmarks.bench_retrieval 1m [n] [--texts T] [--block B] [--json F]
    #       n images x T texts (default T = n = 1,000,000), CLIP-like files, metrics + top-10, B images per block;
    #       --json appends the result row to F
    import json
    import resource
    import sys
    import time

    million = len(sys.argv) > 1 and sys.argv[1] == "1m"
    args = sys.argv[2:] if million else sys.argv[1:]
    opts = {}
    for flag in ("--json", "--block", "--texts"):
        if flag in args:
            i = args.index(flag)
            opts[flag], args = args[i + 1], args[:i] + args[i + 2 :]
    out_json, block, n_txt = opts.get("--json"), opts.get("--block"), opts.get("--texts")
    n = int(args[0]) if args else (1_000_000 if million else 200_000)
    if million:
        row = _million_row(n, int(block) if block else None, int(n_txt) if n_txt else None)
        r = row["results"]["vlkernels"]
        for d, m in r["metrics"].items():
            print(d, " ".join(f"{k}={v:.4f}" for k, v in m.items()))
        print(
            f"{n} images x {row['params']['n_texts']} texts, D=512: {r['median_s']:.1f} s, "
            f"{r['tflops']:.3f} TFLOP/s, peak RSS "
            f"{r['peak_rss_bytes'] / 2**20:.0f} MiB, re-checked: metrics {r['rechecked_fraction']:.2e}, "
            f"top-10 {r['topk_rechecked_fraction']:.2e}; {row['machine_load']}"
        )
        if out_json:
            with open(out_json, "a") as f:
                f.write(json.dumps(row) + "\n")
        sys.exit(0)
    bench = _streamed(n, "cpu")
    t0 = time.perf_counter()
    res = bench.providers["vlkernels"]()
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(res.table())
    print(f"{n} x {n}, D=512: {dt:.1f} s, {2.0 * n * n * 512 / dt / 1e12:.3f} TFLOP/s, peak RSS {peak:.0f} MiB")
