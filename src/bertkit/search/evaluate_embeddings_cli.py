"""`bertkit evaluate-embeddings`: STS correlations and retrieval metrics of a sentence-embedding model.

::

    bertkit evaluate-embeddings --model DIR --sts pairs.csv                  # sentence1, sentence2, score
    bertkit evaluate-embeddings --model DIR --queries q.jsonl --corpus c.jsonl --qrels qrels.tsv \\
        [--lexical-weight W] [--rerank CROSS_ENCODER_DIR] [--output results.json]

The metrics are defined in :mod:`bertkit.sentence.evaluation.metrics`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .rerank import FUSIONS

    p.add_argument("--model", required=True, help="sentence-embedding model folder or cached model id")
    p.add_argument("--sts", default=None, help="CSV/TSV/JSONL of sentence1, sentence2, score")
    p.add_argument("--queries", default=None, help="BEIR queries JSONL (_id, text)")
    p.add_argument("--corpus", default=None, help="BEIR corpus JSONL (_id, text[, title])")
    p.add_argument("--qrels", default=None, help="TSV: query-id, corpus-id, score (header line)")
    p.add_argument(
        "--rerank",
        default=None,
        metavar="DIR",
        help="a cross-encoder folder: rerank each query's top --rerank-depth hits",
    )
    p.add_argument("--rerank-depth", type=A.positive_int, default=20)
    p.add_argument(
        "--fusion",
        default="none",
        choices=FUSIONS,
        help="with --rerank: rank by the cross-encoder alone, or fuse it with the retriever (see bertkit search)",
    )
    p.add_argument(
        "--lexical-weight",
        type=A.fraction_0_1,
        default=0.0,
        help="hybrid search: rank by (1 - W) x the standardised cosine + W x the standardised BM25 score "
        "(0: embeddings only, 1: BM25 only)",
    )
    p.add_argument(
        "--credit-copies",
        action="store_true",
        help="count a document with exactly the same text as a relevant one as relevant too (the qrels "
        "name one copy; without this flag a copy ranked first is a miss)",
    )
    p.add_argument("--batch-size", type=A.positive_int, default=64)
    p.add_argument(
        "--truncation",
        choices=["error", "cut", "chunk"],
        default="error",
        help="a text over the model's limit: an error (default), cut, or pooled overlapping windows",
    )
    p.add_argument("--dtype", default="fp32", choices=["auto", "fp32", "bf16", "int8"])
    A.add_device_flag(p)
    p.add_argument("--output", default=None, help="write the metrics as JSON here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def embed_texts(
    emb: Any, texts: Sequence[str], progress: bool = True, desc: str = "embed", block: int = 2048
) -> np.ndarray:
    """Vectors of ``texts`` with a sentence-embedding pipeline, in blocks under a progress bar."""
    from tqdm.auto import tqdm

    texts = list(texts)
    out = np.zeros((len(texts), emb.dim), np.float32)  # the folder's Dense modules may change the width
    with tqdm(total=len(texts), desc=desc, unit="text", disable=not progress, file=sys.stderr) as bar:
        for s in range(0, len(texts), block):
            part = texts[s : s + block]
            out[s : s + len(part)] = emb.embed(part)
            bar.update(len(part))
    return out


def _check_lengths(emb: Any, texts: Sequence[str], where: Any) -> None:
    """Refuse the first text over the model's limit before anything is embedded, naming its file and
    line (``where(i)``) and the flag that allows it, as ``bertkit index`` does."""
    from .long_texts import check_lengths

    mode = getattr(emb, "truncation", "error")
    if mode == "error":
        check_lengths(emb, texts, where, mode)


def _sts_line(path: str, text: str) -> str:
    """``path:line (column)`` of the first STS row holding ``text`` (read again only for an error)."""
    from pathlib import Path

    from bertkit.sentence.embedding_data import _records

    for n, rec in _records(Path(path)):
        for col in ("sentence1", "sentence2"):
            if rec.get(col) == text:
                return f"{path}:{n} ({col})"
    return str(path)


def _beir_line(path: str, key: str) -> str:
    """``path:line (id ...)`` of the BEIR row with ``_id`` ``key`` (read again only for an error)."""
    import json

    from bertkit._text import read_text, split_records

    for n, line in enumerate(split_records(read_text(path)), 1):
        try:
            if line.strip() and str(json.loads(line).get("_id")) == key:
                return f"{path}:{n} (id {key!r})"
        except (ValueError, AttributeError):
            continue
    return f"{path} (id {key!r})"


def evaluate_sts(emb: Any, path: str, progress: bool = True) -> dict[str, float]:
    from bertkit.sentence.embedding_data import read_embedding_rows
    from bertkit.sentence.evaluation.metrics import sts_metrics

    rows = read_embedding_rows(path, scored=True, score_range=(-math.inf, math.inf))
    # a correlation needs two pairs and gold scores that vary: otherwise it is undefined, not 0
    if len(rows) < 2:
        raise ValueError(f"{path}: {len(rows)} pair; a correlation needs at least 2 scored pairs")
    if len({r["score"] for r in rows}) < 2:
        raise ValueError(
            f"{path}: every gold score is {rows[0]['score']:g}; a correlation is undefined when the scores do not vary"
        )
    # each distinct text once: a set of n documents rated pairwise has n texts in n(n-1)/2 rows
    texts = list(dict.fromkeys([r["sentence1"] for r in rows] + [r["sentence2"] for r in rows]))
    _check_lengths(emb, texts, lambda i: _sts_line(path, texts[i]))
    vecs = embed_texts(emb, texts, progress, "sts")
    at = {t: i for i, t in enumerate(texts)}
    e1 = vecs[[at[r["sentence1"]] for r in rows]]
    e2 = vecs[[at[r["sentence2"]] for r in rows]]
    out = sts_metrics(e1, e2, [r["score"] for r in rows])
    if any(math.isnan(v) for v in out.values()):
        raise ValueError(
            f"{path}: the model gives every pair the same similarity; a correlation is undefined (check the model)"
        )
    return {**out, "pairs": float(len(rows))}


def evaluate_retrieval(
    emb: Any,
    queries_path: str,
    corpus_path: str,
    qrels_path: str,
    rerank: Any = None,
    depth: int = 20,
    progress: bool = True,
    fusion: str = "none",
    lexical_weight: float = 0.0,
    credit: bool = False,
) -> dict[str, Any]:
    """Retrieval metrics of ``emb`` on BEIR files, optionally reranked by ``rerank`` (a cross-encoder
    folder or a ``pipeline("text-ranking")``). The queries the qrels leave with an uncredited exact
    copy of a relevant document are counted in ``uncredited_copies``; with ``credit`` those copies are
    relevant too. Reranked, the retriever's own metrics are under ``first_stage``."""
    from bertkit.sentence.evaluation.metrics import credit_copies, read_beir, read_qrels, retrieval_metrics

    queries, corpus = read_beir(queries_path), read_beir(corpus_path)
    qrels = read_qrels(qrels_path, queries, corpus)
    credited = credit_copies(qrels, corpus)
    touched = sum(len(credited[q]) > len(rel) for q, rel in qrels.items())
    if touched and credit:
        qrels = credited
        print(
            f"{corpus_path}: {touched} queries have a relevant document with an exact copy under another id; "
            "the copies count as relevant (--credit-copies)",
            file=sys.stderr,
        )
    elif touched:
        print(
            f"{corpus_path}: {touched} queries have a relevant document with an exact copy under another id "
            f"that {qrels_path} does not name; a copy ranked above it counts as a miss (--credit-copies "
            "counts it as relevant)",
            file=sys.stderr,
        )
    qids, cids = list(queries), list(corpus)
    _check_lengths(emb, [queries[i] for i in qids], lambda i: _beir_line(queries_path, qids[i]))
    _check_lengths(emb, [corpus[i] for i in cids], lambda i: _beir_line(corpus_path, cids[i]))
    q = embed_texts(emb, [queries[i] for i in qids], progress, "queries")
    c = embed_texts(emb, [corpus[i] for i in cids], progress, "corpus")
    texts = ([queries[i] for i in qids], [corpus[i] for i in cids]) if lexical_weight else (None, None)
    out = retrieval_metrics(
        q, qids, c, cids, qrels, query_texts=texts[0], corpus_texts=texts[1], lexical_weight=lexical_weight
    )
    copies = {"uncredited_copies": float(0 if credit else touched)}
    if rerank is None:
        return {**out, **copies}
    from bertkit.search.rerank import rerank_metrics_per_fusion

    reranked = rerank_metrics_per_fusion(
        rerank, q, qids, queries, c, cids, corpus, qrels, (fusion,), depth, progress, lexical_weight=lexical_weight
    )[fusion]
    # both stages: a reranker that loses what the retriever found shows as the drop between them
    return {**reranked, **copies, "first_stage": {**out, **copies}}


def run(args: argparse.Namespace) -> int:
    from bertkit._folders import check_not_input, check_output_file
    from bertkit._io import atomic_write_json
    from bertkit.pipelines import pipeline

    if not args.sts and not (args.queries or args.corpus or args.qrels):
        raise ValueError("give --sts FILE, or --queries, --corpus and --qrels")
    if (args.queries or args.corpus or args.qrels) and not (args.queries and args.corpus and args.qrels):
        raise ValueError("retrieval needs all three of --queries, --corpus and --qrels")
    if args.fusion != "none" and not args.rerank:
        raise ValueError(f"--fusion {args.fusion} fuses a cross-encoder's scores: give --rerank DIR")
    from bertkit.hub import resolve_model_arg

    # Model ids resolve to their cache snapshots once, before anything is read or written.
    model = resolve_model_arg(args.model)
    rerank = str(resolve_model_arg(args.rerank, "--rerank")) if args.rerank else None
    if args.output:
        check_not_input(
            args.output,
            {
                "--model": model,
                "--sts": args.sts,
                "--queries": args.queries,
                "--corpus": args.corpus,
                "--qrels": args.qrels,
                "--rerank": rerank,
            },
        )
        check_output_file(args.output, args.overwrite)
    emb = pipeline(
        "sentence-embedding",
        model=model,
        dtype=args.dtype,
        batch_size=args.batch_size,
        truncation=args.truncation,
        device=args.device,
    )
    if rerank and args.device:  # the cross-encoder runs where the embedder does
        rerank = pipeline("text-ranking", model=rerank, device=args.device)
    results: dict[str, Any] = {"model": str(args.model)}
    if args.sts:
        results["sts"] = evaluate_sts(emb, args.sts, args.progress)
    if args.queries:
        results["retrieval"] = evaluate_retrieval(
            emb,
            args.queries,
            args.corpus,
            args.qrels,
            rerank,
            args.rerank_depth,
            args.progress,
            args.fusion,
            args.lexical_weight,
            args.credit_copies,
        )
    if args.queries and rerank:
        results["first_stage"] = results["retrieval"].pop("first_stage")
        results["rerank"] = {"model": str(args.rerank), "depth": args.rerank_depth, "fusion": args.fusion}
        print(
            f"first_stage: {args.model} alone; retrieval: its top {args.rerank_depth} reranked by {args.rerank} "
            f"(fusion {args.fusion})",
            file=sys.stderr,
        )
    counts = ("pairs", "queries", "uncredited_copies")
    for task in ("sts", "first_stage", "retrieval"):
        for name, value in results.get(task, {}).items():
            print(f"{task}\t{name}\t{int(value)}" if name in counts else f"{task}\t{name}\t{value:.4f}")
    if args.output:
        check_output_file(args.output, args.overwrite)
        atomic_write_json(args.output, results)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
