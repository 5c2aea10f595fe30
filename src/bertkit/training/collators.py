"""transformers' data collators under their names, so a script written for its Trainer runs unchanged.

Each pads a list of tokenized examples (dicts of token lists, as a tokenizer returns them) with the
tokenizer's own ``pad`` (its pad id and padding side) into a batch of tensors:

- :class:`DataCollatorWithPadding`: the inputs; a ``label`` or ``label_ids`` column becomes ``labels``;
- :class:`DataCollatorForTokenClassification`: the inputs, and the per-token labels padded to the same
  length with ``label_pad_token_id`` (-100, which the loss ignores) on the tokenizer's padding side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["DataCollatorForTokenClassification", "DataCollatorWithPadding"]


def _check_tensors(return_tensors: str) -> None:
    if return_tensors != "pt":
        raise ValueError(f"return_tensors={return_tensors!r}: bertkit's collators return torch tensors ('pt')")


def _pad(collator: Any, features: Sequence[dict[str, Any]]) -> Any:
    if not features:
        raise ValueError("cannot collate an empty batch")
    return collator.tokenizer.pad(
        [dict(f) for f in features],
        padding=collator.padding,
        max_length=collator.max_length,
        pad_to_multiple_of=collator.pad_to_multiple_of,
        return_tensors="pt",
    )


@dataclass
class DataCollatorWithPadding:
    """Pad tokenized examples to the longest of the batch (or ``max_length``, rounded up to
    ``pad_to_multiple_of``); ``label`` / ``label_ids`` come out as ``labels``."""

    tokenizer: Any
    padding: bool | str = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def __post_init__(self) -> None:
        _check_tensors(self.return_tensors)

    def __call__(self, features: Sequence[dict[str, Any]]) -> Any:
        batch = _pad(self, features)
        for name in ("label", "label_ids"):
            if name in batch:
                batch["labels"] = batch.pop(name)
        return batch


@dataclass
class DataCollatorForTokenClassification:
    """Pad tokenized examples and their per-token ``labels`` (or ``label``) to one length; label
    padding is ``label_pad_token_id``."""

    tokenizer: Any
    padding: bool | str = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    label_pad_token_id: int = -100
    return_tensors: str = "pt"

    def __post_init__(self) -> None:
        _check_tensors(self.return_tensors)

    def __call__(self, features: Sequence[dict[str, Any]]) -> Any:
        if not features:
            raise ValueError("cannot collate an empty batch")
        name = "label" if "label" in features[0] else "labels"
        labels = [list(torch.as_tensor(f[name]).tolist()) for f in features] if name in features[0] else None
        batch = _pad(self, [{k: v for k, v in f.items() if k != name} for f in features])
        if labels is None:
            return batch
        length = batch["input_ids"].shape[1]
        longest = max(len(row) for row in labels)
        if longest > length:
            raise ValueError(f"{name}: {longest} labels for a sequence padded to {length} tokens")
        pad = self.label_pad_token_id
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        rows = [[pad] * (length - len(r)) + r if left else r + [pad] * (length - len(r)) for r in labels]
        batch[name] = torch.tensor(rows, dtype=torch.int64)
        return batch
