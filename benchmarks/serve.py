"""Load test of `bertkit serve` on MiniLM: 32 concurrent clients of real single sentences against /embed.

Two servers run side by side (same model and dtype): dynamic batching (``--max-batch-size 64
--max-wait-ms 5``) and ``--max-batch-size 1``. Rounds alternate between them for a fixed time each;
every client loop is bounded in count and time. Reports requests/s and real tokens/s, p50/p99
latency, errors (must be 0), the ratio (target >= 3x), and whether every returned embedding equals
the offline pipeline's for the same text. Prints the CPU flags and the load average.

    python benchmarks/serve.py [--clients 32] [--seconds 10] [--rounds 2] [--dtype auto]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import sys
import time

import numpy as np

from bertkit.assets import asset_path
from bertkit.inference import describe_cpu
from bertkit.pipelines import pipeline
from bertkit.serving.process import server_process


def sentences(n: int) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


async def load(url: str, texts: list[str], clients: int, seconds: float, max_requests: int) -> dict:
    import httpx

    latencies: list[float] = []
    errors: dict[str, int] = {}
    got: dict[int, list[float]] = {}
    done = 0
    stop_at = time.perf_counter() + seconds
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=clients)) as client:

        async def worker(w: int) -> None:
            nonlocal done
            i = w
            for _ in range(max_requests):  # bounded in count and in time
                if time.perf_counter() >= stop_at:
                    return
                k = i % len(texts)
                t0 = time.perf_counter()
                try:
                    r = await client.post(url + "/embed", json={"inputs": texts[k]})
                except httpx.HTTPError as e:
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                    continue
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    errors[str(r.status_code)] = errors.get(str(r.status_code), 0) + 1
                else:
                    got.setdefault(k, r.json()["embedding"])
                    done += 1
                i += clients

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        wall = time.perf_counter() - t0
    return {"wall": wall, "ok": done, "latencies": latencies, "errors": errors, "got": got}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sentences", type=int, default=2000)
    p.add_argument("--dtype", default="auto")
    args = p.parse_args(argv)
    folder = asset_path("minilm")
    texts = sentences(args.sentences)
    offline = pipeline("sentence-embedding", model=folder, dtype=args.dtype)
    lengths = [len(x) for x in offline.tokenizer(texts, truncation=True, max_length=offline.max_length)["input_ids"]]
    print(f"CPU flags: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    common = ["--dtype", args.dtype, "--max-wait-ms", "5"]
    configs = {"dynamic batching": ["--max-batch-size", "64", "--max-batch-tokens", "8192"],
               "max-batch-size 1": ["--max-batch-size", "1"]}
    results: dict[str, list[dict]] = {k: [] for k in configs}
    with server_process(folder, common + configs["dynamic batching"]) as dyn, \
            server_process(folder, common + configs["max-batch-size 1"]) as one:
        servers = {"dynamic batching": dyn, "max-batch-size 1": one}
        for name, srv in servers.items():  # warm-up
            asyncio.run(load(srv.url, texts, 4, 1.0, 20))
        for r in range(args.rounds):
            for name in (list(servers) if r % 2 == 0 else list(reversed(servers))):
                results[name].append(asyncio.run(load(servers[name].url, texts, args.clients, args.seconds, 100000)))
        codes = {name: srv.stop() for name, srv in servers.items()}
    ref = {}
    rps = {}
    all_ok = True
    for name, runs in results.items():
        ok = sum(x["ok"] for x in runs)
        wall = sum(x["wall"] for x in runs)
        lat = sorted(t for x in runs for t in x["latencies"])
        errors: dict[str, int] = {}
        got: dict[int, list[float]] = {}
        for x in runs:
            for k, v in x["errors"].items():
                errors[k] = errors.get(k, 0) + v
            got.update(x["got"])
        keys = sorted(got)
        if keys:
            want = offline([texts[k] for k in keys], return_tensors=True).numpy()
            have = np.asarray([got[k] for k in keys], np.float32)
            diff = float(np.abs(have - want).max())
            cos = float(np.min(np.sum(have * want, 1) / np.linalg.norm(have, axis=1) / np.linalg.norm(want, axis=1)))
            ref[name] = (len(keys), diff, cos)
        tokens = sum(lengths[k % len(texts)] for k in keys) * ok / max(len(keys), 1)
        rps[name] = ok / wall
        p50 = lat[len(lat) // 2] * 1000 if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan")
        n_err = sum(errors.values())
        all_ok &= n_err == 0
        print(f"  {name:<18s} {ok / wall:>8.1f} req/s  ~{tokens / wall:>8,.0f} real tokens/s  p50 {p50:.1f} ms  "
              f"p99 {p99:.1f} ms  errors {n_err} {errors or ''}  exit code {codes[name]}")
        if name in ref:
            n, diff, cos = ref[name]
            same = diff <= (1e-5 if offline.dtype == "fp32" else 2e-2) and cos >= 0.9999
            all_ok &= same
            print(f"    {n} distinct texts vs offline pipeline ({offline.dtype}): max |diff| {diff:.1e}, "
                  f"min cosine {cos:.6f} -> {'equal' if same else 'DIFFERENT'}")
    ratio = rps["dynamic batching"] / rps["max-batch-size 1"]
    print(f"{args.clients} clients, {args.rounds} x {args.seconds:g} s per config, dtype {offline.dtype}; "
          f"ratio dynamic / batch-size-1: {ratio:.2f}x (target >= 3x); load average after: {os.getloadavg()[0]:.2f}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
