"""Byte-level BPE as GPT-2, RoBERTa and ModernBERT use it: the pre-tokenizer, the merges, the decoder.

A text is cut by GPT-2's pattern into pieces (words with their leading space, numbers, runs of
punctuation, whitespace); each piece's UTF-8 bytes are written as printable characters (GPT-2's
byte table), and BPE merges them by rank. Every piece's ids and character spans are cached, so
common words cost one dict lookup: that cache is most of the speed.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any, Callable

# Unicode's White_Space property: what the Rust tokenizers' regex engine calls \s
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


@lru_cache(maxsize=1)
def byte_to_char() -> tuple[str, ...]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the
    rest (controls, space, soft hyphen...) are moved to U+0100 onwards."""
    keep = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return tuple(out)


@lru_cache(maxsize=1)
def char_to_byte() -> dict[str, int]:
    return {c: b for b, c in enumerate(byte_to_char())}


def _ranges(codes: list[int]) -> str:
    """A regex character-class body for sorted code points, as ranges."""
    out = []
    i = 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        a, b = codes[i], codes[j]
        out.append(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}")
        i = j + 1
    return "".join(out)


@lru_cache(maxsize=2)
def _gpt2_regex(limit: int) -> re.Pattern:
    """GPT-2's pattern with its classes written out for the code points below ``limit``."""
    letters, numbers = [], []
    for cp in range(limit):
        cat = unicodedata.category(chr(cp))
        if cat[0] == "L":
            letters.append(cp)
        elif cat[0] == "N":
            numbers.append(cp)
    L, N, S = _ranges(letters), _ranges(numbers), _WHITE_SPACE
    return re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+")


def gpt2_pattern() -> re.Pattern:
    """GPT-2's pre-tokenizer pattern for Python's ``re``: ``\\p{L}`` and ``\\p{N}`` become the Unicode
    letter and number categories written out, ``\\s`` the White_Space property (``re``'s own
    classes differ: ``\\w`` has no category split and ``\\s`` takes the separators U+001C..U+001F)."""
    return _gpt2_regex(0x110000)


_ASTRAL = "\U00010000"


@lru_cache(maxsize=1)
def gpt2_split() -> Callable[[str], list[str]]:
    """``text`` -> its GPT-2 pieces, as ``gpt2_pattern().findall`` gives them, about 4x faster on text
    with no character above U+FFFF (nearly all text). ``re`` keeps a class's characters above U+FFFF
    as a list of ranges that every failed test walks; without them the classes are one table lookup."""
    bmp = _gpt2_regex(0x10000).findall

    def split(text: str) -> list[str]:
        if text.isascii() or max(text) < _ASTRAL:
            return bmp(text)
        return gpt2_pattern().findall(text)

    return split


_NO_MERGE = 1 << 62  # the rank of a pair that no merge joins


class _Cache(dict):
    """piece -> value, computed on first use (``dict.__getitem__`` stays in C for the hits)."""

    __slots__ = ("fill",)

    def __missing__(self, key: str):
        if len(self) > 1_000_000:  # a bound for endless distinct pieces; common ones come back at once
            self.clear()
        value = self[key] = self.fill(key)
        return value


class ByteLevelBPE:
    """BPE over GPT-2's byte alphabet with the ranks of ``merges`` (``(left, right)`` pairs, best first).

    ``ids[piece]`` gives the ids of a pre-token piece, ``spans[piece]`` their (start, end) characters
    within it. ``ignore_merges`` takes a piece that is itself in the vocabulary whole, as `tokenizers`
    does for vocabularies trained that way.
    """

    def __init__(
        self,
        vocab: dict[str, int],
        merges: list[tuple[str, str]],
        ignore_merges: bool = False,
        unk_id: int | None = None,
    ) -> None:
        self.vocab = vocab
        self.ranks = {pair: i for i, pair in reversed(list(enumerate(merges)))}
        self.ignore_merges = ignore_merges
        self.unk_id = unk_id
        self._table = dict(enumerate(byte_to_char()))  # a Latin-1 character -> GPT-2's one for that byte
        self._symbols = _Cache()
        self._symbols.fill = self._merge
        self.ids = _Cache()
        self.ids.fill = self._piece_ids
        self.spans = _Cache()
        self.spans.fill = self._piece_spans
        # the same spans trimmed of the spaces each token starts or ends with (RoBERTa's offsets)
        self.tspans = _Cache()
        self.tspans.fill = self._trimmed_spans
        # the spans as steps from the piece's start: start1, end1 - start1, start2 - end1, ...; when the
        # last token ends where the piece does, a running sum over a text's pieces gives every offset
        self.steps = _Cache()
        self.steps.fill = lambda piece: self._steps(piece, self.spans[piece])
        self.tsteps = _Cache()
        self.tsteps.fill = lambda piece: self._steps(piece, self.tspans[piece])
        self.uneven: set[str] = set()  # pieces whose steps do not end at the piece's end

    def symbols(self, piece: str) -> list[str]:
        """The BPE symbols of ``piece`` (cached: ids, spans and trimmed spans all start from them)."""
        return self._symbols[piece]

    def _merge(self, piece: str) -> list[str]:
        """``piece``'s bytes written in GPT-2's table, then merged by rank: the lowest-ranked pair
        first, the leftmost among equals, as `tokenizers` merges."""
        word = piece.encode("utf-8").decode("latin-1").translate(self._table)
        if self.ignore_merges and word in self.vocab:
            return [word]
        sym = list(word)
        get = self.ranks.get
        # rank[i]: the rank of the pair (sym[i], sym[i + 1]); a merge changes only its two neighbours,
        # and min() and index() find the lowest, leftmost one in C
        rank = [get(pair, _NO_MERGE) for pair in zip(sym, sym[1:])]
        while rank:
            best = min(rank)
            if best == _NO_MERGE:
                break
            at = rank.index(best)
            sym[at : at + 2] = [sym[at] + sym[at + 1]]
            del rank[at]
            if at:
                rank[at - 1] = get((sym[at - 1], sym[at]), _NO_MERGE)
            if at < len(rank):
                rank[at] = get((sym[at], sym[at + 1]), _NO_MERGE)
        return sym

    def _steps(self, piece: str, spans: list[tuple[int, int]]) -> tuple[int, ...]:
        out, at = [], 0
        for a, b in spans:
            out += (a - at, b - a)
            at = b
        if at != len(piece):
            self.uneven.add(piece)
        return tuple(out)

    def _piece_ids(self, piece: str) -> list[int]:
        vocab, unk = self.vocab, self.unk_id
        out = []
        for s in self.symbols(piece):
            tid = vocab.get(s, unk)
            if tid is not None:  # with no unk token, `tokenizers` drops an unknown symbol
                out.append(tid)
        return out

    def _trimmed_spans(self, piece: str) -> list[tuple[int, int]]:
        tokens = [s for s in self.symbols(piece) if self.vocab.get(s, self.unk_id) is not None]
        return trim_offsets(tokens, self.spans[piece], False)

    def _piece_spans(self, piece: str) -> list[tuple[int, int]]:
        """(start, end) characters of each token within ``piece``: a token that holds part of a
        character's bytes spans the whole character, as `tokenizers` aligns it."""
        if piece.isascii():  # one byte a character: the bytes' positions are the characters'
            char_of: Any = range(len(piece))
        else:
            char_of = [i for i, c in enumerate(piece) for _ in range(len(c.encode("utf-8")))]
        out, b = [], 0
        vocab, unk = self.vocab, self.unk_id
        for s in self.symbols(piece):
            n = len(s)
            if vocab.get(s, unk) is not None:
                out.append((char_of[b], char_of[b + n - 1] + 1))
            b += n
        return out


def decode_bytes(tokens: list[str]) -> str:
    """The ByteLevel decoder: each token's characters back to bytes (a token with a character outside
    GPT-2's table, an added token, is taken as its own UTF-8), then UTF-8 with U+FFFD for bad bytes."""
    table = char_to_byte()
    out = bytearray()
    for t in tokens:
        try:
            out += bytes(table[c] for c in t)
        except KeyError:
            out += t.encode("utf-8")
    return out.decode("utf-8", errors="replace")


_TRIMMED = frozenset(
    "\u0120\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))
)


_TRIMMED_CHARS = "".join(sorted(_TRIMMED))


def trim_offsets(tokens: list[str], offsets: list[tuple[int, int]], add_prefix_space: bool) -> list:
    """Offsets without the spaces a token starts or ends with (``trim_offsets`` of the ByteLevel and
    RoBERTa post-processors); with ``add_prefix_space`` the first token keeps the one space added."""
    out = []
    for i, (tok, (s, e)) in enumerate(zip(tokens, offsets)):
        lead, trail = len(tok) - len(tok.lstrip(_TRIMMED_CHARS)), len(tok) - len(tok.rstrip(_TRIMMED_CHARS))
        if lead and not (add_prefix_space and lead == 1 and (i == 0 or s == 0)):
            s = min(s + lead, e)
        if trail and e >= trail:
            e = max(e - trail, s)
        out.append((s, e))
    return out
