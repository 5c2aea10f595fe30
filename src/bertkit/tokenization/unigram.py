"""Unigram tokenizers (SentencePiece's model, as XLM-RoBERTa uses it) with transformers' names.

Read from a `tokenizers` ``tokenizer.json`` (a ``Unigram`` model, a ``Metaspace`` pre-tokenizer and
decoder, the normalizer it declares, Precompiled charsmap included) or straight from a SentencePiece
``.model`` file (a small protobuf reader, no dependency). Ids, offsets and decode match `tokenizers`;
see tests/test_tokenizer_unigram.py.

Each piece (a word with its leading ``▁``) is cut by Viterbi over the vocabulary's log
probabilities; the best cut of every piece is cached, so common words cost one dict lookup.
"""

from __future__ import annotations

import os
import re
import struct
from itertools import accumulate, chain, pairwise, repeat
from pathlib import Path
from typing import Any, Iterable, Sequence

from .._io import atomic_write_json
from .added_tokens import (
    _DEFAULT_MAX_LENGTH,
    CONFIG_FILE,
    SPECIAL_TOKENS_FILE,
    AddedToken,
    _as_added_token,
    _tokenizer_json_added,
)
from .base import TokenizerBase, _folder_config
from .byte_level import _Cache, trim_offsets
from .pieces import PieceTokenizer
from .sp_normalize import build_normalizer
from .tokenizer_json import NO_TEMPLATE, Template, added_tokens_json, post_processor, read_spec, template_json

__all__ = ["UnigramTokenizer", "XLMRobertaTokenizer", "read_sentencepiece_model"]

TOKENIZER_JSON = "tokenizer.json"
SPM_FILE = "sentencepiece.bpe.model"
_UNK_PENALTY = 10.0
_SPACE = "\u2581"
# Metaspace's split of ASCII text, its spaces kept for ▁: each piece from a space to the next
_ascii_pieces = re.compile(" [^ ]*|[^ ]+").findall


# ------------------------------------------------------------------------------ SentencePiece .model
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def _fields(buf: bytes, where: str):
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes for lengths."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = _varint(buf, i)
        elif wire == 1:
            val, i = buf[i : i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            val, i = buf[i : i + n], i + n
        elif wire == 5:
            val, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"{where}: not a SentencePiece model (protobuf wire type {wire} at byte {i})")
        yield num, wire, val


def read_sentencepiece_model(path: str | os.PathLike) -> dict[str, Any]:
    """The parts of a SentencePiece ``.model`` bertkit uses: pieces (text, score, type), the model type
    (1 Unigram, 2 BPE), unk id, byte fallback, and the normalizer spec (charsmap, dummy prefix, extra
    whitespace removal)."""
    where = str(path)
    data = Path(path).read_bytes()
    pieces: list[tuple[str, float, int]] = []
    out: dict[str, Any] = {"model_type": 1, "unk_id": 0, "byte_fallback": False, "pieces": pieces}
    norm = {"charsmap": b"", "add_dummy_prefix": True, "remove_extra_whitespaces": True, "name": ""}
    try:
        for num, _, val in _fields(data, where):
            if num == 1:
                piece, score, kind = "", 0.0, 1
                for n, w, v in _fields(val, where):
                    if n == 1:
                        piece = v.decode("utf-8")
                    elif n == 2 and w == 5:
                        score = struct.unpack("<f", v)[0]
                    elif n == 3:
                        kind = v
                pieces.append((piece, score, kind))
            elif num == 2:
                for n, _, v in _fields(val, where):
                    if n == 3:
                        out["model_type"] = v
                    elif n == 35:
                        out["byte_fallback"] = bool(v)
                    elif n == 40:
                        out["unk_id"] = v
            elif num == 3:
                for n, _, v in _fields(val, where):
                    if n == 1:
                        norm["name"] = v.decode("utf-8")
                    elif n == 2:
                        norm["charsmap"] = bytes(v)
                    elif n == 3:
                        norm["add_dummy_prefix"] = bool(v)
                    elif n == 4:
                        norm["remove_extra_whitespaces"] = bool(v)
    except (IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a SentencePiece model ({e})") from None
    if not pieces:
        raise ValueError(f"{where}: not a SentencePiece model (no pieces)")
    out["normalizer"] = norm
    return out


def spec_from_sentencepiece(path: str | os.PathLike) -> dict[str, Any]:
    """A tokenizer.json-shaped dict for a SentencePiece Unigram model, as transformers' converter writes it:
    the charsmap, trailing whitespace stripped and runs of spaces made one ``▁`` (when the model removes
    extra whitespace), Metaspace with a ``▁`` prepended (when it adds a dummy prefix)."""
    import base64

    m = read_sentencepiece_model(path)
    if m["model_type"] != 1:
        raise ValueError(f"{path}: SentencePiece model type {m['model_type']} is not Unigram (1)")
    norm = m["normalizer"]
    steps: list[dict[str, Any]] = []
    if norm["charsmap"]:
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(norm["charsmap"]).decode()})
    if norm["remove_extra_whitespaces"]:
        steps.append({"type": "Strip", "strip_left": False, "strip_right": True})
        steps.append({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": _SPACE})
    scheme = "always" if norm["add_dummy_prefix"] else "never"
    meta = {"type": "Metaspace", "replacement": _SPACE, "prepend_scheme": scheme, "split": True}
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    # control pieces (<s>, </s>) are special tokens, as transformers' converter makes them
    added = [{"id": i, "content": p, **flags} for i, (p, _, kind) in enumerate(m["pieces"]) if kind == 3]
    return {
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": steps} if steps else None,
        "pre_tokenizer": meta,
        "decoder": meta,
        "post_processor": None,
        "model": {
            "type": "Unigram",
            "unk_id": m["unk_id"],
            "vocab": [[p, s] for p, s, _ in m["pieces"]],
            "byte_fallback": m["byte_fallback"],
        },
    }


# ------------------------------------------------------------------------------ the model
_NOT_FOUND = (-1, 0.0, False)  # a string that neither is a piece nor starts one


class _Viterbi(dict):
    """piece -> (ids, spans within the piece): the best Unigram cut, computed on first use."""

    def __init__(self, pieces: dict[str, tuple[int, float]], unk_id: int, unk_score: float) -> None:
        super().__init__()
        self.pieces = pieces
        self.unk_id = unk_id
        self.unk_score = unk_score
        self.max_len = max((len(p) for p in pieces), default=1)
        # one lookup per candidate: (id or -1 for a proper prefix only, score, whether a longer piece
        # starts with it); past a string that is no piece's prefix no longer candidate can match
        prefixes = {p[:k] for p in pieces for k in range(1, len(p))}
        self.lattice = {p: (-1, 0.0, True) for p in prefixes}
        self.lattice.update((p, (i, sc, p in prefixes)) for p, (i, sc) in pieces.items())

    def __missing__(self, word: str) -> tuple[list[int], list[tuple[int, int]]]:
        if len(self) > 1_000_000:
            self.clear()
        value = self[word] = self.cut(word)
        return value

    def cut(self, word: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Viterbi as `tokenizers` runs it: starts left to right, lengths short to long, a later
        candidate replaces a node's best only when strictly better; an unknown character scores the
        lowest piece score minus 10, and neighbouring unknowns fuse into one token."""
        n = len(word)
        get, max_len, unk_id, unk_score = self.lattice.get, self.max_len, self.unk_id, self.unk_score
        # the best path to each position: its score, the start of its last token and that token's id
        score = [0.0] + [float("-inf")] * n
        start = [0] * (n + 1)
        tid = [0] * (n + 1)
        for s in range(n):
            base = score[s]
            single = False
            for e in range(s + 1, min(n, s + max_len) + 1):
                pid, piece_score, longer = get(word[s:e], _NOT_FOUND)
                if pid >= 0:
                    if e == s + 1:
                        single = True
                    cand = base + piece_score
                    if cand > score[e]:
                        score[e], start[e], tid[e] = cand, s, pid
                if not longer:
                    break
            if not single:
                cand = base + unk_score
                if cand > score[s + 1]:
                    score[s + 1], start[s + 1], tid[s + 1] = cand, s, unk_id
        out_ids: list[int] = []
        out_spans: list[tuple[int, int]] = []
        e = n
        while e > 0:
            s, t = start[e], tid[e]
            if t == unk_id and out_ids and out_ids[-1] == unk_id:
                out_spans[-1] = (s, out_spans[-1][1])  # neighbouring unknowns fuse
            else:
                out_ids.append(t)
                out_spans.append((s, e))
            e = s
        out_ids.reverse()
        out_spans.reverse()
        return out_ids, out_spans


class UnigramTokenizer(PieceTokenizer):
    """A Unigram tokenizer with transformers' calls; XLMRobertaTokenizer sets XLM-R's defaults."""

    model_input_names = ["input_ids", "attention_mask"]
    _special_keys = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
    _class_name = "PreTrainedTokenizerFast"
    _defaults: dict[str, Any] = {}

    def __init__(
        self,
        vocab: list[tuple[str, float]] | None = None,
        unk_id: int | None = 0,
        normalizer: dict[str, Any] | None = None,
        prepend_scheme: str = "always",
        split: bool = True,
        templates: dict[bool, Template] | None = None,
        trim_offsets: bool | None = None,
        trim_prefix_space: bool = True,
        model_max_length: int = _DEFAULT_MAX_LENGTH,
        clean_up_tokenization_spaces: bool = False,
        additional_special_tokens: Iterable[Any] | None = None,
        added_tokens_decoder: dict[int, Any] | None = None,
        where: str = "tokenizer",
        **kwargs: Any,
    ) -> None:
        if not vocab:
            raise ValueError(f"{where}: a Unigram tokenizer needs a vocabulary of (piece, score)")
        if prepend_scheme not in ("always", "first", "never"):
            raise ValueError(f"{where}: Metaspace prepend_scheme {prepend_scheme!r} is not always/first/never")
        self._pieces_list = [(str(p), float(s)) for p, s in vocab]
        self.vocab: dict[str, int] = {}
        for i, (p, _) in enumerate(self._pieces_list):
            self.vocab.setdefault(p, i)
        self.ids_to_tokens: dict[int, str] = {i: p for i, (p, _) in enumerate(self._pieces_list)}
        self._unigram_vocab = dict(self.vocab)
        self._normalizer_spec = normalizer
        self._normalize = build_normalizer(normalizer, where)
        self.prepend_scheme = prepend_scheme
        self.split = bool(split)
        self.trim_offsets = trim_offsets
        self._trim_prefix = bool(trim_prefix_space)
        self.model_max_length = int(model_max_length)
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self._unk_model_id = unk_id
        for k in self._special_keys:
            v = kwargs.pop(k, self._defaults.get(k))
            setattr(self, k, None if v is None else _as_added_token(v, True, k).content)
        extra = [_as_added_token(t, True, "additional_special_tokens") for t in (additional_special_tokens or [])]
        self.additional_special_tokens = list(dict.fromkeys(t.content for t in extra))
        self.init_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None)))}
        self._base_vocab_size = len(self._pieces_list)
        table = {p: (i, s) for i, (p, s) in reversed(list(enumerate(self._pieces_list)))}
        unk_score = min(s for _, s in self._pieces_list) - _UNK_PENALTY
        self._model = _Viterbi(table, -1 if unk_id is None else unk_id, unk_score)
        self._model_ids = _Cache()
        # a piece's space stands for ▁ (see _segment_pieces)
        self._model_ids.fill = lambda piece: self._model[piece.replace(" ", _SPACE)][0]
        self._model_lens = _Cache()  # each token's length, in characters of the piece
        self._model_lens.fill = lambda piece: tuple(b - a for a, b in self._model[piece.replace(" ", _SPACE)][1])
        self._warned_length = False
        mask = self._defaults.get("mask_token")
        if isinstance(mask, AddedToken) and self.mask_token == mask.content:
            extra = [mask] + extra
        self._init_added(added_tokens_decoder, extra)
        self._templates = templates if templates is not None else self._default_templates()

    def _default_templates(self) -> dict[bool, Template]:
        return {False: NO_TEMPLATE, True: NO_TEMPLATE}

    @property
    def _model_vocab(self) -> dict[str, int]:
        return self._unigram_vocab

    def _template(self, pair: bool) -> Template:
        return self._templates[pair]

    def _normalize_for_added(self, part: str) -> tuple[str, list[int] | None, frozenset[int]]:
        if self._normalize is None:
            return part, None, frozenset()
        norm, spans = self._normalize(part)
        return norm, [a for a, _ in spans], frozenset()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, model_max_length={self.model_max_length})"

    # ------------------------------------------------------------------ core
    def _segment_pieces(self, seg: str, first: bool, need_spans: bool) -> tuple[list[str], list | None, bool]:
        """The pre-tokenized pieces of a segment between added tokens, after the normalizer and Metaspace
        (spaces as ``▁``, one prepended, split before each ``▁``); with ``need_spans`` the source span of
        each character of the pieces joined, None when the normalizer kept the text as it was (then
        positions are the segment's own, the prepended ``▁`` standing for the first character); and
        whether a ``▁`` was prepended. In ASCII text a piece keeps its space for the ``▁`` (the piece
        caches read it as ``▁``): cut by one regex, the text stays one byte a character."""
        spans = None
        if self._normalize is None:
            text = seg
        else:
            text, spans = self._normalize(seg, need_spans, True)
        if not text:
            return [], None, False
        always = self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first)
        prefix = always and text[0] != " " and text[0] != _SPACE
        if text.isascii():
            if prefix:
                text = " " + text
            pieces = _ascii_pieces(text) if self.split else [text]
        elif self.split:
            text = text.replace(" ", _SPACE)
            if prefix:
                text = _SPACE + text
            parts = text.split(_SPACE)
            pieces = ([parts[0]] if parts[0] else []) + [_SPACE + p for p in parts[1:]]
        else:
            pieces = [(_SPACE if prefix else "") + text.replace(" ", _SPACE)]
        if spans is None:
            return pieces, None, prefix
        return pieces, ([spans[0]] + spans) if prefix else spans, prefix

    def _encode_details(self, text: str, w: int, ids: list, offsets: list | None, words: list | None) -> int:
        """Append ids (and with ``offsets``, source offsets and word indices, one word per piece).

        A piece's tokens cover it end to end, so a segment's token boundaries are one running sum of
        the cached token lengths, and its offsets pairs of neighbouring boundaries: C-level ``map``,
        ``accumulate`` and ``zip`` over whole segments, no Python loop per token or per piece.
        """
        if offsets is not None and self.trim_offsets:
            return self._trimmed_details(text, w, ids, offsets, words)
        get_ids, get_lens = self._model_ids.__getitem__, self._model_lens.__getitem__
        for tid, p0, p1 in self._split_added(text) or ((None, 0, len(text)),):
            if tid is not None:
                ids.append(tid)
                if offsets is not None:
                    offsets.append((p0, p1))
                    if words is not None:
                        words.append(w)
                w += 1
                continue
            pieces, spans, prefix = self._segment_pieces(text[p0:p1], p0 == 0, offsets is not None)
            ids.extend(chain.from_iterable(map(get_ids, pieces)))
            if offsets is None or not pieces:
                continue
            lens = list(map(get_lens, pieces))
            k0 = len(offsets)
            if spans is None:  # positions kept: the prepended ▁ stands for the first character
                offsets.extend(pairwise(accumulate(chain.from_iterable(lens), initial=p0 - 1 if prefix else p0)))
                if prefix:
                    offsets[k0] = (p0, max(offsets[k0][1], p0 + 1))
            else:  # a token runs from its first character's source start to its last one's source end
                bounds = list(accumulate(chain.from_iterable(lens), initial=0))
                starts = [p0 + a for a, _ in spans]
                ends = [0, *[p0 + b for _, b in spans]]
                offsets.extend(zip(map(starts.__getitem__, bounds[:-1]), map(ends.__getitem__, bounds[1:])))
            if words is not None:
                words.extend(chain.from_iterable(map(repeat, range(w, w + len(pieces)), map(len, lens))))
            w += len(pieces)
        return w

    def _trimmed_details(self, text: str, w: int, ids: list, offsets: list, words: list | None) -> int:
        """``_encode_details`` when the post-processor trims each token's offsets of its spaces."""
        cut = self._split_added(text)
        model = self._model
        n0 = len(ids)
        shown: list[str] = []  # each token's text, as the post-processor trims it
        for tid, p0, p1 in cut or ((None, 0, len(text)),):
            if tid is not None:
                ids.append(tid)
                offsets.append((p0, p1))
                if words is not None:
                    words.append(w)
                shown.append(text[p0:p1] if tid in self._strip_ids else self.ids_to_tokens[tid])
                w += 1
                continue
            pieces, spans, prefix = self._segment_pieces(text[p0:p1], p0 == 0, True)
            s = 0
            base = p0 - 1 if prefix else p0
            for piece in pieces:
                piece = piece.replace(" ", _SPACE)
                pids, pspans = model[piece]
                ids.extend(pids)
                if spans is None:  # positions kept: the prepended ▁ stands for the first character
                    offsets.extend((max(base + s + a, p0), max(base + s + b, p0 + 1)) for a, b in pspans)
                else:
                    offsets.extend((p0 + spans[s + a][0], p0 + spans[s + b - 1][1]) for a, b in pspans)
                if words is not None:
                    words.extend([w] * len(pids))
                shown.extend(piece[a:b] for a, b in pspans)
                s += len(piece)
                w += 1
        offsets[n0:] = trim_offsets(shown, offsets[n0:], self._trim_prefix)
        return w

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = []
        self._encode_details(text, 0, ids, None, None)
        return ids

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """The Metaspace decoder: ``▁`` back to a space, the first token's leading space dropped."""
        out = []
        for i, t in enumerate(tokens):
            t = t.replace(_SPACE, " ")
            if i == 0 and self.prepend_scheme != "never" and t.startswith(" "):
                t = t[1:]
            out.append(t)
        return "".join(out)

    # ------------------------------------------------------------------ loading / saving
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> TokenizerBase:
        """Load from a folder with ``tokenizer.json`` (a Unigram model) or a SentencePiece ``.model``
        (``sentencepiece.bpe.model`` as XLM-R names it, or any one ``*.model``), or a ``.model`` file."""
        from bertkit.hub import resolve_model_path

        cache_dir, revision = kwargs.pop("cache_dir", None), kwargs.pop("revision", None)
        for k in ("local_files_only", "force_download", "token", "trust_remote_code", "subfolder"):
            kwargs.pop(k, None)  # accepted for transformers compatibility; bertkit never downloads
        given = Path(pretrained_model_name_or_path).expanduser()
        if given.is_file():
            return cls(**{**cls._spec_kwargs(spec_from_sentencepiece(given), given), **kwargs})
        path = resolve_model_path(pretrained_model_name_or_path, cache_dir, revision, files=(TOKENIZER_JSON, SPM_FILE))
        config = _folder_config(path, kwargs, TOKENIZER_JSON)
        tj = path / TOKENIZER_JSON
        models = sorted(path.glob("*.model"))
        if tj.is_file():
            spec = cls._spec_kwargs(read_spec(tj), tj)
        elif models:
            spm = path / SPM_FILE if (path / SPM_FILE).is_file() else models[0]
            spec = cls._spec_kwargs(spec_from_sentencepiece(spm), spm)
        else:
            raise FileNotFoundError(f"no {TOKENIZER_JSON} (or a SentencePiece .model) in {path}")
        config["added_tokens_decoder"] = {**config["added_tokens_decoder"], **spec.pop("added_tokens_decoder")}
        tok = cls(**{**spec, **config})
        tok.name_or_path = str(pretrained_model_name_or_path)
        return tok

    @classmethod
    def _spec_kwargs(cls, spec: dict[str, Any], path: Path) -> dict[str, Any]:
        """Constructor arguments from a tokenizer.json-shaped dict holding a Unigram model."""
        model = spec["model"]
        if model.get("type") != "Unigram":
            raise ValueError(f"{path}: model type {model.get('type')!r} is not Unigram")
        if model.get("byte_fallback"):
            raise ValueError(f"{path}: Unigram byte_fallback is not read by bertkit")
        pre, dec = spec.get("pre_tokenizer") or {}, spec.get("decoder") or {}
        if pre.get("type") == "Sequence":  # older files: WhitespaceSplit then Metaspace
            subs = pre.get("pretokenizers") or []
            if [p.get("type") for p in subs] != ["WhitespaceSplit", "Metaspace"]:
                raise ValueError(f"{path}: pre_tokenizer Sequence {[p.get('type') for p in subs]} is not read")
            pre = subs[1]
        if pre.get("type") != "Metaspace" or (dec and dec.get("type") != "Metaspace"):
            raise ValueError(f"{path}: bertkit reads Unigram with a Metaspace pre-tokenizer and decoder")
        if pre.get("replacement", _SPACE) != _SPACE:
            raise ValueError(f"{path}: Metaspace replacement {pre.get('replacement')!r} is not read (only '▁')")
        scheme = pre.get("prepend_scheme") or ("always" if pre.get("add_prefix_space", True) else "never")
        templates, trim, prefix = post_processor(spec, path)
        return {
            "vocab": [tuple(v) for v in model["vocab"]],
            "unk_id": model.get("unk_id"),
            "normalizer": spec.get("normalizer"),
            "prepend_scheme": scheme,
            "split": bool(pre.get("split", True)),
            "templates": templates,
            "trim_offsets": trim,
            "trim_prefix_space": prefix,
            "added_tokens_decoder": _tokenizer_json_added(spec, path),
            "where": str(path),
        }

    def _post_processor_json(self) -> dict[str, Any]:
        post = template_json(self._templates)
        pre, mid, post_sp, ta, tb = self._templates[True]
        roberta = len(pre) == 1 and len(mid) == 2 and len(post_sp) == 1 and ta == tb == 0
        if self.trim_offsets is not None and roberta:
            # the one processor that both trims offsets and adds RoBERTa's special tokens
            return {
                "type": "RobertaProcessing",
                "sep": [post_sp[0][1], post_sp[0][0]],
                "cls": [pre[0][1], pre[0][0]],
                "trim_offsets": bool(self.trim_offsets),
                "add_prefix_space": self._trim_prefix,
            }
        return post

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> tuple[str, ...]:
        """Write ``tokenizer.json`` (what transformers and `tokenizers` load), ``tokenizer_config.json``
        and ``special_tokens_map.json``, each atomically. Returns the written paths."""
        out = Path(save_directory)
        if out.is_file():
            raise ValueError(f"save_pretrained needs a directory, {out} is a file")
        out.mkdir(parents=True, exist_ok=True)
        meta = {"type": "Metaspace", "replacement": _SPACE, "prepend_scheme": self.prepend_scheme, "split": self.split}
        spec = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added_tokens_json(self._added),
            "normalizer": self._normalizer_spec,
            "pre_tokenizer": meta,
            "post_processor": self._post_processor_json(),
            "decoder": meta,
            "model": {
                "type": "Unigram",
                "unk_id": self._unk_model_id,
                "vocab": [list(v) for v in self._pieces_list],
                "byte_fallback": False,
            },
        }
        config = {
            "tokenizer_class": self._class_name,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
            **self.special_tokens_map,
            "added_tokens_decoder": {str(i): t.__getstate__() for i, t in sorted(self._added.items())},
        }
        paths = (out / TOKENIZER_JSON, out / CONFIG_FILE, out / SPECIAL_TOKENS_FILE)
        atomic_write_json(paths[0], spec)
        atomic_write_json(paths[1], config)
        atomic_write_json(paths[2], self.special_tokens_map)
        return tuple(str(p) for p in paths)


class XLMRobertaTokenizer(UnigramTokenizer):
    """XLM-RoBERTa's tokenizer: Unigram over SentencePiece's pieces, ``<s> A </s></s> B </s>``."""

    _class_name = "XLMRobertaTokenizer"
    _defaults = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "mask_token": AddedToken("<mask>", lstrip=True, special=True),
    }

    def _default_templates(self) -> dict[bool, Template]:
        from .tokenizer_json import roberta_template

        return roberta_template((self.cls_token, self.cls_token_id), (self.sep_token, self.sep_token_id))


XLMRobertaTokenizerFast = XLMRobertaTokenizer
