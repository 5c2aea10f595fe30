"""`bertkit distill`: distil a fine-tuned BERT classifier into a smaller DistilBERT-shaped student.

Example::

    bertkit distill --teacher runs/polarity --train train.csv --validation test.csv \\
        --student-layers 3 --output runs/polarity-distil --alpha-ce 0.5 --temperature 2.0
"""

from __future__ import annotations

import argparse
import json

from bertkit import _args as A

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.tasks.distillation import DistillArguments

    A.add_dataclass_arguments(p, DistillArguments)


def run(args: argparse.Namespace) -> int:
    from bertkit.tasks.distillation import DistillArguments, distill

    print(json.dumps(distill(A.from_namespace(DistillArguments, args))))
    return 0
