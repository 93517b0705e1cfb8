"""`vlkernels selftest` itself: the CPU form (through every Triton kernel under TRITON_INTERPRET=1, set by conftest
without a GPU) passes, writes its JSON, covers every op with a GPU path, and reports a broken op as a failure."""

import json

import pytest
import torch

from vlkernels import cli, selftest

OPS = {
    "info_nce_loss loss", "info_nce_loss d_image", "info_nce_loss d_text", "info_nce_loss d_scale",
    "siglip_loss loss", "siglip_loss d_image", "siglip_loss d_text", "siglip_loss d_scale", "siglip_loss d_bias",
    "retrieval.evaluate", "retrieval.topk", "box_iou iou", "box_iou giou", "mask_iou", "rle_iou (RleCounts)",
    "count_above", "l2_normalize", "siglip_score",
}  # fmt: skip


def test_selftest_cpu_quick_cli(tmp_path, capsys):
    path = tmp_path / "selftest.json"
    assert cli.main(["selftest", "--device", "cpu", "--quick", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "0 failed" in out and "FAIL" not in out
    data = json.loads(path.read_text())
    env = data["environment"]
    assert env["device"] == "cpu" and env["versions"]["torch"] == torch.__version__
    assert {"device_name", "driver", "versions", "git_sha", "cuda", "cpu", "backend"} <= set(env)
    checks = data["checks"]
    assert {c["op"] for c in checks} == OPS
    assert {c["dtype"] for c in checks if c["op"].startswith("siglip_loss")} == {"float32", "bfloat16"}
    assert all(c["passed"] for c in checks)
    assert all(c["max_error"] <= c["tolerance"] for c in checks)


def test_selftest_reports_a_broken_op(monkeypatch):
    import vlkernels.ops

    real = vlkernels.ops.l2_normalize
    monkeypatch.setattr(vlkernels.ops, "l2_normalize", lambda x: real(x) * 1.001)
    checks = selftest._core_metrics_checks("cpu", [(5, 7)])
    failed = {c.op for c in checks if not c.passed}
    assert failed == {"l2_normalize"}
    table = selftest.format_table(checks)
    assert "FAIL" in table


def test_selftest_reports_a_lost_gradient(monkeypatch):
    """An op that stops passing a gradient to one input is a FAIL row of that input, not a crash of the run."""
    import vlkernels

    real = vlkernels.siglip_loss
    monkeypatch.setattr(vlkernels, "siglip_loss", lambda x, y, s, b: real(x, y, s, b.detach()))
    checks = selftest._loss_checks("cpu", [(5, 7)])
    failed = [c for c in checks if not c.passed]
    assert {c.op for c in failed} == {"siglip_loss d_bias"} and len(failed) == 2  # fp32 and bf16
    assert all(c.detail == "no gradient reached this input" for c in failed)
    assert "FAIL" in selftest.format_table(checks)


def test_selftest_cuda_without_a_gpu_is_an_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert selftest.main("cuda", quick=True) == 2
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
def test_selftest_json_write_failure_is_one_error_line(monkeypatch, capsys):
    """A --json file that cannot be written (a full disk) is one error line and exit 2, not a traceback."""
    monkeypatch.setattr(selftest, "run_checks", lambda device, quick: [])
    from pathlib import Path

    assert selftest.main("cpu", quick=True, json_path=Path("/dev/full")) == 2
    assert "error: cannot write /dev/full: " in capsys.readouterr().err
