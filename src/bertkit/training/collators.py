"""transformers' data collators under their names, so a script written for its Trainer runs unchanged.

Each pads a list of tokenized examples (dicts of token lists, as a tokenizer returns them) with the
tokenizer's own ``pad`` (its pad id and padding side) into a batch of tensors:

- :func:`default_data_collator` / :class:`DefaultDataCollator`: examples already of one length (padded
  when tokenized) stacked as they are; a ``label`` or ``label_ids`` column becomes ``labels``;
- :class:`DataCollatorWithPadding`: the inputs; a ``label`` or ``label_ids`` column becomes ``labels``;
- :class:`DataCollatorForTokenClassification`: the inputs, and the per-token labels padded to the same
  length with ``label_pad_token_id`` (-100, which the loss ignores) on the tokenizer's padding side;
- :class:`DataCollatorForLanguageModeling`: masked-LM inputs and labels (or, with ``mlm=False``, causal-LM
  labels), drawing its random numbers in transformers' order, so that one ``seed`` gives the same batches.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = [
    "DataCollatorForLanguageModeling",
    "DataCollatorForTokenClassification",
    "DataCollatorWithPadding",
    "DefaultDataCollator",
    "default_data_collator",
]


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


def default_data_collator(features: Sequence[Any], return_tensors: str = "pt") -> dict[str, Any]:
    """Stack examples whose sequences already have one length (tokenized with ``padding="max_length"``):
    each column becomes a tensor, ``label`` / ``label_ids`` become ``labels`` (int or float as given),
    strings and None are left out."""
    _check_tensors(return_tensors)
    if not features:
        raise ValueError("cannot collate an empty batch")
    features = [dict(f) for f in features]
    first = features[0]
    batch: dict[str, Any] = {}
    if first.get("label") is not None:
        value = first["label"].item() if isinstance(first["label"], torch.Tensor) else first["label"]
        dtype = torch.long if isinstance(value, int) else torch.float
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=dtype)
    elif first.get("label_ids") is not None:
        if isinstance(first["label_ids"], torch.Tensor):
            batch["labels"] = torch.stack([f["label_ids"] for f in features])
        else:
            dtype = torch.long if isinstance(first["label_ids"][0], int) else torch.float
            batch["labels"] = torch.tensor([f["label_ids"] for f in features], dtype=dtype)
    for key, value in first.items():
        if key in ("label", "label_ids") or value is None or isinstance(value, str):
            continue
        try:
            if isinstance(value, torch.Tensor):
                batch[key] = torch.stack([f[key] for f in features])
            elif isinstance(value, np.ndarray):
                batch[key] = torch.from_numpy(np.stack([f[key] for f in features]))
            else:
                batch[key] = torch.tensor([f[key] for f in features])
        except (ValueError, RuntimeError) as e:
            lengths = sorted({len(f[key]) for f in features if hasattr(f[key], "__len__")})
            raise ValueError(
                f"default_data_collator: column {key!r} has lengths {lengths} in one batch; it stacks examples "
                "of one length only (tokenize with padding='max_length', or use DataCollatorWithPadding)"
            ) from e
    return batch


@dataclass
class DefaultDataCollator:
    """:func:`default_data_collator` as an object, as transformers has it."""

    return_tensors: str = "pt"

    def __post_init__(self) -> None:
        _check_tensors(self.return_tensors)

    def __call__(self, features: Sequence[Any]) -> dict[str, Any]:
        return default_data_collator(features, self.return_tensors)


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


@dataclass
class DataCollatorForLanguageModeling:
    """Masked-LM batches: ``mlm_probability`` of the tokens that are not special are chosen; of those,
    ``mask_replace_prob`` become the mask token, ``random_replace_prob`` a random token, the rest stay;
    ``labels`` hold the chosen tokens' ids and -100 elsewhere. With ``mlm=False`` the labels are the
    inputs with padding at -100 (causal LM). Examples are tokenized dicts or lists of ids. ``seed``
    makes the masking repeatable (one generator per process); without it, torch's global one draws."""

    tokenizer: Any
    mlm: bool = True
    whole_word_mask: bool = False
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"
    seed: int | None = None
    _generator: Any = field(default=None, init=False, repr=False)
    _generator_pid: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        _check_tensors(self.return_tensors)
        if self.whole_word_mask:
            raise ValueError(
                "whole_word_mask=True is not supported here; bertkit's whole-word masking is "
                "bertkit.data.MaskingCollator (bertkit pretrain --whole-word-masking)"
            )
        if self.mlm and getattr(self.tokenizer, "mask_token", None) is None:
            raise ValueError("mlm=True needs a tokenizer with a mask token; pass mlm=False for causal-LM labels")
        for name in ("mlm_probability", "mask_replace_prob", "random_replace_prob"):
            value = getattr(self, name)
            if value is None or not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
            setattr(self, name, float(value))
        if self.mask_replace_prob + self.random_replace_prob > 1:
            raise ValueError(
                f"mask_replace_prob + random_replace_prob = {self.mask_replace_prob + self.random_replace_prob:g} "
                "exceeds 1"
            )

    def _rng(self) -> torch.Generator | None:
        if self.seed is None:
            return None
        if self._generator is None or self._generator_pid != os.getpid():  # a forked worker draws its own
            self._generator, self._generator_pid = torch.Generator().manual_seed(self.seed), os.getpid()
        return self._generator

    def __call__(self, examples: Sequence[Any]) -> Any:
        if not examples:
            raise ValueError("cannot collate an empty batch")
        rng = self._rng()
        if isinstance(examples[0], dict):
            batch = self.tokenizer.pad(
                [dict(e) for e in examples], return_tensors="pt", pad_to_multiple_of=self.pad_to_multiple_of
            )
        else:
            batch = {"input_ids": self._pad_ids(examples)}
        special = batch.pop("special_tokens_mask", None)
        batch.pop("offset_mapping", None)
        ids = batch["input_ids"]
        if not self.mlm:
            labels = ids.clone()
            if self.tokenizer.pad_token_id is not None:
                labels[labels == self.tokenizer.pad_token_id] = -100
            batch["labels"] = labels
            return batch
        batch["input_ids"], batch["labels"] = self._mask(ids, special, rng)
        return batch

    def _pad_ids(self, examples: Sequence[Any]) -> torch.Tensor:
        rows = [torch.as_tensor(e, dtype=torch.long) for e in examples]
        length = max(r.shape[0] for r in rows)
        multiple = self.pad_to_multiple_of
        if multiple and length % multiple:
            length = (length // multiple + 1) * multiple
        if all(r.shape[0] == length for r in rows):
            return torch.stack(rows)
        if self.tokenizer.pad_token_id is None:
            raise ValueError("the examples need padding and the tokenizer has no pad token")
        out = rows[0].new_full((len(rows), length), self.tokenizer.pad_token_id)
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        for i, r in enumerate(rows):
            if left:
                out[i, length - r.shape[0] :] = r
            else:
                out[i, : r.shape[0]] = r
        return out

    def _mask(
        self, inputs: torch.Tensor, special: torch.Tensor | None, rng: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # The draws come in transformers' order (choice, [MASK], random, the random ids), each over the
        # whole batch, so that the same seed chooses the same tokens.
        labels = inputs.clone()
        if special is None:
            special = torch.tensor(
                [
                    self.tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True)
                    for row in labels.tolist()
                ]
            )
        chance = torch.full(labels.shape, self.mlm_probability).masked_fill_(special.bool(), 0.0)
        chosen = torch.bernoulli(chance, generator=rng).bool()
        labels[~chosen] = -100
        to_mask = torch.bernoulli(torch.full(labels.shape, self.mask_replace_prob), generator=rng).bool() & chosen
        inputs[to_mask] = self.tokenizer.convert_tokens_to_ids(self.tokenizer.mask_token)
        if self.mask_replace_prob == 1 or self.random_replace_prob == 0:
            return inputs, labels
        share = self.random_replace_prob / (1 - self.mask_replace_prob)  # of the chosen tokens not masked
        to_random = torch.bernoulli(torch.full(labels.shape, share), generator=rng).bool() & chosen & ~to_mask
        words = torch.randint(len(self.tokenizer), labels.shape, dtype=torch.long, generator=rng)
        inputs[to_random] = words[to_random]
        return inputs, labels
