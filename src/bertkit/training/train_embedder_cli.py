"""`bertkit train-embedder`: fine-tune a sentence-embedding model (see bertkit.training.embedder)."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.training.embedder import EmbedderArguments

    A.add_dataclass_arguments(p, EmbedderArguments)


def run(args: argparse.Namespace) -> int:
    from bertkit.training.embedder import EmbedderArguments, train_embedder
    from bertkit.training.trainer import NonFiniteLossError

    try:
        result = train_embedder(A.from_namespace(EmbedderArguments, args))
    except NonFiniteLossError as e:
        print(f"bertkit train-embedder: error: {e}", file=sys.stderr)
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
