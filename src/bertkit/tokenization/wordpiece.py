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
import unicodedata
from bisect import bisect_right
from itertools import accumulate, chain, repeat
from operator import sub
from typing import Iterable

from . import _unicode_data as _ud

__all__ = ["Normalizer", "WordPiece", "is_chinese_char", "is_punctuation"]

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    # The slow Python BertTokenizer says 0x2B820 here; tokenizers (BertTokenizerFast) says 0x2B920,
    # so U+2B820..U+2B91F are ordinary letters for it. bertkit matches the Fast one.
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# One CJK ideograph (the ranges above), for scanning whole strings without a per-character loop.
CJK_CHAR_RE = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]")

# Rust's char::is_whitespace (the Unicode White_Space property), minus the ones that are also
# control characters: those are removed by the cleaning step before whitespace is mapped.
_WHITESPACE = frozenset(
    "\t\n\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def is_chinese_char(cp: int) -> bool:
    """Whether code point ``cp`` is a CJK ideograph in BERT's sense."""
    for lo, hi in _CJK_RANGES:
        if lo <= cp <= hi:
            return True
    return False


class _RangeSet:
    """Membership in sorted inclusive code point ranges (bisect; no million-entry set)."""

    def __init__(self, ranges: tuple[tuple[int, int], ...]) -> None:
        self.ranges = ranges
        self.starts = [lo for lo, _ in ranges]

    def __contains__(self, ch: str) -> bool:
        cp = ord(ch)
        i = bisect_right(self.starts, cp) - 1
        return i >= 0 and cp <= self.ranges[i][1]


# The reference's own (older) Unicode tables; see _unicode_data.py.
_REMOVED = _RangeSet(_ud.REMOVED)
_MARKS = _RangeSet(_ud.MARKS)
_PUNCT = _RangeSet(_ud.PUNCT)
_NO_NFD = _RangeSet(_ud.NO_NFD)
_CCC_UNKNOWN = _RangeSet(_ud.CCC_UNKNOWN)


def _ccc(c: str) -> int:
    """Canonical combining class as the reference's NFD knows it."""
    k = unicodedata.combining(c)
    return 0 if k and c in _CCC_UNKNOWN else k


def is_punctuation(ch: str) -> bool:
    """BERT punctuation: ASCII symbols and Unicode P* (as the reference's tables define it)."""
    return ch in _PUNCT


def _is_removed(ch: str) -> bool:
    # lone surrogates (category Cs) cannot reach the reference (not UTF-8); drop them like Cs
    return ch in _REMOVED or "\ud800" <= ch <= "\udfff"


def _class_body(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges
    )


def _build_split_re(limit: int = 0x10FFFF) -> re.Pattern:
    def clip(ranges):
        return [(lo, min(hi, limit)) for lo, hi in ranges if lo <= limit]

    single = _class_body(clip(_ud.PUNCT)) + _class_body(clip(_CJK_RANGES))
    # Words are runs of anything that is not a separator, punctuation or CJK; punctuation and CJK
    # characters are words of their own. Only " \t\n\r" can be separators here: every other
    # whitespace character has been mapped to " " (or removed) before this regex runs.
    return re.compile(f"[^ \\t\\n\\r{single}]+|[{single}]")


def _with_gaps(rx: re.Pattern) -> re.Pattern:
    # each word with the separators before it: findall then gives positions by running sums,
    # without creating a Match object (or a group tuple) per word
    return re.compile(f"[ \\t\\n\\r]*(?:{rx.pattern})")


_SPLIT_RE = _build_split_re()
# re keeps characters above U+FFFF in a class as a list of ranges that every character is
# checked against, so text without such characters gets a regex without them (~3x faster).
_BMP_SPLIT_RE = _build_split_re(0xFFFF)
_ASCII_SPLIT_RE = _build_split_re(0x7F)
_GAPS = {rx: _with_gaps(rx) for rx in (_SPLIT_RE, _BMP_SPLIT_RE, _ASCII_SPLIT_RE)}
_ASCII_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Normalizer:
    """BERT normalizer + pre-tokenizer: text -> words with their character offsets."""

    def __init__(
        self, lowercase: bool = True, strip_accents: bool | None = None, tokenize_chinese_chars: bool = True
    ) -> None:
        self.lowercase = bool(lowercase)
        self.strip_accents = self.lowercase if strip_accents is None else bool(strip_accents)
        self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
        # char -> replacement, for characters that normalize to exactly one *other* character
        self._table: dict[int, str] = {}
        self._ok: set[str] = set()  # non-ASCII characters that normalize 1:1 (maybe to themselves)
        self._bad: dict[str, str] = {}  # characters that do not: char -> normalized string
        self._memo: dict[str, str] = {}  # any character -> normalized string (exact path)
        self._decomp: dict[str, str] = {}  # any character -> cleaned NFD (exact path, stripping)
        self._post: dict[str, str] = {}  # decomposed character -> final string (exact path, stripping)

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
            if ch not in _NO_NFD:
                s = unicodedata.normalize("NFD", s)
            s = "".join(c for c in s if c not in _MARKS)
        if self.lowercase:
            s = "".join(map(self._lower, s))
        return s

    def _classify(self, chars: Iterable[str]) -> None:
        for ch in chars:
            n = self.normalize_char(ch)
            # The fast path picks its splitting regex from the source characters: one that
            # normalizes from the BMP to beyond it (seven CJK compatibility ideographs, e.g. U+FA6C
            # -> U+242EE under NFD) would be split by the BMP-only regex as a letter, not as the
            # CJK character it becomes. The exact path picks the regex from the normalized text.
            astral = n > "\uffff" >= ch
            if len(n) == 1 and not astral and not (self.strip_accents and self._kept_combining(ch)):
                self._ok.add(ch)
                if n != ch:
                    self._table[ord(ch)] = n
            else:
                self._bad[ch] = n

    def _kept_combining(self, ch: str) -> bool:
        # a combining character that survives stripping can be reordered past its neighbours
        # by NFD, which only the exact path reproduces
        return any(_ccc(c) and c not in _MARKS for c in self._decompose(ch))

    def _simple(self, text: str) -> tuple[str, re.Pattern] | None:
        """The normalized text and the splitting regex for it when every character maps 1:1,
        else None."""
        if text.isascii():
            if _ASCII_CONTROL_RE.search(text) is not None:
                return None
            return (text.lower() if self.lowercase else text), _ASCII_SPLIT_RE
        chars = set(text)
        if not chars <= self._ok:
            self._classify(chars - self._ok - self._bad.keys())
            if not chars <= self._ok:
                return None
        return text.translate(self._table), (_BMP_SPLIT_RE if max(chars) <= "\uffff" else _SPLIT_RE)

    def _normalized(self, text: str) -> tuple[str, re.Pattern, list[int] | None]:
        got = self._simple(text)
        if got is not None:
            return got[0], got[1], None
        norm, align = self.normalize_aligned(text)
        return norm, (_BMP_SPLIT_RE if not norm or max(norm) <= "\uffff" else _SPLIT_RE), align

    def normalize_aligned(self, text: str) -> tuple[str, list[int]]:
        """Normalized text and, for each of its characters, the index of the source character.

        The exact path. With accent stripping it runs the reference's stages in order: clean, NFD
        with canonical reordering of combining marks (alignments stay *positional*, as in
        tokenizers' NormalizedString), drop non-spacing marks, lowercase.
        """
        if not self.strip_accents:
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
        decomp = self._decomp
        chars: list[str] = []
        consumes: list[bool] = []  # first character of a decomposition (vs one it inserted)
        origins: list[int] = []  # source index of each character that survived cleaning
        for i, ch in enumerate(text):
            d = decomp.get(ch)
            if d is None:
                d = decomp[ch] = self._decompose(ch)
            if d:
                origins.append(i)
                chars.extend(d)
                consumes.append(True)
                if len(d) > 1:
                    consumes.extend([False] * (len(d) - 1))
        comb = _ccc
        k, n = 0, len(chars)
        while k < n:
            if comb(chars[k]):
                j = k + 1
                while j < n and comb(chars[j]):
                    j += 1
                if j - k > 1:
                    # canonical ordering (stable by combining class); whether a character consumes a
                    # source character travels with it, as in the reference's NFD with alignments
                    run = sorted(zip(chars[k:j], consumes[k:j]), key=lambda t: comb(t[0]))
                    chars[k:j] = [c for c, _ in run]
                    consumes[k:j] = [f for _, f in run]
                k = j
            else:
                k += 1
        align = []
        src = iter(origins)
        prev = 0
        for f in consumes:
            if f:
                prev = next(src)
            align.append(prev)
        post = self._post
        pieces = []
        out_align: list[int] = []
        for c, i in zip(chars, align):
            m = post.get(c)
            if m is None:
                m = post[c] = "" if c in _MARKS else (self._lower(c) if self.lowercase else c)
            if m:
                pieces.append(m)
                if len(m) == 1:
                    out_align.append(i)
                else:
                    out_align.extend([i] * len(m))
        return "".join(pieces), out_align

    @staticmethod
    def _lower(c: str) -> str:
        return _ud.LOWER.get(ord(c)) or c.lower()

    @staticmethod
    def _decompose(ch: str) -> str:
        """Clean + NFD of one character (before marks are dropped)."""
        if _is_removed(ch):
            return ""
        if ch in _WHITESPACE:
            return " "
        if ch in _NO_NFD:
            return ch
        return unicodedata.normalize("NFD", ch)

    def words(self, text: str) -> list[str]:
        """Normalized words of ``text`` (no offsets)."""
        norm, rx, _ = self._normalized(text)
        return rx.findall(norm)

    def words_with_offsets(self, text: str) -> tuple[list[str], list[int], list[int], list[int] | None]:
        """Normalized words, their start and end in the normalized text, and the alignment table
        (normalized index -> source index), or None when the two coincide."""
        norm, rx, align = self._normalized(text)
        found = _GAPS[rx].findall(norm)
        words = list(map(str.lstrip, found, repeat(" \t\n\r")))
        ends = list(accumulate(map(len, found)))
        starts = list(map(sub, ends, map(len, words)))
        return words, starts, ends, align


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

    def __init__(
        self,
        vocab: dict[str, int],
        unk_token: str = "[UNK]",
        max_input_chars_per_word: int = 100,
        continuing_subword_prefix: str = "##",
        cache_size: int = 500_000,
    ) -> None:
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
