"""Pretraining instances, following BERT's ``create_pretraining_data.py``.

With NSP (:func:`create_nsp_instances`), per document:

* the target length is ``seq_len - 3``, or with probability ``short_seq_prob`` a random length in
  ``[2, seq_len - 3]`` (so the model also sees short inputs). BERT draws it once per document;
  here it is drawn again for every instance, which gives the same proportion of short
  instances when documents are as long as whole novels;
* whole sentences are gathered into a chunk until the target length is reached; a random number of
  the chunk's leading sentences forms segment A;
* with probability 0.5 (always when the chunk has a single sentence) segment B is taken from a
  random *other* document starting at a random sentence (label 1, "random next") and the unused
  sentences of the chunk are put back; otherwise B is the rest of the chunk (label 0, "is next");
* the pair is truncated to ``seq_len - 3`` tokens by repeatedly cutting one token from the longer
  segment, from its front or back with equal probability.

Without NSP (:func:`create_single_segment_instances`, RoBERTa-style) sentences of a document are
packed greedily into single segments of up to ``seq_len - 2`` tokens; a sentence longer than that
is cut into pieces so that no text is dropped.

Contiguous (:func:`create_contiguous_instances`, the ``mlm`` and ``electra`` objectives) cuts the
stream of training documents into full-length windows regardless of sentence boundaries; a window
that reaches the end of a document continues into the next one as segment B, so every instance but
the last is full-length and every token is used once.

Each instance is one row ``(a_start, a_end, b_start, b_end, next_sentence_label)`` of global token
offsets into a :class:`~bertkit.data.corpus.ShardedCorpus` (segments stay contiguous after
truncation), so millions of instances cost a few bytes each.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import numpy as np

from bertkit.data.corpus import ShardedCorpus

__all__ = [
    "create_nsp_instances",
    "create_single_segment_instances",
    "create_contiguous_instances",
    "PretrainingDataset",
    "split_documents",
]


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Shrink [start, end) ranges a and b in place: longer one first, front or back at random."""
    while (a[1] - a[0]) + (b[1] - b[0]) > max_tokens:
        seg = a if (a[1] - a[0]) > (b[1] - b[0]) else b
        if seg[1] - seg[0] <= 0:
            break
        if rng.random() < 0.5:
            seg[0] += 1
        else:
            seg[1] -= 1


def create_nsp_instances(
    corpus: ShardedCorpus, documents: Sequence[int], seq_len: int, short_seq_prob: float = 0.1, seed: int = 12345
) -> np.ndarray:
    """Sentence-pair instances with NSP labels for ``documents`` (see module docs)."""
    if seq_len < 8:
        raise ValueError(f"seq_len must be at least 8, got {seq_len}")
    rng = random.Random(seed)
    max_tokens = seq_len - 3
    docs = list(documents)
    rows: list[tuple[int, int, int, int, int]] = []
    bounds = [corpus.document_sentences(d) for d in docs]
    for di, sb in enumerate(bounds):
        n_sent = len(sb) - 1
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_tokens)
        chunk: list[int] = []  # sentence indices within the document
        length = 0
        i = 0
        while i < n_sent:
            chunk.append(i)
            length += int(sb[i + 1] - sb[i])
            if i == n_sent - 1 or length >= target:
                if chunk:
                    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    a = [int(sb[chunk[0]]), int(sb[chunk[a_end - 1] + 1])]
                    if len(chunk) == 1 or rng.random() < 0.5:
                        label = 1
                        target_b = target - (a[1] - a[0])
                        rj = di
                        for _ in range(10):
                            rj = rng.randint(0, len(docs) - 1)
                            if rj != di:
                                break
                        rb = bounds[rj]
                        r_start = rng.randint(0, len(rb) - 2)
                        r_end = r_start
                        while r_end < len(rb) - 1:
                            r_end += 1
                            if rb[r_end] - rb[r_start] >= target_b:
                                break
                        b = [int(rb[r_start]), int(rb[r_end])]
                        i -= len(chunk) - a_end  # put the unused sentences back
                    else:
                        label = 0
                        b = [int(sb[chunk[a_end]]), int(sb[chunk[-1] + 1])]
                    _truncate_pair(a, b, max_tokens, rng)
                    if a[1] > a[0] and b[1] > b[0]:
                        rows.append((a[0], a[1], b[0], b[1], label))
                chunk = []
                length = 0
                target = max_tokens
                if rng.random() < short_seq_prob:
                    target = rng.randint(2, max_tokens)
            i += 1
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def create_single_segment_instances(corpus: ShardedCorpus, documents: Sequence[int], seq_len: int) -> np.ndarray:
    """Full-length single segments (no NSP): sentences packed up to ``seq_len - 2`` tokens."""
    if seq_len < 4:
        raise ValueError(f"seq_len must be at least 4, got {seq_len}")
    max_tokens = seq_len - 2
    rows: list[tuple[int, int, int, int, int]] = []
    for d in documents:
        sb = corpus.document_sentences(d)
        start = int(sb[0])
        for k in range(1, len(sb)):
            end = int(sb[k])
            if end - start > max_tokens:
                prev = int(sb[k - 1])
                if prev > start:  # emit what fits before this sentence
                    rows.append((start, prev, 0, 0, -100))
                    start = prev
                while end - start > max_tokens:  # a sentence longer than a segment: cut it
                    rows.append((start, start + max_tokens, 0, 0, -100))
                    start += max_tokens
        if int(sb[-1]) > start:
            rows.append((start, int(sb[-1]), 0, 0, -100))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def create_contiguous_instances(corpus: ShardedCorpus, documents: Sequence[int], seq_len: int) -> np.ndarray:
    """Full-length windows over the documents' token stream (see module docs): ``seq_len - 2`` tokens
    inside a document, ``seq_len - 3`` across a document boundary (A = end of one, B = start of the next)."""
    if seq_len < 4:
        raise ValueError(f"seq_len must be at least 4, got {seq_len}")
    inside, across = seq_len - 2, seq_len - 3
    rows: list[tuple[int, int, int, int, int]] = []
    pending: tuple[int, int] | None = None  # a document's tail still waiting for its continuation
    for d in documents:
        sb = corpus.document_sentences(d)
        start, end = int(sb[0]), int(sb[-1])
        if pending is not None:
            take = max(0, min(across - (pending[1] - pending[0]), end - start))
            rows.append((pending[0], pending[1], start, start + take, -100))
            start, pending = start + take, None
        while end - start >= inside:
            rows.append((start, start + inside, 0, 0, -100))
            start += inside
        if end > start:
            pending = (start, end)
    if pending is not None:
        rows.append((pending[0], pending[1], 0, 0, -100))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def split_documents(corpus: ShardedCorpus, eval_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded document-level train/held-out split holding out about ``eval_fraction`` of tokens.

    Documents larger than twice the held-out budget (e.g. whole novels) stay in training, so a
    small fraction never swallows a whole book; if none fits (or there is one document), nothing is
    held out, and ``pretrain`` says so.
    """
    n = corpus.num_documents
    if eval_fraction <= 0 or n < 2:
        return np.arange(n), np.zeros(0, np.int64)
    sizes = corpus.document_tokens()
    budget = eval_fraction * float(sizes.sum())
    order = np.random.default_rng(seed).permutation(n)
    held: list[int] = []
    total = 0.0
    for d in order:
        if total >= budget:
            break
        if sizes[d] <= 2 * budget and len(held) < n - 1:
            held.append(int(d))
            total += float(sizes[d])
    held_set = set(held)
    train = np.array([d for d in range(n) if d not in held_set], np.int64)
    return train, np.array(sorted(held), np.int64)


class PretrainingDataset:
    """Instances -> model inputs: ``[CLS] A [SEP] B [SEP]`` ids, token types and NSP label.

    Items also carry ``mask_seed`` = (seed, epoch, index) so that the collator's dynamic masking
    is a deterministic function of the example and the epoch: independent of batch composition,
    process count and resumption. With ``word_starts`` (the corpus must have been prepared with
    word boundaries) they carry the per-token word-start flags that whole-word masking uses.
    """

    def __init__(
        self,
        corpus: ShardedCorpus,
        instances: np.ndarray,
        cls_id: int,
        sep_id: int,
        seed: int = 0,
        word_starts: bool = False,
    ) -> None:
        if word_starts and not corpus.has_word_starts:
            raise ValueError(f"{corpus.folder} was prepared without word boundaries")
        self.word_starts = word_starts
        self.corpus = corpus
        self.instances = instances
        self.cls_id, self.sep_id = cls_id, sep_id
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.instances)

    def __getitem__(self, index: int) -> dict[str, Any]:
        a0, a1, b0, b1, label = (int(x) for x in self.instances[index])
        a = self.corpus.tokens(a0, a1)
        parts = [np.array([self.cls_id]), a, np.array([self.sep_id])]
        n_a = len(a) + 2
        if b1 > b0:
            b = self.corpus.tokens(b0, b1)
            parts += [b, np.array([self.sep_id])]
        ids = np.concatenate(parts).astype(np.int64)
        types = np.zeros(len(ids), np.int64)
        types[n_a:] = 1
        item: dict[str, Any] = {
            "input_ids": ids,
            "token_type_ids": types,
            "mask_seed": (self.seed, self.epoch, int(index)),
        }
        if self.word_starts:
            one = np.ones(1, bool)
            ws = [one, self.corpus.word_starts(a0, a1), one]
            if b1 > b0:
                ws += [self.corpus.word_starts(b0, b1), one]
            item["word_starts"] = np.concatenate(ws)
        if label != -100:
            item["next_sentence_label"] = label
        return item
