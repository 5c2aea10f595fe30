"""UnigramTrainer: learn a Unigram (SentencePiece-style) vocabulary, the algorithm of `tokenizers`'
``UnigramTrainer``, approximated.

Steps: (1) count the Metaspace pieces of each text after NFKC; (2) seed pieces: every character,
then the substrings (2 to ``max_piece_length`` characters) that occur at least twice among the
distinct pieces, by frequency x length; (3) EM: the expected count of each piece over all cuts of
every word (forward-backward), then a Bayesian M step (digamma) that drops pieces expected less than
0.5 times; (4) prune to ``shrinking_factor`` of the pieces by how much the corpus likelihood loses
when a piece must be spelled by the others, until 1.1 x ``vocab_size``; (5) keep the best scores.

Not exact: the Rust trainer seeds from the maximal repeats a suffix array enumerates and prunes with
an inverted index of the Viterbi cuts; tests/test_unigram_trainer.py measures how close this comes
(shared pieces and equal tokenizations on held-out text).
"""

from __future__ import annotations

import math
import os
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Iterable

from bertkit._text import decode_utf8

__all__ = ["UnigramTrainer"]

_SPACE = "\u2581"


def _digamma(x: float) -> float:
    """ψ(x) by recurrence to x >= 6, then the asymptotic series (as `tokenizers` computes it)."""
    result = 0.0
    while x < 6.0:
        result -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    t = f * (-1.0 / 12.0 + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0 + f * (-1.0 / 132.0)))))
    return result + math.log(x) - 0.5 / x + t


def _logsumexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


class UnigramTrainer:
    """Learn ``(piece, log probability)`` pairs for :class:`~bertkit.tokenization.UnigramTokenizer`."""

    def __init__(
        self,
        vocab_size: int = 8000,
        special_tokens: Iterable[str] = ("<unk>",),
        unk_token: str = "<unk>",
        max_piece_length: int = 16,
        shrinking_factor: float = 0.75,
        n_sub_iterations: int = 2,
        seed_size: int = 1_000_000,
    ) -> None:
        self.vocab_size = int(vocab_size)
        self.special_tokens = list(dict.fromkeys(special_tokens))
        self.unk_token = unk_token
        self.max_piece_length = max_piece_length
        self.shrinking_factor = shrinking_factor
        self.n_sub_iterations = n_sub_iterations
        self.seed_size = seed_size
        self.word_counts: Counter[str] = Counter()
        self.vocab: list[tuple[str, float]] = []

    def feed(self, texts: Iterable[str]) -> None:
        """Count the pieces of each text: NFKC, spaces as ``▁``, one prepended, split before each ``▁``."""
        for t in texts:
            text = unicodedata.normalize("NFKC", t).replace(" ", _SPACE)
            if not text:
                continue
            if text[0] != _SPACE:
                text = _SPACE + text
            parts = text.split(_SPACE)
            self.word_counts.update(_SPACE + p for p in parts[1:])

    def feed_files(self, files: Iterable[str | os.PathLike]) -> None:
        """Count each line of each file (UTF-8; a bad byte is named by file, line and offset)."""
        for p in map(Path, files):
            if not p.is_file():
                raise FileNotFoundError(f"corpus file not found: {p}")
            with open(p, "rb") as f:
                offset = 0
                for lineno, raw in enumerate(f, 1):
                    self.feed([decode_utf8(raw, p, lineno, offset).rstrip("\n")])
                    offset += len(raw)

    # ------------------------------------------------------------------ steps
    def _seeds(self) -> list[tuple[str, float]]:
        chars: Counter[str] = Counter()
        subs: Counter[str] = Counter()
        for w, c in self.word_counts.items():
            for ch in w:
                chars[ch] += c
            n = len(w)
            for i in range(n):
                for j in range(i + 2, min(n, i + self.max_piece_length) + 1):
                    subs[w[i:j]] += 1  # each distinct word once, as the Rust trainer's flat string
        seeds = sorted(((c, ch) for ch, c in chars.items()), reverse=True)
        ranked = sorted(((f * len(s), s) for s, f in subs.items() if f >= 2), reverse=True)
        out = [(ch, float(c)) for c, ch in seeds] + [(s, float(sc)) for sc, s in ranked[: self.seed_size]]
        total = math.log(sum(v for _, v in out))
        return [(p, math.log(v) - total) for p, v in out]

    def _lattice(self, word: str, table: dict[str, float], unk: float):
        """(start, end, piece or None for an unknown character, score) of every node of ``word``."""
        nodes = []
        n = len(word)
        for s in range(n):
            single = False
            for e in range(s + 1, min(n, s + self.max_piece_length) + 1):
                sc = table.get(word[s:e])
                if sc is not None:
                    nodes.append((s, e, word[s:e], sc))
                    single = single or e == s + 1
            if not single:
                nodes.append((s, s + 1, None, unk))
        return nodes

    def _e_step(self, pieces: list[tuple[str, float]]) -> dict[str, float]:
        table = dict(pieces)
        unk = min(v for _, v in pieces) - 10.0
        expected: dict[str, float] = dict.fromkeys(table, 0.0)
        for word, count in self.word_counts.items():
            nodes = self._lattice(word, table, unk)
            n = len(word)
            alpha = [-math.inf] * (n + 1)
            alpha[0] = 0.0
            for s, e, _, sc in sorted(nodes, key=lambda x: x[0]):
                alpha[e] = _logsumexp(alpha[e], alpha[s] + sc)
            beta = [-math.inf] * (n + 1)
            beta[n] = 0.0
            for s, e, _, sc in sorted(nodes, key=lambda x: -x[1]):
                beta[s] = _logsumexp(beta[s], beta[e] + sc)
            z = alpha[n]
            for s, e, p, sc in nodes:
                if p is not None:
                    expected[p] += count * math.exp(alpha[s] + sc + beta[e] - z)
        return expected

    def _m_step(self, pieces: list[tuple[str, float]], expected: dict[str, float]) -> list[tuple[str, float]]:
        kept = [(p, expected[p]) for p, _ in pieces if expected[p] >= 0.5 or len(p) == 1]
        logsum = _digamma(sum(f for _, f in kept))
        return [(p, _digamma(max(f, 1e-10)) - logsum) for p, f in kept]

    def _viterbi(self, word: str, table: dict[str, float], unk: float) -> list[str]:
        n = len(word)
        best: list[tuple[float, int, str] | None] = [None] * (n + 1)
        best[0] = (0.0, -1, "")
        for s in range(n):
            if best[s] is None:
                continue
            for e in range(s + 1, min(n, s + self.max_piece_length) + 1):
                sc = table.get(word[s:e], unk if e == s + 1 else None)
                if sc is not None and (best[e] is None or best[s][0] + sc > best[e][0]):
                    best[e] = (best[s][0] + sc, s, word[s:e])
        out, e = [], n
        while e > 0:
            _, s, p = best[e]
            out.append(p)
            e = s
        return out[::-1]

    def _prune(self, pieces: list[tuple[str, float]], target: int) -> list[tuple[str, float]]:
        table = dict(pieces)
        unk = min(table.values()) - 10.0
        freq: Counter[str] = Counter()
        for word, count in self.word_counts.items():
            for p in self._viterbi(word, table, unk):
                freq[p] += count
        loss: list[tuple[float, str]] = []
        for p, sc in pieces:
            if len(p) == 1:
                continue
            del table[p]  # the piece's best spelling by the others
            alt = self._viterbi(p, table, unk)
            loss.append((freq[p] * (sc - sum(table.get(a, unk) for a in alt)), p))
            table[p] = sc
        keep = {p for p, _ in pieces if len(p) == 1}
        for _, p in sorted(loss, reverse=True)[: max(target - len(keep), 0)]:
            keep.add(p)
        return [(p, s) for p, s in pieces if p in keep]

    def train(self, texts: Iterable[str] | None = None) -> list[tuple[str, float]]:
        """Count ``texts`` (if given) and learn; returns ``[(piece, log probability), ...]``, specials first."""
        if texts is not None:
            self.feed(texts)
        if not self.word_counts:
            raise ValueError("no words to train on: the corpus is empty")
        pieces = self._seeds()
        desired = self.vocab_size * 11 // 10
        while True:
            for _ in range(self.n_sub_iterations):
                pieces = self._m_step(pieces, self._e_step(pieces))
            if len(pieces) <= desired:
                break
            pieces = self._prune(pieces, max(int(len(pieces) * self.shrinking_factor), desired))
        room = self.vocab_size - len(self.special_tokens)
        chars = [x for x in pieces if len(x[0]) == 1]
        rest = sorted((x for x in pieces if len(x[0]) > 1), key=lambda x: -x[1])[: max(room - len(chars), 0)]
        final = sorted(chars + rest, key=lambda x: -x[1])
        self.vocab = [(t, 0.0) for t in self.special_tokens] + final
        return self.vocab

    def tokenizer(self, **kwargs):
        """A :class:`UnigramTokenizer` over the learned pieces (NFKC, Metaspace), specials as added tokens."""
        from .unigram import UnigramTokenizer

        if not self.vocab:
            raise ValueError("call train() first")
        unk = next((i for i, (t, _) in enumerate(self.vocab) if t == self.unk_token), None)
        specials = [{"id": i, "content": t, "special": True} for i, t in enumerate(self.special_tokens)]
        return UnigramTokenizer(
            vocab=self.vocab,
            unk_id=unk,
            normalizer={"type": "NFKC"},
            added_tokens_decoder={s["id"]: s for s in specials},
            **kwargs,
        )
