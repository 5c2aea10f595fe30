"""sentence-transformers' v2 training datasets (``sentence_transformers.datasets``), for ``model.fit``.

A v2 training script imports them from here instead and runs unchanged::

    from bertkit import InputExample, SentenceTransformer, losses
    from bertkit.sentence.datasets import NoDuplicatesDataLoader

    loader = NoDuplicatesDataLoader(examples, batch_size=32)
    model.fit(train_objectives=[(loader, losses.MultipleNegativesRankingLoss(model))], epochs=1)

- :class:`NoDuplicatesDataLoader` yields batches in which no text appears twice (compared stripped and
  lower-cased), so that MultipleNegativesRankingLoss's in-batch negatives are never a copy of the
  positive. Iterated directly it is sentence-transformers' loader: ``floor(examples / batch_size)``
  batches per pass, filled greedily from a shuffled list whose position carries over from pass to pass,
  reshuffled each time it wraps around (with Python's ``random``, or a ``random.Random(seed)`` of its
  own). ``SentenceTransformer.fit`` batches it as sentence-transformers 6's ``fit`` does (its
  no-duplicates batch sampler, seeded by the training seed and the epoch), so that a resumed fit draws
  the same batches: :func:`no_duplicate_batches`.
- :class:`SentenceLabelDataset` (an IterableDataset) streams ``samples_per_label`` examples of one label
  at a time, for batch-hard triplet losses; NumPy's global RNG shuffles, as in sentence-transformers.
- :class:`SentencesDataset` is the old list wrapper: ``DataLoader(SentencesDataset(examples, model))``.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset, IterableDataset

__all__ = ["NoDuplicatesDataLoader", "SentenceLabelDataset", "SentencesDataset", "no_duplicate_batches"]

logger = logging.getLogger(__name__)

# Extra shuffled passes the fit's batching may take to reach its batches per epoch, as sentence-transformers'.
_MAX_RESAMPLE_PASSES = 2


def _text_key(text: Any) -> str:
    """The form in which two texts count as the same (sentence-transformers' loader compares so)."""
    return (text if isinstance(text, str) else str(text)).strip().lower()


def _check_examples(examples: Any, where: str) -> list[Any]:
    """``examples`` as a list, refused with one line unless it is a non-empty list of InputExamples."""
    if isinstance(examples, (str, bytes)) or not isinstance(examples, Sequence):
        raise ValueError(f"{where}: examples must be a list of InputExamples, got {type(examples).__name__}")
    items = list(examples)
    if not items:
        raise ValueError(f"{where}: examples is empty")
    for i, ex in enumerate(items):
        texts = getattr(ex, "texts", None)
        if not isinstance(texts, (list, tuple)) or not texts:
            raise ValueError(f"{where}: examples[{i}] is {ex!r}, not an InputExample with texts")
    return items


def _check_positive(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


class NoDuplicatesDataLoader:
    """sentence-transformers' ``NoDuplicatesDataLoader(train_examples, batch_size)``: batches of
    ``batch_size`` InputExamples in which no text appears twice. ``seed`` (bertkit's) gives it a
    ``random.Random(seed)`` of its own; without it the shuffles draw from Python's ``random``."""

    def __init__(self, train_examples: Sequence[Any], batch_size: int, seed: int | None = None) -> None:
        where = "NoDuplicatesDataLoader"
        self.batch_size = _check_positive(batch_size, "batch_size", where)
        items = _check_examples(train_examples, where)
        if len(items) < batch_size:
            raise ValueError(f"{where}: batch_size={batch_size} is more than the {len(items)} examples")
        distinct = len({_text_key(t) for ex in items for t in ex.texts})
        if distinct < batch_size:
            # each example of a batch brings at least one text no other has: sentence-transformers'
            # loader would search for the missing ones forever
            raise ValueError(
                f"{where}: batch_size={batch_size} needs that many examples with no text in common, "
                f"but the examples hold only {distinct} distinct texts"
            )
        # The examples in the given order: what fit batches (a resumed fit must not depend on a shuffle).
        self.dataset = items
        self.train_examples = list(items)  # sentence-transformers' working copy, shuffled in place
        self.data_pointer = 0
        self.collate_fn: Any = None
        self._random: Any = random if seed is None else random.Random(seed)
        self._random.shuffle(self.train_examples)

    def __iter__(self) -> Iterator[Any]:
        n = len(self.train_examples)
        for _ in range(len(self)):
            batch: list[Any] = []
            texts_in_batch: set[str] = set()
            idle = 0  # examples looked at since the batch last grew
            while len(batch) < self.batch_size:
                example = self.train_examples[self.data_pointer]
                keys = [_text_key(t) for t in example.texts]
                if not any(k in texts_in_batch for k in keys):
                    batch.append(example)
                    texts_in_batch.update(keys)
                    idle = 0
                else:
                    idle += 1
                    if idle >= 2 * n:
                        # two wraps' worth of examples include a whole shuffled pass, and none fits: the
                        # batch can never fill (sentence-transformers' loader loops here forever)
                        raise ValueError(
                            f"NoDuplicatesDataLoader: no example can join a batch of {len(batch)} without "
                            f"repeating a text, so batch_size={self.batch_size} cannot be filled; lower it"
                        )
                self.data_pointer += 1
                if self.data_pointer >= n:
                    self.data_pointer = 0
                    self._random.shuffle(self.train_examples)
            yield self.collate_fn(batch) if self.collate_fn is not None else batch

    def __len__(self) -> int:
        return math.floor(len(self.train_examples) / self.batch_size)


def _one_pass(
    keys: Sequence[frozenset[str]], order: list[int], batch_size: int, drop_last: bool = True
) -> Iterator[list[int]]:
    """Batches from one shuffled pass: each batch takes the first examples in ``order`` that share no
    text with it; the ones skipped wait, in order, for the next batch; a batch that cannot fill is
    dropped, or with ``drop_last=False`` yielded as it is (sentence-transformers' NoDuplicatesBatchSampler)."""
    remaining = order
    while remaining:
        batch: list[int] = []
        seen: set[str] = set()
        rest: list[int] = []
        for pos, i in enumerate(remaining):
            if not keys[i].isdisjoint(seen):
                rest.append(i)
                continue
            batch.append(i)
            if len(batch) == batch_size:
                rest.extend(remaining[pos + 1 :])
                break
            seen.update(keys[i])
        remaining = rest
        if len(batch) == batch_size or (batch and not drop_last):
            yield batch


def no_duplicate_batches(examples: Sequence[Any], batch_size: int, seed: int) -> list[list[int]]:
    """One epoch of fit's batches for a NoDuplicatesDataLoader: ``len(examples) // batch_size`` lists
    of indices, no text twice in one, drawn from ``torch.randperm`` seeded with ``seed`` (the training
    seed plus the epoch), as sentence-transformers 6's fit batches it. When one pass cannot fill that
    many, up to two more shuffled passes fill the rest; refused when even they cannot."""
    import torch

    keys = [frozenset(_text_key(t) for t in ex.texts) for ex in examples]
    n, want = len(keys), len(keys) // batch_size
    generator = torch.Generator().manual_seed(seed)
    batches: list[list[int]] = []
    for _ in range(1 + _MAX_RESAMPLE_PASSES):
        order = torch.randperm(n, generator=generator, dtype=torch.int32).tolist()
        for batch in _one_pass(keys, order, batch_size):
            batches.append(batch)
            if len(batches) == want:
                return batches
    raise ValueError(
        f"NoDuplicatesDataLoader: {len(batches)} batches of {batch_size} examples without a repeated text "
        f"in {1 + _MAX_RESAMPLE_PASSES} shuffled passes over {n} examples, fewer than the {want} an epoch "
        "needs; lower batch_size"
    )


class SentenceLabelDataset(IterableDataset):
    """sentence-transformers' ``SentenceLabelDataset``: ``samples_per_label`` different examples of one
    label after another, label by label in a shuffled order, for batch-hard triplet losses. Labels with
    fewer examples are left out; ``with_replacement=False`` draws each example once per round of labels."""

    def __init__(self, examples: Sequence[Any], samples_per_label: int = 2, with_replacement: bool = False) -> None:
        super().__init__()
        where = "SentenceLabelDataset"
        self.samples_per_label = _check_positive(samples_per_label, "samples_per_label", where)
        items = _check_examples(examples, where)
        label2ex: dict[Any, list[Any]] = {}
        for example in items:
            label2ex.setdefault(example.label, []).append(example)
        self.grouped_inputs: list[Any] = []
        self.groups_right_border: list[int] = []  # where each label's examples end in grouped_inputs
        for label_examples in label2ex.values():
            if len(label_examples) >= self.samples_per_label:
                self.grouped_inputs.extend(label_examples)
                self.groups_right_border.append(len(self.grouped_inputs))
        if not self.grouped_inputs:
            most = max(len(v) for v in label2ex.values())
            raise ValueError(
                f"{where}: samples_per_label={samples_per_label}, but no label has that many examples "
                f"(the most is {most})"
            )
        self.label_range = np.arange(len(self.groups_right_border))
        self.with_replacement = with_replacement
        np.random.shuffle(self.label_range)
        logger.info(
            "SentenceLabelDataset: %d examples, of which %d could be used (their labels appear at least %d "
            "times). %d different labels found.",
            len(items),
            len(self.grouped_inputs),
            self.samples_per_label,
            len(self.label_range),
        )

    def __iter__(self) -> Iterator[Any]:
        label_idx = 0
        count = 0
        already_seen: dict[int, set[int]] = {}
        while count < len(self.grouped_inputs):
            label = int(self.label_range[label_idx])
            seen = already_seen.setdefault(label, set())
            left = 0 if label == 0 else self.groups_right_border[label - 1]
            right = self.groups_right_border[label]
            if self.with_replacement:
                selection: Any = np.arange(left, right)
            else:
                selection = [i for i in np.arange(left, right) if i not in seen]
            if len(selection) >= self.samples_per_label:
                for element_idx in np.random.choice(selection, self.samples_per_label, replace=False):
                    count += 1
                    seen.add(element_idx)
                    yield self.grouped_inputs[element_idx]
            label_idx += 1
            if label_idx >= len(self.label_range):
                label_idx = 0
                already_seen = {}
                np.random.shuffle(self.label_range)

    def __len__(self) -> int:
        return len(self.grouped_inputs)


class SentencesDataset(Dataset):
    """sentence-transformers' old ``SentencesDataset(examples, model)``: the examples as a list-like
    (``model`` is not used; a DataLoader over the plain list does the same)."""

    def __init__(self, examples: Sequence[Any], model: Any = None) -> None:
        self.examples = _check_examples(examples, "SentencesDataset")

    def __getitem__(self, item: int) -> Any:
        return self.examples[item]

    def __len__(self) -> int:
        return len(self.examples)
