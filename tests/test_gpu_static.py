"""The static GPU profile (no GPU): SASS/ptxas parsing and occupancy against the CUDA occupancy rules, coverage of
every @triton.jit kernel by a family's kernel_specs(), and the full offline compile (slow) with its CI gates:
no spills, shared memory within the opt-in limit, tensor-core instructions in every GEMM-bearing kernel. Also the
roofline MODEL of every registered GPU benchmark case."""

import importlib
import sys
from pathlib import Path

import pytest

from vlkernels import roofline
from vlkernels.dev import profile as gp

REPO = Path(__file__).resolve().parent.parent

SASS = """
        Function : _lse_pair_fwd_kernel
        /*0a70*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        Function : _other
        /*0100*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
"""

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN3vlk10box_kernelEv' for 'sm_80'
ptxas info    : Function properties for _ZN3vlk10box_kernelEv
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN3vlk3twoEv' for 'sm_80'
ptxas info    : Function properties for _ZN3vlk3twoEv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 17 registers, used 0 barriers, 380 bytes cmem[0]
"""


def test_tensor_core_class():
    assert gp.tensor_core_class(SASS) == "HGMMA"
    assert gp.tensor_core_class(SASS.split("Function : _other")[1]) == "HMMA"
    assert gp.tensor_core_class("FFMA R1, R2, R3, R4 ;\nIMMA.8816 is not a float MMA") == "none"
    assert set(gp.sass_by_function(SASS)) == {"_lse_pair_fwd_kernel", "_other"}


def test_parse_ptxas_verbose():
    v = gp.parse_ptxas_v(PTXAS_LOG)
    assert v["_ZN3vlk10box_kernelEv"] == {
        "registers": 40,
        "spill_stores": 8,
        "spill_loads": 12,
        "stack": 16,
        "smem_static": 2048,
    }
    assert v["_ZN3vlk3twoEv"]["registers"] == 17 and v["_ZN3vlk3twoEv"]["smem_static"] == 0


@pytest.mark.parametrize(
    "arch,regs,smem,warps,blocks,limiter",
    [
        # 255 regs -> 8192 per warp (256-register granules) -> 8 warps per SM -> one 8-warp block.
        (90, 255, 0, 8, 1, "registers"),
        # 32 regs, 4 warps: 64 warps per SM / 4 = 16 blocks, the warp limit.
        (80, 32, 0, 4, 16, "warps"),
        # sm_80: 160 KiB + the 1 KiB runtime reservation per block, 164 KiB per SM -> one block.
        (80, 64, 160 * 1024, 4, 1, "shared_memory"),
        # sm_90: 100 KiB (the cubin already lists the reservation) -> two blocks in 228 KiB.
        (90, 64, 100 * 1024, 4, 2, "shared_memory"),
        # 1 warp, few registers: the 32-blocks-per-SM limit.
        (90, 16, 0, 1, 32, "blocks"),
    ],
)
def test_occupancy_rules(arch, regs, smem, warps, blocks, limiter):
    occ = gp.occupancy(arch, regs, smem, warps)
    assert occ["blocks_per_sm"] == blocks and occ["limiter"] == limiter
    assert occ["warps_per_sm"] == blocks * warps


def test_violations_flag_each_gate():
    ok = {"status": "ok", "family": "f", "kernel": "k", "label": "", "dtype": "bf16", "arch": 90, "gemm": True,
          "spill_stores": 0, "spill_loads": 0, "smem_bytes": 1024, "tensor_core": "HGMMA"}  # fmt: skip
    assert gp.violations([ok]) == []
    bad = [
        dict(ok, spill_stores=4),
        dict(ok, smem_bytes=228 * 1024),
        dict(ok, tensor_core="none"),
        dict(ok, tensor_core="HMMA"),
        dict(ok, status="error: boom"),
    ]
    found = gp.violations(bad)
    assert len(found) == 5
    assert gp.violations([dict(ok, tensor_core="HMMA", allow_hmma="reason")]) == []
    assert gp.violations([dict(ok, arch=80, smem_bytes=164 * 1024)])  # 163 KiB opt-in on sm_80


PTX = """
.visible .entry _Z5plainv(
{
\tmul.rn.f32 \t%f3, %f1, %f2;
\tadd.rn.f32 \t%f4, %f3, %f1;
\tdiv.rn.f32 \t%f5, %f4, %f2;
}
.entry _Z6fusedv(
{
\tfma.rn.f32 \t%f3, %f1, %f2, %f1;
\tmul.f32 \t%f4, %f3, %f1;
\t@%p1 sub.f64 \t%fd2, %fd1, %fd1;
}
"""


def test_ptx_fp_counts_and_the_fma_gate():
    # -fmad=false: no fma and only .rn mul/add/sub (which ptxas may not fuse); div.rn is correctly rounded whatever
    # SASS it expands into.
    counts = gp.ptx_fp_counts(PTX)
    assert counts == {"_Z5plainv": {"ptx_fma": 0, "ptx_contractible": 0},
                      "_Z6fusedv": {"ptx_fma": 1, "ptx_contractible": 2}}  # fmt: skip
    row = {"status": "ok", "source": "cuda", "family": "boxes", "kernel": "void vlk::box_iou_kernel<float, 0>(...)",
           "dtype": "", "arch": 90, "gemm": False, "spill_stores": 0, "spill_loads": 0, "smem_bytes": 0,
           "tensor_core": "none", "ptx_fma": 0, "ptx_contractible": 0}  # fmt: skip
    assert gp.violations([row]) == []
    assert len(gp.violations([dict(row, ptx_fma=1), dict(row, ptx_contractible=3)])) == 2
    # CIoU calls atan (libdevice's polynomial uses fma) and is compared within a bound, not bitwise.
    assert gp.violations([dict(row, kernel="void vlk::box_iou_kernel<float, 3>(...)", ptx_fma=18)]) == []


def test_committed_cuda_rows_have_no_contraction():
    cuda = [r for r in _committed() if r["source"] == "cuda"]
    assert cuda and all(r["ptx_contractible"] == 0 for r in cuda)
    exact = [r for r in cuda if not gp.FMA_ALLOWED.search(r["kernel"])]
    assert any("box_iou_kernel<float, 0>" in r["kernel"] for r in exact)
    assert all(r["ptx_fma"] == 0 for r in exact)


def test_jit_kernels_found_from_source():
    found = set(gp.jit_kernels())
    assert ("core", "_l2_normalize_fwd_kernel") in found
    assert ("metrics", "_pair_cosine_fwd_kernel") in found
    assert all(name.endswith("_kernel") for _, name in found)


def _family_specs(family):
    try:
        mod = importlib.import_module(f"vlkernels.{family}.configs")
    except ModuleNotFoundError:
        pytest.skip(f"vlkernels.{family}.configs does not exist in this tree yet (lands with the family's branch)")
    return mod.kernel_specs()


@pytest.mark.parametrize("family", sorted({f for f, _ in gp.jit_kernels()}))
def test_every_launcher_kernel_is_covered(family):
    """Every @triton.jit kernel of the family's kernels.py appears in its kernel_specs(), at both archs."""
    specs = _family_specs(family)
    kernels = {k for f, k in gp.jit_kernels() if f == family}
    for kern in kernels:
        archs = {s.arch for s in specs if s.kernel.__name__ == kern}
        assert archs == {80, 90}, f"{family}.{kern} is compiled for {sorted(archs)}, not sm_80 and sm_90"
    for s in specs:
        args = set(gp.kernel_arg_names(s.kernel))
        assert set(s.signature) | set(s.constexprs) == args, s.name


def test_launchers_use_the_declared_cuda_tiles(monkeypatch):
    """The tile a CUDA launch picks is one that kernel_specs() lists (so it is in the profile)."""
    import torch

    from vlkernels.core import configs as core_cfg
    from vlkernels.metrics import configs as met_cfg

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    listed_core = {(s.constexprs["BLOCK_D"], s.num_warps, s.num_stages) for s in core_cfg.kernel_specs()}
    listed_met = {(s.constexprs["BLOCK_P"], s.constexprs["BLOCK_D"], s.num_warps, s.num_stages)
                  for s in met_cfg.kernel_specs()}  # fmt: skip
    for d in (1, 37, 64, 65, 256, 257, 768, 1024, 4096, 5000):
        x = torch.empty((2, d), device="meta")
        x_cuda = type("T", (), {"device": torch.device("cuda"), "shape": x.shape})()
        assert tuple(core_cfg.l2_normalize_tile(x_cuda)) in listed_core
        assert tuple(met_cfg.pair_cosine_tile(x_cuda)) in listed_met


REGENERATE = "vlkernels gpu-profile --reuse {p} --json {p}".format(p=gp.COMMITTED.relative_to(REPO))


def _committed() -> list[dict]:
    return gp.read_rows(gp.COMMITTED)


@pytest.fixture(scope="session")
def keyed() -> list[dict]:
    """Every spec's cache key (one compile-worker start, shared by the tests of this process)."""
    try:
        return gp.profile_triton(keys=True)[0]
    except gp.OfflineCompileUnavailable as e:
        pytest.skip(f"this Triton cannot compile for CUDA offline: {e}")


@pytest.fixture(scope="session")
def profile(keyed):
    """Every spec's and every .cu kernel's row: the committed row where its cache key is this tree's (the same
    compile), compiled here otherwise (all of them when the profile was made with another Triton)."""
    try:
        return gp.profile(_committed(), keyed=keyed)
    except gp.OfflineCompileUnavailable as e:
        pytest.skip(f"this Triton cannot compile for CUDA offline: {e}")


def test_static_profile_gates(profile):
    rows, notes = profile
    assert rows, notes
    assert {r["arch"] for r in rows} == {80, 90}
    assert gp.violations(rows) == []
    assert all(r["tensor_core"] in ("HMMA", "HGMMA") for r in rows if r["gemm"])


def test_static_profile_covers_every_spec_and_cu_kernel(profile):
    rows, _ = profile
    specs, _ = gp.collect_specs()
    assert len([r for r in rows if r["source"] == "triton"]) == len(specs)
    if any(r["source"] == "cuda" for r in rows):
        files = {r["file"] for r in rows if r["source"] == "cuda"}
        assert files == {str(p.relative_to(REPO)) for p in (REPO / "csrc").rglob("*.cu")}
        assert all(r.get("threads") for r in rows if r["source"] == "cuda"), "a launch site's block size was not read"


def test_committed_profile_is_current(keyed):
    """benchmarks/results/gpu_static.jsonl holds one row per current spec, each made from this tree: its key is
    Triton's compile-cache key of the spec (kernel source and every jit helper it calls, tile table row, hints,
    Triton and ptxas versions), and the CUDA rows' key hashes csrc/ and nvcc's version. After changing a kernel, a
    tile table or the toolchain, regenerate it (only the changed specs compile): see REGENERATE."""
    import triton

    rows = _committed()
    made_with = {r.get("triton") for r in rows if r["source"] == "triton"}
    assert len({gp.identity(r) for r in keyed}) == len(keyed), "two specs share a name: rows could not be told apart"
    assert {gp.identity(r) for r in keyed} == {gp.identity(r) for r in rows if r["source"] == "triton"}, REGENERATE
    assert gp.violations(rows) == []
    if made_with != {triton.__version__}:
        pytest.skip(f"the profile was made with Triton {made_with}, this is {triton.__version__}: keys differ "
                    "by design (the profile fixture compiles every spec here instead)")  # fmt: skip
    have = {gp.identity(r): r.get("key") for r in rows}
    stale = [
        f"{r['kernel']} {r['label']} sm_{r['arch']} {r['dtype']}" for r in keyed if have[gp.identity(r)] != r["key"]
    ]
    assert not stale, f"{len(stale)} rows are stale (e.g. {stale[:3]}); regenerate: {REGENERATE}"
    nvcc = gp.nvcc_path()
    cuda = [r for r in rows if r["source"] == "cuda"]
    if nvcc and {r.get("nvcc") for r in cuda} == {gp.nvcc_version(nvcc)}:  # another nvcc: test_build compiles them
        assert all(r.get("key") == gp.cuda_key(nvcc) for r in cuda), f"CUDA rows stale: {REGENERATE}"


@pytest.mark.slow
def test_committed_profile_reproduces_when_compiled(keyed):
    """One spec per kernel, compiled here, gives exactly its committed row (and Triton's cache key, the one the profile
    trusts). Which spec (arch, dtype, tile) is picked follows the keys, so it changes as the kernels do."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(keyed):
        groups.setdefault((r["family"], r["kernel"]), []).append(i)
    pick = sorted(ix[int(keyed[ix[0]]["key"], 16) % len(ix)] for ix in groups.values())
    rows, _ = gp.profile_triton(only=pick)
    committed = {gp.identity(r): r for r in _committed()}
    assert len(rows) == len(pick) == len(groups)
    for i, r in zip(pick, rows):
        assert r["status"] == "ok", r["status"]
        assert r["key"] == keyed[i]["key"], "triton_cache_key() is not the key Triton filed the compile under"
        c = committed[gp.identity(r)]
        if c.get("triton") == r["triton"]:
            assert gp.measured(r) == gp.measured(c), gp.identity(r)


def _gpu_cases():
    sys.path.insert(0, str(REPO))
    from benchmarks import harness

    harness.discover()
    return [(f"{fam}/{name}", c) for fam, cases in harness.REGISTRY.items() for name, c in cases.items()
            if "cuda" in c.devices]  # fmt: skip


def test_roofline_models_every_gpu_benchmark_case():
    cases = _gpu_cases()
    assert cases
    for name, case in cases:
        for params in (case.quick, case.full):
            lim = roofline.limit_seconds(name, params, "H100 SXM")
            assert lim is not None and lim > 0, f"{name} has no roofline model"
            assert roofline.limit_seconds(name, params, "A100 SXM") > lim  # every A100 peak is lower


def test_roofline_numbers_from_the_datasheet():
    # InfoNCE: 4 GEMM units of 2·N²·D (DESIGN.md), SigLIP 3; their limits also count what the kernels move
    # (tests/test_roofline.py), so they are never below the tensor-core time at 989 TFLOP/s dense bf16.
    n, d = 65536, 768
    unit = 2.0 * n * n * d
    for index, units in ((0, 4), (1, 3)):
        w = roofline.work("contrastive/loss_gpu", {"n": n, "d": d}, index=index)
        assert w.flops == units * unit
        assert roofline.limit_seconds("contrastive/loss_gpu", {"n": n, "d": d}, "H100 SXM", index=index) >= (
            units * unit / 989e12
        )
    gemm = roofline.limit_seconds("contrastive/loss_gpu", {"n": n, "d": d}, "H100 SXM", index=2)
    assert gemm == pytest.approx(unit / 989e12)
    # Box IoU 4000×4000: DRAM bound, the fp32 N×M output plus the inputs at 3.35 TB/s.
    box = roofline.limit_seconds("boxes/box_iou", {"n": 4000, "m": 4000}, "H100 SXM")
    assert box == pytest.approx((4000 * 4000 * 4 + 8000 * 16) / 3.35e12)
    assert roofline.limit_seconds("nope/case", {}, "H100 SXM") is None
    assert "MODEL" in roofline.table()


def test_table_names_cuda_kernels_in_anonymous_namespaces():
    row = {"source": "cuda", "status": "ok", "family": "core", "file": "csrc/core/x.cu", "threads": 256, "arch": 90,
           "kernel": "void vlk::(anonymous namespace)::count_kernel<float>(float const*, long)", "dtype": "",
           "registers": 17, "spill_stores": 0, "spill_loads": 0, "smem_bytes": 256, "tensor_core": "none"}  # fmt: skip
    assert "| core.count_kernel<float> | csrc/core/x.cu 256 thr |" in gp.table([row])


def test_launch_sites_are_read_without_eval(tmp_path):
    from vlkernels.dev.profile.launch_sites import arith

    assert arith("(16)*(16) + 256 / 2 - 0") == 384
    assert arith("__import__('os').getpid()") is None and arith("kThreads * 2") is None
    (tmp_path / "k.cu").write_text(
        "constexpr int kThreads = 128;\nvoid f() { tile_kernel<float><<<grid, dim3(16, 16), 0, stream>>>(p);\n"
        "row_kernel<<<blocks, vlk::kThreads>>>(q);\nodd_kernel<<<g, threads_for(n)>>>(r); }\n"
    )
    found = gp.threads_at_launch_sites(tmp_path)
    assert found == {"tile_kernel": 256, "row_kernel": 128}
