"""Inference throughput: bertkit BertModel vs transformers BertModel (SDPA, fp32) on all-MiniLM-L6-v2.

Both models run the real MiniLM checkpoint in one process over the same real, variable-length
sentences (Pang & Lee polarity, file order, so every batch is padded to its longest sentence), in
batches of 32, under torch.inference_mode(). Passes alternate between the two models; the script
prints real (non-padding) tokens per second as medians over the repeats, and the ratio
bertkit / transformers. It also checks that both give the same embeddings on real tokens.

    python benchmarks/inference.py [--repeats 7] [--batches 16] [--batch-size 32] [--threads N]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

import torch

from bertkit.assets import asset_path
from bertkit.modeling import BertModel


def load_sentences(n: int) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    if len(texts) < n:
        raise SystemExit(f"polarity-train has {len(texts)} sentences, {n} requested")
    return texts[:n]


def tokenize(texts: list[str], batch_size: int) -> tuple[list[dict[str, torch.Tensor]], str]:
    """Padded batches. bertkit's tokenizer when available, else transformers' (same ids)."""
    folder = asset_path("minilm")
    try:
        from bertkit.tokenization import BertTokenizer

        tok, name = BertTokenizer.from_pretrained(folder), "bertkit"
    except Exception:  # the tokenizer is built in parallel; the benchmark must not depend on it
        from transformers import AutoTokenizer

        tok, name = AutoTokenizer.from_pretrained(str(folder)), "transformers"
    batches = []
    for i in range(0, len(texts), batch_size):
        enc = tok(texts[i:i + batch_size], padding=True, truncation=True, max_length=512, return_tensors="pt")
        batches.append({k: torch.as_tensor(enc[k]) for k in ("input_ids", "attention_mask", "token_type_ids")})
    return batches, name


def run_pass(model, batches) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            model(**b)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--min-ratio", type=float, default=None, help="exit 1 when the ratio is below this")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    folder = asset_path("minilm")
    batches, tok_name = tokenize(load_sentences(args.batches * args.batch_size), args.batch_size)
    real_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    all_tokens = sum(b["input_ids"].numel() for b in batches)

    ours = BertModel.from_pretrained(folder).eval()
    ref = transformers.BertModel.from_pretrained(str(folder), attn_implementation="sdpa", dtype=torch.float32).eval()

    with torch.inference_mode():  # same answers on real tokens before timing anything
        worst = 0.0
        for b in batches[:4]:
            a, r = ours(**b).last_hidden_state, ref(**b).last_hidden_state
            worst = max(worst, (a - r).abs()[b["attention_mask"].bool()].max().item())
    if worst > 1e-4:
        print(f"outputs differ: max |bertkit - transformers| = {worst:.2e}", file=sys.stderr)
        return 1

    run_pass(ours, batches[:2])
    run_pass(ref, batches[:2])
    t_ours, t_ref = [], []
    for i in range(args.repeats):
        order = [(ours, t_ours), (ref, t_ref)] if i % 2 == 0 else [(ref, t_ref), (ours, t_ours)]
        for model, times in order:
            times.append(run_pass(model, batches))
    m_ours, m_ref = statistics.median(t_ours), statistics.median(t_ref)
    ratio = m_ref / m_ours
    print(f"inference MiniLM-L6 fp32, {len(batches)} batches x {args.batch_size} real polarity sentences, "
          f"{real_tokens:,} real tokens ({real_tokens / all_tokens:.0%} of {all_tokens:,} incl. padding), "
          f"{torch.get_num_threads()} threads, tokenizer: {tok_name}, median of {args.repeats}; "
          f"max |diff| on real tokens {worst:.1e}")
    print(f"bertkit                 {real_tokens / m_ours:>10,.0f} real tokens/s  ({m_ours * 1000:.0f} ms/pass)")
    print(f"transformers (sdpa)     {real_tokens / m_ref:>10,.0f} real tokens/s  ({m_ref * 1000:.0f} ms/pass)")
    print(f"ratio bertkit/transformers: {ratio:.2f}x")
    if args.min_ratio is not None and ratio < args.min_ratio:
        print(f"ratio {ratio:.2f} is below the required {args.min_ratio:.2f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
