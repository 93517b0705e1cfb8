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

import contextlib
import ctypes
import dataclasses
import functools
import gc
import importlib
import importlib.util
import io
import json
import os
import pkgutil
import shutil
import statistics
import sys
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
    # Human label of this row (e.g. "InfoNCE fwd+bwd"); the case name when empty. Rows of one run must differ.
    label: str = ""
    # Parameters this row really ran with, where they differ from the case's (e.g. a larger k than the case's).
    params: dict[str, Any] | None = None


class Skip(Exception):
    """Raised by a case that cannot run here (an anchor or input data missing); the message says how to get it."""


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


def _proc_status_bytes(key: str) -> int | None:
    """A memory line of /proc/self/status (``VmHWM``: peak RSS, ``VmRSS``: current RSS) in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
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
    return _proc_status_bytes("VmRSS")


def _stats(times: list[float]) -> dict[str, Any]:
    """Median, extremes and IQR of a list of run times."""
    times = sorted(times)
    q1, q3 = (statistics.quantiles(times, n=4)[0::2]) if len(times) >= 2 else (times[0], times[0])
    return {
        "median_s": statistics.median(times),
        "min_s": times[0],
        "max_s": times[-1],
        "iqr_s": q3 - q1,
        "runs": len(times),
    }


def _run_times(fn: Callable[[], Any], device: str, warmup: int, repeats: int) -> list[float]:
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
    return times


def time_runs(fn: Callable[[], Any], device: str, warmup: int, repeats: int) -> dict[str, Any]:
    """Time fn: warm-up, then `repeats` runs (CUDA-event timed on GPU); median, extremes and IQR."""
    return _stats(_run_times(fn, device, warmup, repeats))


@contextlib.contextmanager
def contention(processes: int):
    """`processes` busy-loop processes pinned to the cores this process may run on, for the duration of the block:
    the load of a data loader or another job beside an evaluation. Started (and stopped) as whole processes, so
    the timed code shares the cores with them exactly as it would with any other program; the block starts once
    every one of them has reported that it is spinning."""
    import multiprocessing

    from .busy import busy_loop

    cores = os.sched_getaffinity(0)
    ctx = multiprocessing.get_context("spawn")
    ready = [ctx.Event() for _ in range(processes)]
    procs = [ctx.Process(target=busy_loop, args=(cores, r), daemon=True) for r in ready]
    for p in procs:
        p.start()
    try:
        for p, r in zip(procs, ready):
            if not r.wait(timeout=60):
                raise RuntimeError(f"a busy-loop process did not start within 60 s (exit code {p.exitcode})")
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()


def time_under_load(
    providers: dict[str, Callable[[], Any]], device: str, repeats: int, processes: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """Each provider quiet and beside `processes` busy loops, in `rounds` rounds; within a round the providers run
    one after the other (their order reversed every other round), each quiet then loaded, so a drift of the
    machine's own load falls on every provider alike. Returns per provider the quiet statistics with a "loaded"
    entry (statistics of the loaded runs) and "slowdown" (loaded median / quiet median)."""
    quiet: dict[str, list[float]] = {name: [] for name in providers}
    loaded: dict[str, list[float]] = {name: [] for name in providers}
    names = list(providers)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            quiet[name] += _run_times(providers[name], device, 1, repeats)
            with contention(processes):
                loaded[name] += _run_times(providers[name], device, 1, repeats)
    out = {}
    for name in names:
        q, lo = _stats(quiet[name]), _stats(loaded[name])
        out[name] = {**q, "loaded": lo, "slowdown": lo["median_s"] / q["median_s"] if q["median_s"] > 0 else None}
    return out


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
    hwm = _proc_status_bytes("VmHWM")
    return None if base is None or hwm is None else max(0, hwm - base)


# The environment recorded with every row: vlkernels' one reader of it.
from vlkernels._environment import cpu_info, device_name, environment  # noqa: E402, F401


def _unrun(case: Case, params: dict, quick: bool, status: str) -> list[dict[str, Any]]:
    """The one row of a case that ran nothing: ``status`` says why ("skipped: ..." or "error: ...")."""
    row = {"family": case.family, "case": case.name, "label": case.name, "mode": "-", "params": params}
    return [{**row, "quick": quick, "baseline": None, "status": status, "results": {}, "notes": ""}]


@functools.cache
def _java() -> str | None:
    return shutil.which("java")


def require_java() -> None:
    """Skip (raised in a case or a provider) where pycocoevalcap's Java PTB tokenizer cannot run (PATH searched once
    a process, not in every timed call)."""
    if _java() is None:
        raise Skip("needs Java 8+ on PATH (pycocoevalcap's PTB tokenizer is a Java program)")


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


@contextlib.contextmanager
def _quiet_fds():
    """Silence file descriptors 1 and 2 while an anchor runs: pycocoevalcap's Java tokenizer and scorers print
    progress lines that would break the report. Python exceptions still propagate and are reported after."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def run_case(
    case: Case, device: str, quick: bool, warmup: int = 1, repeats: int = 5, load: int = 0, rounds: int = 3
) -> list[dict[str, Any]]:
    """Every Bench of a case: the check, then each provider timed (quiet, or quiet and under `load` busy processes
    in `rounds` alternating rounds), then each provider's peak memory."""
    params = case.quick if quick else case.full
    try:
        with _quiet_fds():
            benches = case.fn(**params, device=device)
    except ModuleNotFoundError as e:
        # An anchor library (pycocotools, open_clip, ...) is optional: its case is reported as skipped, not failed.
        why = f"needs {e.name} (pip install 'vlkernels[bench]' or pip install {e.name})"
        return _unrun(case, params, quick, f"skipped: {why}")
    except Skip as e:
        return _unrun(case, params, quick, f"skipped: {e}")
    except Exception as e:  # reported as this case's failure; the other cases still run
        return _unrun(case, params, quick, f"error: {_error(e)}")
    benches = benches if isinstance(benches, list) else [benches]
    if not benches:
        return _unrun(case, params, quick, "skipped: the case built nothing to run (its input data is missing)")
    rows = []
    for b in benches:
        status, outputs = "ok", {}
        try:
            with _quiet_fds():
                outputs = {name: fn() for name, fn in b.providers.items()}
            _sync(device)
        except Skip as e:
            status = f"skipped: {e}"
        except Exception as e:
            status = f"error: {_error(e)}"
        if status == "ok" and b.check is not None:
            try:
                b.check(outputs)
            except AssertionError as e:
                status = f"check failed: {e}"
        del outputs
        results = {}
        if status == "ok":
            with _quiet_fds():
                if load:
                    results = time_under_load(b.providers, device, b.repeats or repeats, load, rounds)
                else:
                    for name, fn in b.providers.items():
                        results[name] = time_runs(fn, device, warmup, b.repeats or repeats)
                for name, fn in b.providers.items():
                    results[name]["peak_mem_bytes"] = peak_memory(fn, device)
        base = results.get(b.baseline) if b.baseline else None
        for r in results.values():
            if base is not None:
                r["speedup_vs_baseline"] = base["median_s"] / r["median_s"] if r["median_s"] > 0 else None
                if "loaded" in r:
                    lo, blo = r["loaded"], base["loaded"]
                    lo["speedup_vs_baseline"] = blo["median_s"] / lo["median_s"] if lo["median_s"] > 0 else None
            if b.flops:
                r["tflops"] = b.flops / r["median_s"] / 1e12
            if b.bytes:
                r["gbps"] = b.bytes / r["median_s"] / 1e9
        rows.append(
            {
                "family": case.family,
                "case": case.name,
                "label": b.label or (case.name if b.mode == "fwd" else f"{case.name} {b.mode}"),
                "mode": b.mode,
                "params": {**params, **(b.params or {})},
                "quick": quick,
                "baseline": b.baseline,
                "status": status,
                "results": results,
                "notes": b.notes,
                **({"load": {"busy_processes": load, "rounds": rounds}} if load else {}),
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


def _fmt_params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _ours(row: dict[str, Any]) -> str | None:
    """The vlkernels provider of a row (the one that is not the anchor)."""
    names = [n for n in row["results"] if n != row["baseline"]]
    return next((n for n in names if n.startswith("vlkernels")), names[0] if names else None)


def format_rows(rows: list[dict[str, Any]]) -> str:
    """Human report: a title line per row (family · label · parameters), then one line per provider with the median,
    the spread, peak memory and, for vlkernels providers, the speedup against the anchor named."""
    lines = []
    for row in rows:
        head = f"{row['family']} · {row['label']} ({_fmt_params(row['params'])})"
        if row["status"] != "ok":
            lines.append(f"{head}: {row['status']}")
            continue
        lines.append(head)
        base = row["baseline"]
        for name, r in row["results"].items():
            extra = []
            sp = r.get("speedup_vs_baseline")
            if sp is not None and name != base:
                extra.append(f"{sp:7.2f}x vs {base}")
            if "gbps" in r:
                extra.append(f"{r['gbps']:.1f} GB/s")
            if "tflops" in r:
                extra.append(f"{r['tflops']:.2f} TFLOP/s")
            if "roofline_pct" in r:
                extra.append(f"{r['roofline_pct']:.0f}% of limit (model)")
            if "loaded" in r:
                lo = r["loaded"]
                vs = ""
                if name != base and "speedup_vs_baseline" in lo:
                    vs = f", {lo['speedup_vs_baseline']:.2f}x vs {base}"
                extra.append(f"loaded {lo['median_s'] * 1e3:.3f} ms ({r['slowdown']:.2f}x slower{vs})")
            spread = f"[{r['min_s'] * 1e3:.2f}, {r['max_s'] * 1e3:.2f}]"
            role = " (anchor)" if name == base else ""
            lines.append(
                f"  {name + role:<28} {r['median_s'] * 1e3:10.3f} ms {spread:>20}  "
                f"peak {_fmt_bytes(r['peak_mem_bytes']):>10}  {'  '.join(extra)}".rstrip()
            )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """One line per compared row: speedup of vlkernels against its anchor; skipped rows listed with the reason."""
    lines = ["", "summary (median time; speedup = anchor / vlkernels, measured side by side in this run):"]
    for row in rows:
        what = f"{row['family']} · {row['label']}"
        if row["status"] != "ok":
            lines.append(f"  {what:<52} {row['status']}")
            continue
        ours, base = _ours(row), row["baseline"]
        if ours is None or base not in row["results"]:
            continue
        r, b = row["results"][ours], row["results"][base]
        line = (
            f"  {what:<52} {r['median_s'] * 1e3:10.2f} ms vs {base} {b['median_s'] * 1e3:10.2f} ms"
            f"  {r['speedup_vs_baseline']:8.2f}x"
        )
        if "loaded" in r:
            line += (
                f" | loaded {r['loaded']['median_s'] * 1e3:.2f} vs {b['loaded']['median_s'] * 1e3:.2f} ms"
                f" {r['loaded']['speedup_vs_baseline']:.2f}x (slowdown {r['slowdown']:.2f}x vs {b['slowdown']:.2f}x)"
            )
        lines.append(line)
    return "\n".join(lines)


def write_jsonl(rows: list[dict[str, Any]], env: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps({**env, **row}) + "\n")


# The --plot formats: matplotlib writes each on every backend.
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> bool:
    """One panel per family: horizontal bars of vlkernels' speedup over each row's anchor (log scale), the anchor
    named on the bar, a line at 1x (parity). False (nothing written) when no row has an anchor's time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ok = [r for r in rows if r["status"] == "ok" and _ours(r) and r["baseline"] in r["results"]]
    families = sorted({r["family"] for r in ok})
    if not families:
        return False
    heights = [max(1, sum(r["family"] == f for r in ok)) for f in families]
    fig, axes = plt.subplots(
        len(families),
        1,
        figsize=(10, 1.2 + 0.45 * sum(heights) + 0.6 * len(families)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, fam in zip(axes[:, 0], families):
        fr = [r for r in ok if r["family"] == fam]
        sp = [r["results"][_ours(r)]["speedup_vs_baseline"] for r in fr]
        ys = list(range(len(fr)))[::-1]
        # Bars grow from parity (1x): right = faster than the anchor, left = slower.
        ax.barh(
            ys,
            [abs(v - 1.0) for v in sp],
            left=[min(v, 1.0) for v in sp],
            color=["tab:green" if v >= 1 else "tab:red" for v in sp],
            height=0.6,
        )
        ax.set_yticks(ys, [r["label"] for r in fr], fontsize=9)
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", linewidth=0.8)
        for y, v, r in zip(ys, sp, fr):
            ratio = f"{v:.0f}x" if v >= 100 else f"{v:.2f}x"
            ax.text(max(v, 1.0) * 1.05, y, f"{ratio} vs {r['baseline']}", va="center", fontsize=8)
        lo, hi = min([*sp, 1.0]), max([*sp, 1.0])
        ax.set_xlim(lo / 2, hi * 8)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(fam, fontsize=10, loc="left")
    axes[-1, 0].set_xlabel("speedup over the anchor (log scale; > 1 = vlkernels faster)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format=path.suffix[1:].lower())  # the file named, whatever matplotlib's default
    plt.close(fig)
    return True


def run(
    families: list[str] | None,
    device: str,
    quick: bool,
    json_path: Path | None,
    plot_path: Path | None,
    echo: Callable[[str], None] = print,
    load: int = 0,
    rounds: int = 3,
) -> int:
    """Run the selected families' cases; returns a process exit code (1 when a check fails). With `load` > 0 every
    provider is timed quiet and beside that many busy-loop processes on the same cores (`rounds` rounds)."""
    if load < 0 or rounds < 1:
        raise ValueError(f"--load takes a count of busy processes >= 0 and --rounds a count >= 1; got {load}, {rounds}")
    known = discover()
    selected = families or known
    unknown = [f for f in selected if f not in REGISTRY]
    if unknown:
        echo(f"unknown benchmark family {unknown}; known: {known}")
        return 2
    if plot_path is not None and plot_path.suffix.lower() not in PLOT_SUFFIXES:
        print(f"error: --plot {plot_path}: expected a {', '.join(PLOT_SUFFIXES)} file", file=sys.stderr)
        return 2
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        print("error: --plot needs matplotlib (pip install matplotlib, or 'vlkernels[bench]')", file=sys.stderr)
        return 2
    # The machine's load when the run started (1, 5, 15 min): other processes on the cores inflate every time.
    env = {**environment(device), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    cpu = env["cpu"]
    echo(
        f"device: {env['device_name']} | CPU {cpu['model']} ({cpu.get('logical_cpus')} logical, {' '.join(cpu['isa'])})"
        f" | torch {env['versions']['torch']} | vlkernels {env['versions']['vlkernels']}"
    )
    if load:
        echo(f"load: every provider timed quiet and beside {load} busy-loop processes on its cores, {rounds} rounds")
    all_rows, failed = [], False
    try:
        for fam in selected:
            for case in REGISTRY[fam].values():
                if device not in case.devices:
                    continue
                rows = run_case(case, device, quick, load=load, rounds=rounds)
                failed |= any(r["status"].startswith(("check failed", "error")) for r in rows)
                echo(format_rows(rows))
                all_rows += rows
                if json_path is not None:
                    try:
                        write_jsonl(rows, env, json_path)
                    except OSError as e:  # a full disk, a path that turned unwritable during the run
                        print(f"error: cannot write {json_path}: {e}", file=sys.stderr)
                        return 2
    except KeyboardInterrupt:
        written = f", written to {json_path}" if json_path is not None and all_rows else ""
        print(f"interrupted: {len(all_rows)} rows finished{written}", file=sys.stderr)
        return 130
    echo(summary(all_rows))
    if plot_path is not None:
        try:
            drawn = plot(all_rows, plot_path, f"{env['device_name']} · {env['date']}")
        except OSError as e:
            print(f"error: cannot write {plot_path}: {e}", file=sys.stderr)
            return 2
        if not drawn:
            print(f"error: --plot {plot_path} not written: no row has an anchor's time to compare", file=sys.stderr)
            return 1
    return 1 if failed else 0
