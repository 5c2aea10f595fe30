"""Dynamic masking for masked-language-model pretraining, done in the collator.

Per sequence (as BERT's ``create_masked_lm_predictions``): of the ``n`` maskable positions
(everything except ``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]``, ``[UNK]`` and padding)
``max(1, round(n * mask_prob))`` are chosen (capped by ``max_predictions``); each chosen position
becomes ``[MASK]`` with probability 0.8, a random ordinary vocabulary token with 0.1, and stays
unchanged with 0.1. ``labels`` holds the original id at chosen positions and -100 elsewhere.

With ``whole_word_masking`` the units are words: a word is a maskable piece plus the ``##``
continuation pieces that follow it, or, when an item carries ``word_starts`` (per-token flags
stored at data-preparation time, :mod:`bertkit.data.words`: Chinese words from a segmenter), a
word-start token plus the tokens up to the next word start. Words are taken in random order while
they fit in the budget, so the pieces of a word are always masked together; the 80/10/10 choice is
still made per piece.

Masks are drawn again for every epoch ("dynamic"). When an item carries ``mask_seed`` (see
:class:`~bertkit.data.instances.PretrainingDataset`) its mask depends only on that seed, so it is
the same whatever the batch composition, number of processes or data loader workers.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

__all__ = ["MaskingCollator"]

_SPECIAL_NAMES = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class MaskingCollator:
    """Pad a list of items and apply dynamic MLM masking (see module docs)."""

    def __init__(
        self,
        vocab: Sequence[str],
        mask_prob: float = 0.15,
        mask_token_prob: float = 0.8,
        random_token_prob: float = 0.1,
        whole_word_masking: bool = False,
        max_predictions: int | None = None,
        pad_to_multiple_of: int | None = 8,
        seed: int = 0,
    ) -> None:
        if not 0.0 <= mask_prob <= 1.0:
            raise ValueError(f"mask_prob must be in [0, 1], got {mask_prob}")
        if mask_token_prob < 0 or random_token_prob < 0 or mask_token_prob + random_token_prob > 1:
            raise ValueError(
                f"mask_token_prob ({mask_token_prob}) + random_token_prob ({random_token_prob}) must be within [0, 1]"
            )
        index = {t: i for i, t in enumerate(vocab)}
        missing = [t for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]") if t not in index]
        if missing:
            raise ValueError(f"vocabulary lacks the special token(s) {missing}")
        self.vocab_size = len(vocab)
        self.pad_id, self.mask_id = index["[PAD]"], index["[MASK]"]
        self.special = np.zeros(self.vocab_size, bool)
        for t in _SPECIAL_NAMES:
            if t in index:
                self.special[index[t]] = True
        self.continuation = np.fromiter((t.startswith("##") for t in vocab), bool, self.vocab_size)
        # Random replacements come from ordinary tokens, never [PAD]/[CLS]/[unused12]...
        bracketed = np.fromiter((t.startswith("[") and t.endswith("]") for t in vocab), bool, self.vocab_size)
        self.random_ids = np.nonzero(~bracketed)[0]
        self.mask_prob = mask_prob
        self.mask_token_prob = mask_token_prob
        self.random_token_prob = random_token_prob
        self.whole_word_masking = whole_word_masking
        self.max_predictions = max_predictions
        self.pad_to_multiple_of = pad_to_multiple_of
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------
    def choose(self, ids: np.ndarray, rng: np.random.Generator, word_starts: np.ndarray | None = None) -> np.ndarray:
        """Positions of ``ids`` to predict (sorted); ``word_starts`` overrides the ``##`` rule."""
        ids = np.asarray(ids)
        cand = np.nonzero(~self.special[ids])[0]
        if len(cand) == 0 or self.mask_prob == 0:
            return cand[:0]
        num = max(1, int(round(len(cand) * self.mask_prob)))
        if self.max_predictions is not None:
            num = min(num, self.max_predictions)
        if not self.whole_word_masking:
            return np.sort(rng.choice(cand, size=num, replace=False))
        # Word starts: a non-continuation piece, or a piece right after a non-maskable position.
        if word_starts is not None:
            if len(word_starts) != len(ids):
                raise ValueError(f"word_starts has {len(word_starts)} flags for {len(ids)} tokens")
            starts = np.asarray(word_starts, bool)[cand]
        else:
            starts = ~self.continuation[ids[cand]]
        starts[0] = True
        starts[1:] |= np.diff(cand) != 1
        word_of = np.cumsum(starts) - 1
        n_words = int(word_of[-1]) + 1
        sizes = np.bincount(word_of, minlength=n_words)
        first = np.nonzero(starts)[0]
        chosen: list[np.ndarray] = []
        total = 0
        for w in rng.permutation(n_words):
            if total >= num:
                break
            if total + sizes[w] > num:
                continue
            chosen.append(cand[first[w] : first[w] + sizes[w]])
            total += int(sizes[w])
        return np.sort(np.concatenate(chosen)) if chosen else cand[:0]

    def mask(
        self, ids: np.ndarray, rng: np.random.Generator, word_starts: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(masked input ids, labels) for one sequence."""
        ids = np.asarray(ids, dtype=np.int64)
        pos = self.choose(ids, rng, word_starts)
        labels = np.full(len(ids), -100, np.int64)
        labels[pos] = ids[pos]
        out = ids.copy()
        u = rng.random(len(pos))
        to_mask = u < self.mask_token_prob
        to_rand = (u >= self.mask_token_prob) & (u < self.mask_token_prob + self.random_token_prob)
        out[pos[to_mask]] = self.mask_id
        n_rand = int(to_rand.sum())
        if n_rand:
            out[pos[to_rand]] = rng.choice(self.random_ids, size=n_rand)
        return out, labels

    def set_epoch(self, epoch: int) -> None:  # masks already vary through the items' mask_seed
        self.epoch = epoch

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not items:
            raise ValueError("cannot collate an empty batch")
        length = max(len(it["input_ids"]) for it in items)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            length = -(-length // m) * m
        b = len(items)
        input_ids = np.full((b, length), self.pad_id, np.int64)
        labels = np.full((b, length), -100, np.int64)
        token_type_ids = np.zeros((b, length), np.int64)
        attention_mask = np.zeros((b, length), np.int64)
        for i, it in enumerate(items):
            ids = np.asarray(it["input_ids"], dtype=np.int64)
            n = len(ids)
            if n and (ids.max() >= self.vocab_size or ids.min() < 0):
                bad = int(ids.max() if ids.max() >= self.vocab_size else ids.min())
                raise ValueError(f"token id {bad} is outside the vocabulary of {self.vocab_size} entries")
            rng = np.random.default_rng(list(it["mask_seed"])) if "mask_seed" in it else self.rng
            input_ids[i, :n], labels[i, :n] = self.mask(ids, rng, it.get("word_starts"))
            attention_mask[i, :n] = 1
            if "token_type_ids" in it:
                token_type_ids[i, :n] = it["token_type_ids"]
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "token_type_ids": torch.from_numpy(token_type_ids),
            "labels": torch.from_numpy(labels),
        }
        if "next_sentence_label" in items[0]:
            batch["next_sentence_label"] = torch.tensor([int(it["next_sentence_label"]) for it in items])
        return batch
