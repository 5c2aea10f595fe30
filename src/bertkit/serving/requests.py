"""Reading a request body: JSON that the endpoints can trust, or a ValueError that says why not.

``json.loads`` lets two things through that later fail deep inside the server as a 500: nesting so
deep that it raises RecursionError, and ``"\\ud800"``-style escapes that decode to a lone surrogate,
a ``str`` that cannot be encoded as UTF-8 (the tokenizer's offsets, or the JSON response, then
fail). :func:`parse_body` refuses both, naming the field, so the server answers 400.

Every endpoint refuses a request with :class:`ApiError`.

This module imports nothing of bertkit.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_DEPTH", "ApiError", "parse_body"]

# deeper than any request an endpoint accepts (a list of {question, context} objects is 3 deep)
MAX_DEPTH = 32


def _lone_surrogate(text: str) -> int | None:
    """Index of the first character of ``text`` that UTF-8 cannot encode, or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def _path(parts: tuple) -> str:
    out = "body"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _check(value: Any) -> None:
    """Walk ``value`` without recursion: refuse nesting over MAX_DEPTH and lone surrogates."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        v, where = stack.pop()
        if len(where) > MAX_DEPTH:
            raise ValueError(f"JSON nested more than {MAX_DEPTH} levels deep (at {_path(where[:3])}...)")
        if isinstance(v, str):
            bad = _lone_surrogate(v)
            if bad is not None:
                raise ValueError(
                    f"{_path(where)} holds a lone surrogate (U+{ord(v[bad]):04X}) at character "
                    f"{bad}, which is not text; send valid Unicode"
                )
        elif isinstance(v, dict):
            for k, x in v.items():
                if _lone_surrogate(k) is not None:
                    raise ValueError(f"a field name in {_path(where)} holds a lone surrogate; send valid Unicode")
                stack.append((x, (*where, k)))
        elif isinstance(v, list):
            stack.extend((x, (*where, i)) for i, x in enumerate(v))


def parse_body(body: bytes | str) -> Any:
    """The JSON value of a request body; a ValueError (for a 400) when it is not JSON the server can use."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise ValueError(f"JSON nested more than {MAX_DEPTH} levels deep") from None
    _check(value)
    return value


# what a refused over-length text is told
_HOW_TO_CUT = "send truncation 'cut' or 'chunk', or start the server with --truncate"


class ApiError(Exception):
    """A request the server refuses: HTTP ``status`` with ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _field(batched: bool, i: int) -> str:
    return f"inputs[{i}]" if batched else "inputs"
