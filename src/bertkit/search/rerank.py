"""Retrieve, then rerank: a cross-encoder reorders the first hits of the embedding search."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["rerank_hits", "rerank_retrieval_metrics"]


def rerank_hits(
    ranker: Any,
    query: str,
    hits: list[dict[str, Any]],
    depth: int,
    max_length: int | None = None,
    truncation: str = "chunk",
) -> list[dict[str, Any]]:
    """``hits`` (each with ``text``) with the first ``depth`` reordered by the cross-encoder, whose logit
    becomes their ``score`` (the retrieval score is kept as ``retrieval_score``); the rest follow as they were.
    A pair longer than ``max_length`` (default: the ranker's) is scored by its best window (``chunk``),
    or by its first (``cut``, the view a reranker trained at that length had of its passages)."""
    head, tail = hits[:depth], hits[depth:]
    ranked = ranker(query, [h["text"] for h in head], return_text=False, truncation=truncation, max_length=max_length)
    return [
        {**head[r["index"]], "retrieval_score": head[r["index"]]["score"], "score": r["score"]} for r in ranked
    ] + tail


def rerank_retrieval_metrics(
    rerank_model: str,
    q: np.ndarray,
    qids: Sequence[str],
    queries: Mapping[str, str],
    c: np.ndarray,
    cids: Sequence[str],
    corpus: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, float]],
    depth: int = 20,
    progress: bool = True,
    max_length: int | None = None,
    truncation: str = "chunk",
) -> dict[str, float]:
    """The retrieval metrics of :func:`bertkit.search.evaluation.retrieval_metrics` after the
    cross-encoder in ``rerank_model`` reorders each query's first ``depth`` hits (``max_length``
    and ``truncation`` as in :func:`rerank_hits`)."""
    from tqdm.auto import tqdm

    from bertkit.pipelines import pipeline
    from bertkit.search.evaluation import RETRIEVAL_KS, _normalized, _query_metrics
    from bertkit.search.index import top_k_exact

    ranker = pipeline("text-ranking", model=rerank_model)
    rows = [i for i, qid in enumerate(qids) if any(s > 0 for s in qrels.get(qid, {}).values())]
    full = max(max(ks) for ks in RETRIEVAL_KS.values())
    sums: dict[str, float] = {}
    qn, cn = _normalized(q), _normalized(c)
    for i in tqdm(rows, desc="rerank", unit="query", disable=not progress, file=sys.stderr):
        _, idx = top_k_exact(cn, qn[i : i + 1], full)
        hits = [{"id": cids[j], "text": corpus[cids[j]], "score": 0.0} for j in idx[0]]
        ranked = rerank_hits(ranker, queries[qids[i]], hits, depth, max_length, truncation)
        relevant = {cid for cid, s in qrels[qids[i]].items() if s > 0}
        for name, v in _query_metrics([h["id"] for h in ranked], relevant).items():
            sums[name] = sums.get(name, 0.0) + v
    out = {name: v / len(rows) for name, v in sums.items()} if rows else {}
    out["queries"] = float(len(rows))
    return out
