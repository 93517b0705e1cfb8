"""A dry run of `vlkernels selftest --device cuda` on CPU: the GPU user's first command, walked end to end.

torch reports an H100 (availability, name, capability, synchronize); ``.to("cuda")`` gives a CPU tensor of the
subclass ``OnGpu``, which ops propagate (tests/fake_cuda.py); every op the self-test calls is replaced by its
reference (or its CPU path) that, given ``OnGpu`` inputs, returns the result times ``1 + rel`` (a controlled
perturbation), and the benchmark harness returns one timed row per CUDA case. So every check's setup, tolerance
and report (table, JSON, roofline percentage) runs as on a GPU: a wrong tolerance, a missing import or a crash in
the report fails here.
"""

import json

import fake_cuda
import pytest
import torch
from fake_cuda import OnGpu, plain

import vlkernels
import vlkernels.metrics
import vlkernels.ops
import vlkernels.retrieval
from vlkernels import cli, selftest
from vlkernels.core.reference import l2_normalize_ref
from vlkernels.metrics.reference import siglip_score_ref
from vlkernels.retrieval.reference import evaluate_ref, topk_ref

GPU_NAME = "NVIDIA H100 80GB HBM3"
# Within every tolerance: 4 units of fp32 roundoff on the bounded checks, nothing on the exact ones.
PASS = {"info_nce_loss": 2.0**-22, "siglip_loss": 2.0**-22, "l2_normalize": 2.0**-22, "siglip_score": 2.0**-22}


# Non-tensor results made "on the GPU" (RLE counts of GPU masks), by identity.
_GPU_OBJECTS: list = []


def _on_gpu(*args) -> bool:
    return any(isinstance(a, OnGpu) or any(a is o for o in _GPU_OBJECTS) for a in args)


def _perturbed(out, rel: float):
    """``out`` (a tensor, or a tuple/dict of them) as the GPU's result: times 1 + rel for floats, on OnGpu."""
    if isinstance(out, tuple):
        return tuple(_perturbed(o, rel) for o in out)
    if isinstance(out, dict):
        return {k: _perturbed(v, rel) for k, v in out.items()}
    if isinstance(out, torch.Tensor):
        return (out * (1 + rel) if out.is_floating_point() else out).as_subclass(OnGpu)
    if isinstance(out, float):
        return out * (1 + rel)
    return out


def _install(monkeypatch, rel: dict[str, float]):
    """Patch torch's CUDA queries and the self-test's ops; ``rel[op]``: the perturbation of op's GPU results."""
    _GPU_OBJECTS.clear()
    fake_cuda.install(monkeypatch, GPU_NAME)

    def fake(name, cpu_fn, differentiable=False):
        def op(*args, **kwargs):
            if not _on_gpu(*args):
                return cpu_fn(*args, **kwargs)
            if differentiable:  # keep the leaves: autograd must reach the caller's tensors
                return _perturbed(cpu_fn(*args, **kwargs), rel.get(name, 0.0))
            out = cpu_fn(*[plain(a) for a in args], **{k: plain(v) for k, v in kwargs.items()})
            return _perturbed(out, rel.get(name, 0.0))

        return op

    def loss(kind):
        def fn(x, y, scale, bias=None):
            b = bias.to(x.dtype) if bias is not None else None
            return selftest._loss_ref(kind, x, y, scale.to(x.dtype), b)

        return fn

    monkeypatch.setattr(vlkernels, "info_nce_loss", fake("info_nce_loss", loss("info_nce"), True))
    monkeypatch.setattr(vlkernels, "siglip_loss", fake("siglip_loss", loss("siglip"), True))

    def evaluate(img, txt, lab, backend="auto"):
        return evaluate_ref(img.float(), txt.float(), lab)

    def topk(q, g, k, backend="auto"):
        return topk_ref(q.float(), g.float(), k)

    monkeypatch.setattr(vlkernels.retrieval, "evaluate", fake("retrieval.evaluate", evaluate))
    monkeypatch.setattr(vlkernels.retrieval, "topk", fake("retrieval.topk", topk))
    for name in ("box_iou", "mask_iou", "count_above"):
        monkeypatch.setattr(vlkernels.ops, name, fake(name, getattr(vlkernels.ops, name)))
    real_encode, real_rle_iou = vlkernels.ops.rle_encode, vlkernels.ops.rle_iou

    def rle_encode(masks, **kw):
        out = real_encode(plain(masks), **kw)
        if _on_gpu(masks):
            _GPU_OBJECTS.append(out)
        return out

    monkeypatch.setattr(vlkernels.ops, "rle_encode", rle_encode)
    monkeypatch.setattr(vlkernels.ops, "rle_iou", fake("rle_iou", real_rle_iou))
    monkeypatch.setattr(vlkernels.ops, "l2_normalize", fake("l2_normalize", l2_normalize_ref))
    monkeypatch.setattr(vlkernels.metrics, "siglip_score", fake("siglip_score", siglip_score_ref))
    harness = cli._benchmarks()

    def run_case(case, device, quick, **kw):
        assert device == "cuda"
        res = {p: {"median_s": 1e-3} for p in ("vlkernels", "torch")}
        return [{"family": case.family, "case": case.name, "params": case.quick if quick else case.full,
                 "status": "ok", "results": res}]  # fmt: skip

    monkeypatch.setattr(harness, "run_case", run_case)


def test_selftest_cuda_dry_run_passes_and_reports(monkeypatch, tmp_path, capsys):
    _install(monkeypatch, PASS)
    path = tmp_path / "selftest.json"
    # --quick: the checks' small shapes (the medium ones run the same code) and no timing; the timing part below.
    status = cli.main(["selftest", "--device", "cuda", "--quick", "--json", str(path)])
    out = capsys.readouterr().out
    data = json.loads(path.read_text())
    failed = [c for c in data["checks"] if not c["passed"]]
    assert status == 0, failed[:5]
    assert GPU_NAME in out and "0 failed" in out
    assert data["environment"]["device_name"] == GPU_NAME and data["environment"]["capability"] == [9, 0]
    ops = {c["op"] for c in data["checks"]}
    assert {"box_iou iou", "mask_iou", "rle_iou (RleCounts)", "count_above", "siglip_score"} <= ops
    # The bounded checks were really perturbed (a nonzero error, within the tolerance).
    losses = [c for c in data["checks"] if c["op"].startswith("info_nce_loss") and c["dtype"] == "float32"]
    assert all(0 < c["max_error"] <= c["tolerance"] for c in losses)
    bench = selftest.run_benchmarks(quick=False)
    assert bench, "the benchmark part of the report did not run"
    # The roofline MODEL knows the H100 and every CUDA case: each timed row gets a percentage of its limit.
    assert all(c.passed and c.pct_of_limit is not None for c in bench), [c.op for c in bench if c.pct_of_limit is None]
    assert "bench " in selftest.format_table(bench)


@pytest.mark.parametrize(
    "op,rel,failing",
    [
        ("box_iou", 2.0**-23, {"box_iou iou", "box_iou giou"}),  # bit-exact checks reject one ulp
        ("count_above", 0.0, set()),
        (
            "info_nce_loss",
            1e-2,
            {"info_nce_loss loss", "info_nce_loss d_image", "info_nce_loss d_text", "info_nce_loss d_scale"},
        ),
        ("l2_normalize", 1e-3, {"l2_normalize"}),
    ],
)
def test_selftest_cuda_dry_run_reports_a_wrong_result(monkeypatch, capsys, op, rel, failing):
    _install(monkeypatch, {**PASS, op: rel})
    checks = selftest.run_checks("cuda", quick=True)
    assert {c.op for c in checks if not c.passed} == failing
    table = selftest.format_table(checks)
    assert ("FAIL" in table) == bool(failing)
