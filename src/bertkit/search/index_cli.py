"""`bertkit index --model DIR --input FILE(.txt|.jsonl|.csv) [--text-column text] --output INDEX_DIR`."""

from __future__ import annotations

import argparse

from bertkit import _args as A
from bertkit.inference import DTYPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .index import BACKENDS

    p.add_argument("--model", required=True, help="sentence-embedding model folder (e.g. MiniLM)")
    p.add_argument("--input", required=True, help="corpus: .txt (one text a line), .jsonl or .csv")
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


def _to_store(args: argparse.Namespace) -> int:
    from .milvus_store import index_to_store

    written, kept = index_to_store(
        args.model,
        args.input,
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
        return _to_store(args)
    if args.ray is not None:
        return _with_ray(args)
    if args.append:
        from .index_update import append_corpus

        n = append_corpus(
            args.output, args.input, args.model, args.text_column, args.truncation, on_cut=_say, device=args.device
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
    )
    print(f"index written to {out}")
    return 0
