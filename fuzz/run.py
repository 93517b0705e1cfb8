"""Runs the atheris fuzz targets fuzz/fuzz_*.py (each defines ``TestOneInput(data: bytes)``).

    python fuzz/run.py                       # every target, 10 s each
    python fuzz/run.py --seconds 600 core    # one target (fuzz_core.py), 10 minutes
    python fuzz/run.py --seconds 5 -- -rss_limit_mb=4096   # extra libFuzzer flags after --
    python fuzz/run.py --seconds 3 --jobs 2  # two targets at a time

Each target runs in its own process with the vlkernels Python modules instrumented for coverage; a corpus is kept
under fuzz/corpus/<target>/ (not committed) so long runs resume. A crash (an exception other than the ones a target
declares expected, or a sanitizer report when run on the sanitized build through VLKERNELS_C_PATH) is saved as
fuzz/crashes/<target>/crash-* and the run fails. Prints one line per target: executions, coverage, corpus size.
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# The per-target driver (sys.argv: libFuzzer's arguments): instrument vlkernels, import the target, hand it to
# libFuzzer.
# With gcc's libasan preloaded atheris gets no coverage signal, so the instrumenting (seconds of startup) is skipped.
_DRIVER = """
import contextlib, importlib.util, os, sys
import atheris
sys.path.insert(0, {repo!r})
coverage = "libasan" not in os.environ.get("LD_PRELOAD", "")
with atheris.instrument_imports(include=["vlkernels"]) if coverage else contextlib.nullcontext():
    import vlkernels, vlkernels.ops
spec = importlib.util.spec_from_file_location("fuzz_target", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
# The target's own branches (which input shapes it built) are the coverage signal for the C++ it calls.
for name in dir(mod) if coverage else ():
    fn = getattr(mod, name)
    if callable(fn) and getattr(fn, "__module__", None) == "fuzz_target" and hasattr(fn, "__code__"):
        setattr(mod, name, atheris.instrument_func(fn))
atheris.Setup(sys.argv, mod.TestOneInput)
atheris.Fuzz()
"""


def targets(names: list[str] | None = None) -> list[Path]:
    """fuzz/fuzz_<name>.py for the given names (all of them when none is given)."""
    found = sorted(HERE.glob("fuzz_*.py"))
    if not names:
        return found
    chosen = [p for p in found if p.stem.removeprefix("fuzz_") in names or p.stem in names]
    missing = set(names) - {p.stem for p in chosen} - {p.stem.removeprefix("fuzz_") for p in chosen}
    if missing:
        raise SystemExit(f"no fuzz target named {sorted(missing)}; have {[p.stem for p in found]}")
    return chosen


# Each target runs in a child of a fork server that has imported torch once (seconds of every target's startup,
# more under ASan); the child imports vlkernels itself, so its modules are still instrumented for coverage.
_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(["torch"])


def _fuzz_child(driver: str, args: list[str], log_path: Path) -> None:
    """libFuzzer's output to the target's log (it writes to the file descriptors), then the driver, which exits."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(REPO)
    sys.argv = [str(Path(sys.executable).name), *args]
    try:
        exec(compile(driver, "<fuzz driver>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        # libFuzzer saves the input a target exited on (and its stats) from a C exit handler: leave through C's
        # exit(), not the os._exit() a multiprocessing child ends with.
        sys.stdout.flush()
        sys.stderr.flush()
        ctypes.CDLL(None).exit(e.code if isinstance(e.code, int) else 1)


# What a finding looks like in a target's log: libFuzzer's, ASan's and UBSan's reports, and Python's.
_REPORT = re.compile(r"==\d+== ?ERROR|ERROR: libFuzzer|runtime error:|deadly signal|Uncaught Python exception")


def _is_finding(exitcode: int | None, log: str, crashes: Path) -> bool:
    """A saved crash input, a report in the log, or a target that did not reach libFuzzer's closing "Done N runs".

    libFuzzer ends a finished run with C's exit(0), which then runs the static destructors of every library the fork
    server loaded; a non-zero status after "Done" with no report and no saved input comes from that teardown, not from
    an input: it is printed, not counted.
    """
    saved = any(not p.name.startswith("slow-unit-") for p in crashes.iterdir())
    finished = re.search(r"^Done \d+ runs in", log, re.MULTILINE) is not None
    return saved or _REPORT.search(log) is not None or not finished or exitcode is None


def run_target(path: Path, seconds: float, extra: list[str], workdir: Path | None = None) -> dict:
    """Fuzz one target for `seconds`; returns its figures and libFuzzer's exit code (0: no finding)."""
    workdir = workdir or HERE
    name = path.stem.removeprefix("fuzz_")
    corpus = workdir / "corpus" / name
    crashes = workdir / "crashes" / name
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    seeds = HERE / "seeds" / name
    args = [
        f"-max_total_time={max(1, round(seconds))}",
        "-print_final_stats=1",
        f"-artifact_prefix={crashes}/",
        "-timeout=30",
        *extra,
        str(corpus),
        *([str(seeds)] if seeds.is_dir() else []),
    ]
    start = time.monotonic()
    log_path = workdir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    driver = _DRIVER.format(repo=str(REPO), path=str(path))
    proc = _FORKSERVER.Process(target=_fuzz_child, args=(driver, args, log_path))
    proc.start()
    proc.join()
    log = log_path.read_text(errors="replace")
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    return {
        "target": name,
        "returncode": proc.exitcode,
        "finding": _is_finding(proc.exitcode, log, crashes),
        "seconds": round(time.monotonic() - start, 1),
        "executions": int(execs.group(1)) if execs else None,
        "coverage": int(cov[-1][0]) if cov else None,
        "features": int(cov[-1][1]) if cov else None,
        "corpus": len(list(corpus.iterdir())),
        # libFuzzer also saves inputs slower than -report_slow_units there: a note, not a finding.
        "crashes": sorted(p.name for p in crashes.iterdir() if not p.name.startswith("slow-unit-")),
        "slow": sorted(p.name for p in crashes.iterdir() if p.name.startswith("slow-unit-")),
        "log_tail": log[-4000:],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="targets (fuzz_<name>.py); all by default")
    ap.add_argument("--seconds", type=float, default=10.0, help="fuzzing time per target")
    ap.add_argument("--workdir", type=Path, default=None, help="where corpus/ and crashes/ go (default fuzz/)")
    # Targets are separate processes, each importing vlkernels and fuzzing on one core: two at a time on two cores.
    ap.add_argument("--jobs", type=int, default=1, help="targets fuzzed at the same time")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {a.jobs}")
    failed = 0
    with ThreadPoolExecutor(a.jobs) as pool:
        results = pool.map(lambda path: run_target(path, a.seconds, extra, a.workdir), targets(a.names))
    for res in results:
        ok = not res["finding"]
        failed += not ok
        print(
            f"{res['target']:<20} {'ok' if ok else 'FINDING'}  {res['executions']} executions in {res['seconds']} s, "
            f"cov {res['coverage']} ft {res['features']}, corpus {res['corpus']}, crashes {len(res['crashes'])}, "
            f"slow units {len(res['slow'])}, exit status {res['returncode']}"
        )
        if not ok:
            print(res["log_tail"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
