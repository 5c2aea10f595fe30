"""Measuring sentence embeddings: semantic similarity (STS) and retrieval.

* STS: Pearson and Spearman correlation of the similarity of each pair (cosine by default; dot,
  euclidean or manhattan) with its human score.
* Retrieval: every query ranks the whole corpus by cosine (or dot product, another similarity, or
  hybrid search with BM25, :mod:`bertkit.search.lexical`); nDCG@10, MRR@10, MAP@100 and
  recall@1/10/100 against the qrels by default, any cut-offs of those and of precision@k and
  accuracy@k on request. Relevance is binary (a qrels score above 0), as in sentence-transformers'
  ``InformationRetrievalEvaluator``; queries without a relevant document are not scored. Equal
  scores rank in ascending corpus id, as there, so exact copies in the corpus rank the same way in
  both. Ranking is chunked, so memory stays at a block of queries times a block of the corpus.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import _hooks
from bertkit._text import parse_json, read_text, require_file, split_records

__all__ = [
    "RETRIEVAL_KS",
    "SIMILARITIES",
    "average_precision",
    "best_accuracy_threshold",
    "best_f1_threshold",
    "correlations",
    "credit_copies",
    "pair_similarity",
    "read_beir",
    "read_qrels",
    "rerank_metrics",
    "retrieval_metrics",
    "sts_metrics",
]

RETRIEVAL_KS = {"ndcg": (10,), "mrr": (10,), "map": (100,), "recall": (1, 10, 100)}
# every metric retrieval_metrics can give, by the name its keys start with
RETRIEVAL_METRICS = ("accuracy", "precision", "recall", "ndcg", "mrr", "map")
# sentence-transformers' similarity_fn_name values
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")


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


def _check_similarity(similarity: str) -> None:
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}, got {similarity!r}")


def pair_similarity(emb1: np.ndarray, emb2: np.ndarray, similarity: str = "cosine") -> np.ndarray:
    """The ``similarity`` of each row of ``emb1`` with the same row of ``emb2`` (float64, one per pair);
    euclidean and manhattan are negative distances, so higher is more similar throughout."""
    _check_similarity(similarity)
    if similarity == "cosine":
        return (_normalized(emb1) * _normalized(emb2)).sum(1).astype(np.float64)
    from bertkit.sentence import util

    pairwise = util.SIMILARITY_FUNCTIONS[similarity][1]
    return pairwise(np.asarray(emb1, np.float32), np.asarray(emb2, np.float32)).numpy().astype(np.float64)


def sts_metrics(
    emb1: np.ndarray, emb2: np.ndarray, scores: Sequence[float], similarity: str = "cosine"
) -> dict[str, float]:
    """``pearson`` and ``spearman`` of the pairs' ``similarity`` (cosine by default) against the gold
    ``scores``."""
    return correlations(pair_similarity(emb1, emb2, similarity), scores)


def correlations(predicted: Sequence[float], gold: Sequence[float]) -> dict[str, float]:
    """``pearson`` and ``spearman`` of one score per pair (``predicted``) against the gold ``scores``."""
    from bertkit.tasks.metrics import pearsonr, spearmanr

    pred = np.asarray(predicted, np.float64)
    ref = np.asarray(gold, np.float64)
    if pred.ndim != 1 or pred.shape != ref.shape:
        raise ValueError(
            f"correlations need one predicted score per gold score, got shapes {pred.shape} and {ref.shape}"
        )
    return {"pearson": float(pearsonr(pred, ref)), "spearman": float(spearmanr(pred, ref))}


def _query_metrics(
    hits: Sequence[Any],
    relevant: set[Any],
    ks: Mapping[str, Sequence[int]] = RETRIEVAL_KS,
    run_end: Sequence[int] | None = None,
) -> dict[str, float]:
    """One query's metrics at the cut-offs ``ks`` (``{metric: cut-offs}``) from its ranked ``hits``.

    ``run_end`` (per rank, the last rank with the same score) counts equal scores as scikit-learn's
    ranking metrics do, which sentence-transformers' cross-encoder evaluators use: nDCG gives every
    rank of a run the run's mean gain, MAP scores a run's relevant hits at the run's end (or at the
    cut-off). Without it each rank is a run of its own.
    """
    out: dict[str, float] = {}
    for k in ks.get("accuracy", ()):
        out[f"accuracy@{k}"] = float(any(h in relevant for h in hits[:k]))
    for k in ks.get("precision", ()):
        out[f"precision@{k}"] = sum(h in relevant for h in hits[:k]) / k
    for k in ks.get("recall", ()):
        out[f"recall@{k}"] = sum(h in relevant for h in hits[:k]) / len(relevant)
    gain = [float(h in relevant) for h in hits]
    if run_end is not None:
        start = 0
        while start < len(gain):
            end = run_end[start] + 1
            gain[start:end] = [sum(gain[start:end]) / (end - start)] * (end - start)
            start = end
    for k in ks.get("ndcg", ()):
        dcg = sum(g / math.log2(r + 2) for r, g in enumerate(gain[:k]) if g)
        idcg = sum(1.0 / math.log2(r + 2) for r in range(min(k, len(relevant))))
        out[f"ndcg@{k}"] = dcg / idcg
    for k in ks.get("mrr", ()):
        out[f"mrr@{k}"] = next((1.0 / (r + 1) for r, h in enumerate(hits[:k]) if h in relevant), 0.0)
    if ks.get("map"):
        found_by_rank = np.cumsum([h in relevant for h in hits]).tolist()
    for k in ks.get("map", ()):
        total = 0.0
        for r, h in enumerate(hits[:k]):
            if h in relevant:
                last = r if run_end is None else min(run_end[r], k - 1)
                total += found_by_rank[last] / (last + 1)
        out[f"map@{k}"] = total / min(k, len(relevant))
    return out


def _ranked_runs(scores: Sequence[float]) -> tuple[list[int], list[int]]:
    """Indices of ``scores`` best first, in sentence-transformers' order (``np.argsort`` reversed), and
    per rank the last rank with the same score."""
    s = np.asarray(scores)
    if s.ndim != 1 or not len(s):
        raise ValueError(f"ranking needs a non-empty list of scores, got shape {s.shape}")
    if np.isnan(s).any():
        raise ValueError(
            f"score {float(s[np.isnan(s)][0])!r} at position {int(np.flatnonzero(np.isnan(s))[0])} is not a number"
        )
    order = np.argsort(s)[::-1]
    ranked = s[order]
    run_end = [0] * len(s)
    end = len(s) - 1
    for r in range(len(s) - 1, -1, -1):
        if r < len(s) - 1 and ranked[r] != ranked[r + 1]:
            end = r
        run_end[r] = end
    return order.tolist(), run_end


def _binary(labels: Sequence[int], n: int, what: str) -> list[int]:
    """``labels`` as a list of 0 and 1, one per score; anything else is refused by value."""
    y = np.asarray(labels).reshape(-1).tolist()
    if len(y) != n:
        raise ValueError(f"{what} must hold one 0 or 1 per score ({n}), got {len(y)}")
    bad = next((v for v in y if v not in (0, 1)), None)
    if bad is not None:
        raise ValueError(f"{what} must be 0 or 1, got {bad!r}")
    return [int(v) for v in y]


def rerank_metrics(relevance: Sequence[int], scores: Sequence[float], k: int = 10) -> dict[str, float]:
    """``mrr@k``, ``ndcg@k`` and ``map`` (average precision over every candidate) of one query's
    candidates, ``relevance`` 1 or 0 each, ranked by ``scores``: sentence-transformers'
    ``CrossEncoderRerankingEvaluator`` numbers, equal scores included (see :func:`_query_metrics`).
    A query with no relevant candidate scores 0 on each."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a whole number >= 1, got {k!r}")
    order, run_end = _ranked_runs(scores)
    rel = _binary(relevance, len(order), "relevance")
    relevant = {i for i, r in enumerate(rel) if r}
    if not relevant:
        return {f"mrr@{k}": 0.0, f"ndcg@{k}": 0.0, "map": 0.0}
    m = _query_metrics(order, relevant, {"mrr": [k], "ndcg": [k], "map": [len(order)]}, run_end)
    return {f"mrr@{k}": m[f"mrr@{k}"], f"ndcg@{k}": m[f"ndcg@{k}"], "map": m[f"map@{len(order)}"]}


def average_precision(labels: Sequence[int], scores: Sequence[float]) -> float:
    """Average precision of binary ``labels`` (1 = positive) ranked by ``scores``, equal scores as one
    threshold (scikit-learn's ``average_precision_score``); 0 without a positive."""
    order, run_end = _ranked_runs(scores)
    relevant = {i for i, y in enumerate(_binary(labels, len(order), "labels")) if y}
    if not relevant:
        return 0.0
    return _query_metrics(order, relevant, {"map": [len(order)]}, run_end)[f"map@{len(order)}"]


def best_accuracy_threshold(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float]:
    """The best accuracy of "positive when the score is at least the threshold" over binary ``labels``,
    and that threshold: a midpoint between neighbouring scores (in the scores' precision), as
    sentence-transformers' ``BinaryClassificationEvaluator.find_best_acc_and_threshold`` picks it."""
    s = np.asarray(scores)
    y = _binary(labels, len(s), "labels")
    dtype = np.result_type(s.dtype, np.float16)
    rows = sorted(zip(s, y), key=lambda row: row[0], reverse=True)
    if not rows:
        return 0.0, -1.0
    positives, negatives_left = 0, y.count(0)
    # the threshold above every score: every pair called negative
    best, threshold = negatives_left / len(y), np.nextafter(rows[0][0], np.inf, dtype=dtype)
    for i, (score, label) in enumerate(rows):
        positives += label
        negatives_left -= 1 - label
        last = i == len(rows) - 1
        if not last and score == rows[i + 1][0]:
            continue
        acc = (positives + negatives_left) / len(y)
        if acc > best:
            best = acc
            threshold = score if last else (score + rows[i + 1][0]) / 2
            if not last and threshold == rows[i + 1][0]:  # a rounded midpoint must not take the next score in
                threshold = score
    return best, threshold


def best_f1_threshold(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float, float, float]:
    """The best F1 of "positive when the score is at least the threshold" over binary ``labels``, with its
    precision, recall and threshold, as sentence-transformers'
    ``BinaryClassificationEvaluator.find_best_f1_and_threshold`` picks them."""
    s = np.asarray(scores)
    y = _binary(labels, len(s), "labels")
    rows = sorted(zip(s, y), key=lambda row: row[0], reverse=True)
    best_f1 = best_precision = best_recall = 0.0
    threshold: Any = 0
    taken = correct = 0
    for i, (score, label) in enumerate(rows):
        taken += 1
        correct += label
        last = i == len(rows) - 1
        if not last and score == rows[i + 1][0]:
            continue
        if correct > 0:
            precision, recall = correct / taken, correct / sum(y)
            f1 = 2 * precision * recall / (precision + recall)
            if f1 > best_f1:
                best_f1, best_precision, best_recall = f1, precision, recall
                threshold = score if last else (score + rows[i + 1][0]) / 2
                if not last and threshold == rows[i + 1][0]:
                    threshold = score
    return best_f1, best_precision, best_recall, threshold


def _check_ks(ks: Mapping[str, Sequence[int]]) -> None:
    for name, cuts in ks.items():
        if name not in RETRIEVAL_METRICS:
            raise ValueError(f"retrieval metric {name!r} is not one of {', '.join(RETRIEVAL_METRICS)}")
        for k in cuts:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ValueError(f"{name}@k: k must be a whole number >= 1, got {k!r}")
    if not any(ks.values()):
        raise ValueError("retrieval metrics need at least one cut-off k")


ScoreFunction = Callable[[Any, Any], Any]


def _scorer(corpus_emb: np.ndarray, similarity: str | ScoreFunction) -> Callable[[np.ndarray, int, int], np.ndarray]:
    """``(queries, start, end)`` -> the (Q, end - start) scores of the queries against those corpus rows."""
    if isinstance(similarity, str):
        _check_similarity(similarity)
        if similarity in ("cosine", "dot"):
            c = _normalized(corpus_emb) if similarity == "cosine" else np.asarray(corpus_emb, np.float32)

            def inner(q: np.ndarray, start: int, end: int) -> np.ndarray:
                # float32 products differ in the last bit with the block's shape, which would break
                # exact ties (copies) differently per chunking; in float64, rounded back to float32,
                # the same pair gets the same score in any chunk
                q = _normalized(q) if similarity == "cosine" else q
                return (q.astype(np.float64) @ c[start:end].astype(np.float64).T).astype(np.float32)

            return inner
        from bertkit.sentence import util

        similarity = util.SIMILARITY_FUNCTIONS[similarity][0]
    import torch

    fn = similarity
    c_t = torch.as_tensor(np.asarray(corpus_emb, np.float32))

    def score(q: np.ndarray, start: int, end: int) -> np.ndarray:
        out = fn(torch.as_tensor(q), c_t[start:end])
        return np.asarray(out.detach().float().cpu().numpy() if hasattr(out, "detach") else out, np.float32)

    return score


def _ranked(
    score: Callable[[np.ndarray, int, int], np.ndarray], q: np.ndarray, n: int, k: int, chunk: int, id_rank: np.ndarray
) -> np.ndarray:
    """Row indices (Q, min(k, n)) of each query's best ``k`` corpus rows, best first; equal scores in
    ascending corpus id (``id_rank``), so a tie at the cut-off never depends on the chunking."""
    k = min(k, n)
    keep = min(k + 1, n)  # one row past the cut-off shows a tie across it
    best_s = np.zeros((len(q), 0), np.float32)
    best_i = np.zeros((len(q), 0), np.int64)
    for start in range(0, n, chunk):
        s = score(q, start, min(n, start + chunk))
        kk = min(keep, s.shape[1])
        idx = np.argpartition(-s, kk - 1, axis=1)[:, :kk] if kk < s.shape[1] else np.arange(s.shape[1])[None]
        idx = np.broadcast_to(idx, (len(q), kk))
        cand_s = np.concatenate([best_s, np.take_along_axis(s, idx, 1)], 1)
        cand_i = np.concatenate([best_i, idx + start], 1)
        order = np.lexsort((id_rank[cand_i], -cand_s), axis=1)[:, :keep]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    if keep > k:
        # a row tied across the cut-off may have left an equal score with a lower id in another
        # chunk's partition: rank that row's whole corpus
        for r in np.flatnonzero(best_s[:, k] == best_s[:, k - 1]):
            full = np.concatenate([score(q[r : r + 1], s, min(n, s + chunk))[0] for s in range(0, n, chunk)])
            best_i[r] = np.lexsort((id_rank, -full))[:keep]
    return best_i[:, :k]


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
    ks: Mapping[str, Sequence[int]] | None = None,
    similarity: str | ScoreFunction = "cosine",
) -> dict[str, float]:
    """Mean nDCG@10, MRR@10, MAP@100 and recall@1/10/100 (or the cut-offs ``ks``, ``{metric: ks}`` of
    :data:`RETRIEVAL_METRICS`) over the queries with a relevant document, ranking ``corpus_emb`` by
    ``similarity``: a name of :data:`SIMILARITIES` or a function ``(queries, corpus)`` -> a score
    matrix on tensors; ``queries`` counts them. With ``lexical_weight`` > 0 the ranking is hybrid
    search (cosine) over ``corpus_texts`` (:func:`bertkit.search.lexical.hybrid_top_k`, a layer above,
    reached through the ``search.first_stage`` hook)."""
    ks = RETRIEVAL_KS if ks is None else ks
    _check_ks(ks)
    depth = max(max(v) for v in ks.values() if v)
    if lexical_weight:
        if similarity != "cosine":
            raise ValueError(f"hybrid search ranks by cosine, not by {similarity!r}")
        c = _normalized(corpus_emb)
        lexical = _hooks.call("search.first_stage", c, corpus_texts, lexical_weight, chunk=corpus_chunk)

        def rank(block: list[int], k: int) -> np.ndarray:
            texts = None if query_texts is None else [query_texts[i] for i in block]
            return lexical(_normalized(query_emb[block]), texts, k)[1]
    else:
        score = _scorer(corpus_emb, similarity)
        order = sorted(range(len(corpus_ids)), key=corpus_ids.__getitem__)
        id_rank = np.empty(len(corpus_ids), np.int64)
        id_rank[order] = np.arange(len(corpus_ids))

        def rank(block: list[int], k: int) -> np.ndarray:
            q = np.asarray(query_emb, np.float32)[block]
            return _ranked(score, q, len(corpus_ids), k, corpus_chunk, id_rank)

    rows = [i for i, qid in enumerate(query_ids) if any(s > 0 for s in qrels.get(qid, {}).values())]
    sums: dict[str, float] = {}
    for s in range(0, len(rows), query_block):
        block = rows[s : s + query_block]
        for i, hit_rows in zip(block, rank(block, depth)):
            relevant = {cid for cid, score in qrels[query_ids[i]].items() if score > 0}
            for name, v in _query_metrics([corpus_ids[j] for j in hit_rows], relevant, ks).items():
                sums[name] = sums.get(name, 0.0) + v
    n = len(rows)
    out = {name: v / n for name, v in sums.items()} if n else {}
    out["queries"] = float(n)
    return out
