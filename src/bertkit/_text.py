"""How bertkit reads text files: records end at ``\\n`` (or ``\\r\\n``) and nowhere else; UTF-8 only.

``str.splitlines()`` also breaks at U+2028, U+2029, U+0085, ``\\x0b``, ``\\x0c`` and ``\\x1c``-``\\x1e``,
characters that occur inside real sentences (U+2028 is common in text pasted from the web). A
reader built on it returns more records than the file has lines, silently. Every reader of
task files, corpora, vocabularies and metrics files splits with :func:`split_records` or
iterates with :func:`iter_lines` instead.

Text that is not UTF-8 fails with the file, the line and the byte offset of the first bad byte,
or, for corpora, which tolerate a few bad bytes, is replaced and counted.

This module is a leaf: it imports nothing of bertkit.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
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
    "read_text",
    "require_file",
    "split_records",
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
