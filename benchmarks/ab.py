"""Two checkouts of vlkernels side by side: every registered CPU case's vlkernels providers timed in checkout A and
checkout B, alternating rounds, on one machine in one run. This is how a change shows "no speed regression": the
harness itself compares vlkernels with its anchors, this compares vlkernels with itself.

    python benchmarks/ab.py /path/to/old/checkout /path/to/new/checkout [--rounds 3] [--family boxes ...]

Each checkout needs its own built extension (``python setup.py build_ext --inplace`` there). A round runs each
checkout in a fresh interpreter (its own ``benchmarks`` and ``vlkernels`` on ``sys.path``); a provider's figure is its
best median over the rounds, so a burst of load in one round does not count against either side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

# Runs inside each checkout: the quick CPU cases of the chosen families, vlkernels providers only.
_CHILD = """
import json, sys
from benchmarks import harness
harness.discover()
cpu = harness.cpu_info()
print(json.dumps({"machine": f"{cpu['model']}, {cpu.get('logical_cpus')} logical CPUs"}), flush=True)
families = json.loads(sys.argv[1]) or sorted(harness.REGISTRY)
for fam in families:
    for case in harness.REGISTRY.get(fam, {}).values():
        if "cpu" not in case.devices:
            continue
        try:
            with harness._quiet_fds():
                benches = case.fn(**case.quick, device="cpu")
        except Exception as e:  # a missing anchor or data file: the case is not comparable here
            print(json.dumps({"case": f"{fam}/{case.name}", "skipped": f"{type(e).__name__}: {e}"[:200]}), flush=True)
            continue
        for b in benches if isinstance(benches, list) else [benches]:
            label = b.label or case.name
            for name, fn in b.providers.items():
                if not name.startswith("vlkernels"):
                    continue
                with harness._quiet_fds():
                    t = harness.time_runs(fn, "cpu", 1, b.repeats or 5)
                    # A case's own repeats are set for its anchors (a JVM start, seconds of pycocotools): short calls
                    # get enough runs that one hiccup on a shared VM does not decide their median.
                    if t["median_s"] < 0.01:
                        t = harness.time_runs(fn, "cpu", 1, 100)
                    elif t["median_s"] < 0.2:
                        t = harness.time_runs(fn, "cpu", 1, 20)
                print(json.dumps({"case": f"{fam}/{label}", "provider": name, "median_s": t["median_s"]}), flush=True)
"""


def _round(checkout: Path, families: list[str]) -> tuple[dict[tuple[str, str], float], str]:
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(families)], cwd=checkout, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"{checkout}: the benchmark child failed:\n{r.stderr[-3000:]}")
    out, machine = {}, ""
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if "median_s" in row:
                out[(row["case"], row["provider"])] = row["median_s"]
            machine = row.get("machine", machine)
    return out, machine


def _revision(checkout: Path) -> str:
    """The checkout's commit (short sha, "+dirty" with uncommitted changes). Rows name commits only, never a local
    path: a row must mean the same on every machine."""
    sha = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if sha.returncode != 0:
        raise SystemExit(f"{checkout.name}: not a git checkout; ab.py compares commits (a row names each side's sha)")
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return sha.stdout.strip() + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="the reference checkout (e.g. the last release)")
    p.add_argument("b", type=Path, help="the checkout under test")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--family", action="append", default=[], help="a benchmark family (repeatable); default: all")
    p.add_argument("--json", type=Path, help="also write the rows as JSON lines")
    args = p.parse_args(argv)
    best: dict[str, dict[tuple[str, str], float]] = {"a": {}, "b": {}}
    machine = ""
    for _ in range(args.rounds):
        for side, checkout in (("a", args.a), ("b", args.b)):
            times, machine = _round(checkout.resolve(), args.family)
            for key, t in times.items():
                best[side][key] = min(t, best[side].get(key, t))
    common = sorted(set(best["a"]) & set(best["b"]))
    stamp = {"machine": machine, "date": datetime.date.today().isoformat(), "rounds": args.rounds}
    stamp |= {"a": _revision(args.a), "b": _revision(args.b)}
    rows = [{"case": c, "provider": p, "a_s": best["a"][c, p], "b_s": best["b"][c, p], **stamp} for c, p in common]
    sides = f"A={stamp['a']} B={stamp['b']}"
    print(f"{stamp['machine']} | {stamp['date']} | best of {args.rounds} alternating rounds | {sides}")
    print(f"{'case':52s} {'provider':22s} {'A ms':>10s} {'B ms':>10s} {'B/A':>6s}")
    for r in rows:
        ratio = r["b_s"] / r["a_s"]
        print(f"{r['case']:52s} {r['provider']:22s} {r['a_s'] * 1e3:10.2f} {r['b_s'] * 1e3:10.2f} {ratio:6.2f}")
    only = sorted({c for c, _ in set(best["a"]) ^ set(best["b"])})
    if only:
        print(f"in one checkout only (not compared): {', '.join(only)}")
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
