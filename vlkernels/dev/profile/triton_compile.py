"""Every family's Triton ``KernelSpec`` compiled offline for sm_80/sm_90 in a subprocess (compiled mode) with
Triton's compiler and bundled ptxas/cuobjdump; Triton's own compile-cache key of each spec."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vlkernels.dev.profile.occupancy import occupancy
from vlkernels.dev.profile.sass import parse_ptxas_v, res_usage, tensor_core_class

FAMILIES = ("contrastive", "retrieval", "metrics", "core")
PACKAGE = Path(__file__).resolve().parents[2]  # vlkernels/


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
    return src, GPUTarget("cuda", spec.arch, 32), {"num_warps": spec.num_warps, "num_stages": spec.num_stages}


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
        if not parse_ptxas_v(log):  # a cache hit: the same ptxas and flags again, for the -v report only
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
    usage = next(iter(res_usage(res.stdout).values()), {})
    v = next(iter(parse_ptxas_v(log).values()), {})
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


_SPECS: list = []


def _compile_one(index: int) -> dict[str, Any]:
    spec = _SPECS[index]
    try:
        return {**compile_triton(spec, nvidia_tools()), "status": "ok"}
    except Exception as e:  # one bad spec is a reported violation, not the end of the profile
        return {**_spec_row(spec), "status": f"error: {type(e).__name__}: {str(e)[-800:]}"}


def _key_of(index: int) -> dict[str, Any]:
    return {**_spec_row(_SPECS[index]), "key": triton_cache_key(_SPECS[index])}


def worker(families: tuple[str, ...], jobs: int, only: list[int] | None, keys: bool) -> int:
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
    cmd = [sys.executable, "-m", "vlkernels.cli", "gpu-profile", "--worker", "--families", ",".join(families)]
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
