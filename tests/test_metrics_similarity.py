"""siglip_score / clip_score against fp64 references, the seed's worked example and torchmetrics itself."""

import math

import numpy as np
import pytest
import torch

import vlkernels.metrics.similarity as sim
from vlkernels.metrics import clip_score, siglip_score
from vlkernels.metrics.reference import clip_score_ref, pair_cosine_ref, siglip_score_ref
from vlkernels.testing import FP32_TOL

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.fixture(params=["triton", "torch"])
def path(request, monkeypatch):
    """Run the public functions through the Triton kernel (interpreted on CPU) and through the chunked torch path."""
    if request.param == "torch":
        monkeypatch.setattr(sim, "use_triton", lambda *t: False)
        # Small chunks so even the small test shapes cross many chunk boundaries.
        monkeypatch.setattr(sim, "_CHUNK_ELEMENTS", 256)
    return request.param


def _emb(n, d, dtype, scale=1.0):
    return (torch.randn(n, d) * scale).to(dtype)


@pytest.mark.parametrize("n", [1, 37, 257, 1000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_siglip_score_pairs_match_reference(path, n, dtype):
    img, txt = _emb(n, 48, dtype, 3.0), _emb(n, 48, dtype)
    got = siglip_score(img, txt, logit_scale=torch.tensor(11.7), logit_bias=-2.3)
    assert got.dtype == torch.float32 and got.shape == (n,)
    # fp16/bf16 inputs are read exactly and computed in fp32, so fp32 tolerances hold against fp64 on the same values.
    torch.testing.assert_close(got.double(), siglip_score_ref(img, txt, 11.7, -2.3), **FP32_TOL)


@pytest.mark.parametrize("dtype", DTYPES)
def test_siglip_score_fixed_frames_per_caption(path, dtype):
    m, k = 37, 8
    img, txt = _emb(m * k, 70, dtype), _emb(m, 70, dtype)
    got = siglip_score(img, txt, 10.0, -1.0, frames=k)
    torch.testing.assert_close(got.double(), siglip_score_ref(img, txt, 10.0, -1.0, frames=k), **FP32_TOL)
    assert torch.equal(siglip_score(img, txt, 10.0, -1.0, frames=np.int64(k)), got)  # a numpy count, as an int


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_siglip_score_frame_index_any_order(path, index_dtype):
    m = 23
    counts = torch.randint(1, 6, (m,))
    owner = torch.repeat_interleave(torch.arange(m), counts)
    owner = owner[torch.randperm(owner.numel())].to(index_dtype)
    img, txt = _emb(owner.numel(), 33, torch.float32), _emb(m, 33, torch.float32)
    got = siglip_score(img, txt, 7.5, 0.5, frames=owner)
    torch.testing.assert_close(got.double(), siglip_score_ref(img, txt, 7.5, 0.5, frames=owner), **FP32_TOL)


def test_siglip_score_seed_example_mean_of_sigmoids():
    # Seed 001, section 4.3: score = mean_f sigmoid(logit_f). Frames at cos 1 and cos 0 to the caption, s=10, b=-5:
    # mean(sigmoid(5), sigmoid(-5)) = 0.5 exactly, while sigmoid of the mean logit would also be 0.5 but a third
    # frame at cos 1 separates the two readings: mean(s(5), s(5), s(-5)) = (1 + s(5)) / 3.
    txt = torch.tensor([[2.0, 0.0]])
    two = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(siglip_score(two, txt, 10.0, -5.0, frames=2), torch.tensor([0.5]))
    three = torch.tensor([[3.0, 0.0], [0.5, 0.0], [0.0, 1.0]])
    want = (1 + 1 / (1 + math.exp(-5))) / 3
    torch.testing.assert_close(siglip_score(three, txt, 10.0, -5.0, frames=3), torch.tensor([want]))


def test_siglip_score_independent_of_batch(path):
    img, txt = _emb(300, 40, torch.float32), _emb(300, 40, torch.float32)
    full = siglip_score(img, txt, 10.0, -3.0)
    for a, b in [(0, 1), (5, 17), (100, 300)]:
        torch.testing.assert_close(siglip_score(img[a:b], txt[a:b], 10.0, -3.0), full[a:b], rtol=0, atol=1e-7)


def test_siglip_score_strided_inputs(path):
    big_img, big_txt = torch.randn(50, 130), torch.randn(50, 128)
    img = big_img[:, 2:66]  # row stride 130
    txt = big_txt[:, ::2]  # column stride 2
    got = siglip_score(img, txt, 5.0, 0.0)
    torch.testing.assert_close(got.double(), siglip_score_ref(img, txt, 5.0, 0.0), **FP32_TOL)


def test_siglip_score_empty_and_zero_vectors(path):
    assert siglip_score(torch.empty(0, 8), torch.empty(0, 8), 10.0, -10.0).shape == (0,)
    assert siglip_score(
        torch.empty(0, 8), torch.empty(0, 8), 10.0, -10.0, frames=torch.empty(0, dtype=torch.long)
    ).shape == (0,)
    # A zero embedding has cosine 0 (F.normalize's eps rule): sigmoid(b).
    got = siglip_score(torch.zeros(1, 4), torch.ones(1, 4), 10.0, -1.0)
    torch.testing.assert_close(got, torch.sigmoid(torch.tensor([-1.0])))


def test_pair_cosine_launchers_agree_across_chunks():
    x, y = torch.randn(1000, 70).half(), torch.randn(300, 70).half()
    idx = torch.randint(0, 300, (1000,))
    want = pair_cosine_ref(x, y[idx])
    torch.testing.assert_close(sim.pair_cosine_chunked(x, y, idx, 1e-12, chunk_rows=37).double(), want, **FP32_TOL)
    torch.testing.assert_close(sim.pair_cosine_fwd(x, y, idx, 1e-12).double(), want, **FP32_TOL)
    grouped = pair_cosine_ref(x[:960], y[torch.arange(960) // 8])
    got = sim.pair_cosine_chunked(x[:960], y[:120], None, 1e-12, chunk_rows=37, group=8)
    torch.testing.assert_close(got.double(), grouped, **FP32_TOL)


@pytest.mark.parametrize("n", [1, 37, 257])
@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_score_matches_reference(path, n, dtype):
    img, txt = _emb(n, 32, dtype), _emb(n, 32, dtype)
    out = clip_score(img, txt)
    want_scores, want_mean = clip_score_ref(img, txt)
    torch.testing.assert_close(out.scores.double(), want_scores, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(out.mean.double(), want_mean, rtol=1e-5, atol=1e-4)


def test_clip_score_clamps_pairs_and_torchmetrics_mean():
    # cos = 0.5 and -0.7: per pair 100 * max(cos, 0) = [50, 0]; torchmetrics clamps the mean: max(100 * -0.1, 0) = 0.
    img = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    txt = torch.tensor([[0.5, math.sqrt(0.75)], [-0.7, math.sqrt(0.51)]])
    out = clip_score(img, txt)
    torch.testing.assert_close(out.scores, torch.tensor([50.0, 0.0]), rtol=1e-6, atol=1e-4)
    assert float(out.mean) == 0.0
    assert float(clip_score(img, txt, weight=2.5).scores[0]) == pytest.approx(1.25, rel=1e-6)


class _FakeClip:
    """Stands in for a HF CLIPModel/CLIPProcessor: 'images' are embedding tensors of shape (D, 1, 1) and texts are
    row numbers into a caption-embedding table, so torchmetrics runs its own arithmetic on our embeddings."""

    def __init__(self, txt: torch.Tensor):
        self.txt = txt
        self.config = type("cfg", (), {})()

    def to(self, device):
        return self

    def __call__(self, text=None, images=None, **kw):
        if images is not None:
            return {"pixel_values": torch.stack(images)}
        ids = torch.tensor([[int(t)] for t in text])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def get_image_features(self, pixel_values):
        return pixel_values.flatten(1)

    def get_text_features(self, input_ids, attention_mask):
        return self.txt[input_ids[:, 0]]


def test_clip_score_matches_torchmetrics():
    tm = pytest.importorskip("torchmetrics.multimodal.clip_score")
    img = torch.randn(64, 24) + 0.3
    txt = torch.randn(64, 24) + 0.3
    fake = _FakeClip(txt)
    metric = tm.CLIPScore(model_name_or_path=lambda: (fake, fake))
    for a in range(0, 64, 16):
        metric.update([img[i].view(-1, 1, 1) for i in range(a, a + 16)], [str(i) for i in range(a, a + 16)])
    out = clip_score(img, txt)
    torch.testing.assert_close(out.mean, metric.compute(), rtol=1e-5, atol=1e-4)
    per_pair, _ = tm._clip_score_update(
        [img[i].view(-1, 1, 1) for i in range(64)], [str(i) for i in range(64)], fake, fake
    )
    torch.testing.assert_close(out.scores, per_pair.clamp_min(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"image_emb": torch.randn(4, 8), "text_emb": torch.randn(4, 9)}, "same embedding size"),
        ({"image_emb": torch.randn(4, 8), "text_emb": torch.randn(3, 8)}, "pair row by row"),
        ({"image_emb": torch.randn(8), "text_emb": torch.randn(8)}, "must have 2 dimensions"),
        ({"image_emb": torch.randint(0, 3, (4, 8)), "text_emb": torch.randn(4, 8)}, "dtype"),
        ({"image_emb": [[1.0]], "text_emb": torch.randn(1, 1)}, "torch.Tensor"),
        ({"image_emb": torch.randn(4, 8), "text_emb": torch.randn(4, 8, device="meta")}, "one device"),
        ({"logit_scale": float("nan")}, "logit_scale must be finite"),
        ({"logit_scale": -1.0}, "logit_scale must be > 0"),
        ({"logit_scale": torch.ones(2)}, "one element"),
        ({"logit_scale": "10"}, "logit_scale must be a float"),
        ({"logit_bias": float("inf")}, "logit_bias must be finite"),
        ({"frames": 3}, "frames=3"),
        ({"frames": 0}, ">= 1"),
        ({"frames": 2.0}, "frames must be None, an int"),
        ({"frames": True}, "frames must be None, an int"),
        ({"frames": np.bool_(True)}, "frames must be None, an int"),
        ({"frames": torch.zeros(8)}, "int32/int64"),
        ({"frames": torch.zeros(7, dtype=torch.long)}, "7 entries"),
        ({"frames": torch.full((8,), 4)}, "outside"),
        ({"frames": torch.zeros(8, dtype=torch.long)}, "no frame"),
    ],
)
def test_siglip_score_errors(kwargs, match):
    args = {"image_emb": torch.randn(8, 8), "text_emb": torch.randn(4, 8), "logit_scale": 10.0, "logit_bias": -1.0}
    if "image_emb" not in kwargs and "frames" not in kwargs:
        args["text_emb"] = torch.randn(8, 8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        siglip_score(**args)


# The interpreted kernel computes inf/inf with numpy, which warns before we raise.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_similarity_rejects_non_finite_embeddings(path, bad):
    img, txt = torch.randn(5, 8), torch.randn(5, 8)
    img[2, 3] = bad
    with pytest.raises(ValueError, match="NaN/Inf"):
        siglip_score(img, txt, 10.0, -1.0)
    with pytest.raises(ValueError, match="NaN/Inf"):
        clip_score(txt, img)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_similarity_huge_finite_norms_named_as_such(path):
    """Finite embeddings whose squared norms pass fp32's range are not called NaN/Inf: the error says what is wrong
    and what to do; eps must be positive and finite."""
    img = torch.tensor([[3e19, 4e19], [1.0, 2.0]], dtype=torch.float64)
    txt = torch.tensor([[4e19, 3e19], [2.0, 1.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="norms too large for fp32"):
        clip_score(img, txt)
    with pytest.raises(ValueError, match="norms too large for fp32"):
        siglip_score(img, txt, 10.0, -5.0)
    # One side alone (its cosine would be a finite dot over an infinite norm: 0, not an error).
    with pytest.raises(ValueError, match="norms too large for fp32"):
        clip_score(img, torch.tensor([[3.0, 4.0], [2.0, 1.0]], dtype=torch.float64))
    # Scaled down, the same directions score as torchmetrics' formula does: 100 * max(cos, 0) = 96.
    # (fp32: the cast, the dot, two norms, two divisions: within 16 units of 2**-24.)
    assert float(clip_score(img * 1e-19, txt * 1e-19).scores[0]) == pytest.approx(96.0, rel=16 * 2.0**-24)
    for eps in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps must be a positive finite number"):
            clip_score(img[1:], txt[1:], eps=eps)


def test_clip_score_errors():
    with pytest.raises(ValueError, match="pair row by row"):
        clip_score(torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(ValueError, match="weight must be > 0"):
        clip_score(torch.randn(3, 4), torch.randn(3, 4), weight=0.0)
    # Finite but past fp32: weight 1e39 gave [nan, inf] (0 * inf), logit_scale 1e39 a RuntimeError from torch.
    with pytest.raises(ValueError, match="weight must lie within fp32's range"):
        clip_score(torch.randn(3, 4), torch.randn(3, 4), weight=1e39)
    for kw in ({"logit_scale": 1e39, "logit_bias": 0.0}, {"logit_scale": 1.0, "logit_bias": -1e39}):
        with pytest.raises(ValueError, match="must lie within fp32's range"):
            siglip_score(torch.randn(3, 4), torch.randn(3, 4), **kw)
    assert math.isnan(float(clip_score(torch.empty(0, 4), torch.empty(0, 4)).mean))


def test_siglip_score_million_pairs_torch_path(monkeypatch):
    # 1M (frame, caption) pairs through the chunked CPU path (the Triton interpreter would take minutes here):
    # several chunk buffers' worth, checked on a random sample of captions against the fp64 reference.
    monkeypatch.setattr(sim, "use_triton", lambda *t: False)
    m, k, d = 125_000, 8, 16
    img, txt = torch.randn(m * k, d).half(), torch.randn(m, d).half()
    got = siglip_score(img, txt, 10.0, -5.0, frames=k)
    pick = torch.randint(0, m, (200,))
    rows = (pick.unsqueeze(1) * k + torch.arange(k)).reshape(-1)
    want = siglip_score_ref(img[rows], txt[pick], 10.0, -5.0, frames=k)
    torch.testing.assert_close(got[pick].double(), want, **FP32_TOL)


@pytest.mark.gpu
def test_metrics_cuda_match_cpu():
    from vlkernels.metrics import visdial_metrics

    img, txt = torch.randn(3000, 96).half(), torch.randn(3000, 96).half()
    for fn in (lambda a, b: clip_score(a, b).scores, lambda a, b: siglip_score(a, b, 10.0, -5.0)):
        torch.testing.assert_close(fn(img.cuda(), txt.cuda()).cpu(), fn(img, txt), rtol=1e-5, atol=1e-4)
    scores, gt = torch.randn(500, 100), torch.randint(0, 100, (500,))
    assert torch.equal(visdial_metrics(scores.cuda(), gt.cuda()).ranks.cpu(), visdial_metrics(scores, gt).ranks)


@pytest.mark.gpu
def test_siglip_score_cuda_matches_cpu():
    img, txt = torch.randn(4000, 256).half(), torch.randn(500, 256).half()
    cpu = siglip_score(img, txt, 10.0, -5.0, frames=8)
    gpu = siglip_score(img.cuda(), txt.cuda(), 10.0, -5.0, frames=8)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-6)
