"""Length-grouped batching and dynamic padding.

Fine-tuning sets mix short and long texts; padding every batch to ``max_length`` (or even to the
longest text in a random batch) spends most of the compute on pad tokens. Grouping examples of
similar length into a batch, then shuffling the order of the batches, keeps SGD's randomness
between steps while cutting padding nearly to zero.
"""

from __future__ import annotations

import random
from typing import Iterator, Sequence

import torch

__all__ = ["LengthGroupedBatchSampler", "collate_features", "padding_fraction"]


class LengthGroupedBatchSampler:
    """Yields lists of indices: batches of similar length, in a random order.

    Indices are shuffled, cut into mega-buckets of ``batch_size * bucket_batches`` examples, each
    bucket sorted by length (longest first) and cut into batches; the batches of all buckets are
    then shuffled. ``shuffle=False`` gives a deterministic fully sorted order (for evaluation).
    The epoch number seeds the shuffle so every epoch differs yet runs are reproducible.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        bucket_batches: int = 50,
        drop_last: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.bucket_batches = bucket_batches
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        n = len(self.lengths)
        idx = list(range(n))
        if not self.shuffle:
            idx.sort(key=lambda i: -self.lengths[i])
            out = [idx[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        else:
            rng = random.Random(self.seed * 1_000_003 + self.epoch)
            rng.shuffle(idx)
            bucket = self.batch_size * max(1, self.bucket_batches)
            out = []
            for b in range(0, n, bucket):
                chunk = sorted(idx[b : b + bucket], key=lambda i: -self.lengths[i])
                out.extend(chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
            rng.shuffle(out)
        if self.drop_last:
            out = [b for b in out if len(b) == self.batch_size]
        return out

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        self.epoch += 1
        return iter(batches)

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


_PAD_VALUES = {"input_ids": None, "token_type_ids": 0, "attention_mask": 0, "labels": -100}


def collate_features(features: Sequence[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Stack a list of feature dicts into tensors, padding sequences to the longest in the batch.

    Keys with per-token lists (input_ids, token_type_ids, attention_mask, token labels) are padded
    on the right; scalar or fixed-size values (class labels, start/end positions) are stacked.
    Multiple-choice features hold one list per choice and are padded across all choices.
    """
    if not features:
        raise ValueError("cannot collate an empty batch")
    out: dict[str, torch.Tensor] = {}
    first = features[0]
    ids = first["input_ids"]
    nested = bool(ids) and isinstance(ids[0], list)  # multiple choice: [choices][tokens]
    if nested:
        seq_len = max(len(c) for f in features for c in f["input_ids"])
    else:
        seq_len = max(len(f["input_ids"]) for f in features)
    for key in first:
        values = [f[key] for f in features]
        pad = pad_token_id if key == "input_ids" else _PAD_VALUES.get(key)
        token_level = key in ("input_ids", "token_type_ids", "attention_mask") or (
            key == "labels"
            and isinstance(first[key], list)
            and not nested
            and len(first[key]) == len(first["input_ids"])
        )
        if token_level:
            if nested:
                rows = [[c + [pad] * (seq_len - len(c)) for c in v] for v in values]
            else:
                rows = [v + [pad] * (seq_len - len(v)) for v in values]
            out[key] = torch.tensor(rows, dtype=torch.long)
        elif key in ("labels", "start_positions", "end_positions"):
            dtype = (
                torch.float
                if isinstance(values[0], float)
                or (isinstance(values[0], list) and values[0] and isinstance(values[0][0], float))
                else torch.long
            )
            out[key] = torch.tensor(values, dtype=dtype)
        # other keys (ids, offsets, example indices) stay with the caller, not in the batch
    return out


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Share of pad tokens when ``batches`` are padded to their own longest example."""
    total = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return 1.0 - real / total if total else 0.0
