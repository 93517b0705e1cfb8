"""Choice and ranking metrics from model scores: Winoground / Probe-C group accuracy, Probe-R pairwise margins,
VCR Q->A / QA->R / joint, SNLI-VE 3-way accuracy and VisDial retrieval metrics (MRR, R@k, mean rank, NDCG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from vlkernels._validate import FLOAT_DTYPES, check_finite, check_same_device, check_tensor
from vlkernels.core.ops import count_above

_INT_DTYPES = (torch.int32, torch.int64)


class GroupAccuracy(NamedTuple):
    """Output of :func:`group_accuracy`: per-example correctness ``(B,)`` bool and the accuracies (fractions)."""

    text: torch.Tensor
    image: torch.Tensor
    group: torch.Tensor
    text_acc: float
    image_acc: float
    group_acc: float


def _mean(x: torch.Tensor) -> float:
    return float(x.double().mean()) if x.numel() else float("nan")


def group_accuracy(scores: torch.Tensor) -> GroupAccuracy:
    """Winoground / Probe-C text, image and group correctness of 2x2 (image, caption) score blocks.

    With ``s(c, i) = scores[b, i, c]`` (image ``i``, caption ``c``; caption ``k`` is the true one for image ``k``):

    .. math::
        \\text{text} &= s(c_0,i_0) > s(c_1,i_0) \\wedge s(c_1,i_1) > s(c_0,i_1) \\\\
        \\text{image} &= s(c_0,i_0) > s(c_0,i_1) \\wedge s(c_1,i_1) > s(c_1,i_0) \\\\
        \\text{group} &= \\text{text} \\wedge \\text{image}

    (Thrush et al. 2022, Winoground; the Probe-C protocol of the probing seed.)

    Args:
        scores: ``(B, 2, 2)`` float, image-major like ``logits_per_image``: ``scores[b, i, c]`` scores image ``i``
            against caption ``c`` of example ``b``.

    Returns:
        :class:`GroupAccuracy`: ``text``, ``image``, ``group`` ``(B,)`` bool and their means as floats (NaN for
        ``B = 0``).

    Raises:
        ValueError: not a float tensor of shape ``(B, 2, 2)``, or NaN/Inf scores.

    Note:
        Comparisons are strict: a tie is a failure (as in the Winoground evaluation code). Any device, no sync
        beyond the final means. Not differentiable.

    Example:
        >>> group_accuracy(torch.tensor([[[0.9, 0.1], [0.2, 0.8]]])).group_acc
        1.0
    """
    check_tensor(scores, "scores", dtypes=FLOAT_DTYPES, ndim=3)
    if tuple(scores.shape[1:]) != (2, 2):
        raise ValueError(f"scores must have shape (B, 2, 2) (image, caption), got {tuple(scores.shape)}")
    check_finite(scores, "scores")
    s00, s01, s10, s11 = scores[:, 0, 0], scores[:, 0, 1], scores[:, 1, 0], scores[:, 1, 1]
    text = (s00 > s01) & (s11 > s10)
    image = (s00 > s10) & (s11 > s01)
    group = text & image
    return GroupAccuracy(text, image, group, _mean(text), _mean(image), _mean(group))


class PairwiseMargin(NamedTuple):
    """Output of :func:`pairwise_margin`. Statistics are per alternative, ``(K,)`` float64."""

    margin: torch.Tensor
    """``(B, K)`` ``positive - alternative``."""
    mean_margin: torch.Tensor
    """``(K,)`` mean logit difference."""
    win_rate: torch.Tensor
    """``(K,)`` fraction with ``positive > alternative`` (ties lose)."""
    mean_prob: torch.Tensor
    """``(K,)`` mean two-way softmax probability of the positive, ``mean sigmoid(margin)`` (the value the probing
    code logs as "rel1_vs_rel2" etc.)."""


def pairwise_margin(positive: torch.Tensor, alternatives: torch.Tensor) -> PairwiseMargin:
    """Probe-R pairwise comparisons, batched: how far the true prompt's logit beats each alternative's.

    .. math::
        m_{bk} = z^+_b - z_{bk}, \\quad \\bar m_k = \\tfrac1B\\sum_b m_{bk}, \\quad
        \\mathrm{win}_k = \\tfrac1B\\sum_b [m_{bk} > 0], \\quad \\bar p_k = \\tfrac1B\\sum_b \\sigma(m_{bk})

    For the probing seed's Probe-R: ``positive`` = logit of the anchor image with the true relation prompt R1,
    ``alternatives[:, k]`` = logits with R2 (impossible relation), R3 (absent object), O1 (object only). The
    seed's per-pair value is ``softmax([z+, z_k])[0] = sigmoid(m_k)`` and its accuracy ``z+ > z_k``.

    Args:
        positive: ``(B,)`` float logits of the true pairing.
        alternatives: ``(B, K)`` (or ``(B,)`` for ``K = 1``) float logits of the alternatives, same device.

    Returns:
        :class:`PairwiseMargin` (``margin`` in the inputs' promoted dtype, statistics in float64).

    Raises:
        ValueError: wrong dtype/rank/device, mismatched batch sizes, or NaN/Inf logits.

    Note:
        Ties (``m = 0``) count as losses and give ``sigmoid(0) = 0.5``. Means over ``B = 0`` are NaN.

    Example:
        >>> pairwise_margin(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])).win_rate
        tensor([0.5000], dtype=torch.float64)
    """
    check_tensor(positive, "positive", dtypes=FLOAT_DTYPES, ndim=1)
    check_tensor(alternatives, "alternatives", dtypes=FLOAT_DTYPES, ndim=(1, 2))
    check_same_device(positive=positive, alternatives=alternatives)
    alt = alternatives.unsqueeze(1) if alternatives.dim() == 1 else alternatives
    if alt.shape[0] != positive.shape[0]:
        raise ValueError(f"positive has {positive.shape[0]} rows but alternatives has {alt.shape[0]}")
    check_finite(positive, "positive")
    check_finite(alt, "alternatives")
    margin = positive.unsqueeze(1) - alt
    # From the float64 inputs, not from the margin: a half-precision difference rounds or overflows (fp16 60000 -
    # (-60000) is inf).
    m64 = positive.double().unsqueeze(1) - alt.double()
    return PairwiseMargin(
        margin=margin,
        mean_margin=m64.mean(dim=0),
        win_rate=(m64 > 0).double().mean(dim=0),
        mean_prob=torch.sigmoid(m64).mean(dim=0),
    )


def _predictions(x: torch.Tensor, name: str, n_classes: int | None = None) -> torch.Tensor:
    """Scores ``(N, C)`` -> argmax (first index among tied maxima); predictions ``(N,)`` int pass through."""
    check_tensor(x, name, dtypes=FLOAT_DTYPES + _INT_DTYPES, ndim=(1, 2))
    if x.dtype in _INT_DTYPES:
        if x.dim() != 1:
            raise ValueError(f"{name}: integer predictions must be 1-D (N,), got shape {tuple(x.shape)}")
        if n_classes is not None and x.numel() and (int(x.min()) < 0 or int(x.max()) >= n_classes):
            raise ValueError(
                f"{name}: integer predictions must lie in [0, {n_classes}), got {int(x.min())}..{int(x.max())}"
            )
        return x.long()
    if x.dim() != 2:
        raise ValueError(f"{name}: float scores must be 2-D (N, C), got shape {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} has no candidates (shape {tuple(x.shape)})")
    if n_classes is not None and x.shape[1] != n_classes:
        raise ValueError(f"{name} must have {n_classes} columns (one per class), got shape {tuple(x.shape)}")
    check_finite(x, name)
    return x.argmax(dim=1)


def _labels(y: torch.Tensor, name: str, n: int, device: torch.device) -> torch.Tensor:
    check_tensor(y, name, dtypes=_INT_DTYPES, ndim=1)
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} entries, expected {n}")
    if y.device != device:
        raise ValueError(f"{name} is on {y.device} but the scores are on {device}")
    return y.long()


class VCRAccuracy(NamedTuple):
    """Output of :func:`vcr_accuracy`: per-question correctness ``(N,)`` bool and accuracies (fractions)."""

    q2a: torch.Tensor
    qa2r: torch.Tensor
    joint: torch.Tensor
    q2a_acc: float
    qa2r_acc: float
    joint_acc: float


def vcr_accuracy(
    answer_scores: torch.Tensor,
    rationale_scores: torch.Tensor,
    answer_labels: torch.Tensor,
    rationale_labels: torch.Tensor,
) -> VCRAccuracy:
    """VCR accuracies: Q->A, QA->R and joint Q->AR (Zellers et al. 2019).

    .. math::
        \\mathrm{Q\\to AR} = \\tfrac1N \\sum_n [\\hat a_n = a_n] \\, [\\hat r_n = r_n]

    Args:
        answer_scores: ``(N, 4)`` float scores of the answer choices, or ``(N,)`` int predicted answers.
        rationale_scores: ``(N, 4)`` float scores of the rationale choices given the *correct* answer (the QA->R
            setting), or ``(N,)`` int predicted rationales.
        answer_labels: ``(N,)`` int correct answer index.
        rationale_labels: ``(N,)`` int correct rationale index.

    Returns:
        :class:`VCRAccuracy` with ``q2a``, ``qa2r``, ``joint`` ``(N,)`` bool and their means.

    Raises:
        ValueError: wrong dtypes or ranks, float scores without 4 columns, integer predictions outside
            ``[0, 4)``, length mismatches, devices, or NaN/Inf scores.

    Note:
        The prediction is the argmax; among tied maxima the lowest index wins (``torch.argmax``, like the
        leaderboard script's ``np.argmax``). Labels out of range simply never match. Means over ``N = 0`` are NaN.

    Example:
        >>> s = torch.tensor([[0.1, 0.7, 0.1, 0.1]])
        >>> vcr_accuracy(s, s, torch.tensor([1]), torch.tensor([2])).joint_acc
        0.0
    """
    a_hat = _predictions(answer_scores, "answer_scores", n_classes=4)
    r_hat = _predictions(rationale_scores, "rationale_scores", n_classes=4)
    n = a_hat.shape[0]
    if r_hat.shape[0] != n:
        raise ValueError(f"rationale_scores has {r_hat.shape[0]} rows but answer_scores has {n}")
    check_same_device(answer_scores=answer_scores, rationale_scores=rationale_scores)
    q2a = a_hat == _labels(answer_labels, "answer_labels", n, a_hat.device)
    qa2r = r_hat == _labels(rationale_labels, "rationale_labels", n, a_hat.device)
    joint = q2a & qa2r
    return VCRAccuracy(q2a, qa2r, joint, _mean(q2a), _mean(qa2r), _mean(joint))


SNLI_VE_CLASSES = ("entailment", "neutral", "contradiction")


class ClassAccuracy(NamedTuple):
    """Output of :func:`snli_ve_accuracy`."""

    accuracy: float
    per_class: dict[str, float]
    """Accuracy on the examples of each true class (its recall); NaN for a class with no example."""
    confusion: torch.Tensor
    """``(C, C)`` int64, ``confusion[true, predicted]``."""
    correct: torch.Tensor
    """``(N,)`` bool."""


def snli_ve_accuracy(
    scores: torch.Tensor, labels: torch.Tensor, class_names: Sequence[str] = SNLI_VE_CLASSES
) -> ClassAccuracy:
    """SNLI-VE 3-way accuracy (Xie et al. 2019) with per-class accuracy and the confusion matrix.

    .. math::
        \\mathrm{acc} = \\tfrac1N \\sum_n [\\hat y_n = y_n], \\qquad
        \\mathrm{acc}_c = \\frac{\\sum_n [\\hat y_n = y_n = c]}{\\sum_n [y_n = c]}

    Args:
        scores: ``(N, C)`` float class scores or ``(N,)`` int predicted classes.
        labels: ``(N,)`` int true classes in ``[0, C)``.
        class_names: names of the ``C`` classes in label order (default SNLI-VE's entailment, neutral,
            contradiction; pass yours if your label map differs).

    Returns:
        :class:`ClassAccuracy`.

    Raises:
        ValueError: wrong dtypes or ranks, length mismatches, a score width other than ``len(class_names)``,
            class names that repeat (or one string in place of a list), predictions or labels outside ``[0, C)``,
            or NaN/Inf scores.

    Note:
        Argmax with the lowest index among tied maxima. Overall accuracy over ``N = 0`` is NaN.

    Example:
        >>> snli_ve_accuracy(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0])).accuracy
        1.0
    """
    if isinstance(class_names, (str, bytes)):
        raise ValueError(f"class_names must be a sequence of names, got the string {class_names!r}")
    names = list(class_names)
    c = len(names)
    if c < 1:
        raise ValueError("class_names must name at least one class")
    if len(set(names)) != c:
        raise ValueError(f"class_names must be distinct (per_class is keyed by them), got {names}")
    pred = _predictions(scores, "scores", n_classes=c)
    n = pred.shape[0]
    y = _labels(labels, "labels", n, pred.device)
    # (Predictions are in range already: an argmax, or integers _predictions checked.)
    if n and (int(y.min()) < 0 or int(y.max()) >= c):
        raise ValueError(f"labels must lie in [0, {c}) for {c} classes")
    confusion = torch.bincount(y * c + pred, minlength=c * c).view(c, c)
    correct = pred == y
    per_true = confusion.sum(dim=1).double()
    diag = confusion.diagonal().double()
    per_class = {
        name: float(diag[k] / per_true[k]) if per_true[k] > 0 else float("nan") for k, name in enumerate(names)
    }
    return ClassAccuracy(_mean(correct), per_class, confusion, correct)


class VisDialMetrics(NamedTuple):
    """Output of :func:`visdial_metrics`. Rates are fractions (the VisDial starter code's ``retrieve()``)."""

    r1: float
    r5: float
    r10: float
    mrr: float
    mean_rank: float
    ndcg: float
    """Mean NDCG over the rounds with a non-zero relevance row (NaN if none)."""
    ranks: torch.Tensor
    """``scores.shape[:-1]`` int64 1-indexed rank of the ground-truth option of each round."""
    ndcg_per_round: torch.Tensor
    """``scores.shape[:-1]`` float64, NaN for rounds without relevance."""


def visdial_metrics(
    scores: torch.Tensor,
    gt_index: torch.Tensor,
    relevance: torch.Tensor | None = None,
    *,
    ties: str = "pessimistic",
) -> VisDialMetrics:
    """VisDial answer-ranking metrics: R@1/5/10, MRR, mean rank and NDCG (Das et al. 2017; VisDial v1.0).

    .. math::
        \\mathrm{rank}_b &= 1 + |\\{j \\ne g_b : s_{bj} > s_{bg_b}\\}| \\; (+\\,|\\{j \\ne g_b : s_{bj} = s_{bg_b}\\}|
            \\text{ pessimistic}) \\\\
        \\mathrm{NDCG}_b &= \\frac{\\sum_{k=1}^{K} \\mathrm{rel}_{b,\\pi(k)} / \\log_2(k+1)}
            {\\sum_{k=1}^{K} \\mathrm{rel}^{\\downarrow}_{b,k} / \\log_2(k+1)}, \\quad K = |\\{j : \\mathrm{rel}_{bj}
            \\ne 0\\}|

    ``pi`` orders the options by descending score, ``rel↓`` is the relevance sorted descending: NDCG over the top K
    with K the number of relevant options and the relevance itself as the gain, as the VisDial v1.0 evaluation.

    Args:
        scores: ``(..., C)`` float scores of the ``C`` candidate answers (100 in VisDial) of each round.
        gt_index: ``(...)`` int index of the ground-truth option of each round.
        relevance: optional ``(..., C)`` dense relevance (VisDial v1.0: fraction of annotators, in [0, 1]); rounds
            whose row is all zero (not annotated) are left out of NDCG.
        ties: ``"pessimistic"`` (default): options tied with the ground truth rank above it, so constant scores
            get rank C, not 1; ``"optimistic"``: ties rank below it.

    Returns:
        :class:`VisDialMetrics` (R@k, MRR as fractions; mean rank; mean NDCG; per-round ranks and NDCG).

    Raises:
        ValueError: wrong dtypes or shapes, a ground-truth index outside ``[0, C)``, negative relevance, NaN/Inf
            scores or relevance, or an unknown ``ties``.

    Note:
        Ranks come from ``vlkernels.ops.count_above`` (one pass, no sort; multithreaded C++ on CPU, CUDA kernel on
        GPU) with the ground-truth score read from the same tensor. NDCG sorts each round stably: options tied in
        score keep index order. fp16/bf16 scores are compared in fp32 (exact). Means over 0 rounds are NaN.

    Example:
        >>> m = visdial_metrics(torch.tensor([[0.1, 0.9, 0.5]]), torch.tensor([2]))
        >>> m.mean_rank, m.mrr
        (2.0, 0.5)
    """
    if ties not in ("pessimistic", "optimistic"):
        raise ValueError(f"ties must be 'pessimistic' or 'optimistic', got {ties!r}")
    check_tensor(scores, "scores", dtypes=FLOAT_DTYPES, min_ndim=1)
    check_tensor(gt_index, "gt_index", dtypes=_INT_DTYPES)
    check_same_device(scores=scores, gt_index=gt_index)
    if tuple(gt_index.shape) != tuple(scores.shape[:-1]):
        raise ValueError(
            f"gt_index must have shape {tuple(scores.shape[:-1])} (scores without the candidate axis), "
            f"got {tuple(gt_index.shape)}"
        )
    c = scores.shape[-1]
    if c == 0:
        raise ValueError(f"scores has no candidates (shape {tuple(scores.shape)})")
    check_finite(scores, "scores")
    s = scores.reshape(-1, c)
    s = (s if s.dtype in (torch.float32, torch.float64) else s.float()).contiguous()
    g = gt_index.reshape(-1).long()
    b = s.shape[0]
    if b and (int(g.min()) < 0 or int(g.max()) >= c):
        raise ValueError(f"gt_index must lie in [0, {c}) for {c} candidates")
    gt_score = s.gather(1, g.unsqueeze(1)).squeeze(1).contiguous()
    # Inclusive counting includes the ground truth itself, which is exactly the pessimistic 1 + above + ties.
    ranks = count_above(s, gt_score, inclusive=True) if ties == "pessimistic" else 1 + count_above(s, gt_score)
    rf = ranks.double()
    ndcg_rows = torch.full((b,), float("nan"), dtype=torch.float64, device=s.device)
    if relevance is not None:
        ndcg_rows = _ndcg(s, relevance, scores.shape)
    valid = ndcg_rows[~torch.isnan(ndcg_rows)]
    return VisDialMetrics(
        r1=_mean(rf <= 1),
        r5=_mean(rf <= 5),
        r10=_mean(rf <= 10),
        mrr=_mean(1.0 / rf),
        mean_rank=_mean(rf),
        ndcg=_mean(valid),
        ranks=ranks.view(scores.shape[:-1]),
        ndcg_per_round=ndcg_rows.view(scores.shape[:-1]),
    )


def _ndcg(s: torch.Tensor, relevance: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    check_tensor(relevance, "relevance", dtypes=FLOAT_DTYPES)
    check_same_device(scores=s, relevance=relevance)
    if tuple(relevance.shape) != tuple(shape):
        raise ValueError(f"relevance must have the shape of scores {tuple(shape)}, got {tuple(relevance.shape)}")
    check_finite(relevance, "relevance")
    rel = relevance.reshape(s.shape).double()
    if rel.numel() and bool((rel < 0).any()):
        raise ValueError("relevance must be non-negative")
    c = s.shape[1]
    k = (rel != 0).sum(dim=1, keepdim=True)
    discount = 1.0 / torch.log2(torch.arange(c, device=s.device, dtype=torch.float64) + 2.0)
    in_top_k = torch.arange(c, device=s.device).unsqueeze(0) < k
    order = torch.sort(s, dim=1, descending=True, stable=True).indices
    dcg = (rel.gather(1, order) * discount * in_top_k).sum(dim=1)
    ideal = (rel.sort(dim=1, descending=True).values * discount * in_top_k).sum(dim=1)
    return torch.where(k.squeeze(1) > 0, dcg / ideal.clamp_min(torch.finfo(torch.float64).tiny), float("nan"))
