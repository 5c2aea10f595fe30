"""Lexical retrieval (Okapi BM25) and its fusion with embedding search: hybrid search.

A sentence embedding ranks texts by what they mean; BM25 ranks them by the words they share with
the query, each weighted by how rare it is in the corpus. The two fail on different queries (a
paraphrase defeats BM25; a name, a number or a rare term that the embedding blurs is what BM25
finds), so a weighted sum of the two, each standardised over the corpus, ranks better than either.

* Words are BERT's pre-tokenized words (:class:`bertkit.tokenization.wordpiece.Normalizer`:
  lowercased, accents stripped, split on whitespace and punctuation, every CJK ideograph a word),
  without the punctuation marks; no stemming and no stop list, so the ranking does not depend on
  the language of the corpus.
* Scores are Okapi BM25 with Lucene's always-positive idf, ``log(1 + (N - n + 0.5) / (n + 0.5))``,
  ``k1`` = 1.2 and ``b`` = 0.75; a word repeated in the query counts each time.
* Hybrid: ``(1 - w) * z(cosine) + w * z(BM25)``, where ``z`` standardises one query's scores over the
  whole corpus (mean 0, standard deviation 1). ``w`` = 0 is the embedding search, ``w`` = 1 is BM25.
  Both scores are computed for every text, so hybrid search is exact whatever index backend
  answers the embedding-only queries.
* An index folder keeps its BM25 postings in ``bm25.npz`` once hybrid search has built them
  (:meth:`BM25.save`), tagged with the SHA-256 of the texts they were built from: a later load reads
  them instead of tokenizing the corpus again, and postings of other texts are never used.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Callable, Sequence

import numpy as np

from bertkit.sentence.util import top_k_exact

__all__ = ["BM25", "first_stage", "hybrid_top_k", "words"]

_HAS_WORD_CHAR = re.compile(r"\w")
_FORMAT = 1  # the layout of a saved BM25 file; another number is rebuilt, never misread
_NORMALIZER = None


def words(text: str) -> list[str]:
    """The words BM25 counts in ``text``: BERT's pre-tokenized words without punctuation marks."""
    global _NORMALIZER
    if _NORMALIZER is None:
        from bertkit.tokenization.wordpiece import Normalizer

        _NORMALIZER = Normalizer()
    return [w for w in _NORMALIZER.words(text) if _HAS_WORD_CHAR.search(w)]


class BM25:
    """Okapi BM25 over a fixed list of texts, held as one posting list per word.

    ``scores(queries)`` -> (Q, N) float32, text ``j`` of the corpus in column ``j``."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and b in [0, 1], got k1={k1}, b={b}")
        self.k1, self.b = float(k1), float(b)
        self.vocab: dict[str, int] = {}
        term_ids: list[int] = []
        lengths = np.zeros(len(texts), np.float64)
        for j, text in enumerate(texts):
            ws = words(text)
            lengths[j] = len(ws)
            term_ids.extend(self.vocab.setdefault(w, len(self.vocab)) for w in ws)
        n = len(texts)
        self.n_texts = n
        doc_ids = np.repeat(np.arange(n, dtype=np.int64), lengths.astype(np.int64))
        # one (word, text) pair per posting, sorted by word then text; its count is the word's tf there
        pairs, tf = np.unique(np.asarray(term_ids, np.int64) * max(n, 1) + doc_ids, return_counts=True)
        term, self._docs = pairs // max(n, 1), (pairs % max(n, 1)).astype(np.int64)
        self._starts = np.searchsorted(term, np.arange(len(self.vocab) + 1))
        df = np.diff(self._starts).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        avg = float(lengths.mean()) if n and lengths.sum() else 1.0
        norm = self.k1 * (1.0 - self.b + self.b * lengths[self._docs] / avg)
        self._weights = (idf[term] * tf * (self.k1 + 1.0) / (tf + norm)).astype(np.float32)

    def __len__(self) -> int:
        return self.n_texts

    def save(self, path: str | os.PathLike, source_sha256: str) -> None:
        """Write the postings to ``path`` (numpy ``.npz``, atomically), tagged with ``source_sha256``, the
        digest of the texts they were built from (:meth:`load` reads them back only for that digest)."""
        from bertkit._io import atomic_path

        # words hold no whitespace, so one newline-joined UTF-8 buffer keeps them in term-id order
        vocab = "\n".join(self.vocab).encode("utf-8")
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(
                f,
                format=np.array([_FORMAT], np.int64),
                source=np.frombuffer(source_sha256.encode("ascii"), np.uint8),
                params=np.array([self.k1, self.b, self.n_texts], np.float64),
                vocab=np.frombuffer(vocab, np.uint8),
                starts=self._starts,
                docs=self._docs,
                weights=self._weights,
            )

    @classmethod
    def load(cls, path: str | os.PathLike, source_sha256: str) -> BM25 | None:
        """The postings :meth:`save` wrote for the texts of digest ``source_sha256``; None where the file
        is missing, damaged, of another format or built from other texts (the caller builds anew)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["format"][0]) != _FORMAT or z["source"].tobytes().decode("ascii") != source_sha256:
                    return None
                k1, b, n = (float(x) for x in z["params"])
                vocab = z["vocab"].tobytes().decode("utf-8")
                starts, docs, weights = z["starts"], z["docs"], z["weights"]
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, UnicodeDecodeError):
            return None
        terms = vocab.split("\n") if vocab else []
        if len(starts) != len(terms) + 1 or len(docs) != len(weights) or (len(docs) and int(docs.max()) >= n):
            return None
        bm25 = cls.__new__(cls)  # the postings as saved: __init__ would tokenize the texts again
        bm25.k1, bm25.b, bm25.n_texts = k1, b, int(n)
        bm25.vocab = {w: i for i, w in enumerate(terms)}
        bm25._starts, bm25._docs, bm25._weights = starts, docs, weights
        return bm25

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """(Q, N): the BM25 score of every text for each query; 0 where they share no word."""
        out = np.zeros((len(queries), self.n_texts), np.float32)
        for i, query in enumerate(queries):
            row = out[i]
            for w in words(query):
                t = self.vocab.get(w)
                if t is not None:  # a word's postings name each text once, so this adds without collisions
                    lo, hi = self._starts[t], self._starts[t + 1]
                    row[self._docs[lo:hi]] += self._weights[lo:hi]
        return out


def _standardized(s: np.ndarray) -> np.ndarray:
    sd = s.std(axis=1, keepdims=True)
    return (s - s.mean(axis=1, keepdims=True)) / np.where(sd > 0, sd, 1.0)


def hybrid_top_k(
    vectors: np.ndarray,
    query_vectors: np.ndarray,
    lexical: BM25,
    query_texts: Sequence[str],
    k: int,
    weight: float,
    block_bytes: int = 1 << 26,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The top ``k`` of ``(1 - weight) * z(cosine) + weight * z(BM25)`` over every text, per query.

    ``vectors`` (N, d) and ``query_vectors`` (Q, d) are L2-normalised; ``query_texts`` are the Q queries
    as text. Returns (fused scores, row indices, cosines, BM25 scores), each (Q, k), best first. Queries
    go in blocks so memory stays near ``block_bytes`` per kind of score."""
    if not 0.0 <= weight <= 1.0 or math.isnan(weight):
        raise ValueError(f"the lexical weight must be in [0, 1] (0: embeddings only, 1: BM25 only), got {weight}")
    q = np.atleast_2d(np.asarray(query_vectors, np.float32))
    if len(query_texts) != q.shape[0]:
        raise ValueError(f"{q.shape[0]} query vectors but {len(query_texts)} query texts")
    n = vectors.shape[0]
    if len(lexical) != n:
        raise ValueError(f"the BM25 index holds {len(lexical)} texts but there are {n} vectors")
    k = min(k, n)
    step = max(1, block_bytes // max(4 * n, 1))
    outs = [], [], [], []
    for s in range(0, q.shape[0], step):
        dense = q[s : s + step] @ np.asarray(vectors, np.float32).T  # (q, N)
        lex = lexical.scores(query_texts[s : s + step])  # (q, N)
        fused = (1.0 - weight) * _standardized(dense) + weight * _standardized(lex)
        idx = np.argpartition(-fused, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (len(fused), 1))
        order = np.argsort(-np.take_along_axis(fused, idx, 1), axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, 1)
        for out, m in zip(outs, (fused, None, dense, lex)):
            out.append(idx if m is None else np.take_along_axis(m, idx, 1))
    return tuple(np.concatenate(o) if o else np.zeros((0, k)) for o in outs)  # type: ignore[return-value]


def first_stage(
    corpus_vectors: np.ndarray, corpus_texts: Sequence[str] | None, lexical_weight: float = 0.0, chunk: int = 65536
) -> Callable[[np.ndarray, Sequence[str] | None, int], tuple[np.ndarray, np.ndarray]]:
    """The retriever over ``corpus_vectors`` (L2-normalised): ``(query vectors, query texts, k)`` ->
    (scores, row indices), each (Q, k), best first. Cosine top-k, or with ``lexical_weight`` > 0 hybrid
    search over ``corpus_texts``, whose BM25 index is built once, here."""
    if not lexical_weight:
        return lambda q, texts, k: top_k_exact(corpus_vectors, q, k, chunk=chunk)
    if corpus_texts is None:
        raise ValueError("a lexical weight above 0 needs the corpus texts")
    lexical = BM25(corpus_texts)

    def rank(q: np.ndarray, texts: Sequence[str] | None, k: int) -> tuple[np.ndarray, np.ndarray]:
        if texts is None:
            raise ValueError("hybrid search (a lexical weight above 0) needs the queries' texts")
        fused, idx, _, _ = hybrid_top_k(corpus_vectors, q, lexical, list(texts), k, lexical_weight)
        return fused, idx

    return rank
