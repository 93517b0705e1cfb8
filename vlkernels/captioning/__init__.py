"""Caption metrics: PTB tokenization without Java, CIDEr-D / CIDEr, BLEU, ROUGE-L equal to pycocoevalcap,
SCST rewards, COCO-format evaluation and a stateful metric for training loops."""

from vlkernels.captioning.cider import Cider, CiderD, CiderOriginal
from vlkernels.captioning.cider_metric import CiderMetric
from vlkernels.captioning.evaluate import evaluate_captions
from vlkernels.captioning.metrics import Bleu, Rouge
from vlkernels.captioning.tokenizer import PTBTokenizer, ptb_tokenize

__all__ = [
    "Bleu",
    "Cider",
    "CiderD",
    "CiderMetric",
    "CiderOriginal",
    "PTBTokenizer",
    "Rouge",
    "evaluate_captions",
    "ptb_tokenize",
]
