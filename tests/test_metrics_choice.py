"""Winoground/Probe-C group accuracy, Probe-R margins, VCR, SNLI-VE and VisDial against loop references and hand
computations."""

import math

import numpy as np
import pytest
import torch

from vlkernels.metrics import group_accuracy, pairwise_margin, snli_ve_accuracy, vcr_accuracy, visdial_metrics
from vlkernels.metrics.reference import group_accuracy_ref, visdial_ref


def _quantized(*shape, dtype=torch.float32):
    # Few distinct values so ties are common and the strict/inclusive conventions are exercised.
    return (torch.randn(*shape) * 2).round().to(dtype) / 2


@pytest.mark.parametrize("b", [1, 37, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_group_accuracy_matches_reference(b, dtype):
    scores = _quantized(b, 2, 2, dtype=dtype)
    res = group_accuracy(scores)
    text, image, group = group_accuracy_ref(scores)
    assert res.text.tolist() == text and res.image.tolist() == image and res.group.tolist() == group
    assert res.group_acc == pytest.approx(sum(group) / b)
    assert res.text_acc == pytest.approx(sum(text) / b) and res.image_acc == pytest.approx(sum(image) / b)


def test_group_accuracy_hand_cases():
    # scores[b, image, caption]
    perfect = [[0.9, 0.1], [0.2, 0.8]]
    # Caption 0 wins for both images: image 1 prefers the wrong caption -> text fails; each caption still picks its
    # own image (0.9 > 0.6 for c0, 0.5 > 0.1 for c1) -> image correct.
    text_fail = [[0.9, 0.1], [0.6, 0.5]]
    tie = [[0.5, 0.5], [0.2, 0.8]]  # s(c0,i0) == s(c1,i0): strict comparison fails text
    res = group_accuracy(torch.tensor([perfect, text_fail, tie]))
    assert res.text.tolist() == [True, False, False]
    assert res.image.tolist() == [True, True, True]
    assert res.group.tolist() == [True, False, False]
    assert math.isnan(group_accuracy(torch.empty(0, 2, 2)).group_acc)


def test_group_accuracy_non_contiguous():
    big = torch.randn(4, 50, 2, 2)
    view = big[1]
    assert group_accuracy(view).group.tolist() == group_accuracy_ref(view)[2]
    transposed = torch.randn(10, 2, 2).transpose(1, 2)
    assert group_accuracy(transposed).text.tolist() == group_accuracy_ref(transposed)[0]


def test_pairwise_margin_matches_probe_softmax():
    pos = torch.randn(200)
    alt = torch.randn(200, 3)
    alt[:5, 0] = pos[:5]  # ties lose
    res = pairwise_margin(pos, alt)
    two_way = torch.stack([pos.unsqueeze(1).expand_as(alt), alt], dim=-1).double().softmax(dim=-1)[..., 0]
    torch.testing.assert_close(res.mean_prob, two_way.mean(dim=0))
    torch.testing.assert_close(res.win_rate, (two_way > 0.5).double().mean(dim=0))
    torch.testing.assert_close(res.mean_margin, (pos.double().unsqueeze(1) - alt.double()).mean(dim=0))
    assert res.margin.shape == (200, 3)


def test_pairwise_margin_hand_and_errors():
    res = pairwise_margin(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, 1.0]))
    assert res.win_rate.tolist() == [1 / 3] and res.mean_margin.tolist() == [0.0]
    assert res.mean_prob.item() == pytest.approx((1 / (1 + math.e**-1) + 1 / (1 + math.e) + 0.5) / 3)
    with pytest.raises(ValueError, match="3 rows but alternatives has 2"):
        pairwise_margin(torch.zeros(3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="NaN/Inf"):
        pairwise_margin(torch.tensor([float("nan")]), torch.zeros(1))
    with pytest.raises(ValueError, match="positive must have 1 dimensions"):
        pairwise_margin(torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="dtype"):
        pairwise_margin(torch.zeros(2, dtype=torch.long), torch.zeros(2))


@pytest.mark.parametrize(("dtype", "pos", "alt"), [(torch.bfloat16, 256.0, -1.875), (torch.float16, 60000.0, -60000.0)])
def test_pairwise_margin_statistics_from_the_float64_inputs(dtype, pos, alt):
    """Half-precision logits: the float64 statistics are those of the given values (the difference of the float64
    inputs), not of the margin rounded (bf16 258 for 257.875) or overflowed (fp16 inf) in the inputs' dtype."""
    res = pairwise_margin(torch.tensor([pos], dtype=dtype), torch.tensor([alt], dtype=dtype))
    exact = float(torch.tensor(pos, dtype=dtype).double() - torch.tensor(alt, dtype=dtype).double())
    assert res.mean_margin.tolist() == [exact] and res.win_rate.tolist() == [1.0]
    assert res.margin.dtype == dtype  # the per-pair margin stays in the inputs' dtype, as documented


def test_vcr_accuracy_matches_numpy():
    n = 257
    qa, qar = torch.randn(n, 4), torch.randn(n, 4)
    ya, yr = torch.randint(0, 4, (n,)), torch.randint(0, 4, (n,))
    res = vcr_accuracy(qa, qar, ya, yr)
    a_ok = np.argmax(qa.numpy(), axis=1) == ya.numpy()
    r_ok = np.argmax(qar.numpy(), axis=1) == yr.numpy()
    assert res.q2a.tolist() == a_ok.tolist() and res.qa2r.tolist() == r_ok.tolist()
    assert res.joint_acc == pytest.approx(float((a_ok & r_ok).mean()))
    assert res.q2a_acc == pytest.approx(float(a_ok.mean())) and res.qa2r_acc == pytest.approx(float(r_ok.mean()))
    # Integer predictions take the same path; argmax ties go to the lowest index (np.argmax's rule).
    same = vcr_accuracy(qa.argmax(1), qar.argmax(1).int(), ya, yr.int())
    assert same.joint.tolist() == res.joint.tolist()
    tied = vcr_accuracy(torch.tensor([[1.0, 1.0, 0.0, 0.0]]), torch.tensor([2]), torch.tensor([1]), torch.tensor([2]))
    assert tied.q2a_acc == 0.0 and tied.qa2r_acc == 1.0


def test_vcr_accuracy_errors():
    s, y = torch.randn(3, 4), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="rationale_scores has 2 rows"):
        vcr_accuracy(s, s[:2], y, y)
    with pytest.raises(ValueError, match="answer_labels has 2 entries"):
        vcr_accuracy(s, s, y[:2], y)
    with pytest.raises(ValueError, match="NaN/Inf"):
        vcr_accuracy(torch.full((3, 4), float("nan")), s, y, y)
    with pytest.raises(ValueError, match="rationale_labels has dtype"):
        vcr_accuracy(s, s, y, y.float())
    with pytest.raises(ValueError, match="integer predictions must be 1-D"):
        vcr_accuracy(torch.zeros(3, 4, dtype=torch.long), s, y, y)
    with pytest.raises(ValueError, match="float scores must be 2-D"):
        vcr_accuracy(torch.zeros(3), s, y, y)
    with pytest.raises(ValueError, match="no candidates"):
        vcr_accuracy(torch.zeros(3, 0), s, y, y)
    # Integer predictions outside the four choices: a prediction 5 against a label 5 counted as correct.
    with pytest.raises(ValueError, match=r"answer_scores: integer predictions must lie in \[0, 4\), got -1..5"):
        vcr_accuracy(torch.tensor([5, -1]), torch.tensor([0, 0]), torch.tensor([5, -1]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"rationale_scores: integer predictions must lie in \[0, 4\)"):
        vcr_accuracy(torch.tensor([0]), torch.tensor([4]), torch.tensor([0]), torch.tensor([4]))
    # Labels out of range still simply never match (documented).
    assert vcr_accuracy(torch.tensor([0]), torch.tensor([0]), torch.tensor([7]), torch.tensor([0])).q2a_acc == 0.0
    with pytest.raises(ValueError, match="is on meta"):
        vcr_accuracy(s, s, y.to("meta"), y)
    with pytest.raises(ValueError, match="answer_scores must have 4 columns"):
        vcr_accuracy(torch.randn(3, 3), s, y, y)


def test_snli_ve_accuracy_confusion_and_per_class():
    n = 1000
    logits, labels = torch.randn(n, 3), torch.randint(0, 3, (n,))
    res = snli_ve_accuracy(logits, labels)
    pred = logits.argmax(1).numpy()
    want = np.zeros((3, 3), dtype=np.int64)
    np.add.at(want, (labels.numpy(), pred), 1)
    np.testing.assert_array_equal(res.confusion.numpy(), want)
    assert res.accuracy == pytest.approx(float((pred == labels.numpy()).mean()))
    for k, name in enumerate(("entailment", "neutral", "contradiction")):
        assert res.per_class[name] == pytest.approx(want[k, k] / want[k].sum())
    hand = snli_ve_accuracy(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 1, 2, 2]), class_names=("e", "n", "c"))
    assert hand.accuracy == 0.75 and hand.per_class == {"e": 1.0, "n": 1.0, "c": 0.5}
    assert math.isnan(snli_ve_accuracy(torch.tensor([0]), torch.tensor([0])).per_class["neutral"])


def test_snli_ve_accuracy_errors():
    with pytest.raises(ValueError, match="3 columns"):
        snli_ve_accuracy(torch.randn(4, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        snli_ve_accuracy(torch.randn(4, 3), torch.full((4,), 3))
    with pytest.raises(ValueError, match=r"predictions must lie in \[0, 3\)"):
        snli_ve_accuracy(torch.tensor([0, 5]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="at least one class"):
        snli_ve_accuracy(torch.tensor([0]), torch.tensor([0]), class_names=())
    with pytest.raises(ValueError, match="NaN/Inf"):
        snli_ve_accuracy(torch.tensor([[0.0, float("nan"), 1.0]]), torch.tensor([0]))
    # per_class is keyed by the names: repeated names (or one string read as its letters) would merge classes.
    with pytest.raises(ValueError, match="must be distinct"):
        snli_ve_accuracy(torch.tensor([0, 1]), torch.tensor([0, 1]), class_names=("x", "x", "y"))
    with pytest.raises(ValueError, match="sequence of names"):
        snli_ve_accuracy(torch.tensor([0, 1]), torch.tensor([0, 1]), class_names="abc")


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
@pytest.mark.parametrize("shape", [(1,), (37,), (20, 10)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_visdial_metrics_match_sort_reference(ties, shape, dtype):
    c = 100
    scores = _quantized(*shape, c, dtype=dtype)
    gt = torch.randint(0, c, shape)
    relevance = torch.randint(0, 3, (*shape, c)).double() / 2 * (torch.rand(*shape, c) < 0.1)
    relevance.view(-1, c)[0] = 0  # one round without dense annotation
    res = visdial_metrics(scores, gt, relevance, ties=ties)
    want = visdial_ref(scores, gt, relevance, pessimistic=ties == "pessimistic")
    assert res.ranks.view(-1).tolist() == want["ranks"]
    for key in ("r1", "r5", "r10", "mrr", "mean_rank"):
        assert getattr(res, key) == pytest.approx(want[key], abs=1e-12), key
    assert res.ranks.shape == shape and res.ndcg_per_round.shape == shape
    np.testing.assert_allclose(res.ndcg_per_round.view(-1).numpy(), np.array(want["ndcg_per_round"]), rtol=1e-12)
    if math.isnan(want["ndcg"]):
        assert math.isnan(res.ndcg)
    else:
        assert res.ndcg == pytest.approx(want["ndcg"], rel=1e-12)


def test_visdial_hand_example():
    # Options scored 0.1, 0.9, 0.5; ground truth option 2 is second: rank 2, MRR 1/2.
    # Relevance (0, 0.5, 1): K = 2 relevant options; by score the top 2 are options 1 (0.5) and 2 (1.0):
    # DCG = 0.5/log2(2) + 1/log2(3); ideal = 1/log2(2) + 0.5/log2(3).
    m = visdial_metrics(torch.tensor([[0.1, 0.9, 0.5]]), torch.tensor([2]), torch.tensor([[0.0, 0.5, 1.0]]))
    assert (m.mean_rank, m.mrr, m.r1, m.r5) == (2.0, 0.5, 0.0, 1.0)
    assert m.ndcg == pytest.approx((0.5 + 1 / math.log2(3)) / (1 + 0.5 / math.log2(3)))
    # Constant scores: the pessimistic convention ranks the ground truth last, the optimistic one first.
    flat = torch.zeros(2, 100)
    assert visdial_metrics(flat, torch.tensor([0, 99])).ranks.tolist() == [100, 100]
    assert visdial_metrics(flat, torch.tensor([0, 99]), ties="optimistic").ranks.tolist() == [1, 1]
    assert math.isnan(visdial_metrics(flat, torch.tensor([0, 99])).ndcg)


def test_visdial_errors():
    s, g = torch.randn(4, 100), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="ties must be"):
        visdial_metrics(s, g, ties="random")
    with pytest.raises(ValueError, match=r"gt_index must have shape \(4,\)"):
        visdial_metrics(s, g[:3])
    with pytest.raises(ValueError, match=r"gt_index must lie in \[0, 100\)"):
        visdial_metrics(s, torch.full((4,), 100))
    with pytest.raises(ValueError, match="gt_index has dtype"):
        visdial_metrics(s, g.float())
    with pytest.raises(ValueError, match="NaN/Inf"):
        visdial_metrics(torch.full((4, 100), float("nan")), g)
    with pytest.raises(ValueError, match="no candidates"):
        visdial_metrics(torch.zeros(4, 0), g)
    with pytest.raises(ValueError, match="relevance must have the shape"):
        visdial_metrics(s, g, torch.zeros(4, 99))
    with pytest.raises(ValueError, match="non-negative"):
        visdial_metrics(s, g, -torch.ones(4, 100))
    with pytest.raises(ValueError, match="relevance contains"):
        visdial_metrics(s, g, torch.full((4, 100), float("inf")))


def test_choice_metrics_empty_and_strided_inputs():
    empty = visdial_metrics(torch.empty(0, 100), torch.empty(0, dtype=torch.long), torch.empty(0, 100))
    assert empty.ranks.shape == (0,) and math.isnan(empty.mrr) and math.isnan(empty.ndcg)
    assert math.isnan(
        vcr_accuracy(torch.empty(0, 4), torch.empty(0, 4), *[torch.empty(0, dtype=torch.long)] * 2).joint_acc
    )
    assert math.isnan(snli_ve_accuracy(torch.empty(0, 3), torch.empty(0, dtype=torch.long)).accuracy)
    # Strided views (a column slice and a transposed matrix) are read correctly.
    big = _quantized(50, 130)
    view, gt = big[:, 10:110], torch.randint(0, 100, (50,))
    assert visdial_metrics(view, gt).ranks.tolist() == visdial_ref(view.contiguous(), gt)["ranks"]
    t = _quantized(100, 40).t()
    gt = torch.randint(0, 100, (40,))
    assert visdial_metrics(t, gt).ranks.tolist() == visdial_ref(t.contiguous(), gt)["ranks"]
    qa = torch.randn(4, 20)[:, ::5]
    y = torch.randint(0, 4, (20,))[::5]
    assert vcr_accuracy(qa, qa, y, y).q2a.tolist() == (qa.argmax(1) == y).tolist()
