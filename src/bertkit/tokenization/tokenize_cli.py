"""`bertkit tokenize --vocab PATH [--cased] "text"`: print WordPiece tokens and their ids."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="+", help="text to tokenize (several arguments are joined by spaces)")
    parser.add_argument(
        "--vocab", required=True, help="vocab.txt, or a folder with vocab.txt (and tokenizer_config.json)"
    )
    parser.add_argument("--cased", action="store_true", help="keep case and accents (cased vocabulary)")
    parser.add_argument("--no-special", action="store_true", help="do not add [CLS] / [SEP]")
    parser.add_argument("--pair", default=None, help="optional second text (token_type_ids 1)")


def run(args: argparse.Namespace) -> int:
    from .tokenizer import load_tokenizer

    tok = load_tokenizer(args.vocab, lower_case=False if args.cased else None)
    text = " ".join(args.text)
    enc = tok(text, args.pair, add_special_tokens=not args.no_special)
    tokens = enc.tokens()
    ids = enc["input_ids"]
    width = max((len(t) for t in tokens), default=0)
    out = sys.stdout
    out.write(f"tokens: {tokens}\n")
    out.write(f"ids:    {ids}\n")
    if args.pair is not None:
        out.write(f"token_type_ids: {enc['token_type_ids']}\n")
    for t, i in zip(tokens, ids):
        out.write(f"  {t:<{width}}  {i}\n")
    return 0
