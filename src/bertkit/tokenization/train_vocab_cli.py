"""`bertkit train-vocab --corpus FILE... --vocab-size N --output vocab.txt [--lowercase] [--min-frequency K]`."""

from __future__ import annotations

import argparse
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    parser.add_argument("--vocab-size", type=int, required=True, help="size of the vocabulary, special tokens included")
    parser.add_argument("--output", required=True, help="where to write vocab.txt")
    parser.add_argument("--lowercase", action="store_true", help="lowercase and strip accents (uncased model)")
    parser.add_argument("--min-frequency", type=int, default=2, help="stop merging below this pair count (2)")
    parser.add_argument("--limit-alphabet", type=int, default=None, help="keep only the N most frequent characters")
    parser.add_argument("--special-tokens", nargs="+", default=None,
                        help="special tokens, first in the vocabulary (default [PAD] [UNK] [CLS] [SEP] [MASK])")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from .vocab_trainer import DEFAULT_SPECIAL_TOKENS, WordPieceTrainer

    t0 = time.perf_counter()
    trainer = WordPieceTrainer(vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                               lowercase=args.lowercase, limit_alphabet=args.limit_alphabet,
                               special_tokens=args.special_tokens or DEFAULT_SPECIAL_TOKENS,
                               show_progress=not args.quiet)
    vocab = trainer.train(files=args.corpus)
    path = trainer.save(args.output)
    print(f"wrote {len(vocab)} tokens to {path} ({len(trainer.word_counts)} distinct words, "
          f"{time.perf_counter() - t0:.1f}s)", file=sys.stderr if args.quiet else sys.stdout)
    return 0
