"""bertkit's sentence embeddings against sentence-transformers on a CUDA GPU, in one interleaved run.

all-MiniLM-L6-v2 (the local asset) embeds the same real polarity sentences on every line, the same batch
size, tokenization inside the timed pass, the GPU synchronised before each clock read. Lines:

- bertkit ``pipeline("sentence-embedding", device="cuda")`` at fp32 and bf16;
- sentence-transformers on the GPU at fp32, and cast to bf16 and to fp16.

The passes of all lines alternate, and each line reports the median over repeats: real tokens per
second, milliseconds per pass, and the min cosine against sentence-transformers fp32. Prints the ratio
of bertkit bf16 to the fastest sentence-transformers line. Needs CUDA; says so and stops without it.

    python benchmarks/engines_gpu.py [--sentences 4096] [--batch-size 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from typing import Callable

import torch

from bertkit.assets import asset_path
from bertkit.pipelines import pipeline

Embed = Callable[[list[str]], torch.Tensor]


def load_texts(n: int) -> list[str]:
    with open(asset_path("polarity-train"), newline="", encoding="utf-8") as f:
        texts = [r["text"] for r in csv.DictReader(f)]
    return (texts * (n // len(texts) + 1))[:n]


def bertkit_line(dtype: str, batch_size: int) -> Embed:
    pipe = pipeline(
        "sentence-embedding",
        model=asset_path("minilm"),
        device="cuda",
        dtype=dtype,
        batch_size=batch_size,
        truncation="cut",
        max_batch_tokens=None,
    )
    return lambda t: pipe(t, return_tensors=True).float().cpu()


def st_line(dtype: torch.dtype, batch_size: int) -> Embed | None:
    try:
        import sentence_transformers
    except ImportError:
        return None
    st = sentence_transformers.SentenceTransformer(
        str(asset_path("minilm")), device="cuda", model_kwargs={"dtype": torch.float32}
    ).to(dtype)
    return lambda t: (
        torch.as_tensor(
            st.encode(
                t, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=False, convert_to_tensor=True
            )
        )
        .float()
        .cpu()
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure")
        return 0
    texts = load_texts(args.sentences)
    lines: dict[str, Embed] = {
        "bertkit fp32": bertkit_line("fp32", args.batch_size),
        "bertkit bf16": bertkit_line("bf16", args.batch_size),
    }
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        line = st_line(dt, args.batch_size)
        if line is None:
            print("sentence-transformers is not installed: its lines are left out")
            break
        lines[f"sentence-transformers {name}"] = line
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    real = sum(min(len(ids), 256) for ids in tok(texts, truncation=True, max_length=256)["input_ids"])
    vectors = {name: embed(texts) for name, embed in lines.items()}  # warm-up, and the vectors compared
    times: dict[str, list[float]] = {name: [] for name in lines}
    for r in range(args.repeats):
        order = list(lines) if r % 2 == 0 else list(reversed(lines))
        for name in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            lines[name](texts)
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{len(texts)} polarity sentences, {real:,} real tokens, batch {args.batch_size}, median of {args.repeats}")
    ref = vectors.get("sentence-transformers fp32", vectors["bertkit fp32"])
    print(f"  {'line':32s} {'real tokens/s':>14s} {'ms/pass':>9s} {'min cos':>9s}")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in sorted(med, key=med.get):
        cos = torch.nn.functional.cosine_similarity(vectors[name], ref, dim=-1).min().item()
        print(f"  {name:32s} {real / med[name]:14,.0f} {1000 * med[name]:9.1f} {cos:9.5f}")
    st = [n for n in med if n.startswith("sentence-transformers")]
    if st:
        best = min(st, key=med.get)
        print(f"ratio bertkit bf16 / {best}: {med[best] / med['bertkit bf16']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
