"""BatchEncoding: the dict that ``BertTokenizer.__call__`` returns (``model(**enc)`` works)."""

from __future__ import annotations

from typing import Any, Callable


class BatchEncoding(dict):
    """A dict of model inputs (``input_ids``, ``token_type_ids``, ``attention_mask``, ...).

    Like transformers' BatchEncoding it also answers ``word_ids(i)``, ``sequence_ids(i)``,
    ``tokens(i)``, attribute access (``enc.input_ids``), ``.to(device)`` for tensors, and
    ``n_sequences``. Word ids are computed on demand, so plain encoding pays nothing for them.
    """

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        rows: list | None = None,
        details: Callable[[int], tuple[list, list, list]] | None = None,
        n_sequences: int | None = None,
        batched: bool = True,
    ) -> None:
        super().__init__(data or {})
        self._rows = rows
        self._details = details
        self._cache: dict[int, tuple[list, list, list]] = {}
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

    def _row(self, i: int):
        if self._rows is None:
            raise ValueError(
                "word_ids()/sequence_ids()/tokens() are only available on an encoding returned by the tokenizer"
            )
        if not self._batched and i != 0:
            raise IndexError(f"batch index {i} out of range for a single encoding")
        if i < 0:
            i += len(self._rows)
        if not 0 <= i < len(self._rows):
            raise IndexError(f"batch index {i} out of range (batch of {len(self._rows)})")
        return i

    def _full(self, i: int) -> tuple[list, list, list]:
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
