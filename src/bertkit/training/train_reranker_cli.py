"""`bertkit train-reranker`: fine-tune a cross-encoder reranker (see bertkit.training.reranker)."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.training.reranker import RerankerArguments

    A.add_dataclass_arguments(p, RerankerArguments)


def run(args: argparse.Namespace) -> int:
    from bertkit.training.reranker import RerankerArguments, train_reranker
    from bertkit.training.trainer import NonFiniteLossError

    try:
        result = train_reranker(A.from_namespace(RerankerArguments, args))
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
