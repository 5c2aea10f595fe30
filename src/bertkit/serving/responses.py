"""The server's JSON responses, written by orjson (imported where the app is made: the serve extra).

A vector goes out as float32 numbers in their shortest exact form (``0.1``, not ``0.10000000149011612``):
the client reads back the very float32 the model computed, in half the bytes, and writing it costs a
tenth of the standard library's time, which on a busy server is time taken from the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertkit._extras import require

orjson = require("orjson", "serve", "bertkit serve")
_responses = require("starlette.responses", "serve", "bertkit serve")

__all__ = ["JSONResponse", "dumps"]

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def _default(value: Any) -> Any:
    if isinstance(value, np.ndarray):  # one orjson does not write directly (a column slice, float16)
        return np.ascontiguousarray(value, dtype=np.float32 if value.dtype.kind == "f" else None).tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(content: Any) -> bytes:
    """``content`` as JSON bytes; numpy arrays and scalars included."""
    return orjson.dumps(content, default=_default, option=_OPTIONS)


class JSONResponse(_responses.JSONResponse):
    """starlette's JSONResponse, written by :func:`dumps`."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
