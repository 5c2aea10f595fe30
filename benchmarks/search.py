"""Semantic search at scale: exact (chunked matrix products) vs faiss HNSW and IVF on >= 100k real vectors.

The corpus is every English text asset (BBC News, Wikipedia, Austen, the movie reviews) split into
sentences: about 130k distinct ones. A seeded shuffle holds ``--queries`` of them out as queries and
embeds the next ``--vectors`` with MiniLM through ``bertkit.search.build_index`` (what ``bertkit
index`` runs), under ``--work``: chunks are saved as they finish, so a killed run resumes, and a
later run reuses the finished index. Reports recall@10 against exact search, single-query and
batched QPS, and faiss build times.

    python benchmarks/search.py [--vectors 100000] [--queries 200] [--work runs/bench-search]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from bertkit._io import atomic_write_text
from bertkit.assets import asset_path
from bertkit.inference import describe_cpu
from bertkit.pipelines import pipeline
from bertkit.search import build_faiss, build_index, load_index, top_k_exact


def _split(text: str) -> list[str]:
    # Not bertkit.data.corpus.split_sentences: that one wants a capital after the full stop, and the
    # movie reviews are lower-cased, so it would leave each review whole.
    parts = (s.strip() for s in re.split(r"(?<=[.!?])\s+", text.replace("\n", " ")))
    return [s for s in parts if 30 <= len(s) <= 400]


def corpus_sentences() -> list[str]:
    """Distinct sentences of the English text assets, in a fixed order."""
    texts: list[str] = []
    for name in ("bbcnews-train", "bbcnews-test"):
        with open(asset_path(name), encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    for name in ("wiki", "austen"):
        with open(asset_path(name), encoding="utf-8") as f:
            texts += f.read().split("\n\n")
    for name in ("polarity-reviews", "polarity-train", "polarity-test"):
        with open(asset_path(name), newline="", encoding="utf-8") as f:
            texts += [row["text"] for row in csv.DictReader(f)]
    return list(dict.fromkeys(s for t in texts for s in _split(t)))


def qps(fn, queries: np.ndarray) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    ids = np.stack([fn(q[None])[0] for q in queries])
    return len(queries) / (time.perf_counter() - t0), ids


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--work", default="runs/bench-search", help="where the corpus file and the index are kept")
    args = p.parse_args(argv)
    print(f"CPU flags: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    sents = corpus_sentences()
    if len(sents) < args.vectors + args.queries:
        raise SystemExit(
            f"the assets give {len(sents):,} distinct sentences, fewer than --vectors {args.vectors:,} "
            f"+ --queries {args.queries:,}"
        )
    order = np.random.default_rng(0).permutation(len(sents))
    query_texts = [sents[i] for i in order[: args.queries]]
    corpus_text = "".join(sents[i] + "\n" for i in order[args.queries : args.queries + args.vectors])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus-{args.vectors}.txt"
    if not corpus.exists():
        atomic_write_text(corpus, corpus_text)
    elif corpus.read_text(encoding="utf-8") != corpus_text:
        raise SystemExit(f"{corpus} holds other sentences than these assets give; move it away or pick another --work")
    model = asset_path("minilm")
    index_dir = work / f"index-{args.vectors}-{args.dtype}"
    t0 = time.perf_counter()
    built = not index_dir.exists()
    if built:
        build_index(model, corpus, index_dir, dtype=args.dtype, vector_dtype="float32")
    index = load_index(index_dir)
    took = time.perf_counter() - t0
    emb = pipeline("sentence-embedding", model=model, dtype=args.dtype)
    queries = emb.forward_features(emb.encode_features(query_texts))
    vectors = np.ascontiguousarray(index.vectors, dtype=np.float32)
    print(
        f"{len(sents):,} distinct sentences in the English text assets; {len(vectors):,} embedded with MiniLM "
        f"({index.meta['dtype']}) "
        + (f"in {took:.0f} s" if built else f"earlier, loaded from {index_dir}")
        + f"; {len(queries)} held-out sentences as queries"
    )
    vectors16 = vectors.astype(np.float16)

    exact_qps, exact_ids = qps(lambda q: top_k_exact(vectors, q, 10)[1], queries)
    exact16_qps, exact16_ids = qps(lambda q: top_k_exact(vectors16, q, 10)[1], queries)
    batch_t0 = time.perf_counter()
    top_k_exact(vectors, queries, 10)
    batch_qps = len(queries) / (time.perf_counter() - batch_t0)

    def recall(ids: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact_ids)]))

    print(f"{len(vectors):,} vectors x {vectors.shape[1]} dims, {len(queries)} queries, top-10")
    print(
        f"  exact float32 (chunked matmul)  {exact_qps:>9,.0f} QPS single-query, {batch_qps:,.0f} QPS batched; "
        f"recall@10 1.000"
    )
    print(
        f"  exact float16 storage           {exact16_qps:>9,.0f} QPS single-query; recall@10 {recall(exact16_ids):.3f}"
    )
    for kind in ("faiss", "faiss-ivf"):
        t0 = time.perf_counter()
        ann = build_faiss(vectors, kind)
        build = time.perf_counter() - t0
        k_qps, ids = qps(lambda q, ix=ann: ix.search(np.ascontiguousarray(q, np.float32), 10)[1], queries)
        label = "faiss HNSW (M 32, efSearch 64)" if kind == "faiss" else f"faiss IVF-flat (nprobe {ann.nprobe})"
        print(
            f"  {label:<31s} {k_qps:>9,.0f} QPS single-query; recall@10 {recall(ids):.3f}; "
            f"build {build:.1f} s; {k_qps / exact_qps:.1f}x exact"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
