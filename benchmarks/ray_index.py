"""`bertkit index` in one process beside `bertkit index --ray` with 1 and 2 actors, on the same cores.

MiniLM, fp32 (or --dtype), real polarity sentences. A local Ray cluster is started in this process on
127.0.0.1 with ``--cores`` CPUs; the one-process run gets the same number of torch threads, and the
actors split them (1 actor x cores threads, 2 actors x cores/2 threads). Each run writes a fresh index
folder; the time is the whole `build_index` call (reading, embedding, writing), so Ray's actor start
(loading torch and the model in each actor) is counted, as a user pays it. Medians over --repeats.
Checks that every Ray index equals the one-process one (fp32: bit for bit). Prints the CPU flags and
the load average: on a shared machine the figures move with the other users' load.

    python benchmarks/ray_index.py [--texts 4000] [--cores 2] [--repeats 3] [--dtype fp32]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.assets import asset_path
from bertkit.inference import describe_cpu
from bertkit.search.index import build_index, load_index


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=4000)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", default="fp32")
    args = p.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # nodes on 127.0.0.1, nothing outward
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # else Ray writes a token into ~/.ray for every later cluster
    import ray

    from bertkit.search.ray_index import build_index_ray

    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)]
    texts = (texts * (args.texts // len(texts) + 1))[: args.texts]
    tmp = Path(tempfile.mkdtemp(prefix="bertkit-ray-bench-"))
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    model = str(asset_path("minilm"))
    kw = {"dtype": args.dtype, "vector_dtype": "float32", "progress": False, "chunk_size": 256}
    print(describe_cpu())
    print(f"{args.texts} texts, MiniLM {args.dtype}, {args.cores} cores, load average {os.getloadavg()}")
    ray.init(num_cpus=args.cores, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 2**20)
    torch.set_num_threads(args.cores)
    runs = {"one process": lambda out: build_index(model, corpus, out, **kw)}
    for actors in (1, 2):
        threads = max(1, args.cores // actors)
        runs[f"ray {actors} actor(s) x {threads} thread(s)"] = lambda out, a=actors, t=threads: build_index_ray(
            model, corpus, out, actors=a, threads=t, **kw
        )
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.repeats):
        for name, run in runs.items():  # interleaved, so a burst of load hits every kind alike
            out = tmp / f"{name.replace(' ', '_')}-{r}"
            t0 = time.perf_counter()
            run(out)
            times[name].append(time.perf_counter() - t0)
    reference = load_index(tmp / "one_process-0")
    base = statistics.median(times["one process"])
    print(f"{'run':<32} {'median s':>9} {'texts/s':>9} {'vs one process':>15}  same vectors")
    for name, ts in times.items():
        got = load_index(tmp / f"{name.replace(' ', '_')}-0")
        same = got.ids == reference.ids and np.array_equal(got.vectors, reference.vectors)
        med = statistics.median(ts)
        print(f"{name:<32} {med:>9.2f} {args.texts / med:>9.0f} {base / med:>14.2f}x  {same}")
    print(f"load average after: {os.getloadavg()}")
    ray.shutdown()


if __name__ == "__main__":
    main()
