"""Sentence embeddings of texts the process has not seen before: bertkit against sentence-transformers.

``benchmarks/engines.py`` times repeated passes over the same sentences, so every batch shape is one
its engine has met. A service or an indexing job meets new batch shapes all the time, and oneDNN
builds (JIT-compiles) a kernel for each new shape of a product. Here each engine runs in a process
of its own (no engine inherits another's kernels): it warms up on other sentences, embeds
``--texts`` polarity sentences it has never seen in chunks of ``--chunk``, then embeds the first
chunk again. Rounds alternate the engines' order; each line reports the median over rounds.

- ``bertkit auto``: ``pipeline("sentence-embedding", dtype="auto")``;
- ``bertkit auto, rows not rounded``: the same with the packed row count left as it is (every new
  batch size a new kernel), to show what the rounding (``bertkit.modeling.packing.padded_rows``) buys;
- sentence-transformers bf16 (the model cast to bfloat16) and fp32.

    python benchmarks/new_texts.py [--texts 3200] [--chunk 400] [--threads 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

ENGINES = ("bertkit auto", "bertkit auto, rows not rounded", "sentence-transformers bf16", "sentence-transformers fp32")


def load_texts(name: str) -> list[str]:
    from bertkit.assets import asset_path

    with open(asset_path(name), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)]


def run_engine(name: str, args: argparse.Namespace) -> dict:
    """One engine in this process: warm-up on the test split, then new texts chunk by chunk, then the first again."""
    import torch

    from bertkit.assets import asset_path

    torch.set_num_threads(args.threads)
    folder = asset_path("minilm")
    if name.startswith("bertkit"):
        from bertkit.pipelines import pipeline

        if name.endswith("rows not rounded"):
            from bertkit.modeling import packing

            packing.padded_rows = lambda tokens: tokens
        pipe = pipeline("sentence-embedding", model=folder, dtype="auto", batch_size=args.batch_size, truncation="cut")

        def embed(t: list[str]) -> object:
            return pipe(t, return_tensors=True)
    else:
        import sentence_transformers

        st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
        if name.endswith("bf16"):
            st = st.to(torch.bfloat16)

        def embed(t: list[str]) -> object:
            return st.encode(t, batch_size=args.batch_size, normalize_embeddings=True)

    embed(load_texts("polarity-test")[:256])  # warm-up on sentences the timed part never sees
    texts = load_texts("polarity-train")[: args.texts]
    chunks = [texts[i : i + args.chunk] for i in range(0, len(texts), args.chunk)]
    times = []
    for c in chunks:
        t0 = time.perf_counter()
        embed(c)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    embed(chunks[0])
    again = time.perf_counter() - t0
    return {"engine": name, "new": sum(times), "first": times[0], "last": times[-1], "again": again}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=3200)
    p.add_argument("--chunk", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--engine", help=argparse.SUPPRESS)  # the child process's one engine
    args = p.parse_args(argv)
    if args.engine:
        print(json.dumps(run_engine(args.engine, args)))
        return 0

    from bertkit.inference import cpu_flags, describe_cpu, resolve_dtype

    flags = cpu_flags()
    print(
        f"CPU flags: {describe_cpu(flags)}; auto -> {resolve_dtype('auto', flags)}; {args.threads} threads; "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    engines = list(ENGINES)
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        print("  (skipped) sentence-transformers: not installed")
        engines = [e for e in engines if e.startswith("bertkit")]
    child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
    results: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(args.rounds):
        for name in engines if r % 2 == 0 else reversed(engines):
            out = subprocess.run([*child, "--engine", name], capture_output=True, text=True, check=True).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
    from tokenizers import Tokenizer

    from bertkit.assets import asset_path

    tok = Tokenizer.from_file(str(asset_path("minilm") / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    tokens = sum(len(e.ids) for e in tok.encode_batch(load_texts("polarity-train")[: args.texts]))
    print(
        f"{args.texts} polarity sentences new to each process ({tokens:,} real tokens) in chunks of {args.chunk}, "
        f"batch {args.batch_size}; median of {args.rounds} rounds, each engine in a process of its own"
    )
    head = ("new texts tok/s", "s in all", "1st chunk ms", "last ms", "1st again ms")
    print(f"  {'engine':<32s} {head[0]:>15s} {head[1]:>9s} {head[2]:>13s} {head[3]:>8s} {head[4]:>13s}")
    med = {}
    for name, runs in results.items():
        m = {k: statistics.median(r[k] for r in runs) for k in ("new", "first", "last", "again")}
        med[name] = m
        print(
            f"  {name:<32s} {tokens / m['new']:>15,.0f} {m['new']:>9.2f} {m['first'] * 1e3:>13.0f} "
            f"{m['last'] * 1e3:>8.0f} {m['again'] * 1e3:>13.0f}"
        )
    for a, b in (
        ("bertkit auto", "sentence-transformers bf16"),
        ("bertkit auto", "bertkit auto, rows not rounded"),
    ):
        if a in med and b in med:
            print(f"ratio {a} / {b} on new texts: {med[b]['new'] / med[a]['new']:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
