"""ByteLevelBPETrainer: learn a byte-level BPE vocabulary and merges as `tokenizers`' ``BpeTrainer`` does
with a ``ByteLevel`` pre-tokenizer and the byte alphabet.

Steps, each as the Rust trainer takes it: (1) count GPT-2's pre-token pieces of each text, written in
GPT-2's byte table; (2) the vocabulary starts with the special tokens, then the 256 byte characters
and every other character seen, in code-point order; (3) repeatedly merge the most frequent
adjacent pair (ties: the pair of lower ids), the merged token getting the next id, until the
vocabulary is full or the best pair occurs fewer than ``min_frequency`` times. The counting and
merging are the WordPiece trainer's (the same algorithm without the ``##`` prefix).
"""

from __future__ import annotations

import heapq
import os
from collections import Counter
from pathlib import Path
from typing import Iterable

from bertkit._text import decode_utf8

from .byte_level import byte_to_char, gpt2_split
from .vocab_trainer import WordPieceTrainer, _bar, _count_pairs, _merge_pair

__all__ = ["ByteLevelBPETrainer"]


class _Pieces:
    """Stands in for the WordPiece trainer's normalizer: ``words(text)`` gives GPT-2's pieces."""

    def __init__(self) -> None:
        self._findall = gpt2_split()
        table = byte_to_char()
        self._table = {i: table[i] for i in range(256)}

    def words(self, text: str) -> list[str]:
        return self._findall(text)

    def to_bytes(self, piece: str) -> str:
        table = self._table
        return "".join([table[b] for b in piece.encode("utf-8")])


class ByteLevelBPETrainer(WordPieceTrainer):
    """Learn ``vocab.json`` + ``merges.txt`` for byte-level BPE from text files or an iterator of texts.

    >>> trainer = ByteLevelBPETrainer(vocab_size=8000, special_tokens=["<s>", "<pad>"])  # doctest: +SKIP
    >>> trainer.train(texts=lines)                                                      # doctest: +SKIP
    >>> trainer.save("out/")                                                            # doctest: +SKIP
    """

    def __init__(
        self,
        vocab_size: int = 30000,
        min_frequency: int = 0,
        special_tokens: Iterable[str] = (),
        show_progress: bool = True,
    ) -> None:
        super().__init__(
            vocab_size=vocab_size,
            min_frequency=max(min_frequency, 1),
            lowercase=False,
            special_tokens=list(special_tokens),
            show_progress=show_progress,
        )
        self.normalizer = _Pieces()  # type: ignore[assignment]
        self.merges: list[tuple[str, str]] = []

    def feed(self, texts: Iterable[str], chunk_chars: int = 1 << 20) -> None:
        """Count the pieces of each text on its own (joining texts would make pieces across them)."""
        counts = self.word_counts
        words = self.normalizer.words
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"texts must be str, got {type(t).__name__}")
            counts.update(words(t))

    def feed_files(self, files: Iterable[str | os.PathLike]) -> None:
        """Count the pieces of each line of each file (UTF-8), newline included, as the Rust trainer
        reads files; a bad byte is named by file, line and offset."""
        paths = [Path(f) for f in files]
        for p in paths:
            if not p.is_file():
                raise FileNotFoundError(f"corpus file not found: {p}")
        total = sum(p.stat().st_size for p in paths)
        bar = _bar(total=total, unit="B", unit_scale=True, desc="counting pieces", disable=not self.show_progress)
        counts, words = self.word_counts, self.normalizer.words
        try:
            for p in paths:
                with open(p, "rb") as f:
                    offset = 0
                    for lineno, raw in enumerate(f, 1):
                        counts.update(words(decode_utf8(raw, p, lineno, offset)))
                        offset += len(raw)
                        bar.update(len(raw))
        finally:
            bar.close()

    def _learn(self) -> list[str]:
        to_bytes = self.normalizer.to_bytes
        byte_counts: Counter[str] = Counter()
        for piece, c in self.word_counts.items():
            byte_counts[to_bytes(piece)] += c
        vocab: list[str] = list(self.special_tokens)
        index: dict[str, int] = {t: i for i, t in enumerate(vocab)}

        def add(tok: str) -> int:
            i = index.get(tok)
            if i is None:
                i = index[tok] = len(vocab)
                vocab.append(tok)
            return i

        alphabet = set(byte_to_char()) | {ch for w in byte_counts for ch in w}
        for ch in sorted(alphabet):
            add(ch)
        items = sorted(byte_counts.items())
        words = [[index[ch] for ch in w] for w, _ in items]
        counts = [c for _, c in items]
        self.merges = []
        if len(vocab) >= self.vocab_size:
            return vocab
        pair_counts, where = _count_pairs(words, counts)
        heap = [(-c, p) for p, c in pair_counts.items()]
        heapq.heapify(heap)
        bar = _bar(total=self.vocab_size - len(vocab), desc="merging", disable=not self.show_progress)
        try:
            while len(vocab) < self.vocab_size and heap:
                negc, pair = heapq.heappop(heap)
                cur = pair_counts.get(pair, 0)
                if cur != -negc:
                    if cur > 0:
                        heapq.heappush(heap, (-cur, pair))
                    continue
                if cur < self.min_frequency:
                    break
                left, right = vocab[pair[0]], vocab[pair[1]]
                n_before = len(vocab)
                new = add(left + right)
                bar.update(len(vocab) - n_before)
                self.merges.append((left, right))
                for p, d in _merge_pair(words, counts, where, pair, new).items():
                    v = pair_counts.get(p, 0) + d
                    if v > 0:
                        pair_counts[p] = v
                        if d > 0:
                            heapq.heappush(heap, (-v, p))
                    else:
                        pair_counts.pop(p, None)
                pair_counts.pop(pair, None)
        finally:
            bar.close()
        return vocab

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``vocab.json`` and ``merges.txt`` (and ``tokenizer.json``) into the folder ``path``."""
        if not self.vocab:
            raise ValueError("nothing to save: call train() first")
        self.tokenizer().save_pretrained(path)
        from .._io import atomic_write_json, atomic_write_text

        out = Path(path)
        atomic_write_json(out / "vocab.json", {t: i for i, t in enumerate(self.vocab)})
        atomic_write_text(out / "merges.txt", "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in self.merges))
        return out

    def tokenizer(self, **kwargs):
        """A :class:`ByteLevelBPETokenizer` over the learned vocabulary and merges, specials as added tokens."""
        from .bpe import ByteLevelBPETokenizer

        if not self.vocab:
            raise ValueError("call train() first")
        vocab = {t: i for i, t in enumerate(self.vocab)}
        tok = ByteLevelBPETokenizer(vocab=vocab, merges=self.merges, **kwargs)
        tok.add_special_tokens({"additional_special_tokens": list(self.special_tokens)})
        return tok
