"""Caption metrics: CIDEr-D / CIDEr, BLEU, ROUGE-L equal to pycocoevalcap, SCST rewards, COCO evaluation."""

from __future__ import annotations

from vlkernels.captioning.cider import Cider, CiderD, CiderOriginal
from vlkernels.captioning.evaluate import evaluate_captions
from vlkernels.captioning.metrics import Bleu, Rouge

__all__ = ["Bleu", "Cider", "CiderD", "CiderOriginal", "Rouge", "evaluate_captions"]

try:  # the C++ PTB tokenizer lands from its own branch; the package works before it does
    from vlkernels.captioning.tokenizer import PTBTokenizer, ptb_tokenize

    __all__ += ["PTBTokenizer", "ptb_tokenize"]
except ImportError:
    pass
