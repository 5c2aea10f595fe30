"""`bertkit train-vocab --corpus FILE... --vocab-size N --output vocab.txt [--lowercase] [--min-frequency K]`.

``--model bpe`` learns byte-level BPE (GPT-2 / RoBERTa style) instead of WordPiece; ``--output`` is then a
folder that gets ``vocab.json``, ``merges.txt`` and ``tokenizer.json``. ``--model unigram`` learns a
SentencePiece-style Unigram vocabulary (NFKC, Metaspace) into a folder's ``tokenizer.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bertkit import _args as A


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        help="UTF-8 text files; a .jsonl file gives its records' text fields, as pretrain --corpus reads it",
    )
    parser.add_argument(
        "--vocab-size", type=A.positive_int, required=True, help="size of the vocabulary, special tokens included"
    )
    parser.add_argument(
        "--model",
        choices=("wordpiece", "bpe", "unigram"),
        default="wordpiece",
        help="wordpiece (BERT's vocab.txt), bpe (byte-level BPE: vocab.json + merges.txt in a folder) or "
        "unigram (SentencePiece-style, tokenizer.json in a folder)",
    )
    parser.add_argument(
        "--output", required=True, help="where to write vocab.txt (a new file); with --model bpe, a folder"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    parser.add_argument("--lowercase", action="store_true", help="lowercase and strip accents (uncased model)")
    parser.add_argument(
        "--min-frequency", type=A.positive_int, default=2, help="stop merging below this pair count (2)"
    )
    parser.add_argument(
        "--limit-alphabet", type=A.positive_int, default=None, help="keep only the N most frequent characters"
    )
    parser.add_argument(
        "--special-tokens",
        nargs="+",
        default=None,
        help="special tokens, first in the vocabulary (default [PAD] [UNK] [CLS] [SEP] [MASK]; for bpe RoBERTa's "
        "<s> <pad> </s> <unk> <mask>)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from bertkit._folders import check_output_file, refuse_inside_input

    from .vocab_trainer import DEFAULT_SPECIAL_TOKENS, WordPieceTrainer

    missing = [f for f in args.corpus if not Path(f).is_file()]
    if missing:  # the input's error first: it is the one to fix
        raise FileNotFoundError(f"corpus file not found: {missing[0]}")
    refuse_inside_input(args.output, *args.corpus)
    if getattr(args, "model", "wordpiece") == "bpe":
        return _run_bpe(args)
    if getattr(args, "model", "wordpiece") == "unigram":
        return _run_unigram(args)
    check_output_file(args.output, args.overwrite)  # before the training, not after it
    specials = list(args.special_tokens or DEFAULT_SPECIAL_TOKENS)
    twice = sorted({t for t in specials if specials.count(t) > 1})
    if twice:
        raise ValueError(f"--special-tokens lists {', '.join(twice)} more than once")
    if "[UNK]" not in specials:  # the tokenizer maps every word it cannot spell to it
        raise ValueError("--special-tokens must include [UNK]: words the vocabulary cannot spell become it")
    absent = [t for t in DEFAULT_SPECIAL_TOKENS if t not in specials]
    if absent:
        print(
            f"bertkit train-vocab: warning: --special-tokens leaves out {', '.join(absent)}; BERT pretraining "
            "and fine-tuning need them",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    trainer = WordPieceTrainer(
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        lowercase=args.lowercase,
        limit_alphabet=args.limit_alphabet,
        special_tokens=specials,
        show_progress=not args.quiet,
    )
    vocab = trainer.train(files=args.corpus)
    path = trainer.save(args.output)
    print(
        f"wrote {len(vocab)} tokens to {path} ({len(trainer.word_counts)} distinct words, "
        f"{time.perf_counter() - t0:.1f}s)",
        file=sys.stderr if args.quiet else sys.stdout,
    )
    return 0


_BPE_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _run_bpe(args: argparse.Namespace) -> int:
    """Byte-level BPE into the folder ``--output``, as tokenizers' BpeTrainer learns it."""
    from bertkit._folders import claim_output_dir

    from .bpe_trainer import ByteLevelBPETrainer

    specials = list(args.special_tokens or ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    twice = sorted({t for t in specials if specials.count(t) > 1})
    if twice:
        raise ValueError(f"--special-tokens lists {', '.join(twice)} more than once")
    if args.limit_alphabet is not None:
        raise ValueError("--limit-alphabet is for wordpiece: byte-level BPE keeps all 256 bytes")
    if args.lowercase:
        raise ValueError("--lowercase is for wordpiece: byte-level BPE keeps the text as it is")
    claim_output_dir(args.output, "train-vocab", overwrite=args.overwrite, owned=_BPE_FILES)
    t0 = time.perf_counter()
    trainer = ByteLevelBPETrainer(
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        special_tokens=specials,
        show_progress=not args.quiet,
    )
    vocab = trainer.train(files=args.corpus)
    path = trainer.save(args.output)
    print(
        f"wrote {len(vocab)} tokens and {len(trainer.merges)} merges to {path} ({len(trainer.word_counts)} "
        f"distinct pieces, {time.perf_counter() - t0:.1f}s)",
        file=sys.stderr if args.quiet else sys.stdout,
    )
    return 0


def _run_unigram(args: argparse.Namespace) -> int:
    """A Unigram vocabulary into the folder ``--output`` (tokenizer.json and the configs)."""
    from bertkit._folders import claim_output_dir

    from .unigram_trainer import UnigramTrainer

    specials = list(args.special_tokens or ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    if "<unk>" not in specials:
        raise ValueError("--special-tokens must include <unk>: characters the vocabulary lacks become it")
    for flag, given in (("--limit-alphabet", args.limit_alphabet is not None), ("--lowercase", args.lowercase)):
        if given:
            raise ValueError(f"{flag} is for wordpiece")
    claim_output_dir(args.output, "train-vocab", overwrite=args.overwrite, owned=_BPE_FILES)
    t0 = time.perf_counter()
    trainer = UnigramTrainer(vocab_size=args.vocab_size, special_tokens=specials)
    trainer.feed_files(args.corpus)
    vocab = trainer.train()
    trainer.tokenizer().save_pretrained(args.output)
    print(
        f"wrote {len(vocab)} pieces to {args.output} ({len(trainer.word_counts)} distinct pieces counted, "
        f"{time.perf_counter() - t0:.1f}s)",
        file=sys.stderr if args.quiet else sys.stdout,
    )
    return 0
