"""`bertkit pretrain`: MLM (+ NSP) pretraining from raw text or prepared shards.

Example::

    bertkit pretrain --corpus austen.txt wiki.txt bbc.jsonl --vocab vocab.txt --config mini \\
        --seq-len 128 --batch-size 32 --max-steps 2000 --lr 1e-3 --warmup-steps 200 \\
        --eval-every 200 --save-every 500 --output runs/mini

Under ``torchrun --nproc_per_node=N -m bertkit pretrain ...`` it runs DistributedDataParallel.
The recipe itself is :func:`bertkit.training.pretraining.pretrain`; the flags are the fields of
:class:`bertkit.training.mlm.PretrainingArguments`.
"""

from __future__ import annotations

import argparse

from bertkit import _args as A

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.training.mlm import PretrainingArguments

    # --max-steps (default 1000) sizes a pretraining run; --epochs would be a second, ignored length.
    # --config defaults to None here so that a typed `--config mini` beside --model is seen and refused.
    A.add_dataclass_arguments(p, PretrainingArguments, exclude=("epochs",), defaults={"config": None})


def run(args: argparse.Namespace) -> int:
    from bertkit.training.pretraining import PretrainingArguments, pretrain

    given = ["config"] if args.config is not None else []
    overrides = {} if given else {"config": PretrainingArguments.config}
    pretrain(A.from_namespace(PretrainingArguments, args, **overrides), given)
    return 0
