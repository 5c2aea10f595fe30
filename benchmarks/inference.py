"""Inference throughput on all-MiniLM-L6-v2 over real polarity sentences, every path in one run.

Paths (real, non-padding tokens per second; medians over repeats; passes interleaved so shared-CPU
noise hits every path alike):

- bertkit sentence-embedding pipeline at dtype fp32 / bf16 / int8 / auto (tokenization included);
- bertkit BertModel fp32 vs transformers BertModel fp32 (SDPA) on the same padded batches of 32 in file order;
- sentence-transformers ``encode`` (sorts by length) in batches of 32, with the model cast to bf16: the anchor.

Quality gates printed alongside: bf16 and int8 sentence-embedding cosine against fp32 (min over the
sentences), fp32 max |diff| against transformers, and with ``--classifier DIR`` (a polarity fine-tune)
int8 vs fp32 accuracy on the polarity test split. Also the CPU flags and the load average.

    python benchmarks/inference.py [--sentences 512] [--repeats 5] [--compile] [--classifier DIR]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

import torch

from bertkit.assets import asset_path
from bertkit.inference import (
    cpu_flags,
    describe_cpu,
    prepare_for_inference,
    resolve_dtype,
    try_compile,
)
from bertkit.modeling import BertModel
from bertkit.pipelines import pipeline


def load(split: str, n: int | None = None) -> list[dict]:
    with open(asset_path(f"polarity-{split}"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return rows[:n] if n else rows


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--compile", action="store_true", help="also time torch.compile on the auto path")
    p.add_argument("--classifier", default=None, help="polarity classifier folder for the int8 accuracy gate")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import sentence_transformers
    import transformers

    folder = asset_path("minilm")
    texts = [r["text"] for r in load("train", args.sentences)]
    flags = cpu_flags()
    print(
        f"CPU flags: {describe_cpu(flags)}; auto -> {resolve_dtype('auto', flags)}; "
        f"{torch.get_num_threads()} threads; load average before: {os.getloadavg()[0]:.2f}"
    )

    # ---- sentence-embedding paths (tokenization included everywhere)
    # cut at the folder's limit, as sentence-transformers (the reference) does
    pipes = {
        d: pipeline("sentence-embedding", model=folder, dtype=d, truncation="cut")
        for d in ("fp32", "bf16", "int8", "auto")
    }
    st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    st_bf16 = sentence_transformers.SentenceTransformer(str(folder), device="cpu").to(torch.bfloat16)
    enc = pipes["fp32"].tokenizer(texts, truncation=True, max_length=pipes["fp32"].max_length)
    real_tokens = sum(len(x) for x in enc["input_ids"])

    ref_vecs = torch.from_numpy(st.encode(texts, batch_size=32, normalize_embeddings=True))
    vecs = {d: pipe(texts, return_tensors=True) for d, pipe in pipes.items()}
    st_bf16_vecs = torch.from_numpy(st_bf16.encode(texts, batch_size=32, normalize_embeddings=True).astype("float32"))

    def cos_min(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).min())

    compiled = None
    if args.compile:
        model = pipes["auto"].model
        fn, warm = try_compile(
            model,
            {
                "input_ids": torch.tensor([enc["input_ids"][0]]),
                "attention_mask": torch.tensor([enc["attention_mask"][0]]),
            },
        )
        print(
            f"torch.compile warm-up (one time, not in the figures below): "
            f"{'unavailable' if warm is None else f'{warm:.1f} s'}"
        )
        if warm is not None:
            compiled = pipeline("sentence-embedding", model=fn, tokenizer=pipes["auto"].tokenizer, truncation="cut")

    paths = {f"bertkit pipeline {d}": (lambda p=pipe: p(texts, return_tensors=True)) for d, pipe in pipes.items()}
    if compiled is not None:
        paths["bertkit pipeline auto+compile"] = lambda: compiled(texts, return_tensors=True)
    paths["sentence-transformers bf16 (anchor)"] = lambda: st_bf16.encode(texts, batch_size=32)
    paths["sentence-transformers fp32"] = lambda: st.encode(texts, batch_size=32)

    # ---- model level: same padded batches in file order, fp32
    ours = prepare_for_inference(BertModel.from_pretrained(folder), "fp32")
    ref = transformers.BertModel.from_pretrained(str(folder), attn_implementation="sdpa", dtype=torch.float32).eval()
    batches = []
    for i in range(0, len(texts), args.batch_size):
        b = pipes["fp32"].tokenizer(
            texts[i : i + args.batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt"
        )
        batches.append({k: b[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    with torch.inference_mode():
        worst = max(
            (ours(**b).last_hidden_state - ref(**b).last_hidden_state).abs()[b["attention_mask"].bool()].max().item()
            for b in batches[:4]
        )

    def forward_all(m: torch.nn.Module) -> None:
        with torch.inference_mode():
            for b in batches:
                m(**b)

    paths["bertkit BertModel fp32 (file-order batches)"] = lambda: forward_all(ours)
    paths["transformers BertModel fp32 sdpa (file-order batches)"] = lambda: forward_all(ref)

    for fn in paths.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in paths}
    names = list(paths)
    for r in range(args.repeats):
        for name in names if r % 2 == 0 else reversed(names):
            times[name].append(timed(paths[name]))
    med = {k: statistics.median(v) for k, v in times.items()}
    tps = {k: real_tokens / v for k, v in med.items()}

    print(f"{len(texts)} polarity sentences, {real_tokens:,} real tokens, median of {args.repeats} interleaved passes")
    for k in names:
        print(f"  {k:<55s} {tps[k]:>9,.0f} real tokens/s  ({med[k] * 1000:.0f} ms)")
    anchor = tps["sentence-transformers bf16 (anchor)"]
    auto = tps["bertkit pipeline auto"]
    print(f"ratio bertkit pipeline auto / sentence-transformers bf16: {auto / anchor:.2f}x (target >= 2x)")
    hf_fp32 = tps["transformers BertModel fp32 sdpa (file-order batches)"]
    ratio = tps["bertkit BertModel fp32 (file-order batches)"] / hf_fp32
    print(f"ratio bertkit fp32 / transformers fp32 (same batches): {ratio:.2f}x (target >= 2x)")
    print(
        f"ratio bertkit pipeline fp32 / transformers fp32: "
        f"{tps['bertkit pipeline fp32'] / tps['transformers BertModel fp32 sdpa (file-order batches)']:.2f}x"
    )
    print("quality gates:")
    print(
        f"  fp32 pipeline vs sentence-transformers fp32: min cosine {cos_min(vecs['fp32'], ref_vecs):.6f}; "
        f"BertModel max |diff| vs transformers on real tokens {worst:.1e}"
    )
    print(
        f"  bf16 vs fp32 sentence embeddings: min cosine {cos_min(vecs['bf16'], vecs['fp32']):.5f} (gate >= 0.999); "
        f"sentence-transformers bf16 vs fp32: {cos_min(st_bf16_vecs, ref_vecs):.5f}"
    )
    print(f"  int8 vs fp32 sentence embeddings: min cosine {cos_min(vecs['int8'], vecs['fp32']):.5f}")
    if args.classifier:
        rows = load("test")
        gold = [r["label"] for r in rows]
        acc = {}
        for d in ("fp32", "int8", "bf16"):
            clf = pipeline("text-classification", model=args.classifier, dtype=d, truncation="cut")
            acc[d] = sum(p["label"] == g for p, g in zip(clf([r["text"] for r in rows]), gold)) / len(rows)
        print(
            f"  polarity test accuracy ({len(rows)}): fp32 {acc['fp32']:.4f}, int8 {acc['int8']:.4f} "
            f"(gate: within 0.01), bf16 {acc['bf16']:.4f}"
        )
    else:
        print("  int8 classifier accuracy gate: pass --classifier DIR (tests/test_inference.py holds it)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
