"""BertTokenizer: transformers' BERT tokenizer API over bertkit's pure-Python WordPiece.

Outputs (ids, token types, masks, offsets, special-token masks, overflow windows, word ids) match
transformers' ``BertTokenizerFast``; see tests/test_tokenizer_parity.py.

Fast path for big corpora: ``tokenizer.encode_batch_ids(texts)`` returns ``list[list[int]]``
without special tokens, padding or truncation; it is the cheapest way to turn text into ids
(``tokenizer(texts, add_special_tokens=False)["input_ids"]`` gives the same ids with a little
more bookkeeping).
"""

from __future__ import annotations

import gc
import os
import re
import unicodedata
import warnings
from itertools import chain, compress, repeat
from operator import add, gt
from pathlib import Path
from typing import Any, Iterable, Sequence

from bertkit._text import decode_utf8, read_json

from .._io import atomic_write_json, atomic_write_text
from .encoding import BatchEncoding
from .wordpiece import _WHITESPACE, CJK_CHAR_RE, Normalizer, WordPiece

__all__ = ["AddedToken", "BertTokenizer", "load_vocab", "load_tokenizer"]

VOCAB_FILE = "vocab.txt"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
ADDED_TOKENS_FILE = "added_tokens.json"
_SPECIAL_KEYS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_DEFAULT_MAX_LENGTH = 512


def load_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """Read a WordPiece vocabulary (one token per line, id = line number - 1).

    ``vocab_file`` may also be a folder holding ``vocab.txt``. Raises FileNotFoundError /
    ValueError naming the file and line for a missing or empty file, invalid UTF-8, an empty token
    or a duplicate token. ``list(load_vocab(f))`` gives the tokens in id order.
    """
    path = Path(vocab_file)
    if path.is_dir():
        path = path / VOCAB_FILE
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    data = path.read_bytes()
    vocab: dict[str, int] = {}
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    offset = 0
    for i, raw in enumerate(lines):
        token = decode_utf8(raw, path, i + 1, offset)
        offset += len(raw) + 1
        if token.endswith("\r"):
            token = token[:-1]
        if token == "":
            raise ValueError(f"{path}:{i + 1}: empty token in vocabulary")
        if token in vocab:
            raise ValueError(f"{path}:{i + 1}: duplicate token {token!r} (first on line {vocab[token] + 1})")
        vocab[token] = i
    if not vocab:
        raise ValueError(f"{path}: vocabulary file is empty")
    return vocab


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


_SEPARATORS_TO_SPACE = str.maketrans("\t\n\r", "   ")


def _pad_cjk(norm: str, align: list[int] | None) -> tuple[str, list[int], frozenset[int]]:
    """``norm`` with a space on each side of every CJK character (as `tokenizers`' BertNormalizer
    writes it), its alignment to the source, and the positions of those spaces."""
    chars: list[str] = []
    out_align: list[int] = []
    pads: list[int] = []
    for i, c in enumerate(norm):
        src = i if align is None else align[i]
        if CJK_CHAR_RE.match(c):
            pads += [len(chars), len(chars) + 2]
            chars += [" ", c, " "]
            out_align += [src, src, src]
        else:
            chars.append(c)
            out_align.append(src)
    return "".join(chars), out_align, frozenset(pads)


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


class _Seq:
    """One encoded text: ids, and with details also offsets and word indices per token."""

    __slots__ = ("ids", "offsets", "words")

    def __init__(self, ids: list[int], offsets: list | None = None, words: list | None = None) -> None:
        self.ids = ids
        self.offsets = offsets
        self.words = words


class BertTokenizer:
    """BERT WordPiece tokenizer with the calls of transformers' ``BertTokenizer(Fast)``.

    >>> tok = BertTokenizer.from_pretrained("path/to/bert-base-uncased")   # doctest: +SKIP
    >>> tok.tokenize("unheard")                                            # doctest: +SKIP
    ['un', '##heard']
    """

    vocab_files_names = {"vocab_file": VOCAB_FILE}
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    padding_side = "right"
    truncation_side = "right"

    def __init__(
        self,
        vocab_file: str | os.PathLike | None = None,
        do_lower_case: bool = True,
        do_basic_tokenize: bool = True,
        never_split: Iterable[str] | None = None,
        unk_token: str = "[UNK]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        cls_token: str = "[CLS]",
        mask_token: str = "[MASK]",
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        model_max_length: int = _DEFAULT_MAX_LENGTH,
        clean_up_tokenization_spaces: bool = False,
        vocab: dict[str, int] | None = None,
        max_input_chars_per_word: int = 100,
        additional_special_tokens: Iterable[str] | None = None,
        added_tokens_decoder: dict[int, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if vocab is None:
            if vocab_file is None:
                raise ValueError("BertTokenizer needs a vocab_file (or a vocab dict)")
            vocab = load_vocab(vocab_file)
        self.vocab_file = str(vocab_file) if vocab_file is not None else None
        self.vocab: dict[str, int] = dict(vocab)
        self.ids_to_tokens: dict[int, str] = {i: t for t, i in self.vocab.items()}
        self.do_lower_case = bool(do_lower_case)
        self.do_basic_tokenize = do_basic_tokenize
        self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
        self.strip_accents = strip_accents
        self.model_max_length = int(model_max_length)
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        self.unk_token, self.sep_token, self.pad_token = str(unk_token), str(sep_token), str(pad_token)
        self.cls_token, self.mask_token = str(cls_token), str(mask_token)
        extra = [_as_added_token(t, True, "additional_special_tokens") for t in (additional_special_tokens or [])]
        self.additional_special_tokens = list(dict.fromkeys(t.content for t in extra))
        self.never_split = set(never_split or [])
        self.init_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None)))}
        self._normalizer = Normalizer(
            lowercase=self.do_lower_case,
            strip_accents=strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
        )
        self._base_vocab_size = len(self.vocab)
        # a copy: added tokens are found in the text before WordPiece runs, never as WordPiece pieces
        self._wordpiece = WordPiece(
            dict(self.vocab), unk_token=self.unk_token, max_input_chars_per_word=self.max_input_chars_per_word
        )
        self._warned_length = False
        # added tokens: id -> AddedToken (insertion order), and the contents marked special, in order
        self._added: dict[int, AddedToken] = {}
        self._special_contents: dict[str, None] = {}
        given = [(_token_id(k, "added_tokens_decoder"), v) for k, v in (added_tokens_decoder or {}).items()]
        for tid, tok in sorted(given, key=lambda kv: kv[0]):
            tok = _as_added_token(tok, False, "added_tokens_decoder")
            if tok.special:
                self._special_contents[tok.content] = None
            self._set_added(tid, tok)
        # transformers registers the named special tokens (and the additional ones, with new ids when
        # they are not in the vocabulary) as special added tokens; a token the files already describe
        # keeps its flags there and is only marked special
        named = [AddedToken(getattr(self, k), special=True) for k in _SPECIAL_KEYS if getattr(self, k) in self.vocab]
        for tok in named + extra:
            if self.vocab.get(tok.content) in self._added:
                self._special_contents[tok.content] = None
            else:
                self._add([tok], refresh=False)
        self._refresh_added()

    # ------------------------------------------------------------------ added tokens
    def _set_added(self, tid: int, tok: AddedToken) -> None:
        """Give ``tok`` the id ``tid`` (its content then encodes to ``tid``; ``tid`` decodes to it)."""
        old = self._added.get(tid)
        if old is not None and old.content != tok.content and self.vocab.get(old.content) == tid:
            if self._wordpiece.vocab.get(old.content) != tid:
                del self.vocab[old.content]
        self._added[tid] = tok
        self.vocab[tok.content] = tid
        # transformers shows a normalized added token in its normalized form (tokens(), decode())
        self.ids_to_tokens[tid] = self._shown(tok.content) if tok.normalized else tok.content

    def _shown(self, text: str) -> str:
        """``text`` normalised as `tokenizers`' BertNormalizer writes it: bertkit's normalisation, plus
        the spaces it puts around CJK characters (bertkit splits those without writing the spaces)."""
        norm = self._normalizer._normalized(text)[0].translate(_SEPARATORS_TO_SPACE)
        if self.tokenize_chinese_chars:
            norm = CJK_CHAR_RE.sub(lambda m: f" {m.group()} ", norm)
        return norm

    def _add(self, tokens: list[AddedToken], refresh: bool = True) -> int:
        """Add tokens the way `tokenizers` does: a content already known keeps its id, a new one gets the
        next id after the vocabulary and the added tokens; an identical token already added or an empty
        one is not counted. Returns how many were counted."""
        for tok in tokens:
            if tok.special and tok.content:
                self._special_contents.setdefault(tok.content, None)
        counted = 0
        for tok in tokens:
            if not tok.content:
                continue
            tid = self.vocab.get(tok.content)
            if tid is not None and self._added.get(tid) == tok:
                continue
            if tid is None:
                tid = max(self._base_vocab_size, max(self._added, default=-1) + 1)
            self._set_added(tid, tok)
            counted += 1
        if refresh:
            self._refresh_added()
        return counted

    def _refresh_added(self) -> None:
        """Rebuild the matchers: one on the raw text (tokens with ``normalized=False``, and ``never_split``
        words of the vocabulary), one on the normalised text; special tokens take priority, then the
        order tokens were added, as in `tokenizers`."""
        specials = [self.vocab[c] for c in self._special_contents if self.vocab.get(c) in self._added]
        order = specials + [i for i, t in self._added.items() if t.content not in self._special_contents]
        raw: dict[str, int] = {}
        norm: dict[str, int] = {}
        for tid in order:
            tok = self._added[tid]
            if tok.normalized:
                pattern = self.ids_to_tokens[tid]
                if pattern:  # a token that normalizes to nothing can never be found
                    norm.setdefault(pattern, tid)
            else:
                raw.setdefault(tok.content, tid)
        for word in self.never_split:
            if word in self.vocab:
                raw.setdefault(word, self.vocab[word])
        self._raw_ids, self._norm_ids = raw, norm
        self._raw_re = _alternation(raw)
        self._norm_re = _alternation(norm)
        self._special_id_set = frozenset(self.vocab[c] for c in self._special_contents if c in self.vocab)
        self._strip_ids = frozenset(i for i, t in self._added.items() if t.lstrip or t.rstrip)

    def _find_added(
        self, s: str, rx: re.Pattern, ids: dict[str, int], pads: frozenset[int] = frozenset()
    ) -> list[tuple[int, int, int]]:
        """(id, start, end) of the added tokens in ``s``: leftmost-longest matches, then single_word,
        lstrip and rstrip applied as `tokenizers` applies them. lstrip/rstrip leave the spaces at ``pads``
        alone: they stand for no character of the source text."""
        out: list[tuple[int, int, int]] = []
        done = 0
        n = len(s)
        added = self._added
        for m in rx.finditer(s):
            start, stop = m.span()
            if start < done:  # a previous token's rstrip took this text
                continue
            tid = ids[m.group()]
            tok = added.get(tid)
            if tok is not None:
                if tok.single_word and (
                    (start > 0 and _is_word_char(s[start - 1])) or (stop < n and _is_word_char(s[stop]))
                ):
                    continue
                if tok.lstrip:
                    while start > done and s[start - 1] in _STRIP_SPACE and start - 1 not in pads:
                        start -= 1
                if tok.rstrip:
                    while stop < n and s[stop] in _STRIP_SPACE and stop not in pads:
                        stop += 1
            out.append((tid, start, stop))
            done = stop
        return out

    def _split_added(self, text: str) -> list[tuple[int | None, int, int]] | None:
        """``text`` cut at its added tokens: (id, start, end) for each token and (None, start, end) for
        the text between; None when there is none (the common case, one regex search)."""
        raw_rx, norm_rx = self._raw_re, self._norm_re
        pieces = None
        if raw_rx is not None and raw_rx.search(text) is not None:
            pieces = _fill_gaps(self._find_added(text, raw_rx, self._raw_ids), len(text))
        if norm_rx is None:
            return pieces
        out: list[tuple[int | None, int, int]] = []
        found = False
        for tid, s, e in pieces or ((None, 0, len(text)),):
            if tid is not None:
                out.append((tid, s, e))
                continue
            part = text[s:e]
            norm, _, align = self._normalizer._normalized(part)
            pads: frozenset[int] = frozenset()
            if self.tokenize_chinese_chars and CJK_CHAR_RE.search(norm) is not None:
                # match where `tokenizers` matches: in text with spaces around CJK characters
                norm, align, pads = _pad_cjk(norm, align)
            if norm_rx.search(norm) is None:
                out.append((None, s, e))
                continue
            found = True
            spans = self._find_added(norm, norm_rx, self._norm_ids, pads)
            if align is not None:  # normalised positions -> positions in the source text
                spans = [(t, align[a], align[b - 1] + 1) for t, a, b in spans]
            out.extend((t, s + a, s + b) for t, a, b in _fill_gaps(spans, len(part)))
        return out if found or pieces is not None else None

    def _stripped_token_text(self, tid: int, piece: str) -> str | None:
        """What transformers shows for an lstrip/rstrip added token: its matched text, whitespace and
        all (normalised when the token is); None when ``piece`` is not that token."""
        tok = self._added.get(tid)
        if tok is None:
            return None
        if tok.normalized:
            piece = self._shown(piece)
        return piece if piece.strip() == self.ids_to_tokens[tid].strip() else None

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        """Added tokens by id (the named special tokens included), as transformers reports them."""
        return dict(sorted(self._added.items()))

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        return {t.content: i for i, t in sorted(self._added.items())}

    def get_added_vocab(self) -> dict[str, int]:
        """Content -> id of every added token."""
        return self.added_tokens_encoder

    def add_tokens(self, new_tokens: str | Any | Sequence[str | Any], special_tokens: bool = False) -> int:
        """Add tokens that are matched whole in the text, never split (transformers' ``add_tokens``).

        A token not in the vocabulary gets the next id, so ``len(tokenizer)`` grows and
        ``model.resize_token_embeddings(len(tokenizer))`` fits. A str becomes an ``AddedToken`` with
        ``normalized=not special_tokens`` (so on an uncased vocabulary ``"NewWord"`` also matches
        "newword"). Returns the number of tokens added, counted as transformers counts them.
        """
        if not new_tokens:
            return 0
        if isinstance(new_tokens, (str, AddedToken)) or not isinstance(new_tokens, (list, tuple)):
            new_tokens = [new_tokens]
        tokens = [_as_added_token(t, bool(special_tokens), "add_tokens") for t in new_tokens]
        return self._add(tokens)

    # ------------------------------------------------------------------ loading / saving
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> "BertTokenizer":
        """Load from a folder with ``vocab.txt`` or ``tokenizer.json`` (and optional ``tokenizer_config.json``,
        ``special_tokens_map.json`` and ``added_tokens.json``), a vocab file, or a model name in the Hugging
        Face cache. Added tokens keep the ids the folder gives them (see :meth:`add_tokens`)."""
        from bertkit.hub import resolve_model_path

        cache_dir = kwargs.pop("cache_dir", None)
        revision = kwargs.pop("revision", None)
        for k in ("local_files_only", "force_download", "token", "trust_remote_code", "subfolder"):
            kwargs.pop(k, None)  # accepted for transformers compatibility; bertkit never downloads
        if Path(pretrained_model_name_or_path).expanduser().is_file():
            return cls(vocab_file=Path(pretrained_model_name_or_path).expanduser(), **kwargs)
        path = resolve_model_path(
            pretrained_model_name_or_path, cache_dir, revision, files=(VOCAB_FILE, "tokenizer.json")
        )
        config: dict[str, Any] = {}
        for name in (CONFIG_FILE, SPECIAL_TOKENS_FILE):
            f = path / name
            if f.is_file():
                loaded = read_json(f)
                if not isinstance(loaded, dict):
                    raise ValueError(f"{f}: expected a JSON object, got {type(loaded).__name__}")
                for k, v in loaded.items():
                    if isinstance(v, dict) and "content" in v:  # AddedToken serialization
                        v = v["content"]
                    if k in ("additional_special_tokens", "extra_special_tokens"):
                        # v5 may name extra special tokens ({"image_token": "<image>"}); bertkit keeps the tokens
                        v = list(v.values()) if isinstance(v, dict) else v
                        if not isinstance(v, list):
                            raise ValueError(f"{f}: {k} must be a list, got {type(v).__name__}")
                        v = [x["content"] if isinstance(x, dict) else x for x in v]
                        k = "additional_special_tokens"
                        v = list(dict.fromkeys(config.get(k, []) + v)) if name == CONFIG_FILE else v
                    config[k] = v
        added = _added_tokens_from_files(path, config)
        for k in (
            "tokenizer_class",
            "added_tokens_decoder",
            "auto_map",
            "name_or_path",
            "backend",
            "vocab_file",
            "tokenizer_file",
            "special_tokens_map_file",
        ):
            config.pop(k, None)
        if int(config.get("model_max_length", _DEFAULT_MAX_LENGTH)) > 1e20:
            config["model_max_length"] = _DEFAULT_MAX_LENGTH  # "no limit" sentinel in transformers configs
        config.update(kwargs)
        config.setdefault("added_tokens_decoder", added)
        vocab_file = path / VOCAB_FILE
        if vocab_file.is_file():
            tok = cls(vocab_file=vocab_file, **config)
        elif (path / "tokenizer.json").is_file():
            spec = _from_tokenizer_json(path / "tokenizer.json")
            # tokenizer.json is what transformers v5 loads first; the config only adds ids it lacks
            config["added_tokens_decoder"] = {**config["added_tokens_decoder"], **spec.pop("added_tokens_decoder")}
            tok = cls(**{**spec, **config})
        else:
            raise FileNotFoundError(f"no {VOCAB_FILE} (or tokenizer.json) in {path}")
        tok.name_or_path = str(pretrained_model_name_or_path)
        return tok

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> tuple[str, ...]:
        """Write ``vocab.txt``, ``tokenizer_config.json`` and ``special_tokens_map.json``
        (each atomically: temp file, then rename). Returns the written paths.

        vocab.txt holds the WordPiece vocabulary only; added tokens go to the config's
        ``added_tokens_decoder`` (id -> token and its flags), which transformers v4 and v5 both read.
        """
        out = Path(save_directory)
        if out.is_file():
            raise ValueError(f"save_pretrained needs a directory, {out} is a file")
        out.mkdir(parents=True, exist_ok=True)
        tokens = self._base_tokens()
        config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.do_lower_case,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "strip_accents": self.strip_accents,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
            **self.special_tokens_map,
        }
        if self.max_input_chars_per_word != 100:
            config["max_input_chars_per_word"] = self.max_input_chars_per_word
        config["added_tokens_decoder"] = {str(i): t.__getstate__() for i, t in sorted(self._added.items())}
        paths = (out / VOCAB_FILE, out / CONFIG_FILE, out / SPECIAL_TOKENS_FILE)
        atomic_write_text(paths[0], "".join(t + "\n" for t in tokens))
        atomic_write_json(paths[1], config)
        atomic_write_json(paths[2], self.special_tokens_map)
        return tuple(str(p) for p in paths)

    def save_vocabulary(self, save_directory: str | os.PathLike, filename_prefix: str | None = None) -> tuple[str]:
        name = (filename_prefix + "-" if filename_prefix else "") + VOCAB_FILE
        path = Path(save_directory) / name
        atomic_write_text(path, "".join(t + "\n" for t in self._base_tokens()))
        return (str(path),)

    def _base_tokens(self) -> list[str]:
        """The WordPiece vocabulary in id order (no added tokens)."""
        base = self._wordpiece.vocab
        return sorted(base, key=base.__getitem__)

    # ------------------------------------------------------------------ special tokens
    @property
    def special_tokens_map(self) -> dict[str, Any]:
        m: dict[str, Any] = {k: getattr(self, k) for k in _SPECIAL_KEYS}
        if self.additional_special_tokens:
            m["additional_special_tokens"] = list(self.additional_special_tokens)
        return m

    @property
    def all_special_tokens(self) -> list[str]:
        out: list[str] = []
        for k in _SPECIAL_KEYS:
            t = getattr(self, k)
            if t not in out:
                out.append(t)
        out += [t for t in self.additional_special_tokens if t not in out]
        return out

    @property
    def all_special_ids(self) -> list[int]:
        return [self.vocab.get(t, self._unk_id()) for t in self.all_special_tokens]

    def _unk_id(self) -> int | None:
        return self.vocab.get(self.unk_token)

    unk_token_id = property(lambda self: self.vocab.get(self.unk_token))
    sep_token_id = property(lambda self: self.vocab.get(self.sep_token))
    pad_token_id = property(lambda self: self.vocab.get(self.pad_token))
    cls_token_id = property(lambda self: self.vocab.get(self.cls_token))
    mask_token_id = property(lambda self: self.vocab.get(self.mask_token))
    pad_token_type_id = 0

    @property
    def vocab_size(self) -> int:
        """Size of the base vocabulary (``len(tokenizer)`` also counts added tokens)."""
        return self._base_vocab_size

    def add_special_tokens(
        self,
        special_tokens_dict: dict[str, Any],
        replace_additional_special_tokens: bool = True,
        replace_extra_special_tokens: bool | None = None,
    ) -> int:
        """Set or add special tokens (e.g. ``{"additional_special_tokens": ["[E1]", "[/E1]"]}``; transformers
        v5 spells the key ``extra_special_tokens``). They are added like ``add_tokens(..., special_tokens=True)``:
        matched whole in the raw text, new ids after the vocabulary. Returns the count transformers returns."""
        if replace_extra_special_tokens is not None:
            replace_additional_special_tokens = replace_extra_special_tokens
        to_add: list[AddedToken] = []
        for key, value in special_tokens_dict.items():
            if key in ("additional_special_tokens", "extra_special_tokens"):
                if not isinstance(value, (list, tuple)) or not all(map(_is_token_like, value)):
                    raise ValueError(f"{key} must be a list of str or AddedToken, got {value!r}")
                toks = [_as_added_token(t, True, key) for t in value]
                if not replace_additional_special_tokens:
                    toks = [t for t in toks if t.content not in self.additional_special_tokens]
                if replace_additional_special_tokens and toks:
                    self.additional_special_tokens = list(dict.fromkeys(t.content for t in toks))
                else:
                    self.additional_special_tokens += [t.content for t in toks]
                to_add += toks
            elif key in _SPECIAL_KEYS:
                if not _is_token_like(value):
                    raise ValueError(f"{key} must be a str or an AddedToken, got {value!r} ({type(value).__name__})")
                tok = _as_added_token(value, True, key)
                setattr(self, key, tok.content)
                to_add.append(tok)
            else:
                raise ValueError(
                    f"unknown special token key {key!r}; use one of {_SPECIAL_KEYS} or 'additional_special_tokens'"
                )
        return self._add(to_add)

    def __len__(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def __repr__(self) -> str:
        return (
            f"BertTokenizer(vocab_size={self.vocab_size}, do_lower_case={self.do_lower_case}, "
            f"strip_accents={self.strip_accents}, tokenize_chinese_chars={self.tokenize_chinese_chars}, "
            f"model_max_length={self.model_max_length})"
        )

    @property
    def is_fast(self) -> bool:
        return True

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 3 if pair else 2

    # ------------------------------------------------------------------ core
    def _check_text(self, text: Any, what: str = "text") -> str:
        if not isinstance(text, str):
            raise TypeError(f"{what} must be a str (or a list of str for a batch), got {type(text).__name__}")
        return text

    def _ids(self, text: str) -> list[int]:
        """Ids of one text, no special tokens added (special and added tokens *in* the text are kept)."""
        wp = self._wordpiece
        norm = self._normalizer
        pieces = self._split_added(text)
        if pieces is None:
            return wp.ids(norm.words(text))
        ids: list[int] = []
        for tid, s, e in pieces:
            if tid is not None:
                ids.append(tid)
            else:
                ids += wp.ids(norm.words(text[s:e]))
        return ids

    def _encode_details(
        self,
        text: str,
        word_base: int = 0,
        char_base: int = 0,
        words_out: list | None = None,
        offsets_out: list | None = None,
        ids_out: list | None = None,
    ) -> int:
        """Append ids, offsets and word indices of ``text``; returns the next word index.

        Why it is shaped like this (measured on 20,000 Austen lines, one core): when normalisation
        keeps character positions (``align is None``, nearly all text) the ids come from one
        ``chain`` over cached per-word piece lists and the offsets from one ``zip`` of word starts and
        ends, both looping in C; only the few multi-piece words are spliced in afterwards. That takes
        3.7 s where a per-word Python loop (the ``else`` branch's shape) takes 7.0 s, 1.9x. Splicing
        runs from the right so earlier indices stay valid. The ``else`` branch handles text whose
        normalisation changes lengths (accents stripped, ligatures), mapping through ``align``.
        """
        cut = self._split_added(text)
        wp = self._wordpiece
        w = word_base
        for tid, p0, p1 in cut or ((None, 0, len(text)),):
            pos = char_base + p0
            if tid is not None:
                ids_out.append(tid)
                offsets_out.append((pos, char_base + p1))
                if words_out is not None:
                    words_out.append(w)
                w += 1
            elif p1 > p0:
                part = text if cut is None else text[p0:p1]
                words, starts, ends, align = self._normalizer.words_with_offsets(part)
                nw = len(words)
                if align is None:
                    if pos:
                        starts = list(map(add, starts, repeat(pos, nw)))
                        ends = list(map(add, ends, repeat(pos, nw)))
                    # all C-level: ids, then per token (word start + piece start, word start + piece end)
                    pieces = list(map(wp._ids.__getitem__, words))
                    n0 = len(ids_out)
                    ids_out.extend(chain.from_iterable(pieces))
                    offs = list(zip(starts, ends))
                    track = words_out is not None
                    wids = list(range(w, w + nw)) if track else None
                    if len(ids_out) - n0 != nw:
                        # splice the few multi-piece words in, from the right so indices stay valid
                        multi = list(compress(range(nw), map(gt, map(len, pieces), repeat(1))))
                        spans = wp._spans
                        for i in reversed(multi):
                            s = starts[i]
                            rel = spans[words[i]]
                            offs[i : i + 1] = [(s + a, s + b) for a, b in rel]
                            if track:
                                wids[i : i + 1] = repeat(w + i, len(rel))
                    offsets_out.extend(offs)
                    if track:
                        words_out.extend(wids)
                else:
                    for (
                        word,
                        s,
                    ) in zip(words, starts):
                        wids = wp.word_ids(word)
                        ids_out.extend(wids)
                        offsets_out.extend(
                            [(pos + align[s + a], pos + align[s + b - 1] + 1) for a, b in wp.word_spans(word)]
                        )
                        if words_out is not None:
                            words_out.extend(repeat(w, len(wids)))
                        w += 1
                    w -= nw
                w += nw
        return w

    def _encode_seq(
        self, text: str | Sequence[str], details: bool, split_words: bool = False, words: bool = True
    ) -> _Seq:
        if split_words:
            if isinstance(text, str) or not all(isinstance(t, str) for t in text):
                raise TypeError(
                    f"with is_split_into_words=True each input must be a list of str, got {type(text).__name__}"
                )
            ids: list[int] = []
            offsets: list = []
            words: list = []
            for i, word in enumerate(text):
                n0 = len(words)
                self._encode_details(word, 0, 0, words, offsets, ids)
                words[n0:] = [i] * (len(words) - n0)
            return _Seq(ids, offsets, words)
        text = self._check_text(text)
        if not details:
            return _Seq(self._ids(text))
        ids, offsets = [], []
        word_ids = [] if words else None  # else computed on demand by BatchEncoding.word_ids()
        self._encode_details(text, 0, 0, word_ids, offsets, ids)
        return _Seq(ids, offsets, word_ids)

    def encode_batch_ids(self, texts: Iterable[str]) -> list[list[int]]:
        """Fast path: ids of each text, without special tokens, padding or truncation."""
        ids = self._ids
        out = []
        gc_was_enabled = gc.isenabled()
        gc.disable()  # see __call__
        try:
            for t in texts:
                if not isinstance(t, str):
                    self._check_text(t)
                out.append(ids(t))
        finally:
            if gc_was_enabled:
                gc.enable()
        return out

    # ------------------------------------------------------------------ simple API
    def tokenize(
        self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs: Any
    ) -> list[str]:
        """Tokens of ``text`` (or of the pair), as transformers' ``tokenize``: special and added tokens in
        the text are kept whole; ``add_special_tokens=True`` adds [CLS]/[SEP]. Other keyword arguments are
        ignored, as transformers ignores them here."""
        self._check_text(text)
        if pair is None and not add_special_tokens and not self._strip_ids:
            itt = self.ids_to_tokens
            return [itt[i] for i in self._ids(text)]
        if pair is not None:
            self._check_text(pair, "pair")
        # an empty pair still counts here, unlike in __call__ (no second [SEP] for it, as transformers)
        return self(text, pair or None, add_special_tokens=add_special_tokens, verbose=False).tokens()

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        unk = self._unk_id()
        if isinstance(tokens, str):
            return self.vocab.get(tokens, unk)
        return [self.vocab.get(t, unk) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int], skip_special_tokens: bool = False) -> str | list[str]:
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if isinstance(ids, int):
            return self._id_to_token(ids)
        # transformers skips the special tokens it names (all_special_ids) here, but every special added
        # token in decode()
        skip = frozenset(self.all_special_ids) if skip_special_tokens else frozenset()
        return [self._id_to_token(int(i)) for i in ids if int(i) not in skip]

    def _id_to_token(self, i: int) -> str:
        try:
            return self.ids_to_tokens[i]
        except KeyError:
            raise IndexError(f"token id {i} is out of range for a vocabulary of {len(self.vocab)}") from None

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """``tokens`` as one text, the way the WordPiece decoder joins them: ``##`` pieces glued to the
        token before (a leading one keeps its ``##``), the rest space-separated, no space before
        ``. ? ! ,``."""
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t[2:] if t.startswith("##") else " " + t
            if t in (" .", " ?", " !", " ,"):  # the decoder's per-token cleanup
                t = t[1:]
            out.append(t)
        return "".join(out)

    def build_inputs_with_special_tokens(self, ids_0: list[int], ids_1: list[int] | None = None) -> list[int]:
        cls, sep = [self.cls_token_id], [self.sep_token_id]
        return cls + ids_0 + sep if ids_1 is None else cls + ids_0 + sep + ids_1 + sep

    def create_token_type_ids_from_sequences(self, ids_0: list[int], ids_1: list[int] | None = None) -> list[int]:
        n0 = len(ids_0) + 2
        return [0] * n0 if ids_1 is None else [0] * n0 + [1] * (len(ids_1) + 1)

    def get_special_tokens_mask(
        self, ids_0: list[int], ids_1: list[int] | None = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        if already_has_special_tokens:
            special = frozenset(self.all_special_ids)
            return [1 if int(i) in special else 0 for i in ids_0]
        m = [1] + [0] * len(ids_0) + [1]
        return m if ids_1 is None else m + [0] * len(ids_1) + [1]

    def encode(
        self,
        text: str,
        text_pair: str | None = None,
        add_special_tokens: bool = True,
        return_tensors: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Ids of a text (or pair), with [CLS]/[SEP] unless ``add_special_tokens=False``: a list, or with
        ``return_tensors="pt"``/``"np"`` a (1, N) LongTensor / int64 array, as transformers returns."""
        enc = self(
            text,
            text_pair,
            add_special_tokens=add_special_tokens,
            return_attention_mask=False,
            return_token_type_ids=False,
            return_tensors=return_tensors,
            **kwargs,
        )
        return enc["input_ids"]

    def encode_plus(self, text: str, text_pair: str | None = None, **kwargs: Any) -> BatchEncoding:
        return self(text, text_pair, **kwargs)

    def batch_encode_plus(self, batch_text_or_text_pairs: Sequence, **kwargs: Any) -> BatchEncoding:
        if not isinstance(batch_text_or_text_pairs, (list, tuple)):
            raise TypeError(f"batch_encode_plus needs a list, got {type(batch_text_or_text_pairs).__name__}")
        return self(list(batch_text_or_text_pairs), **kwargs)

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str | list[str]:
        """Text of ``token_ids``: ``##`` pieces joined, the way BertTokenizerFast decodes. A batch (a list of
        id lists, or a 2-D tensor/array) gives a list of texts, as in transformers v5."""
        if hasattr(token_ids, "tolist"):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, dict) and "input_ids" in token_ids:
            token_ids = token_ids["input_ids"]
        if isinstance(token_ids, (list, tuple)) and token_ids and isinstance(token_ids[0], (list, tuple)):
            return [self.decode(row, skip_special_tokens, clean_up_tokenization_spaces) for row in token_ids]
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if not isinstance(token_ids, (list, tuple)):
            raise TypeError(f"decode needs token ids (a list of int), got {type(token_ids).__name__}")
        skip = self._special_id_set if skip_special_tokens else frozenset()
        try:
            tokens = [self._id_to_token(int(i)) for i in token_ids if int(i) not in skip]
        except (TypeError, ValueError) as e:
            raise TypeError(f"decode needs int token ids or a batch of them, got {str(token_ids)[:200]}") from e
        text = self.convert_tokens_to_string(tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        if clean_up_tokenization_spaces:
            text = clean_up_tokenization(text)
        return text

    def batch_decode(
        self,
        sequences: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> list[str]:
        if hasattr(sequences, "tolist"):
            sequences = sequences.tolist()
        return [self.decode(s, skip_special_tokens, clean_up_tokenization_spaces) for s in sequences]

    def pad(
        self,
        encoded_inputs: Any,
        padding: bool | str = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Pad already-encoded inputs (a dict of lists, or a list of dicts as data collators pass)."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], dict):
            encoded_inputs = {k: [ex[k] for ex in encoded_inputs] for k in encoded_inputs[0]}
        if not isinstance(encoded_inputs, dict) or "input_ids" not in encoded_inputs:
            raise ValueError("pad() needs a dict (or list of dicts) with 'input_ids'")
        data = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in encoded_inputs.items()}
        single = bool(data["input_ids"]) and isinstance(data["input_ids"][0], int) or data["input_ids"] == []
        if single:
            data = {k: [v] for k, v in data.items()}
        rows = data["input_ids"]
        want_am = return_attention_mask if return_attention_mask is not None else True
        if want_am and "attention_mask" not in data:
            data["attention_mask"] = [[1] * len(r) for r in rows]
        mode = _padding_mode(padding)
        if mode == "max_length" and max_length is None:
            max_length = self.model_max_length
        target = _pad_target(list(map(len, rows)), mode, max_length, pad_to_multiple_of)
        self._pad_columns(data, target, padding_side or self.padding_side)
        if not want_am:
            data.pop("attention_mask", None)
        return self._finish(data, single, return_tensors)

    def _pad_columns(self, data: dict[str, list], target: int | None, side: str) -> None:
        """Pad every known column of ``data`` (lists of rows) to ``target`` tokens, in place."""
        if target is None:
            return
        if self.pad_token_id is None:
            raise ValueError(f"padding needs a pad token, but {self.pad_token!r} is not in the vocabulary")
        fill = {
            "input_ids": self.pad_token_id,
            "token_type_ids": self.pad_token_type_id,
            "attention_mask": 0,
            "special_tokens_mask": 1,
            "offset_mapping": (0, 0),
        }
        for key, value in fill.items():
            col = data.get(key)
            if col is None:
                continue
            for r, row in enumerate(col):
                k = target - len(row)
                if k > 0:
                    col[r] = list(row) + [value] * k if side == "right" else [value] * k + list(row)

    @staticmethod
    def _finish(data: dict[str, Any], single: bool, return_tensors: str | None, **kwargs: Any) -> BatchEncoding:
        """The BatchEncoding of padded columns: one row unwrapped when ``single``, tensors when asked."""
        if single:
            data = {k: v[0] for k, v in data.items()}
        enc = BatchEncoding(data, batched=not single, **kwargs)
        if return_tensors is not None:
            if single:
                enc.update({k: [v] for k, v in enc.items()})
            enc.convert_to_tensors(return_tensors)
        return enc

    # ------------------------------------------------------------------ __call__
    def __call__(
        self,
        text: Any = None,
        text_pair: Any = None,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs: Any,
    ) -> BatchEncoding:
        """Encode a text, a pair, or a batch of either (see transformers' ``__call__``)."""
        # Encoding allocates millions of small containers and no cycles; the cyclic GC would
        # otherwise rescan the growing output again and again (up to ~1.5x slower with offsets).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._call(
                text,
                text_pair,
                add_special_tokens,
                padding,
                truncation,
                max_length,
                stride,
                is_split_into_words,
                pad_to_multiple_of,
                padding_side,
                return_tensors,
                return_token_type_ids,
                return_attention_mask,
                return_overflowing_tokens,
                return_special_tokens_mask,
                return_offsets_mapping,
                return_length,
                verbose,
                kwargs,
            )
        finally:
            if gc_was_enabled:
                gc.enable()

    def _call(
        self,
        text,
        text_pair,
        add_special_tokens,
        padding,
        truncation,
        max_length,
        stride,
        is_split_into_words,
        pad_to_multiple_of,
        padding_side,
        return_tensors,
        return_token_type_ids,
        return_attention_mask,
        return_overflowing_tokens,
        return_special_tokens_mask,
        return_offsets_mapping,
        return_length,
        verbose,
        kwargs,
    ) -> BatchEncoding:
        """The steps of ``__call__``: inputs, strategies, encode, window, assemble, pad, tensorise."""
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        batched, texts, pairs = _split_inputs(text, text_pair, is_split_into_words)
        n_special = (3 if pairs is not None else 2) if add_special_tokens else 0
        pad_mode, trunc, max_length = self._strategies(
            padding, truncation, max_length, stride, n_special, pad_to_multiple_of, verbose
        )
        side = padding_side or self.padding_side
        if side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {side!r}")
        if self.truncation_side not in ("right", "left"):
            raise ValueError(f"truncation_side must be 'right' or 'left', got {self.truncation_side!r}")
        details = return_offsets_mapping or is_split_into_words

        # encode each text once; windows are slices of these
        enc_seq = self._encode_seq
        seq_a = [enc_seq(t, details, is_split_into_words, False) for t in texts]
        seq_b = None if pairs is None else [enc_seq(t, details, is_split_into_words, False) for t in pairs]
        rows = self._window_rows(seq_a, seq_b, trunc, max_length, n_special, stride, return_overflowing_tokens, verbose)
        input_ids, types, specials, offsets = self._assemble(
            seq_a, seq_b, rows, trunc, add_special_tokens, details, return_special_tokens_mask
        )
        lengths = [len(r) for r in input_ids]

        data: dict[str, Any] = {"input_ids": input_ids, "token_type_ids": types}
        if return_attention_mask is None or return_attention_mask:
            data["attention_mask"] = [[1] * n for n in lengths]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = specials
        if details:
            data["offset_mapping"] = offsets
        self._pad_columns(data, _pad_target(lengths, pad_mode, max_length, pad_to_multiple_of), side)
        if return_token_type_ids is not None and not return_token_type_ids:
            del data["token_type_ids"]
        if not return_offsets_mapping:
            data.pop("offset_mapping", None)
        if return_length:
            data["length"] = lengths
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = [i for i, _, _ in rows]
        padded_lengths = [len(r) for r in data["input_ids"]]

        def row_details(r: int) -> tuple[list, list, list, list]:
            return self._row_details(rows[r], seq_a, seq_b, texts, pairs, add_special_tokens, padded_lengths[r], side)

        return self._finish(
            data,
            not batched and not return_overflowing_tokens,
            return_tensors,
            rows=rows,
            details=row_details,
            n_sequences=1 if pairs is None else 2,
        )

    def _strategies(
        self,
        padding: Any,
        truncation: Any,
        max_length: int | None,
        stride: int,
        n_special: int,
        pad_to_multiple_of: int | None,
        verbose: bool,
    ) -> tuple[str | None, str | None, int | None]:
        """(padding mode, truncation strategy, max_length) resolved the way transformers does."""
        pad_mode = _padding_mode(padding)
        if truncation is None and max_length is not None and pad_mode is None:
            truncation = "longest_first"  # transformers' default when only max_length is given
        if truncation is True:
            trunc = "longest_first"
        elif truncation in (None, False, "do_not_truncate"):
            trunc = None
        elif truncation in ("longest_first", "only_first", "only_second"):
            trunc = truncation
        else:
            raise ValueError(
                "truncation must be True, False, 'longest_first', 'only_first', 'only_second' "
                f"or 'do_not_truncate', got {truncation!r}"
            )
        if pad_mode == "longest" and trunc is None and max_length is not None and verbose:
            warnings.warn(
                "max_length is ignored when padding=True and there is no truncation; to pad to "
                "max_length use padding='max_length'",
                stacklevel=4,
            )
        if max_length is None and (trunc is not None or pad_mode == "max_length"):
            max_length = self.model_max_length
        if max_length is not None and max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        if trunc is not None and max_length is not None and max_length < n_special:
            raise ValueError(f"max_length={max_length} is smaller than the {n_special} special tokens this input needs")
        if (
            trunc is not None
            and pad_mode is not None
            and pad_to_multiple_of
            and max_length is not None
            and max_length % pad_to_multiple_of
        ):
            raise ValueError(
                f"truncation length ({max_length}) is not a multiple of pad_to_multiple_of ({pad_to_multiple_of})"
            )
        if stride < 0:
            raise ValueError(f"stride must be >= 0, got {stride}")
        return pad_mode, trunc, max_length

    def _window_rows(
        self,
        seq_a: list[_Seq],
        seq_b: list[_Seq] | None,
        trunc: str | None,
        max_length: int | None,
        n_special: int,
        stride: int,
        overflow: bool,
        verbose: bool,
    ) -> list[tuple[int, tuple[int, int], tuple[int, int] | None]]:
        """Truncate into windows: rows of (sample, (a0, a1), (b0, b1) | None); only the first unless ``overflow``."""
        rows: list[tuple[int, tuple[int, int], tuple[int, int] | None]] = []
        for i, a in enumerate(seq_a):
            la = len(a.ids)
            lb = None if seq_b is None else len(seq_b[i].ids)
            if trunc is None:
                wins = [((0, la), None if lb is None else (0, lb))]
                if (
                    verbose
                    and max_length is None
                    and not self._warned_length
                    and la + (lb or 0) + n_special > self.model_max_length
                ):
                    self._warned_length = True  # once per tokenizer, like transformers
                    warnings.warn(
                        f"Token indices sequence length is longer than the specified maximum sequence length "
                        f"for this model ({la + (lb or 0) + n_special} > {self.model_max_length}). Running this "
                        "sequence through the model will result in indexing errors; pass truncation=True.",
                        stacklevel=5,
                    )
            else:
                wins = _windows(la, lb, max_length - n_special, trunc, stride)
                if self.truncation_side == "left":
                    wins = _from_the_left(wins, la, lb, overflow)
            if not overflow:
                wins = wins[:1]
            rows.extend((i, ra, rb) for ra, rb in wins)
        return rows

    def _assemble(
        self,
        seq_a: list[_Seq],
        seq_b: list[_Seq] | None,
        rows: list,
        trunc: str | None,
        add_special_tokens: bool,
        details: bool,
        want_specials: bool,
    ) -> tuple[list, list, list, list]:
        """input_ids, token_type_ids, special_tokens_mask and offsets of every row, special tokens added."""
        cls_id, sep_id = self.cls_token_id, self.sep_token_id
        input_ids, types, specials, offsets = [], [], [], []
        if seq_b is None and trunc is None:
            # the common case, in list comprehensions: one row per text, nothing cut
            if add_special_tokens:
                input_ids = [[cls_id, *a.ids, sep_id] for a in seq_a]
                if details:
                    offsets = [[(0, 0), *a.offsets, (0, 0)] for a in seq_a]
                if want_specials:
                    specials = [[1, *([0] * len(a.ids)), 1] for a in seq_a]
            else:
                input_ids = [a.ids for a in seq_a]
                if details:
                    offsets = [a.offsets for a in seq_a]
                if want_specials:
                    specials = [[0] * len(a.ids) for a in seq_a]
            types = [[0] * len(r) for r in input_ids]
            return input_ids, types, specials, offsets
        for i, (a0, a1), rb in rows:
            ids_a = seq_a[i].ids[a0:a1]
            if rb is None:
                if add_special_tokens:
                    ids = [cls_id, *ids_a, sep_id]
                    n = len(ids)
                    tt = [0] * n
                    sm = [1, *([0] * (n - 2)), 1]
                else:
                    ids = ids_a
                    n = len(ids)
                    tt = [0] * n
                    sm = [0] * n
                if details:
                    off = seq_a[i].offsets[a0:a1]
                    off = [(0, 0), *off, (0, 0)] if add_special_tokens else off
            else:
                b0, b1 = rb
                ids_b = seq_b[i].ids[b0:b1]
                if add_special_tokens:
                    ids = [cls_id, *ids_a, sep_id, *ids_b, sep_id]
                    tt = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
                    sm = [1, *([0] * len(ids_a)), 1, *([0] * len(ids_b)), 1]
                else:
                    ids = ids_a + ids_b
                    tt = [0] * len(ids_a) + [1] * len(ids_b)
                    sm = [0] * len(ids)
                if details:
                    oa, ob = seq_a[i].offsets[a0:a1], seq_b[i].offsets[b0:b1]
                    off = [(0, 0), *oa, (0, 0), *ob, (0, 0)] if add_special_tokens else oa + ob
            input_ids.append(ids)
            types.append(tt)
            specials.append(sm)
            if details:
                offsets.append(off)
        return input_ids, types, specials, offsets

    def _row_details(
        self,
        row: tuple,
        seq_a: list[_Seq],
        seq_b: list[_Seq] | None,
        texts: list,
        pairs: list | None,
        add_special_tokens: bool,
        padded_length: int,
        side: str,
    ) -> tuple[list, list, list, list]:
        """Tokens, word ids, sequence ids and offsets of one row, computed only when BatchEncoding asks."""
        i, (a0, a1), rb = row
        a = seq_a[i] if seq_a[i].words is not None else self._encode_seq(texts[i], True)
        toks, words, offs = self._seq_details(a, a0, a1, texts[i])
        seqs = [0] * len(toks)
        if rb is not None:
            b = seq_b[i] if seq_b[i].words is not None else self._encode_seq(pairs[i], True)
            tb, wb, ob = self._seq_details(b, rb[0], rb[1], pairs[i])
        none = (0, 0)
        if add_special_tokens:
            toks = [self.cls_token, *toks, self.sep_token]
            words = [None, *words, None]
            seqs = [None, *seqs, None]
            offs = [none, *offs, none]
            if rb is not None:
                toks += tb + [self.sep_token]
                words += wb + [None]
                seqs += [1] * len(tb) + [None]
                offs += ob + [none]
        elif rb is not None:
            toks += tb
            words += wb
            seqs += [1] * len(tb)
            offs += ob
        k = padded_length - len(toks)
        if k > 0:
            if side == "right":
                toks += [self.pad_token] * k
                words += [None] * k
                seqs += [None] * k
                offs += [none] * k
            else:
                toks = [self.pad_token] * k + toks
                words = [None] * k + words
                seqs = [None] * k + seqs
                offs = [none] * k + offs
        return toks, words, seqs, offs

    def _seq_details(self, seq: _Seq, start: int, stop: int, text: str | list[str]) -> tuple[list, list, list]:
        """Tokens, word ids and offsets of ``seq[start:stop]``. An added token with lstrip/rstrip shows
        the text it matched, whitespace included, as transformers' ``tokens()`` does."""
        ids = seq.ids[start:stop]
        itt = self.ids_to_tokens
        toks = [itt[x] for x in ids]
        words = seq.words[start:stop]
        offs = seq.offsets[start:stop]
        if self._strip_ids:
            for k, tid in enumerate(ids):
                if tid in self._strip_ids:
                    src = text if isinstance(text, str) else text[words[k]]
                    shown = self._stripped_token_text(tid, src[offs[k][0] : offs[k][1]])
                    if shown is not None:
                        toks[k] = shown
        return toks, words, offs


def _split_inputs(text: Any, text_pair: Any, split_words: bool) -> tuple[bool, list, list | None]:
    """(batched, texts, pairs or None) from ``__call__``'s text arguments."""
    if text is None:
        raise ValueError("you need to give `text` (a str, a list of str, or a list of pairs)")
    if not _is_batched(text, split_words):
        # like transformers, an empty second text means "no pair"
        return False, [text], [text_pair] if text_pair else None
    texts = list(text)
    if text_pair is None:
        if texts and all(isinstance(t, (tuple, list)) and len(t) == 2 and not split_words for t in texts):
            return True, [t[0] for t in texts], [t[1] for t in texts]
        return True, texts, None
    if not _is_batched(text_pair, split_words):
        raise TypeError(f"text is a batch, so text_pair must be a batch too, got {type(text_pair).__name__}")
    pairs = list(text_pair)
    if len(pairs) != len(texts):
        raise ValueError(f"text has {len(texts)} items but text_pair has {len(pairs)}")
    return True, texts, pairs


def _padding_mode(padding: Any) -> str | None:
    """``"longest"``, ``"max_length"`` or None (no padding) for transformers' ``padding`` values."""
    if padding is True or padding == "longest":
        return "longest"
    if padding is False or padding is None or padding == "do_not_pad":
        return None
    if padding == "max_length":
        return "max_length"
    raise ValueError(f"padding must be True, False, 'longest', 'max_length' or 'do_not_pad', got {padding!r}")


def _pad_target(lengths: list[int], mode: str | None, max_length: int | None, multiple: int | None) -> int | None:
    """The padded length of every row (None: no padding), rounded up to ``multiple``."""
    if mode == "longest":
        target = max(lengths, default=0)
    elif mode == "max_length":
        target = max_length
    else:
        return None
    if target is not None and multiple:
        target = -(-target // multiple) * multiple
    return target


def _from_the_left(wins: list, la: int, lb: int | None, overflow: bool) -> list:
    """The kept window of a right cut, mirrored: the same number of tokens of each text, taken from its
    end (``truncation_side="left"``, which keeps the last tokens, as transformers does)."""
    if overflow and len(wins) > 1:
        raise ValueError(
            "truncation_side='left' keeps one window; with return_overflowing_tokens use truncation_side='right'"
        )
    (a0, a1), b = wins[0]
    return [((la - (a1 - a0), la), None if b is None else (lb - (b[1] - b[0]), lb))]


def _windows(la: int, lb: int | None, room: int, strategy: str, stride: int):
    """Truncation windows as tokenizers computes them: [(range_a, range_b), ...], first = kept."""

    def split(n: int, keep: int) -> list[tuple[int, int]]:
        if keep >= n:
            return [(0, n)]
        if keep == 0:
            return [(0, 0), (0, n)]
        if stride >= keep:
            raise ValueError(f"stride={stride} must be smaller than the room left for the text ({keep} tokens)")
        step = keep - stride
        out = []
        start = 0
        while True:
            stop = min(start + keep, n)
            out.append((start, stop))
            if stop == n:
                return out
            start += step

    if lb is None:
        if strategy == "only_second" and la > room:
            raise ValueError("truncation='only_second' needs a text pair")
        return [(w, None) for w in split(la, room)]
    total = la + lb
    if total <= room:
        return [((0, la), (0, lb))]
    if strategy == "longest_first":
        n1, n2 = la, lb
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > room else max(n1, room - n1)
        if n1 + n2 > room:
            n1 = room // 2
            n2 = n1 + room % 2
        if swap:
            n1, n2 = n2, n1
        wa, wb = split(la, n1), split(lb, n2)
    elif strategy == "only_first":
        to_remove = total - room
        if la <= to_remove:
            raise ValueError(
                f"cannot truncate the first text ({la} tokens) by {to_remove} tokens to fit "
                f"max_length; use truncation='longest_first' or a larger max_length"
            )
        wa, wb = split(la, la - to_remove), [(0, lb)]
    else:
        to_remove = total - room
        if lb <= to_remove:
            raise ValueError(
                f"cannot truncate the second text ({lb} tokens) by {to_remove} tokens to fit "
                f"max_length; use truncation='longest_first' or a larger max_length"
            )
        wa, wb = [(0, la)], split(lb, lb - to_remove)
    # the order in which tokenizers' Encoding.merge_with combines overflowing parts
    out = [(wa[0], wb[0])]
    for a in wa[1:]:
        out.append((a, wb[0]))
        out.extend((a, b) for b in wb[1:])
    out.extend((wa[0], b) for b in wb[1:])
    return out


def _from_tokenizer_json(path: Path) -> dict[str, Any]:
    """Constructor arguments from a `tokenizers` tokenizer.json holding a WordPiece model."""
    spec = read_json(path)
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(spec).__name__}")
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ValueError(f"{path}: not a WordPiece tokenizer (model type {model.get('type')!r})")
    vocab = model["vocab"]
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{path}: WordPiece vocabulary ids are not 0..{len(vocab) - 1}")
    out: dict[str, Any] = {
        "vocab": vocab,
        "unk_token": model.get("unk_token", "[UNK]"),
        "max_input_chars_per_word": model.get("max_input_chars_per_word", 100),
        "added_tokens_decoder": _tokenizer_json_added(spec, path),
    }
    norm = spec.get("normalizer") or {}
    if norm.get("type") == "BertNormalizer":
        out.update(
            do_lower_case=norm.get("lowercase", True),
            strip_accents=norm.get("strip_accents"),
            tokenize_chinese_chars=norm.get("handle_chinese_chars", True),
        )
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


def _added_tokens_from_files(path: Path, config: dict[str, Any]) -> dict[int, AddedToken]:
    """The added tokens a saved folder describes, by id: tokenizer.json's ``added_tokens`` when it sits
    beside a vocab.txt and the config lists none, tokenizer_config.json's ``added_tokens_decoder``, and a
    transformers v4 ``added_tokens.json`` (content -> id; special when the config names it special)."""
    out: dict[int, AddedToken] = {}
    decoder = config.get("added_tokens_decoder")
    tj = path / "tokenizer.json"
    if decoder is None and (path / VOCAB_FILE).is_file() and tj.is_file():
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
        specials = {config.get(k) for k in _SPECIAL_KEYS} | set(config.get("additional_special_tokens") or [])
        for content, tid in loaded.items():
            out.setdefault(_token_id(tid, str(f)), AddedToken(content, special=content in specials))
    return out


def _alternation(patterns: dict[str, int]) -> re.Pattern | None:
    """One regex for literal patterns; longest first, so each match is leftmost-longest."""
    if not patterns:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(patterns, key=len, reverse=True)))


def _is_batched(x: Any, split_words: bool) -> bool:
    if isinstance(x, str):
        return False
    if isinstance(x, (list, tuple)):
        if split_words:
            return bool(x) and isinstance(x[0], (list, tuple))
        return True
    raise TypeError(f"text must be a str, a list of str or a list of pairs, got {type(x).__name__}")


def clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``: undo spaces before punctuation and contractions."""
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


def load_tokenizer(vocab: str | os.PathLike, lower_case: bool | None = None) -> BertTokenizer:
    """A :class:`BertTokenizer` for a vocab.txt or a folder holding one (and tokenizer_config.json).

    ``lower_case`` overrides the saved (or default) ``do_lower_case`` when given.
    """
    path = Path(vocab)
    kwargs = {} if lower_case is None else {"do_lower_case": lower_case}
    if path.is_dir():
        return BertTokenizer.from_pretrained(str(path), **kwargs)
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    return BertTokenizer(str(path), **kwargs)
