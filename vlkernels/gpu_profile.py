"""The static GPU profile: every kernel compiled offline for sm_80 and sm_90, and what its SASS says.

No GPU is needed (none has ever run these kernels here). Triton kernels are compiled at exactly the
``KernelSpec`` rows each family's ``configs.kernel_specs()`` lists (the configs its launchers can pick on CUDA) with
Triton's offline compiler and its bundled ``ptxas``/``cuobjdump``; every ``csrc/**/*.cu`` kernel is compiled with
``nvcc -Xptxas -v`` to a cubin. Per kernel and config a row records registers/thread, spill bytes, shared memory,
the tensor-core instruction class in the SASS (``HGMMA`` = Hopper warpgroup MMA, ``HMMA`` = ``mma.sync``, ``none``)
and the theoretical occupancy (blocks and warps per SM from registers, shared memory and warps; ``ARCH_LIMITS``).

``vlkernels gpu-profile [--json PATH]`` prints the table and the violations (exit status 1 when there are any):
a GEMM-bearing kernel without tensor-core instructions (on sm_90 without ``HGMMA``), spills, shared memory above
the arch's opt-in limit, a compile error, or a ``@triton.jit`` kernel no family's ``kernel_specs()`` covers.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAMILIES = ("contrastive", "retrieval", "metrics", "core")
PACKAGE = Path(__file__).resolve().parent
CSRC = PACKAGE.parent / "csrc"


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits (CUDA occupancy calculator, compute capability 8.0 and 9.0)."""

    regs_per_sm: int
    max_regs_per_thread: int
    smem_per_sm: int
    smem_optin_per_block: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    reg_alloc_unit: int  # registers, allocated per warp
    smem_alloc_unit: int  # bytes
    smem_reserved_per_block: int  # bytes the runtime keeps per block


ARCH_LIMITS = {
    80: ArchLimits(65536, 255, 164 * 1024, 163 * 1024, 64, 32, 256, 128, 1024),
    90: ArchLimits(65536, 255, 228 * 1024, 227 * 1024, 64, 32, 256, 128, 1024),
}


def occupancy(arch: int, registers: int, smem_bytes: int, warps: int) -> dict[str, Any]:
    """Theoretical blocks and warps per SM for one block of ``warps`` warps, and the resource that limits them."""
    lim = ARCH_LIMITS[arch]
    regs_per_warp = -(-max(registers, 1) * 32 // lim.reg_alloc_unit) * lim.reg_alloc_unit
    by = {
        "warps": lim.max_warps_per_sm // warps,
        "blocks": lim.max_blocks_per_sm,
        "registers": (lim.regs_per_sm // regs_per_warp) // warps,
    }
    # sm_90 cubins already list the runtime's 1 KiB as static shared memory; sm_80 cubins do not.
    reserved = 0 if arch >= 90 else lim.smem_reserved_per_block
    per_block = -(-(smem_bytes + reserved) // lim.smem_alloc_unit) * lim.smem_alloc_unit
    by["shared_memory"] = lim.smem_per_sm // per_block if per_block else lim.max_blocks_per_sm
    blocks = min(by.values())
    limiter = min(by, key=lambda k: by[k])
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "occupancy": blocks * warps / lim.max_warps_per_sm,
        "limiter": limiter,
    }


def tensor_core_class(sass: str) -> str:
    """``HGMMA`` (sm_90 warpgroup MMA), ``HMMA`` (mma.sync), or ``none``."""
    if re.search(r"\bHGMMA\.", sass):
        return "HGMMA"
    if re.search(r"\bHMMA\.", sass):
        return "HMMA"
    return "none"


def _parse_ptxas_v(log: str) -> dict[str, dict[str, int]]:
    """Per entry function (mangled name): registers, spill stores/loads, stack frame and static smem from -v."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line) or re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = out.setdefault(m.group(1), {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0})
            current.setdefault("smem_static", 0)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["smem_static"] = int(s.group(1)) if s else 0
    return out


def _sass_by_function(sass: str) -> dict[str, str]:
    parts = re.split(r"\n\s*Function : (\S+)\n", "\n" + sass)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _res_usage(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage``: per function REG, STACK, SHARED, LOCAL."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        if name and "REG:" in line:
            out[name] = {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}
            name = None
    return out


def nvidia_tools() -> dict[str, str] | None:
    """Triton's bundled ptxas/cuobjdump directory tools, or None when this Triton has none."""
    try:
        import triton
    except ImportError:
        return None
    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    cuobjdump = bindir / "cuobjdump"
    return {"cuobjdump": str(cuobjdump)} if cuobjdump.is_file() else None


def jit_kernels() -> list[tuple[str, str]]:
    """(family, name) of every top-level ``@triton.jit`` kernel in ``vlkernels/*/kernels.py`` (found from the source,
    so no triton import; device helpers, whose names do not end in ``_kernel``, are not launched on their own)."""
    found = []
    for path in sorted(PACKAGE.glob("*/kernels.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or not node.name.endswith("_kernel"):
                continue
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                found.append((path.parent.name, node.name))
    return found


def collect_specs() -> tuple[list, list[str]]:
    """Every family's ``kernel_specs()``; a family without a configs module is skipped with a note."""
    specs, notes = [], []
    for fam in FAMILIES:
        name = f"vlkernels.{fam}.configs"
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            notes.append(f"{fam}: no {name} module in this tree; its kernels are not profiled")
            continue
        specs += mod.kernel_specs()
    return specs, notes


def _jit(kernel):
    """The JITFunction of a spec's kernel: specs may hold it, its Python function, or a wrapper around it
    (``triton.heuristics``/``autotune``, whose values the spec's constexprs then give)."""
    from triton.runtime.jit import JITFunction

    obj = kernel
    if not isinstance(obj, JITFunction):
        fn = getattr(obj, "fn", obj)
        while hasattr(fn, "fn"):
            fn = fn.fn
        obj = getattr(sys.modules[fn.__module__], fn.__name__)
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn"):
        obj = obj.fn
    return obj


def kernel_arg_names(kernel) -> list[str]:
    """The kernel's argument names, in compiled or interpreted mode."""
    fn = kernel
    while hasattr(fn, "fn"):
        fn = fn.fn
    return list(inspect.signature(fn).parameters)


def _spec_row(spec) -> dict[str, Any]:
    consts = {k: (v.__name__ if callable(v) else v) for k, v in spec.constexprs.items()}
    return {
        "source": "triton",
        "family": spec.family,
        "kernel": spec.kernel.__name__,
        "label": spec.label,
        "arch": spec.arch,
        "dtype": spec.dtype,
        "config": {**consts, "num_warps": spec.num_warps, "num_stages": spec.num_stages},
        "gemm": bool(spec.gemm),
        "threads": 32 * spec.num_warps,
        "allow_hmma": spec.extra.get("allow_hmma"),
    }


def _source(spec):
    """The spec as ``triton.compile`` takes it: (ASTSource, target, options)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _jit(spec.kernel)
    consts = dict(spec.constexprs)
    missing = set(fn.arg_names) - set(spec.signature) - set(consts)
    if missing:
        raise ValueError(f"{spec.name}: arguments {sorted(missing)} have neither a type nor a constexpr value")
    sig = {**spec.signature, **{k: "constexpr" for k in consts}}
    # The 16-divisibility Triton's launch-time specialization gives usual shapes (aligned pointers, strides, dims):
    # without these hints the same kernels compile to other code (address arithmetic, spills) than they run as.
    div = spec.extra.get("divisible_by_16", ())
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in div}
    src = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    # Launch options a launcher passes besides warps and stages (e.g. enable_fp_fusion=False) compile the same way.
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages, **spec.extra.get("options", {})}
    return src, GPUTarget("cuda", spec.arch, 32), options


def triton_cache_key(spec) -> str | None:
    """Triton's own compile-cache key of the spec (the hash ``triton.compile`` files its output under: Triton's
    version, the kernel's source and every jit function it calls, signature, constexprs, hints, target, ptxas version,
    options, cache-invalidating environment). Equal keys mean the same cubin. None when this Triton's internals
    differ from 3.9's; then no committed row is reused."""
    try:
        from triton.compiler.compiler import get_cache_invalidating_env_vars, get_cache_key, make_backend

        src, target, options = _source(spec)
        backend = make_backend(target)
        opts = backend.parse_options(dict(options, **src.parse_options()))
        key = get_cache_key(src, backend, opts, env_vars=get_cache_invalidating_env_vars())
    except (ImportError, AttributeError, TypeError):
        return None
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@contextlib.contextmanager
def _ptxas_log(buf: io.StringIO):
    """Triton's ptxas already runs with ``-v``; its ``dump_ptxas_log`` knob prints that report, caught here, so the
    profile need not run ptxas a second time. Nothing is caught when the cubin comes from Triton's cache."""
    nv = getattr(getattr(importlib.import_module("triton"), "knobs", None), "nvidia", None)
    if nv is None or not hasattr(nv, "dump_ptxas_log"):
        yield
        return
    old = nv.dump_ptxas_log
    nv.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        nv.dump_ptxas_log = old


def compile_triton(spec, tools: dict[str, str]) -> dict[str, Any]:
    """Compile one spec offline and read its resources from ptxas' log and the cubin."""
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    row = _spec_row(spec)
    src, target, options = _source(spec)
    buf = io.StringIO()
    with _ptxas_log(buf):
        k = triton.compile(src, target=target, options=options)
    arch_name = f"sm_{spec.arch}a" if spec.arch >= 90 else f"sm_{spec.arch}"
    ptx = k.asm["ptx"]
    with tempfile.TemporaryDirectory(prefix="vlk_prof_") as tmp:
        cubin = Path(tmp, "k.cubin")
        cubin.write_bytes(k.asm["cubin"])
        log = buf.getvalue()
        if not _parse_ptxas_v(log):  # a cache hit: the same ptxas and flags again, for the -v report only
            Path(tmp, "k.ptx").write_text(ptx)
            log = subprocess.run(
                [get_ptxas(spec.arch).path, "-v", "-lineinfo", "--regAllocOptLevel=2", f"--gpu-name={arch_name}",
                 str(Path(tmp, "k.ptx")), "-o", str(Path(tmp, "v.cubin"))],
                capture_output=True, text=True, check=True,
            ).stderr  # fmt: skip
        # ptxas emits tensor-core SASS only for PTX mma/wgmma instructions: without them there is nothing to find.
        sass = ""
        if re.search(r"\b(?:w?gmma|mma)\.", ptx):
            sass = subprocess.run([tools["cuobjdump"], "-sass", str(cubin)], capture_output=True, text=True).stdout
        res = subprocess.run([tools["cuobjdump"], "-res-usage", str(cubin)], capture_output=True, text=True)
    usage = next(iter(_res_usage(res.stdout).values()), {})
    v = next(iter(_parse_ptxas_v(log).values()), {})
    smem_static = usage.get("shared", 0)
    out = {
        "registers": usage.get("reg", v.get("registers", 0)),
        "spill_stores": v.get("spill_stores", 0),
        "spill_loads": v.get("spill_loads", 0),
        "stack_bytes": usage.get("stack", v.get("stack", 0)),
        "smem_static": smem_static,
        "smem_dynamic": int(k.metadata.shared),
        "smem_bytes": smem_static + int(k.metadata.shared),
        "tensor_core": tensor_core_class(sass),
        "key": getattr(k.metadata, "hash", None),
        "triton": triton.__version__,
    }
    out.update(occupancy(spec.arch, out["registers"], out["smem_bytes"], spec.num_warps))
    return {**row, **out}


def _threads_at_launch_sites() -> dict[str, int]:
    """Threads per block of each ``__global__`` kernel, read from its ``<<<grid, block, ...>>>`` launch sites."""
    text = "\n".join(p.read_text() for p in sorted(CSRC.rglob("*.cu")) + sorted(CSRC.rglob("*.h")))
    pattern = r"constexpr\s+(?:int|int64_t)\s+(\w+)\s*=\s*(\d+)"
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(pattern, text)}
    threads = {}
    for m in re.finditer(r"(\w+)(?:<[^;{}]*?>)?\s*<<<\s*(.+?)>>>", text, re.S):
        args, depth, cur = [], 0, ""
        for ch in m.group(2):
            if ch == "," and depth == 0:
                args.append(cur)
                cur = ""
                continue
            depth += ch == "("
            depth -= ch == ")"
            cur += ch
        if len(args) < 1:
            continue
        expr = re.sub(r"\b\w+::", "", [*args, cur][1]).strip()
        expr = re.sub(r"\b([A-Za-z_]\w*)\b", lambda t: str(consts.get(t.group(1), t.group(1))), expr)
        expr = re.sub(r"dim3\(([^)]*)\)", lambda t: "*".join(t.group(1).split(",")), expr)
        if re.fullmatch(r"[\d\s*+()/-]+", expr):
            threads[m.group(1)] = int(eval(expr))  # digits and arithmetic only (checked above)
    return threads


NVCC_FLAGS = ("-std=c++17", "-O3", "-DVLK_WITH_CUDA=1")


def compile_cuda(arch: int, nvcc: str, tools: dict[str, str], files: list[Path] | None = None) -> list[dict]:
    """Every ``__global__`` kernel of the ``files`` (default: every ``csrc/**/*.cu``) for one arch, from
    ``nvcc -Xptxas -v`` and the cubin."""
    rows = []
    threads = _threads_at_launch_sites()
    for cu in sorted(CSRC.rglob("*.cu")) if files is None else files:
        with tempfile.TemporaryDirectory(prefix="vlk_nvcc_") as tmp:
            cubin = Path(tmp, "k.cubin")
            cmd = [nvcc, *NVCC_FLAGS, f"-I{CSRC}", "-cubin", f"-arch=sm_{arch}",
                   "-Xptxas", "-v", str(cu), "-o", str(cubin)]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True)
            rel = str(cu.relative_to(CSRC.parent))
            if r.returncode != 0:
                rows.append({"source": "cuda", "file": rel, "arch": arch, "status": f"error: {r.stderr[-500:]}"})
                continue
            v = _parse_ptxas_v(r.stderr)
            sass = subprocess.run([tools["cuobjdump"], "-sass", str(cubin)], capture_output=True, text=True).stdout
        per_fn = _sass_by_function(sass)
        names = _demangle(list(v))
        for mangled, info in v.items():
            name = names[mangled]
            base = name.replace("(anonymous namespace)::", "").removeprefix("void ").split("(")[0].split("<")[0]
            base = base.rsplit("::", 1)[-1]
            n_threads = threads.get(base)
            row = {
                "source": "cuda",
                "family": cu.parent.name,
                "file": rel,
                "kernel": name,
                "label": "",
                "arch": arch,
                "dtype": "",
                "config": {},
                "gemm": False,
                "threads": n_threads,
                "registers": info["registers"],
                "spill_stores": info["spill_stores"],
                "spill_loads": info["spill_loads"],
                "stack_bytes": info["stack"],
                "smem_static": info["smem_static"],
                "smem_dynamic": 0,
                "smem_bytes": info["smem_static"],
                "tensor_core": tensor_core_class(per_fn.get(mangled, "")),
            }
            if n_threads:
                row.update(occupancy(arch, info["registers"], info["smem_static"], -(-n_threads // 32)))
            rows.append(row)
    return rows


def _demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


_SPECS: list = []
# The committed profile (in a checkout) and what a compile measures in a row (the rest names the spec or kernel).
COMMITTED = PACKAGE.parent / "benchmarks" / "results" / "gpu_static.jsonl"
MEASURED = ("registers", "spill_stores", "spill_loads", "stack_bytes", "smem_static", "smem_dynamic", "smem_bytes",
            "tensor_core", "blocks_per_sm")  # fmt: skip


def read_rows(path: Path) -> list[dict]:
    """A profile's JSON lines."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measured(row: dict) -> dict:
    """The measured part of a row, to compare a fresh compile with a committed row."""
    return {k: row.get(k) for k in MEASURED}


def identity(row: dict) -> tuple:
    """What names one row of the profile: a Triton spec, or one kernel of one .cu file, at one arch."""
    if row["source"] == "triton":
        return ("triton", row["family"], row["kernel"], row["label"], row["arch"], row["dtype"])
    return ("cuda", row["file"], row.get("kernel", ""), row["arch"])


def _compile_one(index: int) -> dict[str, Any]:
    spec = _SPECS[index]
    try:
        return {**compile_triton(spec, nvidia_tools()), "status": "ok"}
    except Exception as e:  # one bad spec is a reported violation, not the end of the profile
        return {**_spec_row(spec), "status": f"error: {type(e).__name__}: {str(e)[-800:]}"}


def _key_of(index: int) -> dict[str, Any]:
    return {**_spec_row(_SPECS[index]), "key": triton_cache_key(_SPECS[index])}


def _worker(families: tuple[str, ...], jobs: int, only: list[int] | None, keys: bool) -> int:
    """Runs in a fresh interpreter without TRITON_INTERPRET: compiles the specs (all, or the ``only`` indices;
    ``jobs`` forked processes; the specs are inherited, not pickled), or with ``keys`` only computes their cache
    keys; one JSON line each, in spec order."""
    specs, notes = collect_specs()
    for note in notes:
        print(json.dumps({"note": note}), flush=True)
    _SPECS[:] = [s for s in specs if s.family in families]
    todo = list(range(len(_SPECS))) if only is None else only
    work = _key_of if keys else _compile_one
    if keys or jobs <= 1 or len(todo) < 2:
        for row in map(work, todo):
            print(json.dumps(row), flush=True)
        return 0
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for row in pool.map(work, todo):
            print(json.dumps(row), flush=True)
    return 0


class OfflineCompileUnavailable(RuntimeError):
    """This machine's Triton cannot compile for CUDA offline (no NVIDIA backend, no ptxas/cuobjdump)."""


def profile_triton(
    families: tuple[str, ...] = FAMILIES, jobs: int | None = None, only: list[int] | None = None, keys: bool = False
) -> tuple[list[dict], list[str]]:
    """Compile the specs in a subprocess (compiled mode, whatever TRITON_INTERPRET says here), ``jobs`` at a time
    (default: the CPUs this process may use): all of them, or the ``only`` indices into ``collect_specs()`` of
    ``families``; with ``keys``, only their cache keys (no compile). Triton's on-disk cache makes a repeat fast."""
    jobs = jobs or len(os.sched_getaffinity(0))
    if nvidia_tools() is None:
        raise OfflineCompileUnavailable("triton with its NVIDIA backend (bundled ptxas/cuobjdump) is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    cmd = [sys.executable, "-m", "vlkernels.gpu_profile", "--worker", "--families", ",".join(families)]
    cmd += ["--jobs", str(jobs)] + (["--keys"] if keys else [])
    if only is not None:
        if not only:
            return [], []
        cmd += ["--only", ",".join(map(str, only))]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=PACKAGE.parent)
    if r.returncode != 0:
        if "GPUTarget" in r.stderr or "ptxas" in r.stderr:
            raise OfflineCompileUnavailable(r.stderr[-500:])
        raise RuntimeError(f"the compile worker failed:\n{r.stderr[-4000:]}")
    rows, notes = [], []
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            obj = json.loads(line)
            (notes.append(obj["note"]) if "note" in obj else rows.append(obj))
    return rows, notes


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next(
        (str(p) for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"] if p.exists()), None
    )


def nvcc_version(nvcc: str) -> str:
    """nvcc's build line, e.g. ``Build cuda_13.0.r13.0/compiler.36424714_0``."""
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]


def cuda_key(nvcc: str) -> str:
    """What the CUDA rows depend on: nvcc's version, the flags, and every source and header under csrc/ (launch
    sites in any of them give a kernel's block size)."""
    h = hashlib.sha256(nvcc_version(nvcc).encode())
    h.update(" ".join(NVCC_FLAGS).encode())
    for path in sorted(p for p in CSRC.rglob("*") if p.suffix in (".cu", ".cuh", ".h")):
        h.update(str(path.relative_to(CSRC)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def profile_cuda(archs: tuple[int, ...] = (80, 90), files: list[Path] | None = None) -> list[dict]:
    """Every kernel of the .cu ``files`` (default: all of csrc/) at each arch; [] without nvcc or cuobjdump."""
    nvcc, tools = nvcc_path(), nvidia_tools()
    if nvcc is None or tools is None:
        return []
    key, version = cuda_key(nvcc), nvcc_version(nvcc)
    return [dict(row, status=row.get("status", "ok"), key=key, nvcc=version) for arch in archs
            for row in compile_cuda(arch, nvcc, tools, files)]  # fmt: skip


def profile(
    committed: Sequence[dict] = (), families: tuple[str, ...] = FAMILIES, cuda: bool = True, jobs: int | None = None
) -> tuple[list[dict], list[str]]:
    """Every spec's row (and every .cu kernel's with ``cuda``): a ``committed`` row is reused where its key equals
    this tree's key for it (the same compile, as Triton's own cache reasons), the rest is compiled."""
    have = {identity(r): r for r in committed if r.get("key") and r.get("status") == "ok"}
    keyed, notes = profile_triton(families, jobs, keys=True)
    stale = [i for i, r in enumerate(keyed) if not r["key"] or have.get(identity(r), {}).get("key") != r["key"]]
    fresh = iter(profile_triton(families, jobs, only=stale)[0])
    stale_set = set(stale)
    rows = [next(fresh) if i in stale_set else have[identity(r)] for i, r in enumerate(keyed)]
    if cuda:
        nvcc = nvcc_path()
        old = [r for r in committed if r["source"] == "cuda"]
        key = cuda_key(nvcc) if nvcc else None
        if key and old and all(r.get("key") == key and r.get("status") == "ok" for r in old):
            rows += old
        else:
            rows += profile_cuda()
    return rows, notes


def violations(rows: list[dict], specs_kernels: set[str] | None = None) -> list[str]:
    """What the profile must not show: compile errors, spills, shared memory above the opt-in limit, GEMMs without
    tensor-core instructions (without HGMMA on sm_90 unless the spec's ``extra['allow_hmma']`` says why), and
    ``@triton.jit`` kernels that no profiled spec covers (when ``specs_kernels`` is given)."""
    bad = []
    for r in rows:
        kern = r.get("kernel", r.get("file"))
        name = f"{r.get('family')}.{kern} {r.get('label', '')} sm_{r['arch']} {r.get('dtype')}"
        if r["status"] != "ok":
            bad.append(f"{name}: {r['status']}")
            continue
        if r["spill_stores"] or r["spill_loads"]:
            bad.append(f"{name}: spills ({r['spill_stores']} B stores, {r['spill_loads']} B loads)")
        limit = ARCH_LIMITS[r["arch"]].smem_optin_per_block
        if r["smem_bytes"] > limit:
            bad.append(f"{name}: {r['smem_bytes']} B shared memory > {limit} B opt-in limit")
        if r["gemm"] and r["tensor_core"] == "none":
            bad.append(f"{name}: GEMM-bearing but no tensor-core instruction in the SASS")
        elif r["gemm"] and r["arch"] >= 90 and r["tensor_core"] != "HGMMA" and not r.get("allow_hmma"):
            bad.append(f"{name}: GEMM-bearing but {r['tensor_core']} (not HGMMA) on sm_90")
    if specs_kernels is not None:
        for fam, kern in jit_kernels():
            if kern not in specs_kernels:
                bad.append(f"{fam}.{kern}: a @triton.jit kernel that no kernel_specs() row covers")
    return bad


def table(rows: list[dict]) -> str:
    """Markdown table of the profile."""
    head = "| kernel | config | arch | dtype | regs | spill B | smem KiB | TC | blocks/SM | warps/SM | limiter |"
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        if r["status"] != "ok":
            kern = r.get("kernel", r.get("file"))
            lines.append(f"| {kern} | {r.get('label', '')} | sm_{r['arch']} | | ERROR |" + " |" * 6)
            continue
        cfg = r.get("label") or ""
        if r["source"] == "triton":
            c = r["config"]
            tiles = "x".join(str(c[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_P", "BLOCK_D") if k in c)
            cfg = f"{cfg} {tiles} w{c['num_warps']} s{c['num_stages']}".strip()
        else:
            cfg = f"{r['file']} {r['threads'] or '?'} thr"
        kern = r["kernel"].replace("(anonymous namespace)::", "").replace("vlk::", "")
        kern = kern if r["source"] == "triton" else kern.removeprefix("void ").split("(")[0]
        lines.append(
            f"| {r['family']}.{kern} | {cfg} | sm_{r['arch']} | {r['dtype']} | {r['registers']} | "
            f"{r['spill_stores'] + r['spill_loads']} | {r['smem_bytes'] / 1024:.1f} | {r['tensor_core']} | "
            f"{r.get('blocks_per_sm', '?')} | {r.get('warps_per_sm', '?')} | {r.get('limiter', '?')} |"
        )
    return "\n".join(lines)


def run(
    json_path: Path | None = None,
    families: tuple[str, ...] = FAMILIES,
    cuda: bool = True,
    echo=print,
    jobs: int | None = None,
    reuse: Path | None = None,
) -> int:
    """Profile, print the table and the violations, write JSON lines; exit status 1 on a violation, 3 when this
    machine cannot compile offline. ``reuse``: a profile's JSON lines whose rows are kept where their key is current."""
    committed = read_rows(reuse) if reuse else []
    try:
        rows, notes = profile(committed, families, cuda, jobs)
    except OfflineCompileUnavailable as e:
        echo(f"gpu-profile: skipped, this Triton cannot compile for CUDA offline: {e}")
        return 3
    for note in notes:
        echo(f"note: {note}")
    echo(table(rows))
    covered = {r["kernel"] for r in rows if r["source"] == "triton"}
    fams_present = {f for f in families if not any(n.startswith(f"{f}:") for n in notes)}
    missing_ok = {k for f, k in jit_kernels() if f not in fams_present}
    bad = violations(rows, covered | missing_ok)
    for b in bad:
        echo(f"VIOLATION {b}")
    reused = len({id(r) for r in rows} & {id(c) for c in committed})
    echo(f"{len(rows)} rows ({len(rows) - reused} compiled, {reused} reused), {len(bad)} violation(s). "
         "Static analysis only: nothing here ran on a GPU.")  # fmt: skip
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        with json_path.open("w") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vlkernels gpu-profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None, help="write the rows as JSON lines here")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--no-cuda", action="store_true", help="skip the nvcc compiles of csrc/**/*.cu")
    p.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: the usable CPUs)")
    p.add_argument("--reuse", type=Path, default=None, help="keep this profile's rows whose cache key is current")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--keys", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--only", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    fams = tuple(f for f in a.families.split(",") if f)
    if a.worker:
        only = None if a.only is None else [int(i) for i in a.only.split(",") if i]
        return _worker(fams, a.jobs or 1, only, a.keys)
    return run(a.json, fams, not a.no_cuda, jobs=a.jobs, reuse=a.reuse)


if __name__ == "__main__":
    sys.exit(main())
