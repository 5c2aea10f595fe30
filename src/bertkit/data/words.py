"""Word boundaries for whole-word masking, computed once when a corpus is prepared.

Each token gets a word-start flag (stored as ``shard-NNNNN.words.bin``, one byte per token, next to
the token ids). A token *continues* the word before it when

* it is a WordPiece continuation piece (``##...``), or
* it is a CJK character and the CJK character just before it lies in the same word of a Chinese
  word segmenter (jieba, the optional ``[zh]`` extra).

Every other token starts a word. bert-base-chinese style vocabularies split Chinese into single
characters, so without a segmenter "whole words" would be single characters; with it, the
characters of 北京 or 调查报告 are masked together, as in Chinese BERT-wwm. Text that contains no
CJK character never goes through jieba, so English (and the English words of mixed text) keep
their ``##`` grouping, and English corpora need no extra installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bertkit.tokenization.wordpiece import CJK_CHAR_RE as _CJK

__all__ = ["load_jieba", "segment_chinese", "word_start_encoder"]


def load_jieba() -> Any:
    """Import jieba (quietly), or raise ImportError naming the extra that installs it."""
    from bertkit._extras import require

    jieba = require("jieba", "zh", "whole-word masking of Chinese text (word segmentation)")
    import logging

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict..." chatter on every run
    return jieba


def segment_chinese(text: str) -> list[str]:
    """jieba's default segmentation of ``text`` (the words concatenate back to ``text``)."""
    return load_jieba().lcut(text)


def _cjk_word_starts(
    text: str, ids: Sequence[int], offsets: Sequence[tuple[int, int]], continuation: np.ndarray
) -> np.ndarray:
    words = segment_chinese(text)
    word_of = np.empty(len(text), np.int64)
    pos = 0
    for k, w in enumerate(words):
        word_of[pos : pos + len(w)] = k
        pos += len(w)
    if pos != len(text):  # the segmenter dropped or added characters: trust WordPiece only
        return ~continuation[np.asarray(ids, np.int64)]
    starts = np.ones(len(ids), bool)
    prev_word = -1  # jieba word of the previous token when it is a CJK character, else -1
    for k, (tid, (s, e)) in enumerate(zip(ids, offsets)):
        if e - s == 1 and _CJK.match(text, s):
            w = int(word_of[s])
            starts[k] = w != prev_word
            prev_word = w
        else:
            starts[k] = not continuation[tid]
            prev_word = -1
    return starts


def word_start_encoder(
    tokenizer: Any, vocab_tokens: Sequence[str]
) -> Callable[[list[str]], tuple[list[list[int]], list[np.ndarray]]]:
    """``texts -> (ids per text, word-start flags per text)`` without special tokens (module docs)."""
    continuation = np.fromiter((t.startswith("##") for t in vocab_tokens), bool, len(vocab_tokens))
    fast = getattr(tokenizer, "encode_batch_ids", None)

    def encode(texts: list[str]) -> tuple[list[list[int]], list[np.ndarray]]:
        if callable(fast):
            ids = [list(x) for x in fast(texts)]
        else:
            ids = [list(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        starts = [~continuation[np.asarray(x, np.int64)] if x else np.zeros(0, bool) for x in ids]
        cjk = [i for i, t in enumerate(texts) if _CJK.search(t)]
        if cjk:
            load_jieba()  # fail early, with the install hint, before any segmenting
            enc = tokenizer([texts[i] for i in cjk], add_special_tokens=False, return_offsets_mapping=True)
            for j, i in enumerate(cjk):
                if list(enc["input_ids"][j]) != ids[i]:
                    raise RuntimeError("tokenizer gave different ids with and without offsets")
                starts[i] = _cjk_word_starts(texts[i], ids[i], enc["offset_mapping"][j], continuation)
        return ids, starts

    return encode
