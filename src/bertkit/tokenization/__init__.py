"""bertkit.tokenization: WordPiece, byte-level BPE and Unigram tokenization in pure Python (no torch import here).

- :class:`BertTokenizer`: transformers-compatible tokenizer (parity with ``BertTokenizerFast``).
- :class:`BatchEncoding`: what the tokenizer returns; a dict, so ``model(**enc)`` works.
- :class:`WordPieceTrainer`: learn a WordPiece vocabulary from raw text.

Fast path for big corpora: ``BertTokenizer.encode_batch_ids(texts) -> list[list[int]]`` (no
special tokens, no padding); ``tokenizer(texts, add_special_tokens=False)["input_ids"]`` gives
the same ids with a little more bookkeeping.
"""

from __future__ import annotations

from .bpe import (
    ByteLevelBPETokenizer,
    GPT2Tokenizer,
    GPT2TokenizerFast,
    RobertaTokenizer,
    RobertaTokenizerFast,
)
from .encoding import BatchEncoding
from .tokenizer import BertTokenizer, load_tokenizer, load_vocab
from .unigram import UnigramTokenizer, XLMRobertaTokenizer, XLMRobertaTokenizerFast

# transformers code often names the fast class; bertkit has one class that answers both
BertTokenizerFast = BertTokenizer

__all__ = [
    "BatchEncoding",
    "BertTokenizer",
    "BertTokenizerFast",
    "ByteLevelBPETokenizer",
    "GPT2Tokenizer",
    "GPT2TokenizerFast",
    "RobertaTokenizer",
    "RobertaTokenizerFast",
    "UnigramTokenizer",
    "WordPieceTrainer",
    "XLMRobertaTokenizer",
    "XLMRobertaTokenizerFast",
    "load_tokenizer",
    "load_vocab",
]


def __getattr__(name: str):
    if name == "WordPieceTrainer":
        from .vocab_trainer import WordPieceTrainer

        return WordPieceTrainer
    raise AttributeError(f"module 'bertkit.tokenization' has no attribute {name!r}")
