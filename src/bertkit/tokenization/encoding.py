"""BatchEncoding: the dict that ``BertTokenizer.__call__`` returns (``model(**enc)`` works)."""

from __future__ import annotations

import operator
from typing import Any, Callable, NamedTuple


class CharSpan(NamedTuple):
    """Characters ``start`` (included) to ``end`` (excluded) of the original text."""

    start: int
    end: int


class TokenSpan(NamedTuple):
    """Tokens ``start`` (included) to ``end`` (excluded) of an encoded row."""

    start: int
    end: int


class BatchEncoding(dict):
    """A dict of model inputs (``input_ids``, ``token_type_ids``, ``attention_mask``, ...).

    Like transformers' BatchEncoding it also answers ``word_ids(i)``, ``sequence_ids(i)``,
    ``tokens(i)``, the alignment calls (``char_to_token``, ``token_to_chars``, ``word_to_tokens``,
    ``token_to_word``, ``token_to_sequence``, ``word_to_chars``, ``char_to_word``), attribute access
    (``enc.input_ids``), ``.to(device)`` for tensors, and ``n_sequences``. Word ids and offsets are
    computed on demand, so plain encoding pays nothing for them.
    """

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        rows: list | None = None,
        details: Callable[[int], tuple[list, list, list, list]] | None = None,
        n_sequences: int | None = None,
        batched: bool = True,
    ) -> None:
        super().__init__(data or {})
        self._rows = rows
        self._details = details
        self._cache: dict[int, tuple[list, list, list, list]] = {}
        self._batched = batched
        self.n_sequences = n_sequences

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getstate__(self) -> dict:
        return {"data": dict(self)}

    def __setstate__(self, state: dict) -> None:
        self.update(state["data"])
        self._rows = None
        self._details = None
        self._cache = {}
        self._batched = True
        self.n_sequences = None

    @property
    def is_fast(self) -> bool:
        return True

    @property
    def encodings(self) -> list[Encoding] | None:
        """One :class:`Encoding` per row (``ids``, ``tokens``, ``offsets``, ``word_ids``, ...), as the
        tokenizers library gives them; None for an encoding not made by the tokenizer (unpickled)."""
        if self._rows is None:
            return None
        return [Encoding(self, i) for i in range(len(self._rows) if self._batched else 1)]

    def _row(self, i: int):
        if self._rows is None:
            raise ValueError(
                "word_ids()/sequence_ids()/tokens() and the char/token/word alignment calls are only available "
                "on an encoding returned by the tokenizer"
            )
        if not self._batched and i != 0:
            raise IndexError(f"batch index {i} out of range for a single encoding")
        if i < 0:
            i += len(self._rows)
        if not 0 <= i < len(self._rows):
            raise IndexError(f"batch index {i} out of range (batch of {len(self._rows)})")
        return i

    def _full(self, i: int) -> tuple[list, list, list, list]:
        i = self._row(i)
        got = self._cache.get(i)
        if got is None:
            got = self._cache[i] = self._details(i)
        return got

    def tokens(self, batch_index: int = 0) -> list[str]:
        """The token strings of row ``batch_index``, special and padding tokens included."""
        return self._full(batch_index)[0]

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """For each token, the index of the word it comes from (None for special/padding)."""
        return self._full(batch_index)[1]

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """For each token, 0 (first text), 1 (second text) or None (special/padding)."""
        return self._full(batch_index)[2]

    def words(self, batch_index: int = 0) -> list[int | None]:
        return self.word_ids(batch_index)

    # -- alignment between characters, tokens and words (the semantics of tokenizers' Encoding) --------
    def _span(self, sequence_index: int, seqs: list) -> range | list[int]:
        """Token positions of sequence ``sequence_index``; every position when the row has no such
        sequence (as `tokenizers` answers for a sequence index it does not know)."""
        sequence_index = _index(sequence_index, "sequence_index")
        if sequence_index < (self.n_sequences or 1):
            return [k for k, s in enumerate(seqs) if s == sequence_index]
        return range(len(seqs))

    def token_to_chars(self, batch_or_token_index: int, token_index: int | None = None) -> CharSpan | None:
        """Characters of the token in its original text; None for special and padding tokens."""
        b, t = _two(batch_or_token_index, token_index, "token_index")
        _, _, seqs, offs = self._full(b)
        if t >= len(seqs) or seqs[t] is None:
            return None
        return CharSpan(*offs[t])

    def token_to_word(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        """Index of the word the token belongs to, within its sequence; None for special and padding tokens."""
        b, t = _two(batch_or_token_index, token_index, "token_index")
        words = self._full(b)[1]
        return words[t] if t < len(words) else None

    def token_to_sequence(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        """0 or 1 for a token of the first or second text; None for special and padding tokens."""
        b, t = _two(batch_or_token_index, token_index, "token_index")
        seqs = self._full(b)[2]
        return seqs[t] if t < len(seqs) else None

    def char_to_token(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """Index of the token holding character ``char_index`` of text ``sequence_index`` (0, or 1 for the
        second text of a pair); None when no token does (whitespace, or past the end or a truncation)."""
        b, c = _two(batch_or_char_index, char_index, "char_index")
        _, _, seqs, offs = self._full(b)
        for k in self._span(sequence_index, seqs):
            s, e = offs[k]
            if s <= c < e:
                return k
        return None

    def word_to_tokens(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> TokenSpan | None:
        """Tokens of word ``word_index`` of text ``sequence_index``; None when it has none in this row."""
        b, w = _two(batch_or_word_index, word_index, "word_index")
        _, words, seqs, _ = self._full(b)
        hits = []
        for k in self._span(sequence_index, seqs):
            if words[k] is not None and words[k] > w:
                break  # `tokenizers` stops at the first later word (it matters when scanning both texts)
            if words[k] == w:
                hits.append(k)
        return TokenSpan(hits[0], hits[-1] + 1) if hits else None

    def word_to_chars(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> CharSpan:
        """Characters of word ``word_index`` of text ``sequence_index`` in its original text."""
        b, w = _two(batch_or_word_index, word_index, "word_index")
        span = self.word_to_tokens(b, w, sequence_index)
        if span is None:
            raise ValueError(f"word {w} of sequence {sequence_index} has no tokens in row {b}")
        offs = self._full(b)[3]
        return CharSpan(offs[span.start][0], offs[span.end - 1][1])

    def char_to_word(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """Index of the word holding character ``char_index`` of text ``sequence_index``; None if none."""
        b, c = _two(batch_or_char_index, char_index, "char_index")
        t = self.char_to_token(b, c, sequence_index)
        return None if t is None else self._full(b)[1][t]

    def to(self, device: Any) -> "BatchEncoding":
        """Move every tensor to ``device`` (in place); returns self."""
        for k, v in self.items():
            if hasattr(v, "to"):
                self[k] = v.to(device)
        return self

    def convert_to_tensors(self, tensor_type: str | None) -> "BatchEncoding":
        if tensor_type is None:
            return self
        for k, v in list(self.items()):
            self[k] = _as_tensor(v, tensor_type, k)
        return self


def _index(value: Any, name: str) -> int:
    try:
        i = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})") from None
    if i < 0:
        raise ValueError(f"{name} must be >= 0, got {i}")
    return i


def _two(first: Any, second: Any, name: str) -> tuple[int, int]:
    """(batch index, index) from transformers' ``(batch_or_index, index=None)`` call forms."""
    if second is None:
        return 0, _index(first, name)
    try:
        b = operator.index(first)
    except TypeError:
        raise TypeError(f"batch_index must be an int, got {first!r} ({type(first).__name__})") from None
    return b, _index(second, name)


def _as_tensor(value: Any, tensor_type: str, key: str) -> Any:
    if tensor_type == "pt":
        import torch  # imported here so `import bertkit.tokenization` stays torch-free

        try:
            return torch.tensor(value, dtype=torch.long)
        except ValueError as e:
            raise ValueError(
                f"cannot make a tensor of {key!r}: rows have different lengths; "
                "pass padding=True (and truncation=True) to get a rectangular batch"
            ) from e
    if tensor_type == "np":
        import numpy as np

        if value and isinstance(value[0], list) and len({len(r) for r in value}) > 1:
            raise ValueError(
                f"cannot make an array of {key!r}: rows have different lengths; "
                "pass padding=True (and truncation=True) to get a rectangular batch"
            )
        return np.asarray(value, dtype=np.int64)
    raise ValueError(f"return_tensors must be None, 'pt' or 'np', got {tensor_type!r}")


class Encoding:
    """One row of a :class:`BatchEncoding` under the tokenizers library's ``Encoding`` names."""

    def __init__(self, batch: BatchEncoding, index: int) -> None:
        self._batch, self._index = batch, index

    def _column(self, name: str) -> list[int]:
        value = self._batch.get(name)
        if value is None:
            return []
        rows = value.tolist() if hasattr(value, "tolist") else list(value)
        # a batch of rows, or one text's row (return_tensors gives even that a batch axis)
        return list(rows[self._index]) if rows and isinstance(rows[0], list) else rows

    @property
    def ids(self) -> list[int]:
        return self._column("input_ids")

    @property
    def type_ids(self) -> list[int]:
        return self._column("token_type_ids") or [0] * len(self)

    @property
    def attention_mask(self) -> list[int]:
        return self._column("attention_mask") or [1] * len(self)

    @property
    def special_tokens_mask(self) -> list[int]:
        """1 for a special or padding token (no word), 0 for a token of the text."""
        return [int(s is None) for s in self.sequence_ids]

    @property
    def tokens(self) -> list[str]:
        return self._batch.tokens(self._index)

    @property
    def word_ids(self) -> list[int | None]:
        return self._batch.word_ids(self._index)

    @property
    def words(self) -> list[int | None]:
        return self.word_ids

    @property
    def sequence_ids(self) -> list[int | None]:
        return self._batch.sequence_ids(self._index)

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return [tuple(o) for o in self._batch._full(self._index)[3]]

    @property
    def n_sequences(self) -> int:
        return self._batch.n_sequences or 1

    @property
    def overflowing(self) -> list[Encoding]:
        return []  # the tokenizer returns overflowing windows as rows of the batch (overflow_to_sample_mapping)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"Encoding(num_tokens={len(self)}, attributes=[ids, type_ids, tokens, offsets, attention_mask])"
