"""Caption evaluation: PTB tokenization (and, in the captioning branch, CIDEr/BLEU/ROUGE scorers)."""

from vlkernels.captioning.tokenizer import PTBTokenizer, ptb_tokenize

__all__ = ["PTBTokenizer", "ptb_tokenize"]
