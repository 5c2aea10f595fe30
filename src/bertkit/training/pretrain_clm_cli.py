"""`bertkit pretrain-clm`: train a GPT-2 (causal LM) from scratch on raw text.

Example (a small Chinese GPT-2 on the bert-base-chinese vocabulary)::

    bertkit pretrain-clm --corpus news_zh.txt --vocab chinese_vocab.txt --n-layer 4 --n-embd 256 \\
        --seq-len 128 --batch-size 16 --max-minutes 30 --output runs/gpt2-zh
"""

from __future__ import annotations

import argparse
import json

from bertkit import _args as A

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bertkit.training.clm import CLMArguments

    # --max-steps (default 1000) sizes the run; --epochs would be a second, ignored length.
    A.add_dataclass_arguments(p, CLMArguments, exclude=("epochs",))


def run(args: argparse.Namespace) -> int:
    from bertkit.training.clm import CLMArguments, pretrain_clm

    print(json.dumps(pretrain_clm(A.from_namespace(CLMArguments, args))))
    return 0
