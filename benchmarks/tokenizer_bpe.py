"""Batch-encoding throughput of bertkit's byte-level BPE and Unigram tokenizers against the Rust
`tokenizers` engine, on the same texts in one process.

- BPE: GPT-2's real ranks (the ``gpt2-bpe`` asset), RoBERTa's special tokens; English (Austen +
  Wikipedia) and Chinese news text.
- Unigram: sentencepiece's ``kyoto_ja_unigram_8000`` model (Precompiled charsmap), read by bertkit
  from the ``.model`` and by the reference through transformers' converter; the same texts.

Each side encodes the texts in batches, several times, alternating; the script prints tokens/s from
the medians and the ratio bertkit / reference, for ids only and with offsets. The reference runs each
batch on its own thread pool (all cores); bertkit runs on one core. bertkit's piece cache is warm after
the first pass, so a fresh tokenizer's first (cold) pass is printed too.

    python benchmarks/tokenizer_bpe.py [--repeats 5] [--batch-size 1000] [--max-texts 20000]
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--max-texts", type=int, default=20000)
    args = p.parse_args(argv)
    import tokenizers

    flags = cpu_flags()
    print(
        f"cpus={os.cpu_count()} cpu=[{describe_cpu(flags)}] python={sys.version.split()[0]} "
        f"tokenizers={tokenizers.__version__} RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', 'unset')} "
        f"repeats={args.repeats} batch_size={args.batch_size} loadavg={os.getloadavg()[0]:.1f} "
        "(shared machine: figures are noisy)"
    )
    corpora = load_texts(args.max_texts)
    for model, (make, ref) in (("bpe", bpe_pair()), ("unigram", unigram_pair())):
        ours = make()
        for lang, texts in corpora.items():
            for offsets in (False, True):
                mode = "offsets" if offsets else "ids"
                cold_dt, n_tok = run_once(make(), texts, args.batch_size, offsets, False)
                times: dict[str, list[float]] = {"bertkit": [], "reference": []}
                for _ in range(args.repeats):
                    # alternate so that noise from the other tenants hits both sides alike
                    for name, tok in (("bertkit", ours), ("reference", ref)):
                        dt, n = run_once(tok, texts, args.batch_size, offsets, name == "reference")
                        times[name].append(dt)
                med = {k: statistics.median(v) for k, v in times.items()}
                ours_tps, ref_tps = n_tok / med["bertkit"], n_tok / med["reference"]
                print(
                    f"{model:7s} {lang} {mode:7s} texts={len(texts)} tokens={n_tok}  bertkit {ours_tps:,.0f} tok/s  "
                    f"tokenizers {ref_tps:,.0f} tok/s  ratio {ours_tps / ref_tps:.2f}x  "
                    f"(bertkit cold first pass {n_tok / cold_dt:,.0f} tok/s)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
