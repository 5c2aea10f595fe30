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
    from bertkit.training.clm import CLMRecipe

    d = CLMRecipe(corpus=[], vocab="", output="")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="raw .txt / .jsonl files")
    p.add_argument("--vocab", required=True, help="vocab.txt (a BERT WordPiece vocabulary)")
    p.add_argument("--output", required=True, metavar="DIR")
    p.add_argument("--format", choices=["prose", "bert"], default=d.format,
                   help="raw text layout: bert = one sentence a line (default), prose = split sentences")
    p.add_argument("--no-lower-case", dest="lower_case", action="store_false")
    p.add_argument("--n-layer", type=A.positive_int, default=d.n_layer)
    p.add_argument("--n-embd", type=A.positive_int, default=d.n_embd)
    p.add_argument("--n-head", type=A.positive_int, default=d.n_head)
    p.add_argument("--seq-len", type=A.int_range(8), default=d.seq_len, help="block length = the model's n_positions")
    p.add_argument("--dropout", type=A.fraction_0_1_right_open, default=d.dropout)
    p.add_argument("--eval-fraction", type=A.fraction_0_1_right_open, default=d.eval_fraction,
                   help="sentences held out")
    p.add_argument("--eval-blocks", type=A.positive_int, default=d.eval_blocks, help="held-out blocks per evaluation")
    p.add_argument("--batch-size", type=A.positive_int, default=d.batch_size)
    p.add_argument("--max-steps", type=A.positive_int, default=d.max_steps)
    p.add_argument("--max-minutes", type=A.positive_float, default=None, help="also stop after this much training time")
    p.add_argument("--lr", type=A.positive_float, default=d.lr)
    p.add_argument("--warmup-steps", type=A.nonnegative_int, default=d.warmup_steps)
    p.add_argument("--weight-decay", type=A.nonnegative_float, default=d.weight_decay)
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default=d.precision)
    p.add_argument("--seed", type=A.seed, default=d.seed)
    p.add_argument("--eval-every", type=A.nonnegative_int, default=d.eval_every)
    p.add_argument("--save-every", type=A.nonnegative_int, default=d.save_every)
    p.add_argument("--cache-dir", help="where --corpus is prepared (default: the shared prepared-data cache)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --output")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def run(args: argparse.Namespace) -> int:
    from bertkit.training.clm import CLMRecipe, pretrain_clm

    fields = CLMRecipe.__dataclass_fields__
    recipe = CLMRecipe(**{k: v for k, v in vars(args).items() if k in fields})
    print(json.dumps(pretrain_clm(recipe)))
    return 0
