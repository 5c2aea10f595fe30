"""How bertkit reads text files: records end at ``\\n`` (or ``\\r\\n``) and nowhere else; UTF-8 only.

``str.splitlines()`` also breaks at U+2028, U+2029, U+0085, ``\\x0b``, ``\\x0c`` and ``\\x1c``-``\\x1e``,
characters that occur inside real sentences (U+2028 is common in text pasted from the web). A
reader built on it returns more records than the file has lines, silently. Every reader of
task files, corpora, vocabularies and metrics files splits with :func:`split_records` or
iterates with :func:`iter_lines` instead.

Text that is not UTF-8 fails with the file, the line and the byte offset of the first bad byte,
or, for corpora, which tolerate a few bad bytes, is replaced and counted.

The corpus readers (:func:`read_documents`) live here too, below the tokenizer's vocabulary trainer
and the pretraining data that both read raw text.

This module is a leaf: it imports nothing of bertkit.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "ReplacementCounter",
    "decode_utf8",
    "iter_lines",
    "jsonl_objects",
    "parse_json",
    "read_json",
    "read_jsonl",
    "read_documents",
    "read_text",
    "require_file",
    "split_records",
    "split_sentences",
]

_BOM = b"\xef\xbb\xbf"


def split_records(text: str, keepends: bool = False) -> list[str]:
    """Lines of ``text`` split at ``\\n`` only; a ``\\r`` before it is part of the line end.

    A final ``\\n`` does not start an empty record. With ``keepends`` each record keeps its line
    end (what the csv module wants, so quoted fields may span lines).
    """
    if not text:
        return []
    parts = text.split("\n")
    last = parts.pop()
    if keepends:
        out = [p + "\n" for p in parts]
    else:
        out = [p.removesuffix("\r") for p in parts]
    if last:
        out.append(last)
    return out


def _utf8_message(path: str | os.PathLike, data: bytes, err: UnicodeDecodeError, line: int = 1, offset: int = 0) -> str:
    """``FILE:LINE: not valid UTF-8 ...`` for the first bad byte of ``data`` (a slice of the file)."""
    line += data.count(b"\n", 0, err.start)
    line_start = data.rfind(b"\n", 0, err.start) + 1
    byte = data[err.start : err.start + 1].hex()
    return (
        f"{path}:{line}: invalid UTF-8: byte 0x{byte} at byte offset {offset + err.start} of the file "
        f"(byte {err.start - line_start + 1} of the line; {err.reason}); save the file as UTF-8, "
        f"e.g. `iconv -f latin1 -t utf-8`"
    )


def decode_utf8(data: bytes, path: str | os.PathLike, line: int = 1, offset: int = 0) -> str:
    """Decode ``data`` (from ``path``, starting at ``line`` / byte ``offset``) or raise a ValueError
    naming the file, the line and the byte offset of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(_utf8_message(path, data, e, line, offset)) from None


def require_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path when it is a file; else a FileNotFoundError or IsADirectoryError naming it."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a folder; give a data file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return path


def read_text(path: str | os.PathLike) -> str:
    """A whole UTF-8 file as ``str`` (a leading byte-order mark dropped); errors name file, line, offset."""
    path = Path(path)
    data = path.read_bytes()
    skip = len(_BOM) if data.startswith(_BOM) else 0
    return decode_utf8(data[skip:], path, offset=skip)


class ReplacementCounter:
    """A codecs error handler that replaces undecodable bytes by U+FFFD and counts them, with where
    the first one was (line, byte offset), so the caller can say so on screen."""

    def __init__(self) -> None:
        self.count = 0
        self.first: tuple[str, int, int] | None = None  # (file, line, byte offset)
        self.name = f"bertkit_count_{id(self)}"
        codecs.register_error(self.name, self)

    def __call__(self, err: UnicodeDecodeError) -> tuple[str, int]:
        self.count += err.end - err.start
        return "\ufffd", err.end

    def note(self, path: str | os.PathLike, line: int, offset: int, before: int, raw: bytes) -> None:
        """Record where the first replacement happened (called after decoding one line)."""
        if self.first is None and self.count > before:
            try:
                raw.decode("utf-8")
                col = 0
            except UnicodeDecodeError as e:
                col = e.start
            self.first = (str(path), line, offset + col)


def iter_lines(path: str | os.PathLike, replace: ReplacementCounter | None = None) -> Iterator[tuple[int, str]]:
    """Stream ``(line number, line)`` of a UTF-8 file, split at ``\\n`` only, line ends removed.

    Without ``replace`` a byte that is not UTF-8 raises a ValueError naming the file, line and byte
    offset; with it, bad bytes become U+FFFD and are counted there.
    """
    path = Path(path)
    offset = 0
    with open(path, "rb") as f:  # binary iteration splits at b"\n" only
        for lineno, raw in enumerate(f, 1):
            skip = len(_BOM) if lineno == 1 and raw.startswith(_BOM) else 0
            body = raw[skip:]
            if body.endswith(b"\n"):
                body = body[:-2] if body.endswith(b"\r\n") else body[:-1]
            if replace is None:
                text = decode_utf8(body, path, lineno, offset + skip)
            else:
                before = replace.count
                text = body.decode("utf-8", errors=replace.name)
                replace.note(path, lineno, offset + skip, before, body)
            yield lineno, text
            offset += len(raw)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of a JSONL log bertkit appends to (metrics.jsonl), split at ``\\n`` only.

    A last line that does not parse is a write cut short by a kill or a full disk: it is dropped,
    so a resumed run or a plot still reads the complete records. A bad line anywhere else is
    damage and raises a ValueError naming the file and line.
    """
    path = Path(path)
    lines = split_records(read_text(path))
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, f"{path}:{n}")
        except ValueError:
            if n == len(lines):
                break
            raise
        if isinstance(obj, dict):
            out.append(obj)
    return out


def parse_json(text: str, where: str) -> Any:
    """``json.loads`` whose every failure is a ValueError naming ``where`` (``FILE`` or ``FILE:LINE``).

    Covers what json itself lets escape: RecursionError on deeply nested arrays.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read") from None


def jsonl_objects(text: str, path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSONL text read from ``path``; a line that is
    not a JSON object is a ValueError naming the file and line."""
    for n, line in enumerate(split_records(text), 1):
        if not line.strip():
            continue
        obj = parse_json(line, f"{path}:{n}")
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object per line, got {type(obj).__name__}")
        yield n, obj


def read_json(path: str | os.PathLike) -> Any:
    """A UTF-8 JSON file (a leading byte-order mark dropped); every failure names the file."""
    return parse_json(read_text(path), str(path))


_ABBREVIATIONS = {
    "mr",
    "mrs",
    "ms",
    "dr",
    "prof",
    "sr",
    "jr",
    "st",
    "mt",
    "vs",
    "etc",
    "e.g",
    "i.e",
    "cf",
    "al",
    "no",
    "vol",
    "fig",
    "gen",
    "col",
    "lt",
    "capt",
    "sgt",
    "rev",
    "gov",
    "sen",
    "rep",
    "hon",
    "inc",
    "ltd",
    "co",
    "corp",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "approx",
    "dept",
    "est",
    "u.s",
    "u.k",
    "p",
    "pp",
    "ch",
    "ed",
    "eds",
}
# Candidate boundary: terminator(s), optional closers, whitespace, then a plausible sentence start.
_BOUNDARY = re.compile(r"""([.!?]+["'”’)\]]*)(\s+)(?=["'“‘(\[]?[A-Z0-9À-Þ])""")
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")


def split_sentences(text: str) -> list[str]:
    """Split a paragraph of prose into sentences: a sentence ends at ``.``, ``!`` or ``?`` (optionally
    followed by closing quotes or brackets) when whitespace and then an upper-case letter, digit, opening
    quote or bracket follow, except after a known abbreviation (``Mr.``, ``e.g.``) or a one-letter initial."""
    text = text.strip()
    if not text:
        return []
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        end = m.end(1)
        term = m.group(1)
        if term.startswith(".") and len(term.rstrip("\"'”’)]")) == 1:
            w = _WORD_BEFORE.search(text[start:end].rstrip("\"'”’)]"))
            if w:
                word = w.group(1).lower()
                if word in _ABBREVIATIONS or (len(word) == 1 and w.group(1).isupper()):
                    continue
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = m.end(2)
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def read_documents(
    path: str | os.PathLike,
    fmt: str = "prose",
    jsonl_field: str = "text",
    counter: ReplacementCounter | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[list[str]]:
    """Yield documents (lists of sentences) of one file, streaming: ``fmt="bert"`` keeps one sentence a
    line, ``"prose"`` splits each line with :func:`split_sentences`; a blank line ends a document, and a
    ``.jsonl`` file's records are one prose document each (``jsonl_field``)."""
    path = Path(path)
    counter = counter or ReplacementCounter()
    if fmt not in ("prose", "bert"):
        raise ValueError(f"unknown corpus format {fmt!r}; use 'prose' or 'bert'")
    if path.suffix == ".jsonl":
        for lineno, line in iter_lines(path, counter):
            if progress:
                progress(len(line.encode("utf-8", errors="replace")))
            if not line.strip():
                continue
            record = parse_json(line, f"{path}:{lineno}")
            if not isinstance(record, dict) or jsonl_field not in record:
                raise ValueError(f"{path}, line {lineno}: no {jsonl_field!r} field")
            doc = [s for para in split_records(str(record[jsonl_field])) for s in split_sentences(para)]
            if doc:
                yield doc
        return
    doc: list[str] = []
    for _, line in iter_lines(path, counter):
        if progress:
            progress(len(line.encode("utf-8", errors="replace")))
        line = line.strip()
        if not line:
            if doc:
                yield doc
                doc = []
            continue
        if fmt == "bert":
            doc.append(line)
        else:
            doc.extend(split_sentences(line))
    if doc:
        yield doc
