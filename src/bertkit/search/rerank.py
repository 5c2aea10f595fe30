"""Retrieve, then rerank: a cross-encoder reorders the first hits of the embedding search."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["FUSIONS", "fuse_scores", "rerank_hits", "rerank_metrics_per_fusion"]


FUSIONS = ("none", "rrf", "zscore")
RRF_K = 60  # the constant of reciprocal-rank fusion as it is usually run: rank 1 and 2 weigh nearly alike


def fuse_scores(retrieval: Sequence[float], rerank: Sequence[float], fusion: str) -> list[float]:
    """One score per candidate from the retriever's and the cross-encoder's, both higher = better.

    ``none``: the cross-encoder's alone. ``rrf``: reciprocal-rank fusion, ``1/(k + rank)`` summed over
    both rankings, which needs no common scale. ``zscore``: each list standardised over the candidates,
    then summed, so neither model's scale (cosine in [-1, 1], logits unbounded) decides alone.
    """
    if fusion not in FUSIONS:
        raise ValueError(f"fusion {fusion!r} is not one of {', '.join(FUSIONS)}")
    if fusion == "none":
        return [float(x) for x in rerank]
    if fusion == "rrf":
        out = [0.0] * len(rerank)
        for scores in (retrieval, rerank):
            for rank, i in enumerate(sorted(range(len(scores)), key=lambda i: -scores[i])):
                out[i] += 1.0 / (RRF_K + rank + 1)
        return out
    a, b = np.asarray(retrieval, dtype=np.float64), np.asarray(rerank, dtype=np.float64)
    z = [(x - x.mean()) / (x.std() if x.std() > 0 else 1.0) for x in (a, b)]
    return (z[0] + z[1]).tolist()


def rerank_hits(
    ranker: Any,
    query: str,
    hits: list[dict[str, Any]],
    depth: int,
    max_length: int | None = None,
    truncation: str = "chunk",
    fusion: str = "none",
) -> list[dict[str, Any]]:
    """``hits`` (each with ``text`` and ``score``) with the first ``depth`` reordered by the cross-encoder;
    the new order's score becomes their ``score`` (the retrieval score is kept as ``retrieval_score``, the
    cross-encoder's logit as ``rerank_score``); the rest follow as they were. ``fusion`` (see
    :func:`fuse_scores`) ranks by both models rather than the cross-encoder alone.
    A pair longer than ``max_length`` (default: the ranker's) is scored by its best window (``chunk``),
    or by its first (``cut``, the view a reranker trained at that length had of its passages)."""
    head, tail = hits[:depth], hits[depth:]
    logits = _head_logits(ranker, query, [h["text"] for h in head], max_length, truncation)
    fused, order = _fused_order([float(h["score"]) for h in head], logits, fusion)
    return [
        {**head[i], "retrieval_score": head[i]["score"], "rerank_score": logits[i], "score": fused[i]} for i in order
    ] + tail


def _head_logits(ranker: Any, query: str, passages: list[str], max_length: int | None, truncation: str) -> list[float]:
    """The cross-encoder's logit for each of ``passages``, in their order (the ranker returns them sorted)."""
    ranked = ranker(query, passages, return_text=False, truncation=truncation, max_length=max_length)
    logits = [0.0] * len(passages)
    for r in ranked:
        logits[r["index"]] = float(r["score"])
    return logits


def _fused_order(retrieval: list[float], logits: list[float], fusion: str) -> tuple[list[float], list[int]]:
    """The fused scores of the head and its positions best first."""
    fused = fuse_scores(retrieval, logits, fusion)
    return fused, sorted(range(len(fused)), key=lambda i: -fused[i])


def rerank_metrics_per_fusion(
    rerank_model: str | Any,
    q: np.ndarray,
    qids: Sequence[str],
    queries: Mapping[str, str],
    c: np.ndarray,
    cids: Sequence[str],
    corpus: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, float]],
    fusions: Sequence[str] = FUSIONS,
    depth: int = 20,
    progress: bool = True,
    max_length: int | None = None,
    truncation: str = "chunk",
    lexical_weight: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Per fusion of ``fusions``, the retrieval metrics of :func:`bertkit.sentence.evaluation.metrics.retrieval_metrics`
    after the cross-encoder in ``rerank_model`` reorders each query's first ``depth`` hits (``max_length``
    and ``truncation`` as in :func:`rerank_hits`, each fusion as in :func:`fuse_scores`); each pair is
    scored once for all the fusions. With ``lexical_weight`` > 0 the first hits come from hybrid search
    (:func:`bertkit.search.lexical.hybrid_top_k`), and their fused score is the retriever's score.

    ``rerank_model`` is a reranker folder, or a callable that answers like
    ``pipeline("text-ranking")`` (``(query, passages, return_text=False, truncation=..., max_length=...)``
    -> ``[{"index": i, "score": logit}, ...]``), so another library's cross-encoder is measured by
    the same code."""
    from tqdm.auto import tqdm

    from bertkit.pipelines import pipeline
    from bertkit.search.lexical import first_stage
    from bertkit.sentence.evaluation.metrics import RETRIEVAL_KS, _normalized, _query_metrics

    unknown = [f for f in fusions if f not in FUSIONS]
    if unknown:  # before any query is scored
        raise ValueError(f"fusion {unknown[0]!r} is not one of {', '.join(FUSIONS)}")
    ranker = pipeline("text-ranking", model=rerank_model) if isinstance(rerank_model, str) else rerank_model
    rows = [i for i, qid in enumerate(qids) if any(s > 0 for s in qrels.get(qid, {}).values())]
    full = max(max(ks) for ks in RETRIEVAL_KS.values())
    sums: dict[str, dict[str, float]] = {f: {} for f in fusions}
    qn, cn = _normalized(q), _normalized(c)
    rank = first_stage(cn, [corpus[cid] for cid in cids] if lexical_weight else None, lexical_weight)
    for i in tqdm(rows, desc="rerank", unit="query", disable=not progress, file=sys.stderr):
        scores, idx = rank(qn[i : i + 1], [queries[qids[i]]], full)
        head, tail = [int(j) for j in idx[0, :depth]], [cids[int(j)] for j in idx[0, depth:]]
        logits = _head_logits(ranker, queries[qids[i]], [corpus[cids[j]] for j in head], max_length, truncation)
        relevant = {cid for cid, s in qrels[qids[i]].items() if s > 0}
        for fusion in fusions:
            _, best = _fused_order([float(v) for v in scores[0, :depth]], logits, fusion)
            order = [cids[head[k]] for k in best] + tail
            for name, v in _query_metrics(order, relevant).items():
                sums[fusion][name] = sums[fusion].get(name, 0.0) + v
    out: dict[str, dict[str, float]] = {}
    for fusion, m in sums.items():
        out[fusion] = {name: v / len(rows) for name, v in m.items()} if rows else {}
        out[fusion]["queries"] = float(len(rows))
    return out
