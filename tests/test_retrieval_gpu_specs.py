"""Offline GPU compile of every retrieval kernel config the CUDA launchers can use (vlkernels/retrieval/configs.py):
Triton's compiler for sm_80 / sm_90, then the bundled cuobjdump. Tensor-core instructions (HGMMA on sm_90, HMMA on
sm_80) in every fp16/bf16 GEMM kernel, no register spills (no stack frame), shared memory within the opt-in limit."""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from vlkernels.retrieval import configs  # noqa: E402

# Opt-in shared memory per block (CUDA programming guide, compute capability tables).
SMEM_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
MMA = {80: "HMMA", 90: "HGMMA"}


def _cuobjdump(*args: str) -> str:
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return subprocess.run([tool, *args], capture_output=True, text=True, check=True).stdout


def _compile(spec):
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    fn = spec.kernel
    sig = dict(spec.signature, **dict.fromkeys(spec.constexprs, "constexpr"))
    # The runtime specializes 16-divisible pointers, strides and dims (embedding rows are); compile the same.
    div = spec.extra["divisible_by_16"]
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in div}
    src = ASTSource(fn, sig, spec.constexprs, attrs)
    opts = dict(num_warps=spec.num_warps, num_stages=spec.num_stages)
    return triton.compile(src, target=GPUTarget("cuda", spec.arch, 32), options=opts)


def test_kernel_specs_cover_the_launchers():
    specs = configs.kernel_specs()
    names = {s.kernel.__name__ for s in specs}
    assert names == {"_gt_score_fwd_kernel", "_rank_count_fwd_kernel", "_topk_fwd_kernel"}
    for arch in (80, 90):
        for dt in ("fp16", "bf16", "fp32"):
            t = configs.SCORE_TILES[(arch, dt)]
            assert configs.CHUNK_ALIGN % t.block_m == 0 and configs.CHUNK_ALIGN % t.block_n == 0
            mine = [s for s in specs if s.arch == arch and s.dtype == dt]
            slots = {s.constexprs["SLOTS"] for s in mine if "SLOTS" in s.constexprs}
            assert slots == {1 << i for i in range(t.max_slots.bit_length())}
            block_ns = {s.constexprs["BLOCK_N"] for s in mine if "topk" in s.name}
            assert max(block_ns) == configs.MAX_FUSED_K and min(block_ns) == configs.TOPK_MIN_BLOCK_N[dt]


def _profile_all(only: str = "") -> None:
    """Child process (Triton not in interpreter mode): one JSON line per spec (those whose name contains ``only``)."""
    for spec in configs.kernel_specs():
        if only not in spec.name:
            continue
        k = _compile(spec)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            sass = _cuobjdump("-sass", f.name)
            usage = _cuobjdump("-res-usage", f.name)
        row = dict(
            name=spec.name,
            arch=spec.arch,
            gemm=spec.gemm,
            shared=k.metadata.shared,
            regs=max(int(x) for x in re.findall(r"REG:(\d+)", usage)),
            stack=max(int(x) for x in re.findall(r"STACK:(\d+)", usage)),
            local=max(int(x) for x in re.findall(r"LOCAL:(\d+)", usage)),
            mma="HGMMA" if "HGMMA" in sass else "HMMA" if "HMMA" in sass else "none",
        )
        print(json.dumps(row), flush=True)


@pytest.mark.slow  # ~50 compiles: minutes on two cores
def test_kernel_specs_compile_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    root = str(Path(__file__).resolve().parents[1])  # the checkout under test, not an installed copy
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(configs.kernel_specs())
    # A stack frame is where register spills go.
    bad = [r for r in rows if r["stack"] or r["local"] or r["shared"] > SMEM_LIMIT[r["arch"]]]
    bad += [r for r in rows if r["gemm"] and r["mma"] != MMA[r["arch"]]]
    assert not bad, "\n".join(map(json.dumps, bad))


if __name__ == "__main__":
    _profile_all(*sys.argv[1:])
