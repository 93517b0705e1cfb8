"""Retrieval's device paths behind the backend switch, every branch on CPU: the auto decision with
monkeypatched device capabilities, the chunked torch path against the float64 reference, and a Triton compile
failure forced through the interpreter (falls back with a warning; surfaces when Triton is forced)."""

import os
import types
import warnings

import numpy as np
import pytest
import torch

import vlkernels
from vlkernels import _triton
from vlkernels._triton import BackendError
from vlkernels.retrieval import Positives, evaluate, functional, rank_metrics, topk
from vlkernels.retrieval.reference import evaluate_ref, ranks_ref, topk_ref
from vlkernels.testing import assert_topk_equal, clean_backend


@pytest.fixture(autouse=True)
def _clean():
    with clean_backend():
        yield


def _data(n_img=23, per=3, d=12, seed=0, integer=False):
    g = torch.Generator().manual_seed(seed)
    lab = np.arange(n_img * per) % n_img
    if integer:  # exact dot products and many exact ties: the tie policy decides most ranks
        img = torch.randint(-1, 2, (n_img, d), generator=g).double()
        txt = img[torch.from_numpy(lab)] + torch.randint(-1, 2, (len(lab), d), generator=g).double()
    else:
        img = torch.randn(n_img, d, generator=g, dtype=torch.float64)
        txt = img[torch.from_numpy(lab)] + 0.8 * torch.randn(len(lab), d, generator=g, dtype=torch.float64)
    return img, txt, lab


def _gpu(monkeypatch, cap=(9, 0), hip=None):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(_triton, "triton_installed", lambda: True)
    # use_triton reads only .device and .dtype: a stand-in for a tensor on a device this machine does not have.
    monkeypatch.setattr(functional, "_probe", lambda device, dtype: types.SimpleNamespace(device=device, dtype=dtype))


def test_auto_runs_triton_on_sm80_plus_silently(monkeypatch):
    for cap in ((8, 0), (9, 0)):
        _gpu(monkeypatch, cap)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert functional._auto_path(torch.device("cuda"), torch.float16) == "triton"
    assert functional._auto_path(torch.device("cpu"), torch.float32) == "cpu"


@pytest.mark.parametrize(
    "device,cap,hip,match",
    [
        ("cuda", (7, 5), None, r"sm_75.*bf16 tl.dot needs sm_80"),
        ("cuda", (9, 0), "6.2", "not ROCm"),
        ("mps", (9, 0), None, "on mps"),
        ("xpu", (9, 0), None, "on xpu"),
    ],
)
def test_auto_unsupported_device_takes_torch_path_with_one_warning(monkeypatch, device, cap, hip, match):
    _gpu(monkeypatch, cap, hip)
    with pytest.warns(RuntimeWarning, match=match):
        assert functional._auto_path(torch.device(device), torch.bfloat16) == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per reason
        assert functional._auto_path(torch.device(device), torch.bfloat16) == "torch"


def test_switch_forces_torch_or_triton(monkeypatch):
    _gpu(monkeypatch, (9, 0))
    with vlkernels.set_backend("torch"), warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for: no warning
        assert functional._auto_path(torch.device("cuda"), torch.float16) == "torch"
    _gpu(monkeypatch, (7, 0))
    with vlkernels.set_backend("triton"), pytest.raises(BackendError, match="sm_70"):
        functional._auto_path(torch.device("cuda"), torch.float16)


def test_backend_argument_checked():
    img, txt, lab = _data()
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'cpu', 'triton', 'torch'"):
        evaluate(img, txt, lab, backend="cuda")


@pytest.mark.parametrize("integer", [False, True])
def test_torch_path_matches_reference(integer):
    # The chunked torch path (what a GPU without Triton support runs), here on CPU tensors; small device chunks so
    # thresholds and counts cross chunk boundaries. Independent reference: full fp64 matrix + stable argsort.
    img, txt, lab = _data(integer=integer)
    got = evaluate(img, txt, lab, backend="torch", device_chunk=16)
    assert got == evaluate_ref(img, txt, lab)
    # Certified counting: meta names the path and the screen, and counts the re-checks among the decisions (each
    # evaluated pair against every candidate: a text's image among 23 images, an image's text among every text).
    assert got.meta["path"] == "torch" and got.meta["screen"] == "fp32"
    assert got.meta["decisions"] == len(lab) * 23 + len(lab) * len(lab)
    assert 0 <= got.meta["rechecked_pairs"] <= got.meta["decisions"]
    pos = Positives.from_lists([[i % 23, (5 * i) % 23] for i in range(len(lab))], 23)
    _, r = rank_metrics(txt, img, pos, backend="torch", device_chunk=16)
    want = ranks_ref((txt @ img.T).numpy(), pos)
    np.testing.assert_array_equal(r.ranks, want.ranks)
    ex = Positives.from_labels(lab, 23)
    for k in (1, 5, 23):
        v, i = topk(txt, img, k, exclude=ex if k == 5 else None, backend="torch", device_chunk=16)
        wv, wi = topk_ref(txt, img, k, exclude=ex if k == 5 else None)
        assert_topk_equal(v, i, wv, wi)


def test_torch_path_fp64_entries_past_fp32_range():
    """float64 rows with entries past fp32's range whose norms' product is still in the fp32 screen's window: the
    narrowed entries are inf, the screen scores inf or NaN, and such pairs must be re-checked, not counted or
    dropped (reference: the fp64 brute force)."""
    q = torch.tensor([[1e39, 1.0], [1e39, -1.0], [1e39, 1e38]], dtype=torch.float64)
    g = torch.tensor([[1e-39, 0.0], [2e-39, 0.0], [0.0, 1e-39], [0.0, 1e-37]], dtype=torch.float64)
    pos = Positives.from_lists([[0], [0], [1]], 4)
    _, r = rank_metrics(q, g, pos, backend="torch", device_chunk=2)
    np.testing.assert_array_equal(r.ranks, ranks_ref((q @ g.T).numpy(), pos).ranks)
    v, i = topk(q, g, 2, backend="torch", device_chunk=2)
    assert_topk_equal(v, i, *topk_ref(q, g, 2))
    # Ordinary scores from huge and tiny factors: every pair's screen score is NaN.
    gen = torch.Generator().manual_seed(3)
    a, b = (
        torch.randn(20, 8, generator=gen, dtype=torch.float64),
        torch.randn(30, 8, generator=gen, dtype=torch.float64),
    )
    qa, gb = a * 1e200, b * 1e-200
    pos = Positives.from_lists([[j % 30] for j in range(20)], 30)
    res = rank_metrics(qa, gb, pos, backend="torch", device_chunk=16)
    np.testing.assert_array_equal(res[1].ranks, ranks_ref((qa @ gb.T).numpy(), pos).ranks)
    assert res.meta["rechecked_pairs"] == 20 * 30  # every pair undecided, every one re-checked


def _interpreter(monkeypatch):
    if not _triton.triton_installed() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs triton and TRITON_INTERPRET=1 (set by conftest without a GPU)")
    # Retrieval's auto sends CPU tensors to the C++ engine: pretend this device is one Triton runs on.
    monkeypatch.setattr(functional, "_auto_path", lambda device, dtype: "triton")
    monkeypatch.setattr(_triton, "STRICT_INTERPRETER", False)


def _break_tiles(monkeypatch):
    from vlkernels.retrieval import configs
    from vlkernels.retrieval import triton_screen as screen

    # Tiles that are not powers of two: Triton rejects tl.arange(0, 24) when it builds the kernels.
    bad = configs.Tile(24, 24, 16, 4, 1)
    monkeypatch.setattr(screen, "screen_tile", lambda device, dtype: bad)
    monkeypatch.setattr(screen, "topk_tile", lambda device, dtype, block_n: bad)


def test_triton_compile_failure_falls_back_to_torch_with_one_warning(monkeypatch):
    _interpreter(monkeypatch)
    _break_tiles(monkeypatch)
    img, txt, lab = _data(integer=True)
    with pytest.warns(RuntimeWarning, match=r"retrieval_count .*failed on first use.*power of 2") as rec:
        got = evaluate(img, txt, lab, device_chunk=16)
    assert sum("failed on first use" in str(w.message) for w in rec) == 1
    assert got == evaluate_ref(img, txt, lab)
    with pytest.warns(RuntimeWarning, match=r"retrieval_topk .*failed on first use"):
        v, i = topk(txt, img, 4, device_chunk=16)
    assert_topk_equal(v, i, *topk_ref(txt, img, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # later calls go straight to the torch path, silently
        assert evaluate(img, txt, lab, device_chunk=16) == got


def test_triton_errors_surface_when_forced(monkeypatch):
    _interpreter(monkeypatch)
    _break_tiles(monkeypatch)
    img, txt, lab = _data()
    with pytest.raises(Exception, match="power of 2"):
        evaluate(img, txt, lab, backend="triton")
    with pytest.raises(Exception, match="power of 2"):
        topk(txt, img, 3, backend="triton")
    _triton.reset_state()
    with vlkernels.set_backend("triton"), pytest.raises(Exception, match="power of 2"):
        evaluate(img, txt, lab)


def test_auto_triton_that_works_stays_on_triton(monkeypatch):
    # The auto branch that succeeds: the kernels run (interpreted), no warning, same numbers as the reference.
    _interpreter(monkeypatch)
    img, txt, lab = _data(n_img=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert evaluate(img, txt, lab) == evaluate_ref(img, txt, lab)
    assert not _triton.fell_back("retrieval_count", torch.empty(0))


def test_cli_backend_torch(tmp_path):
    # The CLI's --backend torch: files streamed through the chunked torch path, numbers equal to the fp64 reference.
    import json

    from vlkernels.cli import main as cli_main

    img, txt, lab = _data(integer=True)
    np.save(tmp_path / "img.npy", img.numpy())
    np.save(tmp_path / "txt.npy", txt.numpy())
    (tmp_path / "gt.json").write_text(json.dumps({"text_to_image": lab.tolist()}))
    out = tmp_path / "o.json"
    argv = ["retrieval", "--images", str(tmp_path / "img.npy"), "--texts", str(tmp_path / "txt.npy")]
    assert cli_main([*argv, "--gt", str(tmp_path / "gt.json"), "--backend", "torch", "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == evaluate_ref(img, txt, lab)
