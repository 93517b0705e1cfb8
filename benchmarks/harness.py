"""The one benchmark harness: registration, timing, memory, correctness check, JSON lines and plots.

A family registers cases in ``bench_<family>.py``::

    @register("core", "count_above", quick={"n": 2000, "m": 4000}, full={"n": 8000, "m": 25000})
    def _(n, m, device):
        ...
        return Bench(providers={"vlkernels": fn, "torch": ref_fn}, baseline="torch",
                     check=lambda out: ..., bytes=...)

Each provider is a zero-argument callable; the harness runs it once for the check, then warm-up runs, then
``repeats`` timed runs (CUDA-synchronized), and records the median, the spread (min, max, IQR), peak memory
(CUDA max allocated, or the growth of the process's peak RSS on CPU), the ratio to the baseline provider, and
GB/s or TFLOP/s when the case states its bytes or flops.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import gc
import importlib
import json
import pkgutil
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REGISTRY: dict[str, dict[str, Case]] = {}


@dataclasses.dataclass
class Bench:
    """What one case builds for one parameter set: providers to time and how to check them."""

    providers: dict[str, Callable[[], Any]]
    baseline: str | None = None
    # check(outputs) raises AssertionError when providers disagree; outputs maps provider -> its return value.
    check: Callable[[dict[str, Any]], None] | None = None
    mode: str = "fwd"
    flops: float | None = None
    bytes: float | None = None
    repeats: int | None = None
    notes: str = ""


@dataclasses.dataclass
class Case:
    family: str
    name: str
    fn: Callable[..., Bench | list[Bench]]
    quick: dict[str, Any]
    full: dict[str, Any]
    devices: tuple[str, ...]


def register(family: str, name: str, *, quick: dict, full: dict | None = None, devices=("cpu", "cuda")):
    def deco(fn):
        REGISTRY.setdefault(family, {})[name] = Case(family, name, fn, quick, full or quick, tuple(devices))
        return fn

    return deco


def discover() -> list[str]:
    """Import every bench_<family>.py beside this file; returns the families found."""
    pkg = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("bench_"):
            importlib.import_module(f"{__package__}.{info.name}")
    return sorted(REGISTRY)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _vm_hwm_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _vm_rss_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def _reset_cpu_peak() -> int | None:
    """Return freed heap to the OS, reset the kernel's peak-RSS mark, and return the RSS to measure from.

    Blocks of 64 KiB and more are served by mmap from here on (mallopt), so a freed temporary leaves RSS at once
    and the peak RSS tracks live allocations instead of glibc's heap fragmentation. Only memory passes run after
    this is set: run_case times every provider first.
    """
    gc.collect()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        libc.malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _vm_rss_bytes()


def time_runs(fn: Callable[[], Any], device: str, warmup: int, repeats: int) -> dict[str, Any]:
    """Time fn: warm-up, then `repeats` runs (CUDA-event timed on GPU); median, extremes and IQR."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    q1, q3 = (statistics.quantiles(times, n=4)[0::2]) if len(times) >= 2 else (times[0], times[0])
    return {
        "median_s": statistics.median(times),
        "min_s": times[0],
        "max_s": times[-1],
        "iqr_s": q3 - q1,
        "runs": len(times),
    }


def peak_memory(fn: Callable[[], Any], device: str) -> int | None:
    """Extra memory at the peak of one run of fn: CUDA max allocated, or growth of the process's peak RSS."""
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    base = _reset_cpu_peak()
    fn()
    hwm = _vm_hwm_bytes()
    return None if base is None or hwm is None else max(0, hwm - base)


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({torch.get_num_threads()} threads)"
    except OSError:
        pass
    return platform.processor() or "cpu"


def environment(device: str) -> dict[str, Any]:
    import vlkernels
    from vlkernels._triton import triton_version

    versions = {
        "vlkernels": vlkernels.__version__,
        "torch": torch.__version__,
        "triton": triton_version(),
        "python": platform.python_version(),
    }
    for mod in ("numpy", "torchvision", "pycocotools", "faiss", "open_clip", "pycocoevalcap"):
        try:
            versions[mod] = getattr(importlib.import_module(mod), "__version__", "installed")
        except Exception:
            versions[mod] = None
    try:
        root = Path(vlkernels.__file__).resolve().parent.parent
        sha = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {
        "device": device,
        "device_name": device_name(device),
        "cuda": torch.version.cuda if device == "cuda" else None,
        "versions": versions,
        "git_sha": sha,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def run_case(case: Case, device: str, quick: bool, warmup: int = 1, repeats: int = 5) -> list[dict[str, Any]]:
    params = case.quick if quick else case.full
    try:
        benches = case.fn(**params, device=device)
    except ModuleNotFoundError as e:
        # An anchor library (pycocotools, open_clip, ...) is optional: its case is reported as skipped, not failed.
        status = f"skipped: needs {e.name} (pip install it to run this case)"
        return [
            {
                "family": case.family,
                "case": case.name,
                "mode": "-",
                "params": params,
                "quick": quick,
                "baseline": None,
                "status": status,
                "results": {},
                "notes": "",
            }
        ]
    benches = benches if isinstance(benches, list) else [benches]
    rows = []
    for b in benches:
        outputs = {name: fn() for name, fn in b.providers.items()}
        _sync(device)
        status = "ok"
        if b.check is not None:
            try:
                b.check(outputs)
            except AssertionError as e:
                status = f"check failed: {e}"
        del outputs
        results = {}
        if status == "ok":
            for name, fn in b.providers.items():
                results[name] = time_runs(fn, device, warmup, b.repeats or repeats)
            for name, fn in b.providers.items():
                results[name]["peak_mem_bytes"] = peak_memory(fn, device)
        base = results.get(b.baseline) if b.baseline else None
        for r in results.values():
            if base is not None:
                r["speedup_vs_baseline"] = base["median_s"] / r["median_s"] if r["median_s"] > 0 else None
            if b.flops:
                r["tflops"] = b.flops / r["median_s"] / 1e12
            if b.bytes:
                r["gbps"] = b.bytes / r["median_s"] / 1e9
        rows.append(
            {
                "family": case.family,
                "case": case.name,
                "mode": b.mode,
                "params": params,
                "quick": quick,
                "baseline": b.baseline,
                "status": status,
                "results": results,
                "notes": b.notes,
            }
        )
    return rows


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        head = f"{row['family']}/{row['case']} [{row['mode']}] {row['params']}"
        if row["status"] != "ok":
            lines.append(f"{head}: {row['status']}")
            continue
        lines.append(head)
        for name, r in row["results"].items():
            extra = []
            if "speedup_vs_baseline" in r and r["speedup_vs_baseline"] is not None and name != row["baseline"]:
                extra.append(f"{r['speedup_vs_baseline']:.2f}x vs {row['baseline']}")
            if "gbps" in r:
                extra.append(f"{r['gbps']:.1f} GB/s")
            if "tflops" in r:
                extra.append(f"{r['tflops']:.2f} TFLOP/s")
            spread = f"[{r['min_s'] * 1e3:.2f}, {r['max_s'] * 1e3:.2f}]"
            lines.append(
                f"  {name:<16} median {r['median_s'] * 1e3:10.3f} ms {spread:>22}  "
                f"peak {_fmt_bytes(r['peak_mem_bytes']):>10}  {'  '.join(extra)}"
            )
    return "\n".join(lines)


def write_jsonl(rows: list[dict[str, Any]], env: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps({**env, **row}) + "\n")


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok"]
    labels = [f"{r['family']}/{r['case']}\n{r['mode']}" for r in ok]
    providers = sorted({p for r in ok for p in r["results"]})
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(ok)), 4))
    width = 0.8 / max(1, len(providers))
    for k, p in enumerate(providers):
        xs = [i + k * width for i, r in enumerate(ok) if p in r["results"]]
        ys = [r["results"][p]["median_s"] * 1e3 for r in ok if p in r["results"]]
        ax.bar(xs, ys, width, label=p)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(ok))], labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median time (ms, log)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(
    families: list[str] | None,
    device: str,
    quick: bool,
    json_path: Path | None,
    plot_path: Path | None,
    echo: Callable[[str], None] = print,
) -> int:
    """Run the selected families' cases; returns a process exit code (1 when a check fails)."""
    known = discover()
    selected = families or known
    unknown = [f for f in selected if f not in REGISTRY]
    if unknown:
        echo(f"unknown benchmark family {unknown}; known: {known}")
        return 2
    env = environment(device)
    echo(f"device: {env['device_name']} | torch {env['versions']['torch']} | vlkernels {env['versions']['vlkernels']}")
    all_rows, failed = [], False
    for fam in selected:
        for case in REGISTRY[fam].values():
            if device not in case.devices:
                continue
            rows = run_case(case, device, quick)
            failed |= any(r["status"].startswith("check failed") for r in rows)
            echo(format_rows(rows))
            all_rows += rows
            if json_path is not None:
                write_jsonl(rows, env, json_path)
    if plot_path is not None and all_rows:
        plot(all_rows, plot_path, f"{env['device_name']} · {env['date']}")
    return 1 if failed else 0
