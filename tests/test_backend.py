"""The backend switch (VLKERNELS_BACKEND / set_backend) and the first-use fallback, every branch on CPU: device
capabilities are monkeypatched, and real Triton compile failures are forced through the interpreter."""

import os
import types
import warnings

import pytest
import torch

import vlkernels
from vlkernels import _triton
from vlkernels._triton import BackendError, run_triton, unsupported_reason, use_triton
from vlkernels.testing import clean_backend


@pytest.fixture(autouse=True)
def _clean():
    with clean_backend():
        yield


def _fake(device: str, dtype=torch.float32):
    # use_triton reads only .device and .dtype: a stand-in for a tensor on a device this machine does not have.
    return types.SimpleNamespace(device=torch.device(device), dtype=dtype)


def _gpu(monkeypatch, cap=(9, 0), hip=None):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(_triton, "triton_installed", lambda: True)


def test_set_backend_default_env_and_context(monkeypatch):
    assert vlkernels.get_backend() == "auto"
    monkeypatch.setenv("VLKERNELS_BACKEND", "torch")
    assert vlkernels.get_backend() == "torch"
    with vlkernels.set_backend("triton"):
        assert vlkernels.get_backend() == "triton"
        with vlkernels.set_backend("auto"):
            assert vlkernels.get_backend() == "auto"
        assert vlkernels.get_backend() == "triton"
    assert vlkernels.get_backend() == "torch"
    vlkernels.set_backend("triton")
    assert vlkernels.get_backend() == "triton"
    vlkernels.set_backend(None)
    assert vlkernels.get_backend() == "torch"


def test_set_backend_rejects_unknown_names(monkeypatch):
    with pytest.raises(ValueError, match="backend must be one of auto, triton, torch"):
        vlkernels.set_backend("cuda")
    monkeypatch.setenv("VLKERNELS_BACKEND", "tritn")
    with pytest.raises(ValueError, match="VLKERNELS_BACKEND must be one of"):
        vlkernels.get_backend()


def test_auto_runs_triton_on_sm80_and_sm90(monkeypatch):
    for cap in ((8, 0), (8, 6), (9, 0), (10, 0)):
        _gpu(monkeypatch, cap)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert use_triton(_fake("cuda", torch.bfloat16))


def test_auto_old_gpu_takes_torch_path_with_one_warning(monkeypatch):
    _gpu(monkeypatch, (7, 5))
    with pytest.warns(RuntimeWarning, match=r"sm_75.*bf16 tl.dot needs sm_80"):
        assert not use_triton(_fake("cuda", torch.bfloat16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason warns once per process
        assert not use_triton(_fake("cuda", torch.bfloat16))


@pytest.mark.parametrize(
    "device,hip,match", [("cuda", "6.2", "not ROCm"), ("mps", None, "on mps"), ("xpu", None, "on xpu")]
)
def test_auto_other_devices_take_torch_path(monkeypatch, device, hip, match):
    _gpu(monkeypatch, (9, 0), hip)
    with pytest.warns(RuntimeWarning, match=match):
        assert not use_triton(_fake(device))


def test_auto_without_triton_warns_on_gpu(monkeypatch):
    _gpu(monkeypatch)
    monkeypatch.setattr(_triton, "triton_installed", lambda: False)
    with pytest.warns(RuntimeWarning, match="triton is not installed"):
        assert not use_triton(_fake("cuda"))


def test_cpu_without_interpreter_is_silent(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not use_triton(torch.zeros(2))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert use_triton(torch.zeros(2)) == _triton.triton_installed()


def test_forced_triton_raises_where_it_cannot_run(monkeypatch):
    _gpu(monkeypatch, (7, 0))
    with vlkernels.set_backend("triton"), pytest.raises(BackendError, match="forces 'triton', but this GPU is sm_70"):
        use_triton(_fake("cuda"))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with vlkernels.set_backend("triton"), pytest.raises(BackendError, match="TRITON_INTERPRET=1"):
        use_triton(torch.zeros(2))


def test_forced_torch_never_runs_triton(monkeypatch):
    _gpu(monkeypatch)
    with vlkernels.set_backend("torch"):
        assert not use_triton(_fake("cuda", torch.bfloat16))


def test_unsupported_reason_none_on_hopper(monkeypatch):
    _gpu(monkeypatch, (9, 0))
    assert unsupported_reason(torch.device("cuda"), torch.bfloat16) is None


class _CompileError(Exception):
    pass


def test_run_triton_falls_back_once_with_the_error_quoted(monkeypatch):
    monkeypatch.setattr(_triton, "STRICT_INTERPRETER", False)
    calls = []

    def broken(x):
        calls.append(1)
        raise _CompileError("ptxas fatal: out of registers")

    x = torch.arange(4.0)
    with pytest.warns(RuntimeWarning, match=r"failed on first use.*_CompileError: ptxas fatal: out of registers"):
        out = run_triton("toy", broken, lambda t: t * 2, x)
    assert torch.equal(out, x * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(run_triton("toy", broken, lambda t: t * 2, x), x * 2)
    assert len(calls) == 1  # the broken kernel is not retried
    assert _triton.fell_back("toy", x) and not _triton.fell_back("toy", x.double())


def test_run_triton_surfaces_errors_when_forced_or_after_first_success(monkeypatch):
    monkeypatch.setattr(_triton, "STRICT_INTERPRETER", False)

    def broken(x):
        raise _CompileError("boom")

    with vlkernels.set_backend("triton"), pytest.raises(_CompileError, match="boom"):
        run_triton("toy", broken, lambda t: t, torch.zeros(1))
    state = {"fail": False}

    def flaky(x):
        if state["fail"]:
            raise _CompileError("later")
        return x

    run_triton("toy2", flaky, lambda t: t, torch.zeros(1))
    state["fail"] = True
    with pytest.raises(_CompileError, match="later"):
        run_triton("toy2", flaky, lambda t: t, torch.zeros(1))


def test_run_triton_strict_under_the_interpreter():
    # Tests run the kernels through the interpreter: a broken kernel must fail them, not fall back.
    def broken(x):
        raise _CompileError("kernel bug")

    with pytest.raises(_CompileError):
        run_triton("toy3", broken, lambda t: t, torch.zeros(1))


def _interpreter(monkeypatch):
    if not _triton.triton_installed() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs triton and TRITON_INTERPRET=1 (set by conftest without a GPU)")
    monkeypatch.setattr(_triton, "STRICT_INTERPRETER", False)


def test_l2_normalize_real_compile_failure_falls_back(monkeypatch):
    from vlkernels.core import configs

    _interpreter(monkeypatch)
    # A tile that is not a power of two: Triton rejects tl.arange(0, 100) when it builds the kernel.
    monkeypatch.setattr(configs, "l2_normalize_tile", lambda x: configs.RowTile(100, 4, 1))
    x = torch.randn(5, 37)
    with pytest.warns(RuntimeWarning, match=r"l2_normalize .*failed on first use.*power of 2"):
        y = vlkernels.ops.l2_normalize(x)
    torch.testing.assert_close(y, torch.nn.functional.normalize(x, dim=-1), rtol=1e-6, atol=1e-7)
    _triton.reset_state()
    with vlkernels.set_backend("triton"), pytest.raises(Exception, match="power of 2"):
        vlkernels.ops.l2_normalize(x)


def test_siglip_score_real_compile_failure_falls_back(monkeypatch):
    from vlkernels.metrics import configs, siglip_score

    _interpreter(monkeypatch)
    monkeypatch.setattr(configs, "pair_cosine_tile", lambda x: configs.PairTile(8, 100, 4, 1))
    img, txt = torch.randn(12, 20), torch.randn(4, 20)
    with pytest.warns(RuntimeWarning, match=r"pair_cosine .*failed on first use"):
        got = siglip_score(img, txt, 10.0, -3.0, frames=3)
    cos = torch.nn.functional.cosine_similarity(img.double().view(4, 3, 20), txt.double()[:, None], dim=2)
    torch.testing.assert_close(got.double(), torch.sigmoid(cos * 10 - 3).mean(1), rtol=1e-5, atol=1e-6)
    _triton.reset_state()
    with vlkernels.set_backend("triton"), pytest.raises(Exception, match="power of 2"):
        siglip_score(img, txt, 10.0, -3.0, frames=3)


@pytest.mark.parametrize("loss", ["info_nce", "siglip"])
def test_contrastive_launch_failure_falls_back_to_the_torch_path(monkeypatch, loss):
    from vlkernels.contrastive import info_nce_loss, ops, siglip_loss

    _interpreter(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("PassManager::run failed (forced in a test)")

    for name in ("lse_pair_fwd", "lse_pair_bwd", "siglip_fwd"):
        monkeypatch.setattr(ops, name, broken)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(9, 16, generator=g), torch.randn(9, 16, generator=g)
    scale = torch.tensor(3.0)
    fn = info_nce_loss if loss == "info_nce" else lambda a, b, s: siglip_loss(a, b, s, torch.tensor(-1.0))
    with pytest.warns(RuntimeWarning, match="failed on first use.*forced in a test"):
        got = fn(x, y, scale)
    logits = 3.0 * x.double() @ y.double().T
    if loss == "info_nce":
        lab = torch.arange(9)
        f = torch.nn.functional.cross_entropy
        want = (f(logits, lab) + f(logits.T, lab)) / 2
    else:
        z = 2 * torch.eye(9, dtype=torch.float64) - 1
        want = -torch.nn.functional.logsigmoid(z * (logits - 1.0)).sum() / 9
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    _triton.reset_state()
    with vlkernels.set_backend("triton"), pytest.raises(RuntimeError, match="forced in a test"):
        fn(x, y, scale)
