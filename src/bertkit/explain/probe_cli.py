"""`bertkit probe --model DIR --task FILE [--text-column text] [--label-column label] [--json F] [--png F]`."""

from __future__ import annotations

import argparse

from bertkit._args import fraction_0_1_open, positive_float, positive_int, seed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model folder or cached model id (any registered family)")
    p.add_argument("--task", required=True, help="labelled CSV, TSV or JSONL file")
    p.add_argument("--text-column", default="text", help="the text column (default text)")
    p.add_argument("--text-pair-column", default=None, help="a second text column, for sentence-pair tasks")
    p.add_argument("--label-column", default="label", help="the label column (default label)")
    p.add_argument("--max-rows", type=positive_int, default=2000, help="read at most this many rows (default 2000)")
    p.add_argument("--max-length", type=positive_int, default=128, help="tokens per text (default 128)")
    p.add_argument("--test-size", type=fraction_0_1_open, default=0.2, help="held-out share of the rows (default 0.2)")
    p.add_argument(
        "--c",
        type=positive_float,
        default=0.01,
        help="inverse L2 strength of the probes, as scikit-learn's C (default 0.01)",
    )
    p.add_argument("--seed", type=seed, default=0, help="split, shuffled control labels and random model (default 0)")
    p.add_argument(
        "--no-random-baseline",
        dest="random_baseline",
        action="store_false",
        help="leave out the randomly initialised model of the same shape",
    )
    p.add_argument("--json", dest="json_path", default=None, help="write every probe's numbers here")
    p.add_argument("--png", dest="png_path", default=None, help="write the accuracy and selectivity plot here")
    p.add_argument("--overwrite", action="store_true", help="replace existing --json / --png files")


def run(args: argparse.Namespace) -> int:
    from bertkit.explain.probe import probe

    res = probe(
        args.model,
        args.task,
        text_column=args.text_column,
        label_column=args.label_column,
        text_pair_column=args.text_pair_column,
        test_size=args.test_size,
        max_rows=args.max_rows,
        max_length=args.max_length,
        c=args.c,
        seed=args.seed,
        random_baseline=args.random_baseline,
        json_path=args.json_path,
        png_path=args.png_path,
        overwrite=args.overwrite,
    )
    print(res.table())
    for path in (args.json_path, args.png_path):
        if path is not None:
            print(f"wrote {path}")
    return 0
