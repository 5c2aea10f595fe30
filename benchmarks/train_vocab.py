"""Vocabulary training: bertkit's WordPieceTrainer vs `tokenizers`' WordPieceTrainer.

Both learn an uncased vocabulary of the same size from the same real corpus (Austen + Wikipedia
text, minus a held-out tail), with the same BERT normalizer/pre-tokenizer. The script prints the
wall time of each and the fertility (WordPiece tokens per whitespace-separated word) of each
vocabulary on the held-out text, tokenized by the same tokenizer (bertkit's BertTokenizer, which
matches BertTokenizerFast exactly), and their ratio.

    python benchmarks/train_vocab.py [--vocab-size 8000] [--min-frequency 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bertkit.assets import asset_path
from bertkit.tokenization import BertTokenizer, WordPieceTrainer


def split_corpus(
    out_dir: Path, held_out_frac: float = 0.1, max_chars: int | None = None
) -> tuple[list[Path], list[str]]:
    """Train files (each asset minus its last 10% of lines) and held-out lines."""
    train_files, held = [], []
    for name in ("austen", "wiki"):
        lines = asset_path(name).read_text(encoding="utf-8").splitlines()
        if max_chars is not None:
            kept, n = [], 0
            for ln in lines:
                kept.append(ln)
                n += len(ln) + 1
                if n >= max_chars:
                    break
            lines = kept
        cut = int(len(lines) * (1 - held_out_frac))
        p = out_dir / f"{name}.train.txt"
        p.write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
        train_files.append(p)
        held += [ln for ln in lines[cut:] if ln.strip()]
    return train_files, held


def train_reference(files: list[Path], vocab_size: int, min_frequency: int, out: Path) -> float:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None, handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    )
    t0 = time.perf_counter()
    tok.train([str(f) for f in files], trainer)
    dt = time.perf_counter() - t0
    vocab = tok.get_vocab()
    out.write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])), encoding="utf-8")
    return dt


def train_ours(files: list[Path], vocab_size: int, min_frequency: int, out: Path) -> float:
    t0 = time.perf_counter()
    trainer = WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, lowercase=True, show_progress=False)
    trainer.train(files=files)
    dt = time.perf_counter() - t0
    trainer.save(out)
    return dt


def fertility(vocab_file: Path, lines: list[str]) -> float:
    tok = BertTokenizer(vocab_file, do_lower_case=True, model_max_length=10**9)
    n_tokens = sum(map(len, tok.encode_batch_ids(lines)))
    n_words = sum(len(ln.split()) for ln in lines)
    return n_tokens / n_words


def compare(vocab_size: int, min_frequency: int, max_chars: int | None = None) -> dict[str, float]:
    """Train both, return times, vocabulary sizes and held-out fertilities."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        files, held = split_corpus(d, max_chars=max_chars)
        t_ref = train_reference(files, vocab_size, min_frequency, d / "ref.txt")
        t_our = train_ours(files, vocab_size, min_frequency, d / "ours.txt")
        return {
            "time_ref": t_ref,
            "time_ours": t_our,
            "size_ref": len((d / "ref.txt").read_text(encoding="utf-8").splitlines()),
            "size_ours": len((d / "ours.txt").read_text(encoding="utf-8").splitlines()),
            "fert_ref": fertility(d / "ref.txt", held),
            "fert_ours": fertility(d / "ours.txt", held),
            "held_lines": len(held),
            "train_bytes": sum(f.stat().st_size for f in files),
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab-size", type=int, nargs="+", default=[8000, 16000])
    p.add_argument("--min-frequency", type=int, default=2)
    args = p.parse_args(argv)
    for vs in args.vocab_size:
        r = compare(vs, args.min_frequency)
        print(
            f"train-vocab austen+wiki ({r['train_bytes'] / 1e6:.1f} MB) vocab_size={vs} "
            f"min_frequency={args.min_frequency}: "
            f"bertkit {r['time_ours']:.1f}s (vocab {r['size_ours']})  "
            f"tokenizers WordPieceTrainer {r['time_ref']:.1f}s "
            f"(vocab {r['size_ref']})"
        )
        print(
            f"fertility on held-out ({r['held_lines']} lines): bertkit {r['fert_ours']:.4f} tokens/word  "
            f"tokenizers {r['fert_ref']:.4f} tokens/word  ratio {r['fert_ours'] / r['fert_ref']:.4f} "
            f"({(r['fert_ours'] / r['fert_ref'] - 1) * 100:+.2f}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
