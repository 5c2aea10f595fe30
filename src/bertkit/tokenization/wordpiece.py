"""BERT normalization, pre-tokenization and greedy WordPiece, done in whole-string C-level passes.

The pipeline reproduces `tokenizers`' ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece``
(the engine behind transformers' ``BertTokenizerFast``), offsets included:

1. *clean*: drop NUL, U+FFFD and "other" characters (Unicode C*: Cc, Cf, Cs, Co, Cn) except tab,
   CR and LF; map whitespace (tab, CR, LF and the Unicode ``White_Space`` characters) to a space;
2. *Chinese characters*: put spaces around CJK ideographs;
3. *strip accents* (default: same as ``lowercase``): NFD, then drop non-spacing marks (Mn);
4. *lowercase*: per character (so a final capital sigma becomes ``σ``, not ``ς``);
5. split on whitespace and on punctuation (ASCII symbols and Unicode P*);
6. WordPiece: greedy longest-match-first with ``##``; a word longer than
   ``max_input_chars_per_word`` characters, or one that cannot be matched, becomes ``[UNK]``.

Speed comes from three facts. Almost every character normalizes to exactly one character, so the
normalized text is ``text.lower()`` (ASCII) or one ``str.translate`` (anything else) and keeps the
original offsets; one compiled regex then cuts the words; and word -> ids goes through a bounded
dict cache whose ``__missing__`` runs WordPiece, so the hot loop is ``map`` + ``chain`` in C.
Texts holding a character that does *not* normalize 1:1 (a control character, a combining mark,
a Hangul syllable, ...) take an exact per-character path that keeps an alignment table.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from itertools import chain
from typing import Iterable

__all__ = ["Normalizer", "WordPiece", "is_chinese_char", "is_punctuation"]

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# Rust's char::is_whitespace (the Unicode White_Space property), minus the ones that are also
# control characters: those are removed by the cleaning step before whitespace is mapped.
_WHITESPACE = frozenset("\t\n\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                        "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def is_chinese_char(cp: int) -> bool:
    """Whether code point ``cp`` is a CJK ideograph in BERT's sense."""
    for lo, hi in _CJK_RANGES:
        if lo <= cp <= hi:
            return True
    return False


def is_punctuation(ch: str) -> bool:
    """BERT punctuation: any ASCII symbol, or Unicode category P*."""
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def _is_removed(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    cp = ord(ch)
    return cp == 0 or cp == 0xFFFD or unicodedata.category(ch)[0] == "C"


def _ranges_class(cps: Iterable[int]) -> str:
    """A regex character-class body for a sorted set of code points."""
    out = []
    cps = sorted(cps)
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = cps[i], cps[j]
        out.append(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
        i = j + 1
    return "".join(out)


def _build_split_re() -> re.Pattern:
    punct = [cp for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)).startswith("P")]
    punct += [ord(c) for c in _ASCII_PUNCT]
    cjk = "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _CJK_RANGES)
    single = _ranges_class(set(punct)) + cjk
    # Words are runs of anything that is not a separator, punctuation or CJK; punctuation and CJK
    # characters are words of their own. Only " \t\n\r" can be separators here: every other
    # whitespace character has been mapped to " " (or removed) before this regex runs.
    return re.compile(f"[^ \\t\\n\\r{single}]+|[{single}]")


_SPLIT_RE = _build_split_re()
_ASCII_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Normalizer:
    """BERT normalizer + pre-tokenizer: text -> words with their character offsets."""

    def __init__(self, lowercase: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True) -> None:
        self.lowercase = bool(lowercase)
        self.strip_accents = self.lowercase if strip_accents is None else bool(strip_accents)
        self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
        # char -> replacement, for characters that normalize to exactly one *other* character
        self._table: dict[int, str] = {}
        self._ok: set[str] = set()  # non-ASCII characters that normalize 1:1 (maybe to themselves)
        self._bad: dict[str, str] = {}  # characters that do not: char -> normalized string
        self._memo: dict[str, str] = {}  # any character -> normalized string (exact path)

    # -- per-character rules (run once per distinct character, then cached) ------------------
    def normalize_char(self, ch: str) -> str:
        """The normalized form of one character (may be empty or several characters)."""
        if _is_removed(ch):
            return ""
        if ch in _WHITESPACE:
            return " "
        cp = ord(ch)
        if self.tokenize_chinese_chars and is_chinese_char(cp):
            # CJK ideographs are split before accents are stripped, so they keep their identity
            # for pre-tokenization; NFD may still map a compatibility ideograph to its unified one.
            pass
        s = ch
        if self.strip_accents:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            s = "".join(c.lower() for c in s)
        return s

    def _classify(self, chars: Iterable[str]) -> None:
        for ch in chars:
            n = self.normalize_char(ch)
            if len(n) == 1:
                self._ok.add(ch)
                if n != ch:
                    self._table[ord(ch)] = n
            else:
                self._bad[ch] = n

    def _simple(self, text: str) -> str | None:
        """The normalized text when every character maps 1:1, else None."""
        if text.isascii():
            if _ASCII_CONTROL_RE.search(text) is not None:
                return None
            return text.lower() if self.lowercase else text
        chars = set(text)
        if not chars <= self._ok:
            self._classify(chars - self._ok - self._bad.keys())
            if not chars <= self._ok:
                return None
        return text.translate(self._table)

    def normalize_aligned(self, text: str) -> tuple[str, list[int]]:
        """Normalized text and, for each of its characters, the index of the source character."""
        memo = self._memo
        pieces = []
        align: list[int] = []
        for i, ch in enumerate(text):
            n = memo.get(ch)
            if n is None:
                n = memo[ch] = self.normalize_char(ch)
            if n:
                pieces.append(n)
                if len(n) == 1:
                    align.append(i)
                else:
                    align.extend([i] * len(n))
        return "".join(pieces), align

    def words(self, text: str) -> list[str]:
        """Normalized words of ``text`` (no offsets)."""
        norm = self._simple(text)
        if norm is None:
            norm = self.normalize_aligned(text)[0]
        return _SPLIT_RE.findall(norm)

    def words_with_offsets(self, text: str) -> tuple[list[str], list[tuple[int, int]], list[int] | None]:
        """Normalized words, their spans in the normalized text, and the alignment table
        (normalized index -> source index), or None when the two coincide."""
        norm = self._simple(text)
        align = None
        if norm is None:
            norm, align = self.normalize_aligned(text)
        matches = list(_SPLIT_RE.finditer(norm))
        return list(map(re.Match.group, matches)), list(map(re.Match.span, matches)), align


class _Cache(dict):
    """word -> tuple of ids; computes on a miss; cleared when it outgrows its bound."""

    __slots__ = ("fn", "limit")

    def __init__(self, fn, limit: int) -> None:
        super().__init__()
        self.fn = fn
        self.limit = limit

    def __missing__(self, word: str):
        if len(self) >= self.limit:
            self.clear()
        value = self.fn(word)
        self[word] = value
        return value


class WordPiece:
    """Greedy longest-match-first WordPiece over a vocabulary, with a bounded word cache."""

    def __init__(self, vocab: dict[str, int], unk_token: str = "[UNK]",
                 max_input_chars_per_word: int = 100, continuing_subword_prefix: str = "##",
                 cache_size: int = 500_000) -> None:
        self.vocab = vocab
        self.unk_token = unk_token
        self.unk_id = vocab.get(unk_token)
        self.max_input_chars_per_word = max_input_chars_per_word
        self.prefix = continuing_subword_prefix
        self.max_piece = max((len(t) for t in vocab), default=1)
        self._ids = _Cache(self._ids_of, cache_size)
        self._spans = _Cache(self._spans_of, cache_size)

    def split(self, word: str) -> list[tuple[str, int, int]]:
        """(piece, start, end) for one normalized word; [(unk, 0, len)] when it cannot be matched."""
        n = len(word)
        if n > self.max_input_chars_per_word:
            return [(self.unk_token, 0, n)]
        vocab = self.vocab
        prefix = self.prefix
        out = []
        start = 0
        while start < n:
            end = min(n, start + self.max_piece)
            piece = None
            while start < end:
                sub = word[start:end]
                if start > 0:
                    sub = prefix + sub
                if sub in vocab:
                    piece = sub
                    break
                end -= 1
            if piece is None:
                return [(self.unk_token, 0, n)]
            out.append((piece, start, end))
            start = end
        return out

    def _ids_of(self, word: str) -> tuple[int, ...]:
        vocab = self.vocab
        pieces = self.split(word)
        if self.unk_id is None and pieces and pieces[0][0] == self.unk_token:
            raise ValueError(f"word {word!r} cannot be tokenized and the vocabulary has no {self.unk_token!r}")
        return tuple(vocab[p] for p, _, _ in pieces)

    def _spans_of(self, word: str) -> tuple[tuple[int, int], ...]:
        return tuple((s, e) for _, s, e in self.split(word))

    def ids(self, words: list[str]) -> list[int]:
        """Flat ids of a list of normalized words (the hot path: all C-level)."""
        return list(chain.from_iterable(map(self._ids.__getitem__, words)))

    def word_ids(self, word: str) -> tuple[int, ...]:
        return self._ids[word]

    def word_spans(self, word: str) -> tuple[tuple[int, int], ...]:
        return self._spans[word]

    def tokens(self, word: str) -> list[str]:
        return [p for p, _, _ in self.split(word)]
