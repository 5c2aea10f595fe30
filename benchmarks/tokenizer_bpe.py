"""Batch-encoding throughput of bertkit's byte-level BPE and Unigram tokenizers against the Rust
`tokenizers` engine, on the same texts in one process.

- BPE: GPT-2's real ranks (the ``gpt2-bpe`` asset), RoBERTa's special tokens; English (Austen +
  Wikipedia) and Chinese news text.
- Unigram: sentencepiece's ``kyoto_ja_unigram_8000`` model (Precompiled charsmap), read by bertkit
  from the ``.model`` and by the reference through transformers' converter; the same texts.

Both sides read the same files with the same special tokens and post-processor (bertkit's BPE reads
the reference's own tokenizer.json). Each side encodes the texts in batches, several times,
alternating; the script prints tokens/s from the medians and the ratio bertkit / reference, for ids
only and with offsets (the reference's ``encode_batch`` always computes offsets, and leaves them in
Rust). Beside it, transformers' ``PreTrainedTokenizerFast`` over the same Rust tokenizer, called as
bertkit is called (``tok(batch, return_offsets_mapping=...)``, Python lists out): the comparison
``benchmarks/tokenizer.py`` makes for WordPiece against ``BertTokenizerFast``. The reference runs
each batch on its own thread pool (all cores, or RAYON_NUM_THREADS); bertkit runs on one core;
``--one-thread`` also times the reference on one thread. bertkit's piece cache is warm after the first
pass, so a fresh tokenizer's first (cold) pass is printed too, with its ratio to the reference.

    python benchmarks/tokenizer_bpe.py [--repeats 5] [--batch-size 1000] [--max-texts 20000]
        [--models bpe,unigram] [--langs en,zh] [--one-thread]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bertkit._cpu import cpu_flags, describe_cpu
from bertkit.assets import asset_path
from bertkit.tokenization import RobertaTokenizer, UnigramTokenizer
from bertkit.tokenization.byte_level import gpt2_pattern


def load_texts(max_texts: int) -> dict[str, list[str]]:
    def lines(name: str, n: int) -> list[str]:
        with open(asset_path(name), encoding="utf-8") as f:
            out = [ln.strip() for ln in f if ln.strip()]
        return out[:n]

    return {"en": lines("austen", max_texts // 2) + lines("wiki", max_texts // 2), "zh": lines("news-zh", max_texts)}


def bpe_pair():
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, processors

    folder = asset_path("gpt2-bpe")
    ref = tokenizers.Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = decoders.ByteLevel()
    ref.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    sep, cls = ("</s>", ref.token_to_id("</s>")), ("<s>", ref.token_to_id("<s>"))
    ref.post_processor = processors.RobertaProcessing(sep, cls, trim_offsets=True, add_prefix_space=False)

    # bertkit reads the reference's own tokenizer.json: the same vocabulary, added tokens and post-processor
    # the pattern for text beyond U+FFFF is compiled once a process, on first need: here, outside the timings
    gpt2_pattern()
    tmp = tempfile.TemporaryDirectory(prefix="bertkit-bench-")  # removed when the closure below goes
    ref.save(str(Path(tmp.name) / "tokenizer.json"))

    def ours():
        return RobertaTokenizer.from_pretrained(tmp.name, model_max_length=10**9)

    return ours, ref


def unigram_pair():
    from transformers.convert_slow_tokenizer import SpmConverter

    path = asset_path("spm-kyoto-unigram")

    class Slow:
        vocab_file = str(path)

    ref = SpmConverter(Slow()).converted()
    return (lambda: UnigramTokenizer.from_pretrained(path, model_max_length=10**9)), ref


def fast_tokenizer(ref):
    """transformers' fast tokenizer over the reference engine itself: the call users make."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=ref, model_max_length=10**9)


def run_once(tok, texts: list[str], batch_size: int, offsets: bool, is_ref: bool) -> tuple[float, int]:
    n_tokens = 0
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch_size):
        batch = texts[i : i + batch_size]
        if is_ref:
            n_tokens += sum(len(e.ids) for e in tok.encode_batch(batch))  # offsets are always computed
        else:
            n_tokens += sum(map(len, tok(batch, return_offsets_mapping=offsets)["input_ids"]))
    return time.perf_counter() - t0, n_tokens


def ref_once(ref, texts: list[str], batch_size: int, one_thread: bool) -> float:
    """One reference pass; with ``one_thread``, `tokenizers`' batch runs on the calling thread
    (TOKENIZERS_PARALLELISM=false, which it reads at each call)."""
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    if one_thread:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        return run_once(ref, texts, batch_size, True, True)[0]
    finally:
        if one_thread:
            if saved is None:
                del os.environ["TOKENIZERS_PARALLELISM"]
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = saved


def measure(make, ours, ref, texts: list[str], offsets: bool, args: argparse.Namespace) -> str:
    """One benchmark line: medians of alternating passes, the ratios, and a fresh tokenizer's cold pass."""
    cold_dt, n_tok = run_once(make(), texts, args.batch_size, offsets, False)
    times: dict[str, list[float]] = {"bertkit": [], "reference": [], "fast": [], "one thread": []}
    fast = fast_tokenizer(ref)
    for _ in range(args.repeats):
        # alternate so that noise from the other tenants hits every side alike
        times["bertkit"].append(run_once(ours, texts, args.batch_size, offsets, False)[0])
        times["reference"].append(ref_once(ref, texts, args.batch_size, False))
        times["fast"].append(run_once(fast, texts, args.batch_size, offsets, False)[0])
        if args.one_thread:
            times["one thread"].append(ref_once(ref, texts, args.batch_size, True))
    tps = {k: n_tok / statistics.median(v) for k, v in times.items() if v}
    cold = n_tok / cold_dt
    line = (
        f"texts={len(texts)} tokens={n_tok}  bertkit {tps['bertkit']:,.0f} tok/s  tokenizers {tps['reference']:,.0f} "
        f"tok/s  ratio {tps['bertkit'] / tps['reference']:.2f}x  (cold first pass {cold:,.0f} tok/s, "
        f"{cold / tps['reference']:.2f}x)  [transformers fast, same call: {tps['fast']:,.0f} tok/s, "
        f"{tps['bertkit'] / tps['fast']:.2f}x]"
    )
    if args.one_thread:
        line += f"  [tokenizers 1 thread {tps['one thread']:,.0f} tok/s: {tps['bertkit'] / tps['one thread']:.2f}x]"
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--max-texts", type=int, default=20000)
    p.add_argument("--models", default="bpe,unigram", help="comma-separated: bpe, unigram")
    p.add_argument("--langs", default="en,zh", help="comma-separated: en, zh")
    p.add_argument("--one-thread", action="store_true", help="also time tokenizers with TOKENIZERS_PARALLELISM=false")
    args = p.parse_args(argv)
    import tokenizers

    flags = cpu_flags()
    threads = os.environ.get("RAYON_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
    print(
        f"cpus={os.cpu_count()} cpu=[{describe_cpu(flags)}] python={sys.version.split()[0]} "
        f"tokenizers={tokenizers.__version__} tokenizers_threads={threads} (RAYON_NUM_THREADS="
        f"{os.environ.get('RAYON_NUM_THREADS', 'unset')}, TOKENIZERS_PARALLELISM="
        f"{os.environ.get('TOKENIZERS_PARALLELISM', 'unset')}) bertkit_threads=1 repeats={args.repeats} "
        f"batch_size={args.batch_size} loadavg={os.getloadavg()[0]:.1f} (shared machine: figures are noisy)"
    )
    corpora = load_texts(args.max_texts)
    pairs = {"bpe": bpe_pair, "unigram": unigram_pair}
    for model in args.models.split(","):
        make, ref = pairs[model]()
        ours = make()
        for lang in args.langs.split(","):
            for offsets in (False, True):
                line = measure(make, ours, ref, corpora[lang], offsets, args)
                print(f"{model:7s} {lang} {'offsets' if offsets else 'ids':7s} {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
