"""SentencePiece's normalization as `tokenizers` applies it, with each output character's source span.

- ``Precompiled``: the charsmap a SentencePiece model carries (NFKC plus its own rules), a darts-clone
  double-array trie over UTF-8 keys followed by the replacement strings, read here without a
  dependency. `tokenizers` looks a grapheme (under 6 bytes) up whole first, then each character;
  graphemes are found by the rules of Unicode's extended grapheme clusters that matter here (marks,
  joiners, Hangul syllables, regional-indicator pairs, CR LF), not the full table.
- ``Replace``, ``Strip``, ``NFKC``/``NFC``/``NFD``/``NFKD``, ``Lowercase``, ``Prepend`` and
  ``Sequence`` as tokenizer.json declares them.

A normalized text is a ``(str, spans)`` pair: ``spans[i]`` is the (start, end) in the original text of
normalized character ``i``.
"""

from __future__ import annotations

import base64
import re
import struct
import unicodedata
from typing import Any, Callable

Spans = list[tuple[int, int]]
Normalized = tuple[str, Spans]

# Spans not written out yet: every character so far is at its source position. A step that keeps
# positions passes it on; one that moves characters writes the spans out first (``_listed``).
_KEPT: Spans = []


def _listed(text: str, spans: Spans | None) -> Spans | None:
    return [(i, i + 1) for i in range(len(text))] if spans is _KEPT else spans


class CharsMap:
    """A SentencePiece precompiled charsmap: ``lookup(key)`` gives the replacement of the shortest
    prefix of ``key`` the trie holds (None when none), as spm_precompiled answers it."""

    def __init__(self, blob: bytes, where: str = "precompiled_charsmap") -> None:
        if len(blob) < 4:
            raise ValueError(f"{where}: a precompiled charsmap needs at least 4 bytes, got {len(blob)}")
        (size,) = struct.unpack_from("<I", blob, 0)
        if size % 4 or 4 + size > len(blob):
            raise ValueError(f"{where}: trie size {size} does not fit the {len(blob)}-byte charsmap")
        self.units = struct.unpack_from(f"<{size // 4}I", blob, 4)
        self.strings = blob[4 + size :]
        self._cache: dict[str, str | None] = {}

    def _search(self, key: bytes) -> int | None:
        units = self.units
        pos = 0
        unit = units[0]
        pos ^= (unit >> 10) << ((unit & 0x200) >> 6)
        for c in key:
            if c == 0:
                break
            pos ^= c
            if pos >= len(units):
                return None
            unit = units[pos]
            if (unit & 0x800000FF) != c:
                return None
            pos ^= (unit >> 10) << ((unit & 0x200) >> 6)
            if (unit >> 8) & 1:
                return units[pos] & 0x7FFFFFFF
        return None

    def lookup(self, chunk: str) -> str | None:
        try:
            return self._cache[chunk]
        except KeyError:
            pass
        at = self._search(chunk.encode("utf-8"))
        out = None
        if at is not None:
            end = self.strings.find(b"\0", at)
            out = self.strings[at : end if end >= 0 else len(self.strings)].decode("utf-8", errors="replace")
        self._cache[chunk] = out
        return out


# ------------------------------------------------------------------------------------ graphemes
def _gcb(c: str) -> str:
    """A character's grapheme-break class, in the few classes the rules below use."""
    cp = ord(c)
    if c in "\r\n":
        return c
    if c == "\u200d":
        return "ZWJ"
    if 0x1F1E6 <= cp <= 0x1F1FF:
        return "RI"
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97C:
        return "L"
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return "V"
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return "T"
    if 0xAC00 <= cp <= 0xD7A3:
        return "LV" if (cp - 0xAC00) % 28 == 0 else "LVT"
    cat = unicodedata.category(c)
    if cat in ("Mn", "Me") or c == "\u200c" or 0x1F3FB <= cp <= 0x1F3FF or 0xFF9E <= cp <= 0xFF9F:
        return "Extend"
    if cat == "Mc":
        return "SpacingMark"
    if cat in ("Cc", "Zl", "Zp") or (cat == "Cf" and cp not in (0x200C, 0x200D)):
        return "Control"
    if cat == "So" or 0x1F000 <= cp <= 0x1FAFF:
        return "Pict"
    return "Other"


def graphemes(text: str) -> list[tuple[int, int]]:
    """(start, end) of each grapheme cluster of ``text`` (see the module docstring for the rules kept)."""
    out: list[tuple[int, int]] = []
    if not text:
        return out
    start = 0
    prev = _gcb(text[0])
    ri = 1 if prev == "RI" else 0
    pict = prev == "Pict"
    for i in range(1, len(text)):
        cur = _gcb(text[i])
        if prev == "\r" and cur == "\n":
            join = True
        elif prev in ("Control", "\r", "\n") or cur in ("Control", "\r", "\n"):
            join = False
        elif prev == "L" and cur in ("L", "V", "LV", "LVT"):
            join = True
        elif prev in ("LV", "V") and cur in ("V", "T"):
            join = True
        elif prev in ("LVT", "T") and cur == "T":
            join = True
        elif cur in ("Extend", "ZWJ", "SpacingMark"):
            join = True
        elif prev == "ZWJ" and cur == "Pict" and pict:
            join = True
        elif prev == "RI" and cur == "RI" and ri % 2 == 1:
            join = True
        else:
            join = False
        if not join:
            out.append((start, i))
            start = i
            pict = cur == "Pict"
            ri = 0
        elif cur == "Pict":
            pict = True
        ri = ri + 1 if cur == "RI" else 0
        prev = cur
    out.append((start, len(text)))
    return out


# ------------------------------------------------------------------------------------ normalizers
def _replace_changes(changes: list[tuple[str, int]], old: str, new: str) -> None:
    diff = len(new) - len(old)
    changes.extend((c, 0) for c in new)
    if diff > 0:
        for k in range(len(changes) - diff, len(changes)):
            changes[k] = (changes[k][0], 1)
    elif diff < 0 and changes:
        changes[-1] = (changes[-1][0], changes[-1][1] + diff)
    elif diff < 0:
        changes.append(("", diff))


def precompiled(charsmap: CharsMap) -> Callable[[str, Spans], Normalized]:
    # per character: (may it join a neighbour into a longer grapheme, its replacement or None)
    info: dict[str, tuple[bool, str | None]] = {}
    # characters that join no neighbour: kept as they are (``plain``), or replaced by one character
    # (``single``); a text of only these is answered by C-level set and translate calls
    plain: set[str] = set()
    one_to_one: set[str] = set()
    single: dict[int, str] = {}

    def classify(c: str) -> tuple[bool, str | None]:
        v = info[c] = (_gcb(c) not in ("Other", "Control", "Pict"), charsmap.lookup(c))
        if not v[0] and (v[1] is None or len(v[1]) == 1):
            one_to_one.add(c)
            if v[1] is None:
                plain.add(c)
            else:
                single[ord(c)] = v[1]
        return v

    # the ASCII characters that are not plain, found in ASCII text by one regex scan
    odd = "".join(c for c in map(chr, range(128)) if not (classify(c) and c in plain))
    odd_ascii = re.compile(f"[{re.escape(odd)}]").search if odd else lambda text: None

    def run(text: str, spans: Spans | None) -> Normalized:
        if (text.isascii() and odd_ascii(text) is None) or plain.issuperset(text):
            return text, spans  # the common case: nothing to replace
        if one_to_one.issuperset(text):
            return text.translate(single), spans  # one character for one: every span stays
        chars = set(text)
        seen = [info.get(c) or classify(c) for c in chars]
        if not any(j for j, _ in seen):
            # every grapheme is one character: replace character by character
            if all(r is None for _, r in seen):
                return text, spans  # the common case: nothing to replace
            get = info.__getitem__
            if spans is None:
                return "".join([c if (r := get(c)[1]) is None else r for c in text]), None
            spans = _listed(text, spans)
            changes: list[tuple[str, int]] = []
            for c in text:
                r = get(c)[1]
                if r is None:
                    changes.append((c, 0))
                else:
                    _replace_changes(changes, c, r)
            return _fix_empty(text, spans, [(c, n) for c, n in changes if c or n])
        changes = []
        modified = False
        spans = _listed(text, spans)
        for a, b in graphemes(text):
            g = text[a:b]
            if len(g.encode("utf-8")) < 6:
                norm = charsmap.lookup(g)
                if norm is not None:
                    modified = True
                    _replace_changes(changes, g, norm)
                    continue
            for c in g:
                norm = charsmap.lookup(c)
                if norm is not None:
                    modified = True
                    _replace_changes(changes, c, norm)
                else:
                    changes.append((c, 0))
        if not modified:
            return text, spans
        changes = [(c, n) for c, n in changes if c or n]
        return _fix_empty(text, spans, changes)

    return run


def _fix_empty(text: str, spans: Spans | None, changes: list[tuple[str, int]]) -> Normalized:
    """A replacement by nothing leaves a change with no character: its source characters are dropped."""
    if spans is None:
        return "".join(c for c, _ in changes), None
    out_chars: list[str] = []
    out_spans: Spans = []
    pos = 0
    for c, change in changes:
        if not c:
            pos += -change
            continue
        if change > 0:
            span = out_spans[-1] if out_spans else (spans[pos] if pos < len(spans) else (0, 0))
        else:
            span = spans[pos] if pos < len(spans) else (spans[-1][1], spans[-1][1])
            pos += 1 - change
        out_chars.append(c)
        out_spans.append(span)
    return "".join(out_chars), out_spans


def _unicode_form(form: str) -> Callable[[str, Spans], Normalized]:
    """NFC/NFD/NFKC/NFKD aligned as `tokenizers` aligns them: each character decomposes (its first piece
    replaces it, the rest are inserted and share its span); a composed character stands for the pieces
    it joins, taking the span of the first source character it consumes."""
    decompose = "NFKD" if "K" in form else "NFD"
    composes = form in ("NFC", "NFKC")

    def run(text: str, spans: Spans | None) -> Normalized:
        if unicodedata.is_normalized(form, text):
            return text, spans
        if spans is None:
            return unicodedata.normalize(form, text), None
        spans = _listed(text, spans)
        pieces: list[tuple[str, int]] = []
        for c in text:
            d = unicodedata.normalize(decompose, c) or c
            pieces.append((d[0], 0))
            pieces.extend((x, 1) for x in d[1:])
        if composes:
            joined = "".join(c for c, _ in pieces)
            out = unicodedata.normalize(form, joined)
            composed: list[tuple[str, int]] = []
            k = 0
            for c in out:
                n = max(len(unicodedata.normalize("NFD", c)), 1) if c != joined[k : k + 1] else 1
                group = pieces[k : k + n]
                composed.append((c, sum(ch for _, ch in group) - (len(group) - 1)))
                k += n
            pieces = composed
        return _fix_empty(text, spans, pieces)

    return run


def _replace(pattern: str, content: str, regex: bool) -> Callable[[str, Spans], Normalized]:
    rx = re.compile(pattern if regex else re.escape(pattern))

    def run(text: str, spans: Spans | None) -> Normalized:
        if rx.search(text) is None:
            return text, spans
        if spans is None:
            return rx.sub(lambda m: content, text), None
        spans = _listed(text, spans)
        chars: list[str] = []
        out: Spans = []
        done = 0
        for m in rx.finditer(text):
            s, e = m.span()
            chars.append(text[done:s])
            out.extend(spans[done:s])
            if content:
                chars.append(content)
                # as `tokenizers` aligns it: the new text takes the span of the match's last character
                out.extend([spans[e - 1]] * len(content))
            done = e
        chars.append(text[done:])
        out.extend(spans[done:])
        return "".join(chars), out

    return run


_RUST_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))
)


def _strip(left: bool, right: bool) -> Callable[[str, Spans], Normalized]:
    def run(text: str, spans: Spans) -> Normalized:
        a, b = 0, len(text)
        while left and a < b and text[a] in _RUST_WHITESPACE:
            a += 1
        while right and b > a and text[b - 1] in _RUST_WHITESPACE:
            b -= 1
        if a == 0 and (b == len(text) or spans is _KEPT):
            return text[:b], spans  # a prefix keeps its positions
        return text[a:b], None if spans is None else _listed(text, spans)[a:b]

    return run


def _lowercase(text: str, spans: Spans | None) -> Normalized:
    if spans is None or spans is _KEPT:
        low = "".join(map(str.lower, text))
        if spans is None or len(low) == len(text):  # same length: every character lowered to one
            return low, spans
    spans = _listed(text, spans)
    chars: list[str] = []
    out: Spans = []
    for c, sp in zip(text, spans):
        low = c.lower()
        chars.append(low)
        out.extend([sp] * len(low))
    return "".join(chars), out


def _prepend(prefix: str) -> Callable[[str, Spans], Normalized]:
    def run(text: str, spans: Spans) -> Normalized:
        if not text:
            return text, spans
        if spans is None:
            return prefix + text, None
        spans = _listed(text, spans)
        return prefix + text, [spans[0]] * len(prefix) + spans

    return run


def build_normalizer(spec: dict[str, Any] | None, where: str) -> Callable[[str], Normalized] | None:
    """A normalizer from tokenizer.json's ``normalizer`` (None: text kept as is)."""
    if not spec:
        return None
    steps = _steps(spec, where)

    def run(text: str, need_spans: bool = True, kept_as_none: bool = False) -> Normalized:
        """``text`` normalized, with the source span of each character (None unless ``need_spans``;
        with ``kept_as_none`` also None when every character is still at its source position)."""
        spans = _KEPT if need_spans else None
        for step in steps:
            text, spans = step(text, spans)
        if spans is _KEPT:
            return text, None if kept_as_none else _listed(text, spans)
        return text, spans

    return run


def _steps(spec: dict[str, Any], where: str) -> list[Callable[[str, Spans], Normalized]]:
    kind = spec.get("type")
    if kind == "Sequence":
        return [s for sub in spec.get("normalizers") or [] for s in _steps(sub, where)]
    if kind == "Precompiled":
        blob = base64.b64decode(spec.get("precompiled_charsmap") or "")
        return [precompiled(CharsMap(blob, where))] if blob else []
    if kind in ("NFKC", "NFC", "NFD", "NFKD"):
        return [_unicode_form(kind)]
    if kind == "Replace":
        pat = spec.get("pattern") or {}
        if "Regex" in pat:
            return [_replace(pat["Regex"], spec.get("content", ""), True)]
        return [_replace(pat.get("String", ""), spec.get("content", ""), False)]
    if kind == "Strip":
        return [_strip(bool(spec.get("strip_left")), bool(spec.get("strip_right")))]
    if kind == "Lowercase":
        return [_lowercase]
    if kind == "Prepend":
        return [_prepend(spec.get("prepend", ""))]
    raise ValueError(f"{where}: normalizer type {kind!r} is not one bertkit reads")
