"""Added tokens: transformers' ``AddedToken``, and how a saved folder describes its added tokens."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

from bertkit._text import read_json

from .wordpiece import _WHITESPACE

CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
ADDED_TOKENS_FILE = "added_tokens.json"
_DEFAULT_MAX_LENGTH = 512
_SPECIAL_KEYS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class AddedToken:
    """A token added on top of the WordPiece vocabulary, with the fields of transformers' ``AddedToken``.

    Added tokens are found in the text before WordPiece runs and are never split. ``normalized=False``
    matches the raw text; ``normalized=True`` the normalised text (lower-cased for an uncased vocabulary);
    ``lstrip``/``rstrip`` take the whitespace beside the token into it; ``single_word`` matches only
    between non-word characters; ``special`` tokens are dropped by ``decode(skip_special_tokens=True)``.
    ``normalized`` defaults to ``not special``, as in transformers.
    """

    __slots__ = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")

    def __init__(
        self,
        content: str,
        single_word: bool = False,
        lstrip: bool = False,
        rstrip: bool = False,
        normalized: bool | None = None,
        special: bool = False,
    ) -> None:
        if not isinstance(content, str):
            raise TypeError(f"AddedToken content must be a str, got {content!r} ({type(content).__name__})")
        self.content = content
        self.single_word = bool(single_word)
        self.lstrip = bool(lstrip)
        self.rstrip = bool(rstrip)
        self.special = bool(special)
        self.normalized = (not self.special) if normalized is None else bool(normalized)

    def _key(self) -> tuple:
        return (self.content, self.single_word, self.lstrip, self.rstrip, self.normalized, self.special)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AddedToken) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self.content)

    def __str__(self) -> str:
        return self.content

    def __repr__(self) -> str:
        return (
            f"AddedToken({self.content!r}, rstrip={self.rstrip}, lstrip={self.lstrip}, "
            f"single_word={self.single_word}, normalized={self.normalized}, special={self.special})"
        )

    def __getstate__(self) -> dict[str, Any]:
        """The JSON form transformers writes (``added_tokens_decoder`` entries)."""
        return {
            "content": self.content,
            "lstrip": self.lstrip,
            "normalized": self.normalized,
            "rstrip": self.rstrip,
            "single_word": self.single_word,
            "special": self.special,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)


_ADDED_FIELDS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def _as_added_token(value: Any, special: bool, where: str) -> AddedToken:
    """An AddedToken from a str, an AddedToken (bertkit's, transformers' or tokenizers') or its JSON dict.

    A str gets transformers' defaults for ``special``; ``special=True`` marks any token special, as
    transformers' ``add_special_tokens`` does.
    """
    if isinstance(value, str):
        return AddedToken(value, special=special)
    if isinstance(value, dict):
        if not isinstance(value.get("content"), str):
            raise ValueError(f"{where}: an added token needs a str 'content', got {value!r}")
        fields = {k: value[k] for k in _ADDED_FIELDS if value.get(k) is not None}
        tok = AddedToken(value["content"], **fields)
    elif isinstance(getattr(value, "content", None), str):
        fields = {k: getattr(value, k) for k in _ADDED_FIELDS if getattr(value, k, None) is not None}
        tok = AddedToken(value.content, **fields)
    else:
        raise TypeError(f"{where}: tokens must be str or AddedToken, got {value!r} ({type(value).__name__})")
    if special and not tok.special:
        tok.special = True
    return tok


def _is_token_like(value: Any) -> bool:
    return isinstance(value, str) or isinstance(getattr(value, "content", None), str)


# Rust's char::is_whitespace, which tokenizers uses for lstrip/rstrip
_STRIP_SPACE = _WHITESPACE | frozenset("\x0b\x0c\x85")


def _is_word_char(c: str) -> bool:
    """A character of regex ``\\w`` in the Rust sense (letters, marks, digits, connector punctuation)."""
    if c.isalnum() or c == "_":
        return True
    cat = unicodedata.category(c)
    return cat[0] == "M" or cat == "Pc" or c in "\u200c\u200d"


def _fill_gaps(spans: list[tuple[int, int, int]], n: int) -> list[tuple[int | None, int, int]]:
    """(id, start, end) of the added tokens, with (None, start, end) for the text between them."""
    out: list[tuple[int | None, int, int]] = []
    done = 0
    for tid, s, e in spans:
        if done < s:
            out.append((None, done, s))
        out.append((tid, s, e))
        done = e
    if done < n:
        out.append((None, done, n))
    return out


def _token_id(value: Any, where: str) -> int:
    try:
        tid = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: added token id {value!r} is not an integer") from None
    if tid < 0 or (isinstance(value, float) and value != tid):
        raise ValueError(f"{where}: added token id {value!r} is not a non-negative integer")
    return tid


def _tokenizer_json_added(spec: dict[str, Any], path: Path) -> dict[int, AddedToken]:
    """tokenizer.json's ``added_tokens`` list, by id."""
    entries = spec.get("added_tokens") or []
    if not isinstance(entries, list):
        raise ValueError(f"{path}: added_tokens must be a list, got {type(entries).__name__}")
    out: dict[int, AddedToken] = {}
    for e in entries:
        if not isinstance(e, dict) or "id" not in e:
            raise ValueError(f"{path}: each added token needs an 'id' and a 'content', got {e!r}")
        out[_token_id(e["id"], str(path))] = _as_added_token(e, False, str(path))
    return out


def _added_tokens_from_files(
    path: Path, config: dict[str, Any], vocab_name: str = "vocab.txt"
) -> dict[int, AddedToken]:
    """The added tokens a saved folder describes, by id: tokenizer.json's ``added_tokens`` when it sits
    beside a vocab.txt and the config lists none, tokenizer_config.json's ``added_tokens_decoder``, and a
    transformers v4 ``added_tokens.json`` (content -> id; special when the config names it special)."""
    out: dict[int, AddedToken] = {}
    decoder = config.get("added_tokens_decoder")
    tj = path / "tokenizer.json"
    if decoder is None and (path / vocab_name).is_file() and tj.is_file():
        spec = read_json(tj)
        if isinstance(spec, dict):
            out.update(_tokenizer_json_added(spec, tj))
    if decoder is not None:
        where = str(path / CONFIG_FILE)
        if not isinstance(decoder, dict):
            raise ValueError(f"{where}: added_tokens_decoder must be an object, got {type(decoder).__name__}")
        for k, v in decoder.items():
            out.setdefault(_token_id(k, where), _as_added_token(v, False, where))
    f = path / ADDED_TOKENS_FILE
    if f.is_file():
        loaded = read_json(f)
        if not isinstance(loaded, dict):
            raise ValueError(f"{f}: expected a JSON object of token -> id, got {type(loaded).__name__}")
        specials = {config.get(k) for k in (*_SPECIAL_KEYS, "bos_token", "eos_token")} | set(
            config.get("additional_special_tokens") or []
        )
        for content, tid in loaded.items():
            out.setdefault(_token_id(tid, str(f)), AddedToken(content, special=content in specials))
    return out


def _alternation(patterns: dict[str, int]) -> re.Pattern | None:
    """One regex for literal patterns; longest first, so each match is leftmost-longest."""
    if not patterns:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(patterns, key=len, reverse=True)))
