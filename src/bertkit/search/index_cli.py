"""`bertkit index --model DIR --input FILE(.txt|.jsonl|.csv)|FOLDER|GLOB ... [--text-column text] --output INDEX_DIR
[--shard-size N] [--ray [ADDRESS]]`."""

from __future__ import annotations

import argparse

from bertkit import _args as A
from bertkit.inference import DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .index import BACKENDS

    p.add_argument("--model", required=True, help="sentence-embedding model folder (e.g. MiniLM)")
    p.add_argument(
        "--input",
        required=True,
        nargs="+",
        metavar="FILE",
        help="corpus: .txt (one text a line), .jsonl or .csv files, folders of them or glob patterns, read in "
        "the order given (a folder's files by name); with several files a row without an id is FILE_NAME:LINE",
    )
    p.add_argument("--text-column", default="text", help="field/column holding the text (.jsonl/.csv)")
    p.add_argument(
        "--output", default=None, help="new or empty index folder (a killed run resumes: re-run the same command)"
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="milvus://FILE_OR_URI",
        help="write into a Milvus collection instead of a folder: milvus://FILE (Milvus Lite) or "
        "milvus://http://HOST:PORT, with ?collection=NAME&index=FLAT|HNSW|IVF_FLAT (a killed run resumes)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier index in --output (only its files), or unfinished chunks of other inputs",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="embed on a Ray cluster (HOST:PORT, ray://HOST:PORT or auto; no address: a local one) with "
        "an actor pool, each actor one encoder; the result is the same index folder (the ray extra)",
    )
    p.add_argument("--actors", type=A.positive_int, default=1, help="with --ray: encoder actors in the pool")
    p.add_argument("--actor-threads", type=A.positive_int, default=1, help="with --ray: CPUs (torch threads) per actor")
    p.add_argument(
        "--shard-size",
        type=A.positive_int,
        default=None,
        metavar="ROWS",
        help="write a sharded index: --output/shard-NNNNN/ index folders of ROWS rows each and a manifest.json "
        "(`bertkit search` reads it; a killed run keeps its finished shards)",
    )
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="model precision while embedding")
    A.add_device_flag(p)
    p.add_argument("--vector-dtype", default="float16", choices=("float16", "float32"), help="stored vectors")
    p.add_argument("--backend", default="exact", choices=BACKENDS, help="also build a faiss index now")
    p.add_argument(
        "--truncation",
        default="error",
        choices=("error", "cut", "chunk"),
        help="a text over the model's limit: refuse it, naming file and line (error), keep its first tokens "
        "and say how many were cut (cut), or pool overlapping windows (chunk)",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add to the existing index in --output the rows of --input whose id it lacks (only they are embedded)",
    )


def _say(line: str) -> None:
    print(f"index: {line}")


def _one_input(args: argparse.Namespace, what: str) -> str:
    if len(args.input) > 1:
        raise ValueError(f"{what} reads one --input file, got {len(args.input)}")
    return args.input[0]


def _to_store(args: argparse.Namespace) -> int:
    from .milvus_store import index_to_store

    written, kept = index_to_store(
        args.model,
        _one_input(args, "--store"),
        args.store,
        text_column=args.text_column,
        dtype=args.dtype,
        truncation=args.truncation,
        append=args.append,
        overwrite=args.overwrite,
        on_cut=_say,
        device=args.device,
    )
    print(f"{written} row(s) written to {args.store} ({kept} already there)")
    return 0


def _with_ray(args: argparse.Namespace) -> int:
    from .ray_index import build_index_ray

    if args.append:
        raise ValueError("--append embeds in this process; run it without --ray")
    out = build_index_ray(
        args.model,
        args.input,
        args.output,
        address=None if args.ray == "local" else args.ray,
        actors=args.actors,
        threads=args.actor_threads,
        say=_say,
        shard_size=args.shard_size,
        text_column=args.text_column,
        dtype=args.dtype,
        vector_dtype=args.vector_dtype,
        backend=args.backend,
        overwrite=args.overwrite,
        truncation=args.truncation,
        on_cut=_say,
    )
    print(f"index written to {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    from .index import build_index

    if (args.output is None) == (args.store is None):
        raise ValueError("give one of --output DIR (an index folder) or --store milvus://FILE_OR_URI")
    if args.store is not None:
        if args.ray is not None:
            raise ValueError("--ray writes an index folder (--output); it does not write into --store yet")
        if args.shard_size is not None:
            raise ValueError("--shard-size writes index folders (--output), not a --store")
        return _to_store(args)
    if args.append and args.shard_size is not None:
        raise ValueError("--append adds to one index folder; a sharded index (--shard-size) is built whole")
    if args.ray is not None:
        return _with_ray(args)
    if args.append:
        from .index_update import append_corpus

        n = append_corpus(
            args.output,
            _one_input(args, "--append"),
            args.model,
            args.text_column,
            args.truncation,
            on_cut=_say,
            device=args.device,
        )
        print(f"{n} new row(s) added to {args.output}")
        return 0
    out = build_index(
        args.model,
        args.input,
        args.output,
        text_column=args.text_column,
        dtype=args.dtype,
        vector_dtype=args.vector_dtype,
        backend=args.backend,
        overwrite=args.overwrite,
        truncation=args.truncation,
        on_cut=_say,
        device=args.device,
        shard_size=args.shard_size,
    )
    print(f"index written to {out}")
    return 0
