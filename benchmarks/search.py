"""Semantic search at scale: exact (chunked matrix products) vs faiss HNSW and IVF on >= 100k vectors.

The corpus is the news (BBC) and Wikipedia assets split into sentences. Embedding 100k sentences on
a small shared CPU takes many minutes, so by default ``--embed`` real sentences are embedded with
MiniLM and the rest of the ``--vectors`` are synthesised from them: each is the normalised sum of
one real sentence vector, 0.6 of another and 0.15 of Gaussian noise (so the set keeps the real
vectors' geometry: clusters, anisotropy). ``--embed`` >= ``--vectors`` embeds everything for real.
Queries are held-out real sentences. Reports recall@10 against exact search and single-query QPS.

    python benchmarks/search.py [--vectors 100000] [--embed 4000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np

from bertkit.assets import asset_path
from bertkit.inference import describe_cpu
from bertkit.pipelines import pipeline
from bertkit.search import build_faiss, top_k_exact


def corpus_sentences() -> list[str]:
    with open(asset_path("bbcnews-train"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    with open(asset_path("wiki"), encoding="utf-8") as f:
        texts += f.read().split("\n\n")
    out = []
    for t in texts:
        for s in re.split(r"(?<=[.!?])\s+", t.replace("\n", " ")):
            if 30 <= len(s) <= 400:
                out.append(s.strip())
    return out


def qps(fn, queries: np.ndarray) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    ids = np.stack([fn(q[None])[0] for q in queries])
    return len(queries) / (time.perf_counter() - t0), ids


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=100_000)
    p.add_argument("--embed", type=int, default=4000, help="real sentences to embed (the rest are synthesised)")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--dtype", default="auto")
    args = p.parse_args(argv)
    print(f"CPU flags: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    sents = corpus_sentences()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(sents))
    n_real = min(args.embed, args.vectors, len(sents) - args.queries)
    emb = pipeline("sentence-embedding", model=asset_path("minilm"), dtype=args.dtype)
    t0 = time.perf_counter()
    real = emb.forward_features(emb.encode_features([sents[i] for i in order[:n_real]]))
    queries = emb.forward_features(emb.encode_features([sents[i] for i in order[-args.queries:]]))
    took = time.perf_counter() - t0
    print(f"{len(sents):,} sentences from the news + Wikipedia assets; embedded {n_real + args.queries:,} "
          f"for real in {took:.1f} s ({emb.dtype})")
    n_syn = args.vectors - n_real
    if n_syn > 0:
        a, b = rng.integers(0, n_real, n_syn), rng.integers(0, n_real, n_syn)
        syn = real[a] + 0.6 * real[b] + 0.15 * rng.standard_normal((n_syn, real.shape[1])).astype(np.float32) / np.sqrt(
            real.shape[1])
        vectors = np.concatenate([real, syn]).astype(np.float32)
        print(f"{n_syn:,} of the {args.vectors:,} vectors synthesised from the real ones (see the docstring)")
    else:
        vectors = real
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors16 = vectors.astype(np.float16)

    exact_qps, exact_ids = qps(lambda q: top_k_exact(vectors, q, 10)[1], queries)
    exact16_qps, exact16_ids = qps(lambda q: top_k_exact(vectors16, q, 10)[1], queries)
    batch_t0 = time.perf_counter()
    top_k_exact(vectors, queries, 10)
    batch_qps = len(queries) / (time.perf_counter() - batch_t0)

    def recall(ids: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact_ids)]))

    print(f"{len(vectors):,} vectors x {vectors.shape[1]} dims, {len(queries)} queries, top-10")
    print(f"  exact float32 (chunked matmul)  {exact_qps:>9,.0f} QPS single-query, {batch_qps:,.0f} QPS batched; "
          f"recall@10 1.000")
    print(f"  exact float16 storage           {exact16_qps:>9,.0f} QPS single-query; "
          f"recall@10 {recall(exact16_ids):.3f}")
    for kind in ("faiss", "faiss-ivf"):
        t0 = time.perf_counter()
        index = build_faiss(vectors, kind)
        build = time.perf_counter() - t0
        k_qps, ids = qps(lambda q, ix=index: ix.search(np.ascontiguousarray(q, np.float32), 10)[1], queries)
        label = "faiss HNSW (M 32, efSearch 64)" if kind == "faiss" else f"faiss IVF-flat (nprobe {index.nprobe})"
        print(f"  {label:<31s} {k_qps:>9,.0f} QPS single-query; recall@10 {recall(ids):.3f}; "
              f"build {build:.1f} s; {k_qps / exact_qps:.1f}x exact")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
