"""The profile as a whole: committed rows reused where their key is current, the rest compiled; the gates
(violations), the table, and the run behind ``vlkernels gpu-profile``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from vlkernels.dev.profile.cuda_compile import FMA_ALLOWED, compile_cuda, nvcc_path, nvcc_version
from vlkernels.dev.profile.keys import cuda_key, identity, read_rows
from vlkernels.dev.profile.occupancy import ARCH_LIMITS
from vlkernels.dev.profile.triton_compile import (
    FAMILIES,
    OfflineCompileUnavailable,
    jit_kernels,
    nvidia_tools,
    profile_triton,
)


def profile_cuda(archs: tuple[int, ...] = (80, 90), files: list[Path] | None = None) -> list[dict]:
    """Every kernel of the .cu ``files`` (default: all of csrc/) at each arch; [] without nvcc or cuobjdump."""
    nvcc, tools = nvcc_path(), nvidia_tools()
    if nvcc is None or tools is None:
        return []
    key, version = cuda_key(nvcc), nvcc_version(nvcc)
    return [dict(row, status=row.get("status", "ok"), key=key, nvcc=version) for arch in archs
            for row in compile_cuda(arch, nvcc, tools, files)]  # fmt: skip


def profile(
    committed: Sequence[dict] = (),
    families: tuple[str, ...] = FAMILIES,
    cuda: bool = True,
    jobs: int | None = None,
    keyed: list[dict] | None = None,
) -> tuple[list[dict], list[str]]:
    """Every spec's row (and every .cu kernel's with ``cuda``): a ``committed`` row is reused where its key equals
    this tree's key for it (the same compile, as Triton's own cache reasons), the rest is compiled. ``keyed``: the
    keys of ``families``' specs when the caller has them already (``profile_triton(keys=True)``)."""
    have = {identity(r): r for r in committed if r.get("key") and r.get("status") == "ok"}
    notes: list[str] = []
    if keyed is None:
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
        if r.get("source") == "cuda" and r.get("ptx_contractible"):
            bad.append(f"{name}: {r['ptx_contractible']} mul/add/sub in the PTX that ptxas may contract (-fmad=false)")
        if r.get("source") == "cuda" and r.get("ptx_fma") and not FMA_ALLOWED.search(r["kernel"]):
            bad.append(f"{name}: {r['ptx_fma']} fma in the PTX of a kernel that must equal its CPU twin bit for bit")
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
