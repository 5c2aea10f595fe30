"""Batch-encoding throughput: bertkit's pure-Python BertTokenizer vs transformers' BertTokenizerFast.

Both tokenizers encode the same real corpora (English: Austen + Wikipedia text; Chinese: news
sentences) in batches, in one process, several times; the script prints tokens/s (medians) and the
ratio bertkit / reference, for ids only (padding off) and with offsets. The reference is the Rust
`tokenizers` engine, which runs each batch on its own thread pool (all cores); bertkit runs on one
core. bertkit's word cache is warm after the first pass, so a fresh tokenizer's first (cold) pass is
printed too.

    python benchmarks/tokenizer.py [--repeats 5] [--batch-size 1000] [--max-texts 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bertkit.assets import asset_path
from bertkit.tokenization import BertTokenizer


def load_corpora(max_texts: int) -> dict[str, tuple[str, list[str]]]:
    def lines(name: str, n: int) -> list[str]:
        with open(asset_path(name), encoding="utf-8") as f:
            out = [ln.strip() for ln in f if ln.strip()]
        return out[:n]

    en = lines("austen", max_texts // 2) + lines("wiki", max_texts // 2)
    zh = lines("news-zh", max_texts)
    return {"en": ("vocab-uncased", en), "zh": ("vocab-chinese", zh)}


def reference(vocab_path, lower: bool):
    from transformers import BertTokenizerFast

    with open(vocab_path, encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    # transformers 5 takes vocab= (vocab_file= is ignored there)
    return BertTokenizerFast(vocab=vocab, do_lower_case=lower, tokenize_chinese_chars=True, strip_accents=None)


def run_once(tok, texts: list[str], batch_size: int, offsets: bool) -> tuple[float, int]:
    n_tokens = 0
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch_size):
        enc = tok(texts[i : i + batch_size], return_offsets_mapping=offsets)
        n_tokens += sum(map(len, enc["input_ids"]))
    return time.perf_counter() - t0, n_tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--max-texts", type=int, default=20000)
    args = p.parse_args(argv)
    import tokenizers

    print(
        f"cpus={os.cpu_count()} python={sys.version.split()[0]} tokenizers={tokenizers.__version__} "
        f"RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', 'unset')} repeats={args.repeats} "
        f"batch_size={args.batch_size} loadavg={os.getloadavg()[0]:.1f} (shared machine: a busy core slows "
        "the reference's 2-thread pool more than single-threaded bertkit)"
    )
    for lang, (vocab, texts) in load_corpora(args.max_texts).items():
        path = asset_path(vocab)
        ours = BertTokenizer(path, do_lower_case=True, model_max_length=10**9)
        ref = reference(path, True)
        for offsets in (False, True):
            mode = "offsets" if offsets else "ids"
            times: dict[str, list[float]] = {"bertkit": [], "reference": []}
            # a fresh tokenizer's first pass: the word cache starts empty
            cold_dt, n_tok = run_once(
                BertTokenizer(path, do_lower_case=True, model_max_length=10**9), texts, args.batch_size, offsets
            )
            for r in range(args.repeats):
                # alternate so that noise from the other tenants hits both sides alike
                for name, tok in (("bertkit", ours), ("reference", ref)):
                    dt, n_tok = run_once(tok, texts, args.batch_size, offsets)
                    times[name].append(dt)
            med = {k: statistics.median(v) for k, v in times.items()}
            ours_tps, ref_tps = n_tok / med["bertkit"], n_tok / med["reference"]
            print(
                f"{lang} {mode:7s} texts={len(texts)} tokens={n_tok}  bertkit {ours_tps:,.0f} tok/s  "
                f"BertTokenizerFast {ref_tps:,.0f} tok/s  ratio {ours_tps / ref_tps:.2f}x  "
                f"(bertkit cold first pass {n_tok / cold_dt:,.0f} tok/s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
