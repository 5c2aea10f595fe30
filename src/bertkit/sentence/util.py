"""Similarity, search and quantization of sentence vectors, under sentence-transformers' ``util`` names.

``from bertkit import SentenceTransformer, util`` runs a sentence-transformers script unchanged:
``util.cos_sim(a, b)``, ``util.semantic_search(queries, corpus, top_k=5)``,
``util.paraphrase_mining(model, sentences)``, ``util.community_detection(vectors)`` and
``util.quantize_embeddings(vectors, "int8")`` take the same arguments and give the same results.
Inputs may be tensors, numpy arrays or lists of either; a 1-D vector counts as one row. Scores are
computed in float32 whatever the input precision, so nearby scores do not collapse into ties.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bertkit import _args as A

__all__ = [
    "community_detection",
    "cos_sim",
    "dot_score",
    "euclidean_sim",
    "manhattan_sim",
    "normalize_embeddings",
    "pairwise_cos_sim",
    "pairwise_dot_score",
    "pairwise_euclidean_sim",
    "pairwise_manhattan_sim",
    "paraphrase_mining",
    "paraphrase_mining_embeddings",
    "quantize_embeddings",
    "semantic_search",
    "top_k_exact",
    "truncate_embeddings",
]

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")

Vectors = Tensor | np.ndarray | Sequence[Any]


def _tensor(a: Vectors, what: str = "embeddings") -> Tensor:
    """A dense float32 tensor from a tensor, an array, or a list of vectors (stacked)."""
    if isinstance(a, Tensor):
        t = a
    elif isinstance(a, np.ndarray):
        t = torch.from_numpy(a) if a.flags.writeable else torch.tensor(a)
    elif isinstance(a, (list, tuple)):
        if a and all(isinstance(x, Tensor) for x in a):
            t = torch.stack(list(a))
        elif a and all(isinstance(x, np.ndarray) for x in a):
            t = torch.from_numpy(np.stack(a))
        else:
            try:
                t = torch.tensor(a)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{what}: expected a tensor, an array or a list of equal-length vectors ({e})") from e
    else:
        raise TypeError(f"{what}: expected a tensor, an array or a list of vectors, got {type(a).__name__}")
    if t.is_sparse:
        raise ValueError(f"{what}: sparse tensors are not supported; pass dense vectors (tensor.to_dense())")
    if not torch.is_floating_point(t):
        t = t.float()
    elif torch.finfo(t.dtype).bits < 32:
        t = t.float()
    return t


def _rows(a: Vectors, what: str = "embeddings") -> Tensor:
    """Like :func:`_tensor`, with a 1-D vector made one row."""
    t = _tensor(a, what)
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.dim() != 2:
        raise ValueError(f"{what}: expected vectors of shape (n, dim) or (dim,), got shape {tuple(t.shape)}")
    return t


def _same_width(a: Tensor, b: Tensor) -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"the two sets of vectors differ in width: {a.shape[-1]} and {b.shape[-1]}")


def _same_shape(a: Tensor, b: Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"pairwise scores need vectors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def normalize_embeddings(embeddings: Tensor) -> Tensor:
    """Each vector scaled to unit L2 length (a zero vector stays zero)."""
    return torch.nn.functional.normalize(_tensor(embeddings), p=2, dim=-1)


def cos_sim(a: Vectors, b: Vectors) -> Tensor:
    """(len(a), len(b)) cosine similarities: ``res[i][j] = cos(a[i], b[j])``."""
    a, b = _rows(a, "a"), _rows(b, "b")
    _same_width(a, b)
    return normalize_embeddings(a) @ normalize_embeddings(b).T


def dot_score(a: Vectors, b: Vectors) -> Tensor:
    """(len(a), len(b)) dot products."""
    a, b = _rows(a, "a"), _rows(b, "b")
    _same_width(a, b)
    return a @ b.T


def euclidean_sim(a: Vectors, b: Vectors) -> Tensor:
    """(len(a), len(b)) negative Euclidean distances (higher is more similar)."""
    a, b = _rows(a, "a"), _rows(b, "b")
    _same_width(a, b)
    return -torch.cdist(a, b, p=2.0)


def manhattan_sim(a: Vectors, b: Vectors) -> Tensor:
    """(len(a), len(b)) negative Manhattan distances."""
    a, b = _rows(a, "a"), _rows(b, "b")
    _same_width(a, b)
    return -torch.cdist(a, b, p=1.0)


def pairwise_cos_sim(a: Vectors, b: Vectors) -> Tensor:
    """``res[i] = cos(a[i], b[i])``."""
    a, b = _tensor(a, "a"), _tensor(b, "b")
    _same_shape(a, b)
    return (normalize_embeddings(a) * normalize_embeddings(b)).sum(-1)


def pairwise_dot_score(a: Vectors, b: Vectors) -> Tensor:
    """``res[i] = a[i] . b[i]``."""
    a, b = _tensor(a, "a"), _tensor(b, "b")
    _same_shape(a, b)
    return (a * b).sum(-1)


def pairwise_euclidean_sim(a: Vectors, b: Vectors) -> Tensor:
    """``res[i] = -||a[i] - b[i]||``."""
    a, b = _tensor(a, "a"), _tensor(b, "b")
    _same_shape(a, b)
    return -torch.linalg.vector_norm(a - b, dim=-1)


def pairwise_manhattan_sim(a: Vectors, b: Vectors) -> Tensor:
    """``res[i] = -sum |a[i] - b[i]|``."""
    a, b = _tensor(a, "a"), _tensor(b, "b")
    _same_shape(a, b)
    return -(a - b).abs().sum(-1)


# similarity_fn_name -> (matrix, pairwise), the names sentence-transformers' config files use
SIMILARITY_FUNCTIONS: dict[str, tuple[Callable[[Any, Any], Tensor], Callable[[Any, Any], Tensor]]] = {
    "cosine": (cos_sim, pairwise_cos_sim),
    "dot": (dot_score, pairwise_dot_score),
    "euclidean": (euclidean_sim, pairwise_euclidean_sim),
    "manhattan": (manhattan_sim, pairwise_manhattan_sim),
}


def truncate_embeddings(embeddings: Any, truncate_dim: int | None) -> Any:
    """The first ``truncate_dim`` dimensions of each vector (Matryoshka models); None keeps all."""
    return embeddings if truncate_dim is None else embeddings[..., :truncate_dim]


def semantic_search(
    query_embeddings: Vectors,
    corpus_embeddings: Vectors,
    query_chunk_size: int = 100,
    corpus_chunk_size: int = 500000,
    top_k: int = 10,
    score_function: Callable[[Tensor, Tensor], Tensor] = cos_sim,
) -> list[list[dict[str, int | float]]]:
    """For each query, its ``top_k`` corpus entries as ``{"corpus_id", "score"}``, best first.

    Chunks bound the memory of the score matrix; they do not change the result.
    """
    for name, value in (
        ("query_chunk_size", query_chunk_size),
        ("corpus_chunk_size", corpus_chunk_size),
        ("top_k", top_k),
    ):
        A.positive_int.check(name, value)
    queries, corpus = _rows(query_embeddings, "query_embeddings"), _rows(corpus_embeddings, "corpus_embeddings")
    _same_width(queries, corpus)
    if corpus.device != queries.device:
        queries = queries.to(corpus.device)
    cosine = score_function is cos_sim
    heaps: list[list[tuple[float, int]]] = [[] for _ in range(len(queries))]
    for c0 in range(0, len(corpus), corpus_chunk_size):
        chunk = corpus[c0 : c0 + corpus_chunk_size]
        if cosine:  # normalise each corpus chunk once rather than once per query chunk
            chunk = normalize_embeddings(chunk)
        for q0 in range(0, len(queries), query_chunk_size):
            q = queries[q0 : q0 + query_chunk_size]
            scores = normalize_embeddings(q) @ chunk.T if cosine else score_function(q, chunk)
            values, idx = torch.topk(scores, min(top_k, scores.shape[1]), dim=1, largest=True, sorted=False)
            for heap, ids, vals in zip(heaps[q0 : q0 + len(q)], (idx + c0).tolist(), values.tolist()):
                for cand in zip(vals, ids):
                    if len(heap) < top_k:
                        heapq.heappush(heap, cand)
                    else:
                        heapq.heappushpop(heap, cand)
    return [
        [{"corpus_id": cid, "score": score} for score, cid in sorted(heap, key=lambda c: c[0], reverse=True)]
        for heap in heaps
    ]


def paraphrase_mining(
    model: Any,
    sentences: list[str],
    show_progress_bar: bool = False,
    batch_size: int = 32,
    query_chunk_size: int = 5000,
    corpus_chunk_size: int = 100000,
    max_pairs: int = 500000,
    top_k: int = 100,
    score_function: Callable[[Tensor, Tensor], Tensor] = cos_sim,
    truncate_dim: int | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
) -> list[list[float | int]]:
    """The most similar sentence pairs as ``[score, i, j]`` (i < j), best first; embeds with ``model``."""
    embeddings = model.encode(
        sentences,
        show_progress_bar=show_progress_bar,
        batch_size=batch_size,
        convert_to_tensor=True,
        truncate_dim=truncate_dim,
        prompt_name=prompt_name,
        prompt=prompt,
    )
    return paraphrase_mining_embeddings(
        embeddings,
        query_chunk_size=query_chunk_size,
        corpus_chunk_size=corpus_chunk_size,
        max_pairs=max_pairs,
        top_k=top_k,
        score_function=score_function,
    )


def paraphrase_mining_embeddings(
    embeddings: Vectors,
    query_chunk_size: int = 5000,
    corpus_chunk_size: int = 100000,
    max_pairs: int = 500000,
    top_k: int = 100,
    score_function: Callable[[Tensor, Tensor], Tensor] = cos_sim,
) -> list[list[float | int]]:
    """Up to ``max_pairs`` pairs ``[score, i, j]`` (i < j) among each vector's ``top_k`` neighbours,
    best first. ``score_function`` is taken as symmetric: each pair is scored once."""
    for name, value in (
        ("query_chunk_size", query_chunk_size),
        ("corpus_chunk_size", corpus_chunk_size),
        ("max_pairs", max_pairs),
        ("top_k", top_k),
    ):
        A.positive_int.check(name, value)
    emb = _rows(embeddings)
    pairs: list[tuple[float, int, int]] = []  # min-heap holding the best max_pairs pairs
    queued: set[tuple[int, int]] = set()
    floor = float("-inf")
    for q0 in range(0, len(emb), query_chunk_size):
        q = emb[q0 : q0 + query_chunk_size]
        # each query's best top_k + 1 (itself among them) over all corpus chunks
        best_v = best_i = None
        for c0 in range(0, len(emb), corpus_chunk_size):
            scores = score_function(q, emb[c0 : c0 + corpus_chunk_size]).detach()
            v, i = torch.topk(scores, min(top_k + 1, scores.shape[1]), dim=1)
            i = i + c0
            if best_v is None:
                best_v, best_i = v, i
            else:
                v, i = torch.cat([best_v, v], 1), torch.cat([best_i, i], 1)
                best_v, pos = torch.topk(v, min(top_k + 1, v.shape[1]), dim=1)
                best_i = torch.gather(i, 1, pos)
        for row, (ids, vals) in enumerate(zip(best_i.tolist(), best_v.tolist())):
            a = q0 + row
            for b, score in [(b, s) for b, s in zip(ids, vals) if b != a][:top_k]:
                if score <= floor:
                    continue
                pair = (a, b) if a < b else (b, a)
                if pair in queued:
                    continue
                queued.add(pair)
                if len(pairs) < max_pairs:
                    heapq.heappush(pairs, (score, *pair))
                else:
                    dropped = heapq.heappushpop(pairs, (score, *pair))
                    queued.discard(dropped[1:])
                    floor = dropped[0]
    return sorted(([s, a, b] for s, a, b in pairs), key=lambda x: x[0], reverse=True)


def community_detection(
    embeddings: Vectors,
    threshold: float = 0.75,
    min_community_size: int = 10,
    batch_size: int = 1024,
    show_progress_bar: bool = False,
) -> list[list[int]]:
    """Groups of at least ``min_community_size`` vectors whose cosine to a central vector is at least
    ``threshold``; largest first, each led by its centre, no vector in two groups."""
    from tqdm.auto import tqdm

    A.positive_int.check("min_community_size", min_community_size)
    A.positive_int.check("batch_size", batch_size)
    if len(embeddings) == 0:
        return []
    emb = normalize_embeddings(_rows(embeddings))
    if len(emb) < min_community_size:
        return []
    widest = min(max(2 * min_community_size, 50), len(emb))
    found: list[tuple[int, np.ndarray]] = []
    for s in tqdm(range(0, len(emb), batch_size), desc="Finding clusters", disable=not show_progress_bar):
        scores = emb[s : s + batch_size] @ emb.T
        kth, _ = scores.topk(k=min_community_size, largest=True)
        for r in range(len(scores)):
            if kth[r][-1] < threshold:
                continue
            vals, idx = scores[r].topk(k=widest, largest=True)
            while vals[-1] >= threshold and widest < len(emb):  # the group may be wider than looked
                widest = min(2 * widest, len(emb))
                vals, idx = scores[r].topk(k=widest, largest=True)
            found.append((s + r, idx[vals >= threshold].numpy().astype(np.int64)))
    found.sort(key=lambda c: len(c[1]), reverse=True)
    used = np.zeros(len(emb), dtype=bool)
    groups: list[list[int]] = []
    for centre, members in found:
        if used[centre]:
            continue
        free = members[~used[members]]
        if len(free) >= min_community_size:
            group = [centre] + free[free != centre].tolist()
            groups.append(group)
            used[group] = True
    return sorted(groups, key=len, reverse=True)


def quantize_embeddings(
    embeddings: Vectors,
    precision: str,
    ranges: np.ndarray | None = None,
    calibration_embeddings: np.ndarray | None = None,
) -> np.ndarray:
    """Vectors as ``precision``: float32; int8/uint8 (256 buckets per dimension between the min and
    max of ``ranges``, else of ``calibration_embeddings``, else of the vectors themselves); binary/
    ubinary (the sign bits packed eight to a byte, binary shifted by -128)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if isinstance(embeddings, Tensor):
        emb = embeddings.detach().float().cpu().numpy()
    else:
        emb = np.asarray(
            [x.detach().float().cpu().numpy() if isinstance(x, Tensor) else x for x in embeddings]
            if isinstance(embeddings, (list, tuple))
            else embeddings
        )
    if emb.dtype in (np.int8, np.uint8):
        raise ValueError("quantize_embeddings needs float vectors, and these are already int8/uint8")
    if precision == "float32":
        return emb.astype(np.float32)
    if precision.endswith("int8"):
        if ranges is None:
            source = emb if calibration_embeddings is None else np.asarray(calibration_embeddings)
            if source.ndim == 1 or source.shape[0] == 1:
                raise ValueError(
                    f"{precision} buckets cannot be set from a single vector: pass ranges= or "
                    "calibration_embeddings= from a representative set of vectors"
                )
            ranges = np.vstack((source.min(axis=0), source.max(axis=0)))
        ranges = np.asarray(ranges, dtype=np.float32)
        starts = ranges[0]
        steps = (ranges[1] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((emb - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    bits = np.packbits(emb > 0, axis=-1)
    return bits if precision == "ubinary" else (bits.astype(np.int16) - 128).astype(np.int8)


def top_k_exact(vectors: np.ndarray, queries: np.ndarray, k: int, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Inner-product top-``k`` of ``queries`` (Q, d) against ``vectors`` (N, d) in row chunks, so memory
    stays at ``Q * chunk`` scores. Returns (scores, indices), each (Q, k), best first."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    n = vectors.shape[0]
    k = min(k, n)
    best_s = np.full((q.shape[0], 0), -np.inf, np.float32)
    best_i = np.zeros((q.shape[0], 0), np.int64)
    for start in range(0, n, chunk):
        block = np.asarray(vectors[start : start + chunk], dtype=np.float32)
        s = q @ block.T  # (Q, chunk)
        kk = min(k, s.shape[1])
        idx = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, idx, 1)], 1)
        cand_i = np.concatenate([best_i, idx + start], 1)
        keep = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, keep, 1), np.take_along_axis(cand_i, keep, 1)
    return best_s, best_i
