"""The retrieval kernel configs the CUDA launchers can use (vlkernels/retrieval/configs.py) cover every tile, slot
count and fused-k block they pick. Compiling them for sm_80 / sm_90 (tensor cores, spills, shared memory) is the
static GPU profile's job: tests/test_gpu_static.py."""

import pytest

triton = pytest.importorskip("triton")

from vlkernels.retrieval import configs  # noqa: E402


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
