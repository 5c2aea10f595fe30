"""`bertkit train-reranker`: fine-tune a cross-encoder reranker (see bertkit.training.reranker)."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit import _args as A
from bertkit.training.train_embedder_cli import add_training_flags


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model folder to start from (an encoder or a cross-encoder)")
    p.add_argument("--train", required=True, help="JSONL/CSV/TSV rows: query, passage, label (0/1) or score")
    p.add_argument("--validation", default=None, help="a file like --train; MRR@10 and nDCG@10 per evaluation")
    p.add_argument("--output", required=True, help="new or empty folder for the cross-encoder")
    p.add_argument("--loss", choices=["bce", "listwise"], default="bce")
    p.add_argument(
        "--group-size",
        type=A.int_range(2),
        default=4,
        help="listwise: passages per group, the positive and its hard negatives (default 4)",
    )
    p.add_argument("--max-length", type=A.SEQ_LEN, default=None, help="tokens per pair (default 512)")
    add_training_flags(p, "train-reranker")


def run(args: argparse.Namespace) -> int:
    from bertkit.training.reranker import RerankerArguments, train_reranker
    from bertkit.training.trainer import NonFiniteLossError

    try:
        result = train_reranker(RerankerArguments.from_namespace(args))
    except NonFiniteLossError as e:
        print(f"bertkit train-reranker: error: {e}", file=sys.stderr)
        return 3
    print(
        json.dumps(
            {
                "output": result.output_dir,
                "step": result.step,
                **{f"eval_{k}": v for k, v in result.last_metrics.items()},
            }
        )
    )
    return 0
