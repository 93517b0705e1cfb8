"""Every ``csrc/**/*.cu`` kernel compiled with nvcc to a cubin: registers, spills, shared memory, tensor-core class
and the PTX's fma / contractible counts per kernel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from vlkernels.dev.profile.launch_sites import threads_at_launch_sites
from vlkernels.dev.profile.occupancy import occupancy
from vlkernels.dev.profile.sass import parse_ptxas_v, ptx_fp_counts, sass_by_function, tensor_core_class

PACKAGE = Path(__file__).resolve().parents[2]  # vlkernels/
CSRC = PACKAGE.parent / "csrc"
# -fmad=false as in CMakeLists.txt: no a*b+c contracted into FMA, so the kernels round as their CPU twins do.
NVCC_FLAGS = ("-std=c++17", "-O3", "-DVLK_WITH_CUDA=1", "-fmad=false")

# Kernels allowed an fma in their PTX: CIoU (box_iou kind 3) calls atan, whose libdevice polynomial uses fma; CUDA's
# atan and the CPU's libm atan differ in the last bits anyway, so CIoU is compared within a bound, not bitwise.
FMA_ALLOWED = re.compile(r"box_iou(?:_aligned)?_kernel<\w+, 3>")


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next(
        (str(p) for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"] if p.exists()), None
    )


def nvcc_version(nvcc: str) -> str:
    """nvcc's build line, e.g. ``Build cuda_13.0.r13.0/compiler.36424714_0``."""
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]


def compile_cuda(arch: int, nvcc: str, tools: dict[str, str], files: list[Path] | None = None) -> list[dict]:
    """Every ``__global__`` kernel of the ``files`` (default: every ``csrc/**/*.cu``) for one arch, from
    ``nvcc -Xptxas -v`` and the cubin."""
    rows = []
    threads = threads_at_launch_sites()
    for cu in sorted(CSRC.rglob("*.cu")) if files is None else files:
        with tempfile.TemporaryDirectory(prefix="vlk_nvcc_") as tmp:
            cubin = Path(tmp, "k.cubin")
            # --keep leaves the PTX of the same compile beside the cubin (its fma and contractible mul/add counts).
            cmd = [nvcc, *NVCC_FLAGS, f"-I{CSRC}", "-cubin", f"-arch=sm_{arch}",
                   "-Xptxas", "-v", "--keep", f"--keep-dir={tmp}", str(cu), "-o", str(cubin)]  # fmt: skip
            r = subprocess.run(cmd, capture_output=True, text=True)
            rel = str(cu.relative_to(CSRC.parent))
            if r.returncode != 0:
                rows.append({"source": "cuda", "file": rel, "arch": arch, "status": f"error: {r.stderr[-500:]}"})
                continue
            v = parse_ptxas_v(r.stderr)
            fp = ptx_fp_counts("\n".join(p.read_text() for p in Path(tmp).glob("*.ptx")))
            sass = subprocess.run([tools["cuobjdump"], "-sass", str(cubin)], capture_output=True, text=True).stdout
        per_fn = sass_by_function(sass)
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
                **fp.get(mangled, {"ptx_fma": None, "ptx_contractible": None}),
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
