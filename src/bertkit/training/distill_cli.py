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
    from bertkit.training.distillation import DistillConfig

    d = DistillConfig(teacher="", train="", output="")
    p.add_argument("--teacher", required=True, metavar="DIR", help="a fine-tuned BERT text classifier")
    p.add_argument("--train", required=True, metavar="FILE")
    p.add_argument("--validation", metavar="FILE")
    p.add_argument("--output", required=True, metavar="DIR")
    p.add_argument("--student-layers", type=A.positive_int, default=d.student_layers,
                   help="layers of the student, taken from every other teacher layer")
    p.add_argument("--alpha-ce", type=A.nonnegative_float, default=d.alpha_ce, help="weight of the soft-target loss")
    p.add_argument("--alpha-hard", type=A.nonnegative_float, default=d.alpha_hard, help="weight of the gold-label loss")
    p.add_argument("--alpha-cos", type=A.nonnegative_float, default=d.alpha_cos,
                   help="weight of the hidden-state cosine loss (0 = off)")
    p.add_argument("--temperature", type=A.positive_float, default=d.temperature)
    p.add_argument("--epochs", type=A.positive_float, default=d.epochs)
    p.add_argument("--batch-size", type=A.positive_int, default=d.batch_size)
    p.add_argument("--lr", type=A.positive_float, default=d.lr)
    p.add_argument("--warmup-ratio", type=A.float_range(0, 1), default=d.warmup_ratio)
    p.add_argument("--max-length", type=A.int_range(8), default=None,
                   help="default: the teacher's fine-tuning max_length")
    p.add_argument("--max-train-samples", type=A.positive_int, default=None, help="first N training examples only")
    p.add_argument("--seed", type=A.seed, default=d.seed)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def run(args: argparse.Namespace) -> int:
    from bertkit.training.distillation import DistillConfig, distill

    fields = DistillConfig.__dataclass_fields__
    print(json.dumps(distill(DistillConfig(**{k: v for k, v in vars(args).items() if k in fields}))))
    return 0
