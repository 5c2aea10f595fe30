"""Byte-level BPE tokenizers with transformers' names: GPT2Tokenizer, RobertaTokenizer (and ModernBERT's
``PreTrainedTokenizerFast`` over the same model), read from ``tokenizer.json`` or ``vocab.json`` +
``merges.txt``. Ids, offsets, word ids and decode match the `tokenizers` library; see
tests/test_tokenizer_bpe.py.
"""

from __future__ import annotations

import os
from itertools import accumulate, chain, repeat
from pathlib import Path
from typing import Any, Iterable, Sequence

from bertkit._text import read_json

from .._io import atomic_write_json
from .added_tokens import (
    _DEFAULT_MAX_LENGTH,
    CONFIG_FILE,
    SPECIAL_TOKENS_FILE,
    AddedToken,
    _as_added_token,
    _tokenizer_json_added,
)
from .base import _folder_config
from .byte_level import ByteLevelBPE, decode_bytes, gpt2_split, trim_offsets
from .pieces import PieceTokenizer
from .tokenizer_json import (
    NO_TEMPLATE,
    Template,
    added_tokens_json,
    post_processor,
    read_spec,
    roberta_template,
    template_json,
)

__all__ = ["ByteLevelBPETokenizer", "GPT2Tokenizer", "RobertaTokenizer", "read_merges", "read_vocab_json"]

VOCAB_JSON = "vocab.json"
MERGES_FILE = "merges.txt"
TOKENIZER_JSON = "tokenizer.json"


def read_vocab_json(path: str | os.PathLike) -> dict[str, int]:
    """A ``vocab.json`` (token -> id), checked: an object of str -> non-negative int."""
    vocab = read_json(Path(path))
    if not isinstance(vocab, dict) or not all(isinstance(v, int) and v >= 0 for v in vocab.values()):
        raise ValueError(f"{path}: expected a JSON object of token -> non-negative id")
    return vocab


def read_merges(path: str | os.PathLike) -> list[tuple[str, str]]:
    """A ``merges.txt``: one ``left right`` pair a line, best first; a ``#version`` line is skipped."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if (n == 1 and line.startswith("#version")) or not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{path}:{n}: a merge is two tokens separated by one space, got {line!r}")
        out.append((parts[0], parts[1]))
    return out


def check_merges(merges: list[tuple[str, str]], vocab: dict[str, int], where: str) -> None:
    """Each merge's parts and result must be tokens of the vocabulary (else the files do not belong
    together); the error names the merges file and line."""
    for n, (a, b) in enumerate(merges, 1):
        for tok in (a, b, a + b):
            if tok not in vocab:
                raise ValueError(f"{where}: merge {n} ({a} {b}) needs {tok!r}, which is not in the vocabulary")


class ByteLevelBPETokenizer(PieceTokenizer):
    """A byte-level BPE tokenizer with transformers' calls; the subclasses set transformers' defaults."""

    model_input_names = ["input_ids", "attention_mask"]
    _special_keys = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
    _class_name = "PreTrainedTokenizerFast"
    _defaults: dict[str, Any] = {}

    def __init__(
        self,
        vocab_file: str | os.PathLike | None = None,
        merges_file: str | os.PathLike | None = None,
        vocab: dict[str, int] | None = None,
        merges: list[tuple[str, str]] | None = None,
        add_prefix_space: bool = False,
        trim_offsets: bool | None = None,
        trim_prefix_space: bool | None = None,
        templates: dict[bool, Template] | None = None,
        model_max_length: int = _DEFAULT_MAX_LENGTH,
        clean_up_tokenization_spaces: bool = False,
        additional_special_tokens: Iterable[Any] | None = None,
        added_tokens_decoder: dict[int, Any] | None = None,
        ignore_merges: bool = False,
        unk_model_token: str | None = None,
        **kwargs: Any,
    ) -> None:
        where = str(merges_file or "merges")
        if vocab is None:
            if vocab_file is None:
                raise ValueError(f"{type(self).__name__} needs a vocab_file and merges_file (or vocab and merges)")
            vocab = read_vocab_json(vocab_file)
        if merges is None:
            if merges_file is None:
                raise ValueError(f"{type(self).__name__} needs a merges_file (or merges)")
            merges = read_merges(merges_file)
        check_merges(merges, vocab, where)
        self.vocab_file = str(vocab_file) if vocab_file is not None else None
        self.vocab: dict[str, int] = dict(vocab)
        self.ids_to_tokens: dict[int, str] = {i: t for t, i in self.vocab.items()}
        self._bpe_vocab = dict(vocab)
        self._merges = list(merges)
        self.add_prefix_space = bool(add_prefix_space)
        self.trim_offsets = trim_offsets
        # the post-processor's own add_prefix_space: whether a first token's single space is kept
        self._trim_prefix = self.add_prefix_space if trim_prefix_space is None else bool(trim_prefix_space)
        self.model_max_length = int(model_max_length)
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        for k in self._special_keys:
            v = kwargs.pop(k, self._defaults.get(k))
            setattr(self, k, None if v is None else _as_added_token(v, True, k).content)
        extra = [_as_added_token(t, True, "additional_special_tokens") for t in (additional_special_tokens or [])]
        self.additional_special_tokens = list(dict.fromkeys(t.content for t in extra))
        self.init_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None)))}
        self._base_vocab_size = len(self.vocab)
        self._model = ByteLevelBPE(self._bpe_vocab, self._merges, ignore_merges, self._bpe_vocab.get(unk_model_token))
        self._unk_model_token = unk_model_token
        self._ignore_merges = bool(ignore_merges)
        self._findall = gpt2_split()
        self._warned_length = False
        # a mask token that eats the space before it, as transformers' RoBERTa sets it
        mask = self._defaults.get("mask_token")
        if mask is not None and not isinstance(mask, str) and self.mask_token == mask.content:
            extra = [mask] + extra
        self._init_added(added_tokens_decoder, extra)
        self._templates = templates if templates is not None else self._default_templates()

    def _default_templates(self) -> dict[bool, Template]:
        return {False: NO_TEMPLATE, True: NO_TEMPLATE}

    @property
    def _model_vocab(self) -> dict[str, int]:
        return self._bpe_vocab

    def _template(self, pair: bool) -> Template:
        return self._templates[pair]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}, merges={len(self._merges)}, "
            f"add_prefix_space={self.add_prefix_space}, model_max_length={self.model_max_length})"
        )

    # ------------------------------------------------------------------ core
    def _segment(self, seg: str) -> str:
        """The text the pre-tokenizer sees: with ``add_prefix_space``, a space before a segment that has none."""
        return " " + seg if self.add_prefix_space and seg and seg[0] != " " else seg

    def _ids(self, text: str) -> list[int]:
        """Ids of one text, no special tokens added (special and added tokens *in* the text are kept)."""
        get = self._model.ids.__getitem__
        pieces = self._split_added(text)
        if pieces is None:
            return list(chain.from_iterable(map(get, self._findall(self._segment(text)))))
        ids: list[int] = []
        for tid, s, e in pieces:
            if tid is not None:
                ids.append(tid)
            else:
                ids.extend(chain.from_iterable(map(get, self._findall(self._segment(text[s:e])))))
        return ids

    def _encode_details(self, text: str, w: int, ids: list, offsets: list, words: list | None) -> int:
        """Append ids, character offsets and word indices (one word per pre-token piece) of ``text``.

        Offsets come from per-piece cached spans (trimmed of spaces in the cache when the
        post-processor trims and keeps no prefix space), written as steps from the piece's start:
        one running sum over a segment's steps places every token, with no Python loop per token.
        """
        trims, late = self._trims(), self._trims() and self._trim_prefix
        model = self._model
        get_ids = model.ids.__getitem__
        get_spans = (model.tspans if trims and not late else model.spans).__getitem__
        get_steps = (model.tsteps if trims and not late else model.steps).__getitem__
        n0 = len(ids)
        shown: dict[int, str] = {}  # an lstrip/rstrip added token is trimmed as the text it matched
        for tid, p0, p1 in self._split_added(text) or ((None, 0, len(text)),):
            if tid is not None:
                tok = text[p0:p1] if tid in self._strip_ids else self.ids_to_tokens[tid]
                shown[len(ids) - n0] = tok
                ids.append(tid)
                offsets.append(trim_offsets([tok], [(p0, p1)], False)[0] if trims and not late else (p0, p1))
                if words is not None:
                    words.append(w)
                w += 1
                continue
            seg = text[p0:p1]
            src = self._segment(seg)
            shift = p0 - (len(src) - len(seg))  # the added space stands for the first character
            pieces = self._findall(src)
            id_lists = list(map(get_ids, pieces))
            k0 = len(offsets)
            ids.extend(chain.from_iterable(id_lists))
            steps = list(map(get_steps, pieces))
            if not model.uneven or model.uneven.isdisjoint(pieces):
                # one running sum gives start1, end1, start2, end2, ... of every token, all in C
                marks = accumulate(chain.from_iterable(steps), initial=shift)
                next(marks)  # then start1, end1, start2, end2, ...: zip of the one iterator pairs them
                offsets.extend(zip(marks, marks))
            else:  # a piece whose last token ends before the piece does: placed piece by piece
                starts = accumulate(map(len, pieces), initial=shift)
                offsets.extend([(s + a, s + b) for s, sp in zip(starts, map(get_spans, pieces)) for a, b in sp])
            if words is not None:  # None: word ids are computed when BatchEncoding asks for them
                words.extend(chain.from_iterable(map(repeat, range(w, w + len(pieces)), map(len, id_lists))))
            w += len(pieces)
            if shift < p0:  # the added space: the first piece's tokens start no earlier than the text
                for k in range(k0, k0 + len(id_lists[0]) if id_lists else k0):
                    a, b = offsets[k]
                    offsets[k] = (max(a, p0), max(b, p0 + 1))
        if late:
            toks = list(map(self.ids_to_tokens.__getitem__, ids[n0:]))
            for k, t in shown.items():
                toks[k] = t
            offsets[n0:] = trim_offsets(toks, offsets[n0:], self._trim_prefix)
        return w

    def _trims(self) -> bool:
        return bool(self.trim_offsets)

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """``tokens`` as text, the way the ByteLevel decoder joins them (bytes back to UTF-8)."""
        return decode_bytes(list(tokens))

    # ------------------------------------------------------------------ loading / saving
    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any
    ) -> "ByteLevelBPETokenizer":
        """Load from a folder with ``tokenizer.json`` or ``vocab.json`` + ``merges.txt`` (and optional
        ``tokenizer_config.json`` / ``special_tokens_map.json``), or a model name in the Hugging Face cache."""
        from bertkit.hub import resolve_model_path

        cache_dir, revision = kwargs.pop("cache_dir", None), kwargs.pop("revision", None)
        for k in ("local_files_only", "force_download", "token", "trust_remote_code", "subfolder"):
            kwargs.pop(k, None)  # accepted for transformers compatibility; bertkit never downloads
        path = resolve_model_path(
            pretrained_model_name_or_path, cache_dir, revision, files=(TOKENIZER_JSON, VOCAB_JSON)
        )
        config = _folder_config(path, kwargs, VOCAB_JSON)
        tj = path / TOKENIZER_JSON
        if tj.is_file():
            spec = bpe_spec(tj)
            config["added_tokens_decoder"] = {**config["added_tokens_decoder"], **spec.pop("added_tokens_decoder")}
            tok = cls(**{**spec, **config})
        elif (path / VOCAB_JSON).is_file() and (path / MERGES_FILE).is_file():
            tok = cls(vocab_file=path / VOCAB_JSON, merges_file=path / MERGES_FILE, **config)
        else:
            raise FileNotFoundError(f"no {TOKENIZER_JSON} (or {VOCAB_JSON} and {MERGES_FILE}) in {path}")
        tok.name_or_path = str(pretrained_model_name_or_path)
        return tok

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> tuple[str, ...]:
        """Write ``tokenizer.json`` (what transformers and `tokenizers` load), ``tokenizer_config.json`` and
        ``special_tokens_map.json``, each atomically. Returns the written paths."""
        out = Path(save_directory)
        if out.is_file():
            raise ValueError(f"save_pretrained needs a directory, {out} is a file")
        out.mkdir(parents=True, exist_ok=True)
        level = {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space, "trim_offsets": True}
        post: dict[str, Any] = template_json(self._templates)
        if self.trim_offsets is not None:
            trim = {**level, "add_prefix_space": self._trim_prefix, "trim_offsets": bool(self.trim_offsets)}
            post = {"type": "Sequence", "processors": [trim, post]}
        spec = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added_tokens_json(self._added),
            "normalizer": None,
            "pre_tokenizer": {**level, "use_regex": True},
            "post_processor": post,
            "decoder": {**level, "use_regex": True},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": self._unk_model_token,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": self._ignore_merges,
                "vocab": self._bpe_vocab,
                "merges": [list(m) for m in self._merges],
            },
        }
        config = {
            "tokenizer_class": self._class_name,
            "add_prefix_space": self.add_prefix_space,
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


def bpe_spec(path: Path) -> dict[str, Any]:
    """Constructor arguments from a tokenizer.json holding a byte-level BPE model; a one-line error
    names the file and the part bertkit does not read."""
    spec = read_spec(path)
    model = spec["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"{path}: model type {model.get('type')!r} is not BPE")
    pre, dec = spec.get("pre_tokenizer") or {}, spec.get("decoder") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        raise ValueError(
            f"{path}: pre_tokenizer {pre.get('type')!r}: bertkit reads byte-level BPE (ByteLevel with its regex)"
        )
    if dec and dec.get("type") != "ByteLevel":
        raise ValueError(f"{path}: decoder {dec.get('type')!r}: bertkit reads byte-level BPE (a ByteLevel decoder)")
    if spec.get("normalizer"):
        raise ValueError(f"{path}: normalizer {spec['normalizer'].get('type')!r} before byte-level BPE is not read")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ValueError(f"{path}: BPE {key}={model[key]!r} is not read by bertkit")
    if model.get("dropout"):
        raise ValueError(f"{path}: BPE dropout={model['dropout']} (random merges) is not read by bertkit")
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model.get("merges") or []]
    if any(len(m) != 2 for m in merges):
        raise ValueError(f"{path}: a BPE merge is two tokens")
    templates, trim, prefix = post_processor(spec, path)

    return {
        "vocab": model["vocab"],
        "merges": merges,
        "add_prefix_space": bool(pre.get("add_prefix_space", False)),
        "trim_offsets": trim,
        "trim_prefix_space": prefix,
        "templates": templates,
        "ignore_merges": bool(model.get("ignore_merges", False)),
        "unk_model_token": model.get("unk_token"),
        "added_tokens_decoder": _tokenizer_json_added(spec, path),
    }


class GPT2Tokenizer(ByteLevelBPETokenizer):
    """GPT-2's tokenizer: byte-level BPE, ``<|endoftext|>`` as bos/eos/unk, no special tokens added."""

    _class_name = "GPT2Tokenizer"
    _defaults = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}


class RobertaTokenizer(ByteLevelBPETokenizer):
    """RoBERTa's tokenizer: GPT-2's byte-level BPE, ``<s> A </s></s> B </s>``, offsets trimmed of spaces."""

    _class_name = "RobertaTokenizer"

    def __init__(self, *args: Any, trim_offsets: bool | None = True, **kwargs: Any) -> None:
        super().__init__(*args, trim_offsets=trim_offsets, **kwargs)

    @property
    def _defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "mask_token": AddedToken("<mask>", lstrip=True, special=True),
        }

    def _default_templates(self) -> dict[bool, Template]:
        return roberta_template((self.cls_token, self.cls_token_id), (self.sep_token, self.sep_token_id))


GPT2TokenizerFast = GPT2Tokenizer
RobertaTokenizerFast = RobertaTokenizer
