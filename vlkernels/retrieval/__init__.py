"""Retrieval: exact streaming rank metrics (R@K, MeanR, MedianR, MRR, mAP, mAP@R, R-Precision, NDCG) for image-text
retrieval in both directions, and top-K search with exclusions, without the N x M score matrix."""

from vlkernels.retrieval.functional import RetrievalResult, evaluate, rank_metrics, topk
from vlkernels.retrieval.io import Embeddings
from vlkernels.retrieval.metrics import Ranks, metrics_from_ranks
from vlkernels.retrieval.positives import Positives
from vlkernels.retrieval.stateful import RetrievalMetric
from vlkernels.retrieval.stream import evaluate_stream

__all__ = [
    "Embeddings",
    "Positives",
    "Ranks",
    "RetrievalMetric",
    "RetrievalResult",
    "evaluate",
    "evaluate_stream",
    "metrics_from_ranks",
    "rank_metrics",
    "topk",
]
