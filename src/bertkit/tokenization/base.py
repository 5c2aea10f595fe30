"""TokenizerBase: transformers' tokenizer calls (``__call__``, ``pad``, ``decode``, added and special
tokens, truncation windows, offsets) over any model that turns a text into ids.

A subclass gives the model: ``_ids(text)`` (ids of one text, added tokens kept whole),
``_encode_seq`` (ids with offsets and word indices), ``convert_tokens_to_string`` and the special
tokens it wraps a text or a pair in.
"""

from __future__ import annotations

import gc
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

from bertkit._text import read_json

from .added_tokens import (
    _DEFAULT_MAX_LENGTH,
    _SPECIAL_KEYS,
    _STRIP_SPACE,
    CONFIG_FILE,
    SPECIAL_TOKENS_FILE,
    AddedToken,
    _added_tokens_from_files,
    _alternation,
    _as_added_token,
    _fill_gaps,
    _is_token_like,
    _is_word_char,
    _token_id,
)
from .encoding import BatchEncoding
from .truncation import (
    _from_the_left,
    _pad_target,
    _padding_mode,
    _Seq,
    _split_inputs,
    _windows,
    clean_up_tokenization,
)


def _folder_config(path: Path, kwargs: dict[str, Any], vocab_name: str) -> dict[str, Any]:
    """Constructor arguments from a saved folder's tokenizer_config.json and special_tokens_map.json (an
    AddedToken's dict read as its content), its added tokens by id, then ``kwargs`` on top."""
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
    added = _added_tokens_from_files(path, config, vocab_name)
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
    return config


class TokenizerBase:
    """The calls every bertkit tokenizer shares; see the module docstring for what a subclass gives."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    _special_keys: tuple[str, ...] = _SPECIAL_KEYS
    never_split: set[str] = frozenset()  # type: ignore[assignment]
    padding_side = "right"
    truncation_side = "right"

    @property
    def _model_vocab(self) -> dict[str, int]:
        """The model's own vocabulary (no added tokens)."""
        raise NotImplementedError

    def _init_added(self, added_tokens_decoder: dict[int, Any] | None, extra: list[AddedToken]) -> None:
        """Register the added tokens a folder gives (by id), then the named and ``extra`` special tokens."""
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
        named = [
            AddedToken(getattr(self, k), special=True)
            for k in self._special_keys
            if getattr(self, k, None) is not None and getattr(self, k) in self.vocab
        ]
        for tok in named + extra:
            if self.vocab.get(tok.content) in self._added:
                self._special_contents[tok.content] = None
            else:
                self._add([tok], refresh=False)
        self._refresh_added()

    def _shown(self, text: str) -> str:
        """How an added token with ``normalized=True`` is shown (the normalizer's output)."""
        return text

    def _normalize_for_added(self, part: str) -> tuple[str, list[int] | None, frozenset[int]]:
        """(normalized text, its alignment to ``part`` or None when positions are kept, positions that
        stand for no source character): where ``normalized=True`` added tokens are matched."""
        return part, None, frozenset()

    # ------------------------------------------------------------------ added tokens
    def _set_added(self, tid: int, tok: AddedToken) -> None:
        """Give ``tok`` the id ``tid`` (its content then encodes to ``tid``; ``tid`` decodes to it)."""
        old = self._added.get(tid)
        if old is not None and old.content != tok.content and self.vocab.get(old.content) == tid:
            if self._model_vocab.get(old.content) != tid:
                del self.vocab[old.content]
        self._added[tid] = tok
        self.vocab[tok.content] = tid
        # transformers shows a normalized added token in its normalized form (tokens(), decode())
        # a normalized added token is shown (decode, convert_ids_to_tokens, tokens) in its normalized form,
        # as `tokenizers` 0.23 gives it
        self.ids_to_tokens[tid] = self._shown(tok.content) if tok.normalized else tok.content

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
            norm, align, pads = self._normalize_for_added(part)
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

    # ------------------------------------------------------------------ special tokens
    @property
    def special_tokens_map(self) -> dict[str, Any]:
        m: dict[str, Any] = {k: getattr(self, k) for k in self._special_keys if getattr(self, k, None) is not None}
        if self.additional_special_tokens:
            m["additional_special_tokens"] = list(self.additional_special_tokens)
        return m

    @property
    def all_special_tokens(self) -> list[str]:
        out: list[str] = []
        for k in self._special_keys:
            t = getattr(self, k, None)
            if t is not None and t not in out:
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
    bos_token_id = property(lambda self: self.vocab.get(getattr(self, "bos_token", None)))
    eos_token_id = property(lambda self: self.vocab.get(getattr(self, "eos_token", None)))
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
            elif key in self._special_keys:
                if not _is_token_like(value):
                    raise ValueError(f"{key} must be a str or an AddedToken, got {value!r} ({type(value).__name__})")
                tok = _as_added_token(value, True, key)
                setattr(self, key, tok.content)
                to_add.append(tok)
            else:
                raise ValueError(
                    f"unknown special token key {key!r}; use one of {self._special_keys} or 'additional_special_tokens'"
                )
        return self._add(to_add)

    def __len__(self) -> int:
        return len(self.vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    @property
    def is_fast(self) -> bool:
        return True

    def _template(self, pair: bool) -> tuple[list, list, list, int, int]:
        """The special tokens a text (or a pair) is wrapped in: (before A, between A and B, after the last
        text, type id of A, type id of B); each special token as (id, token, type id). BERT's here."""
        cls, sep = (self.cls_token_id, self.cls_token, 0), (self.sep_token_id, self.sep_token, 0)
        if not pair:
            return [cls], [], [sep], 0, 1
        return [cls], [sep], [(sep[0], sep[1], 1)], 0, 1

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        pre, mid, post, _, _ = self._template(pair)
        return len(pre) + len(mid) + len(post)

    def build_inputs_with_special_tokens(self, ids_0: list[int], ids_1: list[int] | None = None) -> list[int]:
        pre, mid, post, _, _ = self._template(ids_1 is not None)
        ids = [t[0] for t in pre] + list(ids_0)
        if ids_1 is not None:
            ids += [t[0] for t in mid] + list(ids_1)
        return ids + [t[0] for t in post]

    def create_token_type_ids_from_sequences(self, ids_0: list[int], ids_1: list[int] | None = None) -> list[int]:
        pre, mid, post, ta, tb = self._template(ids_1 is not None)
        types = [t[2] for t in pre] + [ta] * len(ids_0)
        if ids_1 is not None:
            types += [t[2] for t in mid] + [tb] * len(ids_1)
        return types + [t[2] for t in post]

    def get_special_tokens_mask(
        self, ids_0: list[int], ids_1: list[int] | None = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        if already_has_special_tokens:
            special = frozenset(self.all_special_ids)
            return [1 if int(i) in special else 0 for i in ids_0]
        pre, mid, post, _, _ = self._template(ids_1 is not None)
        m = [1] * len(pre) + [0] * len(ids_0)
        if ids_1 is not None:
            m += [1] * len(mid) + [0] * len(ids_1)
        return m + [1] * len(post)

    # ------------------------------------------------------------------ core
    def _check_text(self, text: Any, what: str = "text") -> str:
        if not isinstance(text, str):
            raise TypeError(f"{what} must be a str (or a list of str for a batch), got {type(text).__name__}")
        return text

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
        n_special = self.num_special_tokens_to_add(pairs is not None) if add_special_tokens else 0
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
        input_ids, types, specials, offsets = [], [], [], []
        pre, _, post, ta, _ = self._template(False)
        if seq_b is None and trunc is None and ta == 0 and all(t[2] == 0 for t in pre + post):
            # the common case, in list comprehensions: one row per text, nothing cut
            if add_special_tokens:
                p_ids, s_ids = [t[0] for t in pre], [t[0] for t in post]
                input_ids = [[*p_ids, *a.ids, *s_ids] for a in seq_a]
                if details:
                    p_off, s_off = [(0, 0)] * len(pre), [(0, 0)] * len(post)
                    offsets = [[*p_off, *a.offsets, *s_off] for a in seq_a]
                if want_specials:
                    p_m, s_m = [1] * len(pre), [1] * len(post)
                    specials = [[*p_m, *([0] * len(a.ids)), *s_m] for a in seq_a]
            else:
                input_ids = [a.ids for a in seq_a]
                if details:
                    offsets = [a.offsets for a in seq_a]
                if want_specials:
                    specials = [[0] * len(a.ids) for a in seq_a]
            types = [[0] * len(r) for r in input_ids]
            return input_ids, types, specials, offsets
        templates = (self._template(False), self._template(True)) if add_special_tokens else None
        none = (0, 0)
        for i, (a0, a1), rb in rows:
            parts = [(seq_a[i], a0, a1)] if rb is None else [(seq_a[i], a0, a1), (seq_b[i], rb[0], rb[1])]
            if templates is None:
                pre, mid, post, ta, tb = [], [], [], 0, 1
            else:
                pre, mid, post, ta, tb = templates[rb is not None]
            ids, tt, sm, off = [t[0] for t in pre], [t[2] for t in pre], [1] * len(pre), [none] * len(pre)
            for k, (seq, s0, s1) in enumerate(parts):
                if k:
                    ids += [t[0] for t in mid]
                    tt += [t[2] for t in mid]
                    sm += [1] * len(mid)
                    off += [none] * len(mid)
                ids += seq.ids[s0:s1]
                tt += [tb if k else ta] * (s1 - s0)
                sm += [0] * (s1 - s0)
                if details:
                    off += seq.offsets[s0:s1]
            ids += [t[0] for t in post]
            tt += [t[2] for t in post]
            sm += [1] * len(post)
            input_ids.append(ids)
            types.append(tt)
            specials.append(sm)
            if details:
                offsets.append(off + [none] * len(post))
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
            pre, mid, post, _, _ = self._template(rb is not None)
            toks = [t[1] for t in pre] + toks
            words = [None] * len(pre) + words
            seqs = [None] * len(pre) + seqs
            offs = [none] * len(pre) + offs
            if rb is not None:
                toks += [t[1] for t in mid] + tb
                words += [None] * len(mid) + wb
                seqs += [None] * len(mid) + [1] * len(tb)
                offs += [none] * len(mid) + ob
            toks += [t[1] for t in post]
            words += [None] * len(post)
            seqs += [None] * len(post)
            offs += [none] * len(post)
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
                    if getattr(self, "trim_offsets", None):
                        # offsets trimmed of the whitespace the token took: the token still shows it
                        (a, b), tok = offs[k], self._added[tid]
                        while tok.lstrip and a > 0 and src[a - 1] in _STRIP_SPACE:
                            a -= 1
                        while tok.rstrip and b < len(src) and src[b] in _STRIP_SPACE:
                            b += 1
                        toks[k] = src[a:b]
        return toks, words, offs
