"""Measuring sentence embeddings: semantic similarity (STS) and retrieval.

* STS: Pearson and Spearman correlation of the cosine of each pair with its human score.
* Retrieval: every query ranks the whole corpus by cosine (or by hybrid search with BM25,
  :mod:`bertkit.search.lexical`); nDCG@10, MRR@10, MAP@100 and
  recall@1/10/100 against the qrels. Relevance is binary (a qrels score above 0), as in
  sentence-transformers' ``InformationRetrievalEvaluator``; queries without a relevant document
  are not scored. Ranking is chunked (:func:`bertkit.search.index.top_k_exact`), so memory stays at
  a block of queries times a block of the corpus.

Exact copies: a corpus that holds the same text under two ids (news sets and web crawls often do)
ranks the copies side by side, and qrels naming only one of them score the other as a miss.
:func:`credit_copies` extends each query's relevant documents to their exact copies; the queries
whose relevant documents it changes are the ones the copies touch (`evaluate-embeddings` counts
them, and scores with the extended qrels under `--credit-copies`).

Files: queries and corpus in the BEIR JSONL layout (``_id``, ``text``, optional ``title``, which is
put before the text), qrels as a TSV of ``query-id``, ``corpus-id``, ``score`` with a header line.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bertkit._text import parse_json, read_text, require_file, split_records

__all__ = [
    "RETRIEVAL_KS",
    "credit_copies",
    "read_beir",
    "read_qrels",
    "retrieval_metrics",
    "sts_metrics",
]

RETRIEVAL_KS = {"ndcg": (10,), "mrr": (10,), "map": (100,), "recall": (1, 10, 100)}


def read_beir(path: str | Path) -> dict[str, str]:
    """``{_id: text}`` of a BEIR JSONL file (queries or corpus); a title goes before the text."""
    path = require_file(path)
    out: dict[str, str] = {}
    # strict UTF-8 (a bad byte names its line), a BOM dropped, lines split at \n only
    for n, line in enumerate(split_records(read_text(path)), 1):
        if not line.strip():
            continue
        obj = parse_json(line, f"{path}:{n}")
        if not isinstance(obj, dict) or "_id" not in obj or not isinstance(obj.get("text"), str):
            raise ValueError(f"{path}:{n}: a BEIR row needs '_id' and a string 'text'")
        title = obj.get("title") or ""
        key = str(obj["_id"])
        if key in out:
            raise ValueError(f"{path}:{n}: _id {key!r} appears twice")
        out[key] = (f"{title} {obj['text']}" if title else obj["text"]).strip()
    if not out:
        raise ValueError(f"{path}: no rows")
    return out


def read_qrels(
    path: str | Path, query_ids: Mapping[str, object] | set[str], corpus_ids: Mapping[str, object] | set[str]
) -> dict[str, dict[str, float]]:
    """``{query-id: {corpus-id: score}}`` of a qrels TSV; an id missing from the queries or the corpus
    is an error naming the line."""
    path = require_file(path)
    qrels: dict[str, dict[str, float]] = {}
    rows = csv.reader(split_records(read_text(path), keepends=True), delimiter="\t")
    for n, row in enumerate(rows, 1):
        if not row or not "".join(row).strip():
            continue
        if n == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue  # the header
        if len(row) < 3:
            raise ValueError(f"{path}:{n}: expected query-id, corpus-id and score separated by tabs")
        qid, cid, raw = row[0].strip(), row[1].strip(), row[2].strip()
        try:
            score = float(raw)
        except ValueError:
            raise ValueError(f"{path}:{n}: score {raw!r} is not a number") from None
        if not math.isfinite(score):
            raise ValueError(f"{path}:{n}: score {raw!r} is not a finite number")
        if qid not in query_ids:
            raise ValueError(f"{path}:{n}: query-id {qid!r} is not in the queries")
        if cid not in corpus_ids:
            raise ValueError(f"{path}:{n}: corpus-id {cid!r} is not in the corpus")
        qrels.setdefault(qid, {})[cid] = score
    if not qrels:
        raise ValueError(f"{path}: no qrels")
    return qrels


def _copies(corpus: Mapping[str, str]) -> dict[str, list[str]]:
    """``{corpus-id: ids of every document with the same text}``, for the ids that have a copy; texts
    are compared with runs of whitespace made one space."""
    by_text: dict[str, list[str]] = {}
    for cid, text in corpus.items():
        by_text.setdefault(" ".join(text.split()), []).append(cid)
    return {cid: ids for ids in by_text.values() if len(ids) > 1 for cid in ids}


def credit_copies(qrels: Mapping[str, Mapping[str, float]], corpus: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """``qrels`` with each relevant document's exact copies in ``corpus`` relevant too, at the same
    score (a copy the qrels already grade keeps its own score)."""
    copies = _copies(corpus)
    out: dict[str, dict[str, float]] = {}
    for qid, rel in qrels.items():
        extended = dict(rel)
        for cid, score in rel.items():
            if score > 0:
                for other in copies.get(cid, ()):
                    extended.setdefault(other, score)
        out[qid] = extended
    return out


def _normalized(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def sts_metrics(emb1: np.ndarray, emb2: np.ndarray, scores: Sequence[float]) -> dict[str, float]:
    """``pearson`` and ``spearman`` of the pairs' cosine similarity against the gold ``scores``."""
    from bertkit.tasks.metrics import pearsonr, spearmanr

    cos = (_normalized(emb1) * _normalized(emb2)).sum(1).astype(np.float64)
    gold = np.asarray(scores, np.float64)
    return {"pearson": float(pearsonr(cos, gold)), "spearman": float(spearmanr(cos, gold))}


def _query_metrics(hits: Sequence[str], relevant: set[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in RETRIEVAL_KS["recall"]:
        out[f"recall@{k}"] = sum(h in relevant for h in hits[:k]) / len(relevant)
    for k in RETRIEVAL_KS["mrr"]:
        out[f"mrr@{k}"] = next((1.0 / (r + 1) for r, h in enumerate(hits[:k]) if h in relevant), 0.0)
    for k in RETRIEVAL_KS["ndcg"]:
        dcg = sum(1.0 / math.log2(r + 2) for r, h in enumerate(hits[:k]) if h in relevant)
        idcg = sum(1.0 / math.log2(r + 2) for r in range(min(k, len(relevant))))
        out[f"ndcg@{k}"] = dcg / idcg
    for k in RETRIEVAL_KS["map"]:
        found, total = 0, 0.0
        for r, h in enumerate(hits[:k]):
            if h in relevant:
                found += 1
                total += found / (r + 1)
        out[f"map@{k}"] = total / min(k, len(relevant))
    return out


def retrieval_metrics(
    query_emb: np.ndarray,
    query_ids: Sequence[str],
    corpus_emb: np.ndarray,
    corpus_ids: Sequence[str],
    qrels: Mapping[str, Mapping[str, float]],
    query_block: int = 1024,
    corpus_chunk: int = 16384,
    query_texts: Sequence[str] | None = None,
    corpus_texts: Sequence[str] | None = None,
    lexical_weight: float = 0.0,
) -> dict[str, float]:
    """Mean nDCG@10, MRR@10, MAP@100 and recall@1/10/100 over the queries with a relevant document,
    ranking ``corpus_emb`` by cosine; ``queries`` counts them. With ``lexical_weight`` > 0 the ranking
    is hybrid search over ``corpus_texts`` (:func:`bertkit.search.lexical.hybrid_top_k`)."""
    from bertkit.search.lexical import first_stage

    depth = max(max(ks) for ks in RETRIEVAL_KS.values())
    q = _normalized(query_emb)
    c = _normalized(corpus_emb)
    rows = [i for i, qid in enumerate(query_ids) if any(s > 0 for s in qrels.get(qid, {}).values())]
    rank = first_stage(c, corpus_texts, lexical_weight, chunk=corpus_chunk)
    sums: dict[str, float] = {}
    for s in range(0, len(rows), query_block):
        block = rows[s : s + query_block]
        _, idx = rank(q[block], None if query_texts is None else [query_texts[i] for i in block], depth)
        for i, hit_rows in zip(block, idx):
            relevant = {cid for cid, score in qrels[query_ids[i]].items() if score > 0}
            for name, v in _query_metrics([corpus_ids[j] for j in hit_rows], relevant).items():
                sums[name] = sums.get(name, 0.0) + v
    n = len(rows)
    out = {name: v / n for name, v in sums.items()} if n else {}
    out["queries"] = float(n)
    return out
