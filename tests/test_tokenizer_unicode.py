"""Exhaustive check of bertkit's Unicode tables against the reference, one code point at a time.

`tokenizers` (behind BertTokenizerFast) classifies characters with its own, older Unicode tables
(the `unicode_categories` crate): unassigned code points are *kept* (they become [UNK]), marks
added in later Unicode versions are not stripped, and newer punctuation does not split words.
bertkit ships those tables as ranges in ``bertkit/tokenization/_unicode_data.py``; this test
checks every code point against the reference normalizer and pre-tokenizer, and

    python tests/test_tokenizer_unicode.py --regenerate

rewrites the table module from the reference (dev-time only; bertkit never imports tokenizers).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import normalizers, pre_tokenizers  # noqa: E402

from bertkit.tokenization.wordpiece import _SPLIT_RE, Normalizer, is_chinese_char  # noqa: E402

ALL = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
_WS = frozenset(
    " \t\n\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def reference_sets() -> dict[str, list[int]]:
    clean = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    strip = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    import unicodedata

    removed, marks, punct, no_nfd = [], [], [], []
    lowercase: dict[int, str] = {}

    for cp in ALL:
        c = chr(cp)
        if clean.normalize_str(c) == "":
            removed.append(cp)
            continue
        low = lower.normalize_str(c)
        if low != c.lower() and c not in _WS:
            lowercase[cp] = low
        s = strip.normalize_str(c)
        if s == "":
            marks.append(c)
        elif c not in _WS and len(pre.pre_tokenize_str("a" + c + "a")) == 3:
            punct.append(cp)
        py = "".join(x for x in unicodedata.normalize("NFD", c) if x not in marks)
        if s and len(s) == 1 and s != py and unicodedata.normalize("NFD", c) != c and s == c:
            no_nfd.append(cp)
    # combining classes the reference's (older) NFD does not know: it does not reorder them
    nfd = normalizers.NFD()
    ccc_unknown = []
    for cp in ALL:
        c = chr(cp)
        k = unicodedata.combining(c)
        if not k:
            continue
        if k < 240:
            known = nfd.normalize_str("a\u0345" + c) == "a" + c + "\u0345"
        else:
            known = nfd.normalize_str("a" + c + "\u0334") == "a\u0334" + c
        if not known:
            ccc_unknown.append(cp)
    return {
        "REMOVED": removed,
        "MARKS": [ord(c) for c in marks],
        "PUNCT": punct,
        "NO_NFD": no_nfd,
        "LOWER": lowercase,
        "CCC_UNKNOWN": ccc_unknown,
    }


def _ranges(cps: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [tuple(r) for r in out]


def regenerate() -> None:
    import tokenizers as tk

    sets = reference_sets()
    lines = [
        '"""Unicode character classes exactly as `tokenizers` (BertTokenizerFast) sees them.',
        "",
        f"Generated from tokenizers {tk.__version__} by tests/test_tokenizer_unicode.py --regenerate;",
        "inclusive (first, last) code point ranges. REMOVED: dropped by the cleaning step (NUL, U+FFFD,",
        "Cc/Cf/Co/Cs in the crate's tables; unassigned code points are *kept*). MARKS: dropped when",
        "stripping accents (Mn). PUNCT: split off as punctuation. NO_NFD: characters that Python's",
        "newer Unicode decomposes under NFD but the reference does not. LOWER: code point -> lowercase",
        "where the reference (Rust's char::to_lowercase) differs from Python's str.lower(). CCC_UNKNOWN:",
        "characters with a combining class in Python that the reference's NFD does not reorder.",
        '"""',
        "",
    ]
    for name, cps in sets.items():
        if isinstance(cps, dict):
            lines.append(f"{name} = {{")
            for cp, low in sorted(cps.items()):
                lines.append(f"    0x{cp:X}: {low!r},")
            lines.append("}")
            lines.append("")
            continue
        rs = _ranges(cps)
        lines.append(f"{name} = (")
        row = []
        for lo, hi in rs:
            row.append(f"(0x{lo:X}, 0x{hi:X}),")
            if len(row) == 5:
                lines.append("    " + " ".join(row))
                row = []
        if row:
            lines.append("    " + " ".join(row))
        lines.append(")")
        lines.append("")
    out = Path(__file__).resolve().parents[1] / "src/bertkit/tokenization/_unicode_data.py"
    out.write_text("\n".join(lines), encoding="utf-8")
    counts = (f"{k} {len(v) if isinstance(v, dict) else len(_ranges(v))} entries" for k, v in sets.items())
    print(f"wrote {out}: " + ", ".join(counts))


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "cased"])
def test_every_code_point_normalizes_like_reference(lower):
    ref = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lower)
    ours = Normalizer(lowercase=lower)
    bad = []
    for cp in ALL:
        c = chr(cp)
        r = ref.normalize_str(c)
        if is_chinese_char(cp):
            assert len(r) == 3 and r[0] == r[2] == " ", hex(cp)  # spaced, maybe NFD-mapped
            r = r[1]
        if ours.normalize_char(c) != r:
            bad.append((hex(cp), r, ours.normalize_char(c)))
    assert not bad, f"{len(bad)} code points differ, e.g. {bad[:10]}"


def test_every_code_point_splits_like_reference():
    pre = pre_tokenizers.BertPreTokenizer()
    bad = []
    for cp in ALL:
        c = chr(cp)
        if c in _WS or is_chinese_char(cp) or cp < 0x20 or cp == 0x85 or cp in (0x0B, 0x0C):
            continue  # whitespace/controls never reach the splitter; CJK is split by the normalizer
        r = len(pre.pre_tokenize_str("a" + c + "a"))
        m = len(_SPLIT_RE.findall("a" + c + "a"))
        if r != m:
            bad.append(hex(cp))
    assert not bad, f"{len(bad)} code points split differently, e.g. {bad[:10]}"


if __name__ == "__main__":
    if "--regenerate" in sys.argv:
        regenerate()
