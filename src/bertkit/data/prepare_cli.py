"""`bertkit prepare-data`: tokenize raw text once into pretraining shards."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from bertkit import _args as A

__all__ = ["add_arguments", "run", "load_tokenizer", "prepared_cache_dir", "ensure_prepared"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                   help="raw text files (.txt) or JSONL files (.jsonl, one document per record)")
    p.add_argument("--vocab", required=True, help="vocab.txt (or a folder holding one)")
    p.add_argument("--output", required=True, help="shard folder to write")
    p.add_argument("--format", choices=["prose", "bert"], default="prose",
                   help="prose: split lines into sentences with the rule-based splitter; bert: one "
                        "sentence per line. Both: blank line between documents (default: prose)")
    p.add_argument("--jsonl-field", default="text", help="text field of .jsonl records (default: text)")
    p.add_argument("--no-lower-case", dest="lower_case", action="store_false",
                   help="keep case (for cased vocabularies)")
    p.add_argument("--seq-len", type=A.SEQ_LEN, default=128,
                   help="accepted for symmetry with `pretrain`; shards do not depend on it")
    p.add_argument("--shard-tokens", type=A.positive_int, default=50_000_000, help="tokens per shard file")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def load_tokenizer(vocab: str | os.PathLike, lower_case: bool = True):  # -> BertTokenizer
    """bertkit's BertTokenizer for a vocab.txt or a folder holding one."""
    from bertkit.tokenization import BertTokenizer

    path = Path(vocab)
    if path.is_dir():
        return BertTokenizer.from_pretrained(str(path), do_lower_case=lower_case)
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    return BertTokenizer(str(path), do_lower_case=lower_case)


def prepared_cache_dir(files: Sequence[str | os.PathLike], vocab_tokens: Sequence[str], fmt: str,
                       lower_case: bool, jsonl_field: str = "text") -> Path:
    """Cache folder for on-the-fly preparation, keyed by the files (path, size, mtime) and vocab."""
    from bertkit.data.corpus import vocab_fingerprint

    h = hashlib.sha256()
    for f in files:
        st = Path(f).stat()
        h.update(f"{Path(f).resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    h.update(f"{vocab_fingerprint(vocab_tokens)}|{fmt}|{lower_case}|{jsonl_field}".encode())
    root = Path(os.environ.get("BERTKIT_CACHE", Path.home() / ".cache" / "bertkit")) / "prepared"
    return root / h.hexdigest()[:20]


def ensure_prepared(files: Sequence[str | os.PathLike], vocab: str | os.PathLike, fmt: str = "prose",
                    lower_case: bool = True, jsonl_field: str = "text", progress: bool = True,
                    cache_dir: str | os.PathLike | None = None) -> Path:
    """Prepare ``files`` into the cache unless already there (rank 0 prepares, others wait)."""
    from bertkit.data.corpus import load_vocab, prepare_corpus

    for f in files:
        if not Path(f).is_file():
            raise FileNotFoundError(f"corpus file not found: {f}")
    tokens = load_vocab(vocab)
    out = Path(cache_dir) if cache_dir else prepared_cache_dir(files, tokens, fmt, lower_case, jsonl_field)
    if (out / "meta.json").is_file():
        return out
    if int(os.environ.get("RANK", "0")) != 0:
        deadline = time.time() + 3600
        while not (out / "meta.json").is_file():
            if time.time() > deadline:
                raise TimeoutError(f"rank 0 did not finish preparing {out} within an hour")
            time.sleep(1.0)
        return out
    print(f"preparing {len(files)} corpus file(s) into {out}", file=sys.stderr)
    prepare_corpus(files, load_tokenizer(vocab, lower_case), out, tokens, fmt=fmt,
                   jsonl_field=jsonl_field, progress=progress)
    return out


def run(args: argparse.Namespace) -> int:
    from bertkit.data.corpus import load_vocab, prepare_corpus

    tokens = load_vocab(args.vocab)
    tok = load_tokenizer(args.vocab, args.lower_case)
    out = prepare_corpus(args.corpus, tok, args.output, tokens, fmt=args.format,
                         jsonl_field=args.jsonl_field, shard_tokens=args.shard_tokens,
                         progress=args.progress)
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    print(f"wrote {out}: {meta['num_tokens']:,} tokens, {meta['num_sentences']:,} sentences, "
          f"{meta['num_documents']:,} documents in {len(meta['shards'])} shard(s)")
    return 0
