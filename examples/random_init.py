"""Save a randomly initialised copy of a pretrained BERT folder: same config, same vocabulary.

    python examples/random_init.py PRETRAINED_DIR OUTPUT_DIR [--seed 0]

The baseline that shows what pretraining is worth: fine-tune both folders the same way.
"""

from __future__ import annotations

import argparse
import sys

import torch

from bertkit.modeling import BertConfig, BertForPreTraining
from bertkit.tokenization import load_tokenizer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pretrained")
    ap.add_argument("output")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    config = BertConfig.from_pretrained(args.pretrained)
    BertForPreTraining(config).save_pretrained(args.output, tokenizer=load_tokenizer(args.pretrained))
    print(f"random-init {config.num_hidden_layers}x{config.hidden_size} BERT saved in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
