"""Exact search over a sharded index (`bertkit index --shard-size`) beside the one-folder index of the same rows.

Seeded random unit vectors stand in for embeddings (search time depends on the shape, not the values):
``--vectors`` rows of 384 dims, float32, split into 1 (the one-folder index), 4 and 16 shards. Each
query searches every shard exactly and merges their top-k (:class:`bertkit.search.shards.ShardedIndex`),
the reference being the one-folder index's own search in the same process. Medians over ``--repeats``
of ``--queries`` single queries and of one batch; checks that every sharded answer has the one-folder
index's rows. Prints the CPU flags and the load average: on a shared machine the figures move with it.

    python benchmarks/sharded_search.py [--vectors 100000] [--queries 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from bertkit.inference import describe_cpu
from bertkit.search.index import Index
from bertkit.search.shards import ShardedIndex


def _index(vectors: np.ndarray, first: int) -> Index:
    ids = [str(first + i) for i in range(len(vectors))]
    return Index(Path("mem"), {}, vectors, ids, ids)


def _time(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vectors", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--k", type=int, default=10)
    args = p.parse_args()
    print(f"CPU flags: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.vectors, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, 384), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    one = _index(vectors, 0)
    want = one.search_ids(queries, args.k)[1]
    base_single = _time(lambda: [one.search_ids(q[None], args.k) for q in queries], args.repeats)
    base_batch = _time(lambda: one.search_ids(queries, args.k), args.repeats)
    print(f"{args.vectors:,} vectors x 384, {args.queries} queries, top-{args.k}, medians of {args.repeats}")
    print(f"{'index':<22}{'single q/s':>12}{'batch q/s':>12}{'vs one folder':>15}  same rows")
    print(f"{'one folder':<22}{args.queries / base_single:>12,.0f}{args.queries / base_batch:>12,.0f}{1:>14.2f}x  True")
    for n in (4, 16):
        size = -(-args.vectors // n)
        sharded = ShardedIndex(
            Path("mem"),
            {"dim": 384},
            [_index(vectors[s : s + size], s) for s in range(0, args.vectors, size)],
        )
        same = np.array_equal(sharded.search_ids(queries, args.k)[1], want)
        single = _time(lambda ix=sharded: [ix.search_ids(q[None], args.k) for q in queries], args.repeats)
        batch = _time(lambda ix=sharded: ix.search_ids(queries, args.k), args.repeats)
        print(
            f"{f'{n} shards':<22}{args.queries / single:>12,.0f}{args.queries / batch:>12,.0f}"
            f"{base_single / single:>14.2f}x  {same}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
