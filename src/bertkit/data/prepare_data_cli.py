"""`bertkit prepare-data`: tokenize raw text once into pretraining shards."""

from __future__ import annotations

import argparse

from bertkit import _args as A
from bertkit._text import read_json

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        metavar="FILE",
        help="raw text files (.txt) or JSONL files (.jsonl, one document per record)",
    )
    p.add_argument("--vocab", required=True, help="vocab.txt (or a folder holding one)")
    p.add_argument("--output", required=True, help="shard folder to write (must not exist or be empty)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier `bertkit prepare-data` output in --output (only the files it wrote)",
    )
    p.add_argument(
        "--format",
        choices=["prose", "bert"],
        default="prose",
        help="prose: split lines into sentences with the rule-based splitter; bert: one "
        "sentence per line. Both: blank line between documents (default: prose)",
    )
    p.add_argument("--jsonl-field", default="text", help="text field of .jsonl records (default: text)")
    p.add_argument(
        "--no-lower-case", dest="lower_case", action="store_false", help="keep case (for cased vocabularies)"
    )
    p.add_argument(
        "--seq-len",
        type=A.SEQ_LEN,
        default=128,
        help="accepted for symmetry with `pretrain`; shards do not depend on it",
    )
    p.add_argument(
        "--whole-word-masking",
        dest="word_boundaries",
        action="store_true",
        help="also store word boundaries for `pretrain --whole-word-masking`; Chinese text is "
        "segmented into words with jieba (pip install 'bertkit[zh]')",
    )
    p.add_argument("--shard-tokens", type=A.positive_int, default=50_000_000, help="tokens per shard file")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def run(args: argparse.Namespace) -> int:
    from bertkit.data.corpus import prepare_corpus
    from bertkit.tokenization import load_tokenizer, load_vocab

    out = prepare_corpus(
        args.corpus,
        load_tokenizer(args.vocab, args.lower_case),
        args.output,
        list(load_vocab(args.vocab)),
        fmt=args.format,
        jsonl_field=args.jsonl_field,
        shard_tokens=args.shard_tokens,
        progress=args.progress,
        overwrite=args.overwrite,
        word_boundaries=args.word_boundaries,
    )
    meta = read_json(out / "meta.json")
    print(
        f"wrote {out}: {meta['num_tokens']:,} tokens, {meta['num_sentences']:,} sentences, "
        f"{meta['num_documents']:,} documents in {len(meta['shards'])} shard(s)"
    )
    return 0
