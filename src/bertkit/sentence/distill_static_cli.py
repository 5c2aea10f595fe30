"""`bertkit distill-static --model DIR --output DIR [--dims 256] [--vocab FILE]`."""

from __future__ import annotations

import argparse

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="sentence model folder or cached model id (the teacher)")
    p.add_argument("--output", required=True, help="folder to write the static model into")
    p.add_argument(
        "--dims",
        type=A.int_range(1),
        default=256,
        help="PCA dimensions to keep (default 256; at most the model's width)",
    )
    p.add_argument(
        "--vocab",
        default=None,
        help="text file of extra words, one a line, added as whole tokens (e.g. a corpus's frequent words)",
    )
    p.add_argument(
        "--dtype",
        choices=("fp32", "bf16", "auto"),
        default="auto",
        help="precision of the teacher's forward (default auto: bf16 where this CPU is fast at it, else fp32)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an earlier distill-static output there")


def _read_vocab(path: str) -> list[str]:
    from bertkit._text import read_text

    words = [w.strip() for w in read_text(path).splitlines()]
    return [w for w in words if w]


def run(args: argparse.Namespace) -> int:
    import time

    from .distill_static import distill_static

    vocab = _read_vocab(args.vocab) if args.vocab else None
    t0 = time.perf_counter()
    model = distill_static(
        args.model, args.output, dims=args.dims, vocabulary=vocab, dtype=args.dtype, overwrite=args.overwrite
    )
    print(
        f"wrote {args.output}: {model.weight.shape[0]:,} tokens x {model.dim} dims in "
        f"{time.perf_counter() - t0:.1f} s (loads in bertkit, model2vec and sentence-transformers)"
    )
    return 0
