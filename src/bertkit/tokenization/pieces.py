"""What the byte-level BPE and Unigram tokenizers share: a text encoded through the subclass's own
``_ids(text)`` (ids alone, the fast path) and ``_encode_details(text, word, ids, offsets, words)``
(ids with offsets and word indices, appended in place)."""

from __future__ import annotations

from typing import Sequence

from .base import TokenizerBase
from .truncation import _Seq

__all__ = ["PieceTokenizer"]


class PieceTokenizer(TokenizerBase):
    """A tokenizer whose model splits pre-tokenized pieces (BPE, Unigram) rather than WordPiece's words."""

    def _ids(self, text: str) -> list[int]:
        raise NotImplementedError

    def _encode_details(self, text: str, w: int, ids: list, offsets: list | None, words: list | None) -> int:
        raise NotImplementedError

    def _encode_seq(
        self, text: str | Sequence[str], details: bool, split_words: bool = False, words: bool = True
    ) -> _Seq:
        if split_words:
            if isinstance(text, str) or not all(isinstance(t, str) for t in text):
                raise TypeError(
                    f"with is_split_into_words=True each input must be a list of str, got {type(text).__name__}"
                )
            ids: list[int] = []
            offsets: list = []
            wids: list = []
            for i, word in enumerate(text):
                n0 = len(wids)
                self._encode_details(word, 0, ids, offsets, wids)
                wids[n0:] = [i] * (len(wids) - n0)
            return _Seq(ids, offsets, wids)
        text = self._check_text(text)
        if not details:
            return _Seq(self._ids(text))
        ids, offsets = [], []
        wids = [] if words else None  # None: word ids are computed when BatchEncoding asks for them
        self._encode_details(text, 0, ids, offsets, wids)
        return _Seq(ids, offsets, wids)
