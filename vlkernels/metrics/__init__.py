"""Task metrics from embeddings, scores and answers: SigLIP/CLIP score, VQA accuracy, Winoground-style group
accuracy, Probe-R margins, VCR / SNLI-VE / VisDial multiple-choice and ranking metrics."""

from vlkernels.metrics.choice import (
    SNLI_VE_CLASSES,
    ClassAccuracy,
    GroupAccuracy,
    PairwiseMargin,
    VCRAccuracy,
    VisDialMetrics,
    group_accuracy,
    pairwise_margin,
    snli_ve_accuracy,
    vcr_accuracy,
    visdial_metrics,
)
from vlkernels.metrics.similarity import ClipScore, clip_score, siglip_score
from vlkernels.metrics.vqa import VQAResult, normalize_answer, vqa_accuracy, vqa_evaluate

__all__ = [
    "SNLI_VE_CLASSES",
    "ClassAccuracy",
    "ClipScore",
    "GroupAccuracy",
    "PairwiseMargin",
    "VCRAccuracy",
    "VQAResult",
    "VisDialMetrics",
    "clip_score",
    "group_accuracy",
    "normalize_answer",
    "pairwise_margin",
    "siglip_score",
    "snli_ve_accuracy",
    "vcr_accuracy",
    "visdial_metrics",
    "vqa_accuracy",
    "vqa_evaluate",
]
