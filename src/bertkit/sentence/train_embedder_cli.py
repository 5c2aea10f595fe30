"""`bertkit train-embedder`: fine-tune a sentence-embedding model (see bertkit.sentence.embedder)."""

from __future__ import annotations

import argparse
import json

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.sentence.embedder import EmbedderArguments

    A.add_dataclass_arguments(p, EmbedderArguments)


def run(args: argparse.Namespace) -> int:
    from bertkit.sentence.embedder import EmbedderArguments, train_embedder

    result = train_embedder(A.from_namespace(EmbedderArguments, args))
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
