"""The retrieval kernel configs the CUDA launchers can use (vlkernels/retrieval/configs.py) cover every tile, slot
count and fused-k block they pick, and every screen kernel is a tensor-core GEMM for fp32 inputs too (bf16 halves).
Compiling them for sm_80 / sm_90 (tensor cores, spills, shared memory) is the static GPU profile's job:
tests/test_gpu_static.py."""

import pytest

triton = pytest.importorskip("triton")

from vlkernels.retrieval import configs  # noqa: E402

SCREEN = {"_rank_screen_kernel", "_topk_collect_kernel", "_bound_tile_kernel", "_topk_bound_kernel"}


def test_kernel_specs_cover_the_launchers():
    specs = configs.kernel_specs()
    names = {s.kernel.__name__ for s in specs}
    assert names == SCREEN | {"_exact_score_kernel"}
    for arch in (80, 90):
        exact = [s for s in specs if s.arch == arch and s.kernel.__name__ == "_exact_score_kernel"]
        assert {s.dtype for s in exact} == {"fp16", "bf16", "fp32", "fp64"}
        # The exact kernel is compiled as it is launched: no multiply-add contraction (fp64 inputs' bits).
        assert all(s.extra["options"] == {"enable_fp_fusion": False} and not s.gemm for s in exact)
        for dt in ("fp16", "bf16", "fp32"):
            t = configs.SCREEN_TILES[(arch, dt)]
            assert configs.CHUNK_ALIGN % t.block_m == 0 and configs.CHUNK_ALIGN % t.block_n == 0
            mine = [s for s in specs if s.arch == arch and s.dtype == dt and s.kernel.__name__ in SCREEN]
            assert {s.kernel.__name__ for s in mine} == SCREEN
            # Every screen kernel is a tensor-core GEMM, fp32 inputs included (two bf16 halves, SPLIT).
            assert all(s.gemm for s in mine)
            assert all(s.constexprs["SPLIT"] == (dt == "fp32") for s in mine)
            assert all(s.signature["qh_ptr"] == ("*bf16" if dt == "fp32" else f"*{dt}") for s in mine)
            slots = {s.constexprs["SLOTS"] for s in mine if "SLOTS" in s.constexprs}
            assert slots == {1 << i for i in range(t.max_slots.bit_length())}
            block_ns = {s.constexprs["BLOCK_N"] for s in mine if s.kernel.__name__ == "_topk_bound_kernel"}
            assert block_ns == set(configs.TOPK_BLOCK_NS[dt]) and max(block_ns) == configs.MAX_FUSED_K
            assert configs.TOPK_TILES[(arch, dt)].block_n == configs.MAX_FUSED_K


def test_topk_block_n_is_a_compiled_block(monkeypatch):
    """Every k + exclusions <= MAX_FUSED_K picks a fused BLOCK_N that kernel_specs() lists for its kind on CUDA."""
    import torch

    monkeypatch.setattr(configs, "cuda_arch", lambda device: 90)
    cuda = torch.device("cuda")
    for kind, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)):
        for kk in range(1, configs.MAX_FUSED_K + 1):
            b = configs.topk_block_n(cuda, dtype, kk)
            assert b >= kk and b in configs.TOPK_BLOCK_NS[kind]
    assert configs.topk_block_n(cuda, torch.float64, 20) == 64  # fp64 inputs screen as fp32 halves
    assert configs.topk_block_n(torch.device("cpu"), torch.float32, 20) == 32
