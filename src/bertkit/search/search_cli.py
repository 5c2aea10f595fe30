"""`bertkit search --index INDEX_DIR "query" [--top-k 10] [--backend exact|faiss|faiss-ivf]
[--lexical-weight W] [--rerank DIR]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit import _args as A
from bertkit.inference import DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .index import BACKENDS
    from .rerank import FUSIONS

    p.add_argument("--index", default=None, help="folder made by `bertkit index` (one index or a sharded one)")
    p.add_argument("--store", default=None, metavar="milvus://FILE_OR_URI", help="a Milvus collection made by `index`")
    p.add_argument("query", nargs="+", help="query text(s)")
    p.add_argument("--top-k", type=A.positive_int, default=10)
    p.add_argument("--backend", default="exact", choices=BACKENDS)
    p.add_argument("--model", default=None, help="embedding model (default: the one the index was built with)")
    p.add_argument("--dtype", default="auto", choices=DTYPES)
    A.add_device_flag(p)
    p.add_argument(
        "--truncation",
        default="error",
        choices=("error", "cut", "chunk"),
        help="a query over the model's limit: refuse it (error), keep its first tokens and say how many "
        "were cut (cut), or pool overlapping windows (chunk)",
    )
    p.add_argument(
        "--lexical-weight",
        type=A.fraction_0_1,
        default=0.0,
        help="hybrid search: rank by (1 - W) x the standardised cosine + W x the standardised BM25 score of "
        "every text (0: embeddings only, 1: BM25 only)",
    )
    p.add_argument("--rerank", default=None, metavar="DIR", help="a cross-encoder folder: rerank the first hits")
    p.add_argument("--rerank-depth", type=A.positive_int, default=20, help="hits the cross-encoder reorders")
    p.add_argument(
        "--fusion",
        default="none",
        choices=FUSIONS,
        help="rank the reranked hits by the cross-encoder alone (none), or by it and the retriever together: "
        "reciprocal ranks (rrf) or standardised scores (zscore) summed",
    )


def run(args: argparse.Namespace) -> int:
    from bertkit.hub import resolve_model_arg

    from .index import check_index_model, embed_queries, open_index

    if args.fusion != "none" and not args.rerank:
        raise ValueError(f"--fusion {args.fusion} fuses a cross-encoder's scores: give --rerank DIR")
    empty = [i + 1 for i, q in enumerate(args.query) if not q.strip()]
    if empty:  # an empty query still embeds to a vector and returns hits that mean nothing
        raise ValueError(f"query {empty[0]} is empty; give the text to search for")
    for i, q in enumerate(args.query):
        try:
            q.encode("utf-8")
        except UnicodeEncodeError as e:  # bytes that are not UTF-8 reach argv as lone surrogates
            raise ValueError(
                f"query {i + 1} is not valid UTF-8 (byte 0x{ord(q[e.start]) & 0xFF:02X} at character {e.start}); "
                "give the query as UTF-8 text"
            ) from None

    if (args.index is None) == (args.store is None):
        raise ValueError("give one of --index DIR or --store milvus://FILE_OR_URI")
    if args.store is not None:
        from .milvus_store import load_store

        if args.backend != "exact":
            raise ValueError(f"--backend {args.backend} is for index folders; the store searches with its own index")
        index = load_store(args.store, args.model)
    else:
        index = open_index(args.index, backend=args.backend)
    model = resolve_model_arg(args.model) if args.model else Path(index.meta["model"])
    queries = embed_queries(
        model,
        args.query,
        dtype=args.dtype,
        truncation=args.truncation,
        on_cut=lambda line: print(f"search: {line}", file=sys.stderr),
        device=args.device,
    )
    if args.store is None:  # a store checks its model itself (load_store)
        check_index_model(index, model)  # after the model loads, which names a model that cannot embed first
    depth = max(args.top_k, args.rerank_depth) if args.rerank else args.top_k
    ranker = None
    if args.rerank:
        from bertkit.pipelines import pipeline

        from .rerank import rerank_hits

        ranker = pipeline(
            "text-ranking", model=resolve_model_arg(args.rerank, "--rerank"), dtype=args.dtype, device=args.device
        )
    for q, hits in zip(args.query, index.search(queries, depth, args.query, args.lexical_weight)):
        if ranker is not None:
            hits = rerank_hits(ranker, q, hits, args.rerank_depth, fusion=args.fusion)[: args.top_k]
        print(f"query: {q}")
        for h in hits:
            parts = f" (cosine {h['cosine']:.4f}, bm25 {h['bm25']:.2f})" if "bm25" in h else ""
            if ranker is not None:  # a logit and a cosine are on no common scale: each hit says which it shows
                kind = "logit" if args.fusion == "none" else args.fusion
                parts = (
                    f" (reranked: {kind}; retrieval {h['retrieval_score']:.4f})"
                    if "rerank_score" in h
                    else f" (retrieval score, not reranked: below --rerank-depth {args.rerank_depth}){parts}"
                )
            print(f"  {h['score']:.4f}{parts}  [{h['id']}] {h['text']}")
    return 0
