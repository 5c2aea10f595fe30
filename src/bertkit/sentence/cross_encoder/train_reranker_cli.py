"""`bertkit train-reranker`: fine-tune a cross-encoder reranker (see bertkit.sentence.cross_encoder.reranker)."""

from __future__ import annotations

import argparse
import json

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.sentence.cross_encoder.reranker import RerankerArguments

    A.add_dataclass_arguments(p, RerankerArguments)


def run(args: argparse.Namespace) -> int:
    from bertkit.sentence.cross_encoder.reranker import RerankerArguments, train_reranker

    result = train_reranker(A.from_namespace(RerankerArguments, args))
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
