"""What this CPU can do at best: matmul throughput and memory bandwidth, and the ceilings they set.

    python benchmarks/roofline.py [--threads N] [--repeats 5]

Measured here, in one process with the thread count the other benchmarks use:

- matmul GFLOP/s in fp32 and bf16 at the shapes of a MiniLM forward over a batch of ~1,000 tokens
  (hidden 384, intermediate 1,536) and of a large square product;
- weight-reading bandwidth (GB/s): a batch-1 product with a 50,257 x 512 fp32 / bf16 matrix, which
  is what every step of GPT-2 decoding does, at batch 1 and 8, written three ways (``linear``, a
  product with a transposed copy, and ``(W @ x.T).T``), and a plain sum over 256 MB.

From these it prints two ceilings that no implementation on this machine can pass:

- MiniLM sentence embeddings (tokens/s): matmul FLOPs per token (linear layers plus attention at the
  polarity sentences' mean length) over the matmul rate at MiniLM's shapes;
- GPT-2 greedy decoding at batch 1 (tokens/s): bytes of weights read per step over the fastest
  form's bandwidth.

A benchmark's "Nx faster than the reference" target is only reachable when N x the reference's
figure stays under the ceiling; the other benchmarks' figures can be set against these.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from bertkit.inference import cpu_flags


def median_seconds(fn, repeats: int, inner: int) -> float:
    fn()  # warm-up: kernel selection, allocation
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def gemm_gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    inner = max(1, int(2e9 / (2 * m * k * n)))  # about 2 GFLOP per timed repeat
    return 2 * m * k * n / median_seconds(lambda: torch.matmul(a, b), repeats, inner) / 1e9


def gemv_gbps(rows: int, cols: int, dtype: torch.dtype, repeats: int, form: str = "linear", batch: int = 1) -> float:
    """(batch, cols) x a (rows, cols) weight, written as ``linear(x, W)``, as ``x @ W_t`` with a
    (cols, rows) copy, or as ``(W @ x.T).T``: GB/s of weight read."""
    w, x = torch.randn(rows, cols).to(dtype), torch.randn(batch, cols).to(dtype)
    wt = w.t().contiguous()
    fn = {
        "linear": lambda: torch.nn.functional.linear(x, w),
        "x @ W_t": lambda: x @ wt,
        "(W @ x.T).T": lambda: (w @ x.T).T,
    }[form]
    return w.numel() * w.element_size() / median_seconds(fn, repeats, 20) / 1e9


def sum_gbps(repeats: int) -> float:
    t = torch.ones(64 * 1024 * 1024)  # 256 MB of fp32
    return t.numel() * 4 / median_seconds(lambda: t.sum(), repeats, 3) / 1e9


def minilm_flops_per_token(mean_len: float, hidden: int = 384, inter: int = 1536, layers: int = 6) -> float:
    """Matmul FLOPs per token of a BERT forward: QKV, output, FFN in and out, plus QK^T and AV."""
    linear = 4 * hidden * hidden + 2 * hidden * inter
    attention = 2 * mean_len * hidden
    return 2 * layers * (linear + attention)


def gpt2_bytes_per_step(vocab: int, n_embd: int, n_layer: int, bytes_per: int) -> float:
    """Bytes of weights a batch-1 decoding step reads: every layer's projections and the LM head."""
    per_layer = 12 * n_embd * n_embd  # c_attn 3H^2, c_proj H^2, c_fc 4H^2, mlp c_proj 4H^2
    return bytes_per * (n_layer * per_layer + vocab * n_embd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--mean-len",
        type=float,
        default=27.7,
        help="mean real tokens per sentence (polarity: 14,161 tokens / 512 sentences)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    flags = [f for f, on in cpu_flags().items() if on]
    print(
        f"cpu flags: {' '.join(flags) or 'none'}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}",
        flush=True,
    )
    rates: dict[str, float] = {}
    with torch.inference_mode():
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            shapes = {"minilm": [(1024, 384, 1536), (1024, 1536, 384), (1024, 384, 384)], "large": [(2048, 2048, 2048)]}
            for label, dims in shapes.items():
                flops = sum(2 * m * k * n for m, k, n in dims)
                seconds = sum(2 * m * k * n / (gemm_gflops(m, k, n, dtype, args.repeats) * 1e9) for m, k, n in dims)
                rates[f"{name} {label}"] = flops / seconds / 1e9
                print(
                    f"matmul {name:4s} {label:6s} {rates[f'{name} {label}']:8.1f} GFLOP/s  "
                    f"({', '.join(f'{m}x{k}x{n}' for m, k, n in dims)})",
                    flush=True,
                )
        bw = {}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            for batch in (1, 8):
                forms = {
                    form: gemv_gbps(50257, 512, dtype, args.repeats, form, batch)
                    for form in ("linear", "x @ W_t", "(W @ x.T).T")
                }
                if batch == 1:
                    bw[name] = max(forms.values())
                print(
                    f"batch-{batch} product with a 50257x512 {name} matrix W, GB/s of weight read: "
                    + ", ".join(f"{form} {v:.1f}" for form, v in forms.items()),
                    flush=True,
                )
        print(f"sum over 256 MB fp32: {sum_gbps(args.repeats):6.1f} GB/s", flush=True)

    per_token = minilm_flops_per_token(args.mean_len)
    print(
        f"ceiling, MiniLM sentence embeddings ({per_token / 1e6:.1f} MFLOP per token at mean length "
        f"{args.mean_len}): fp32 {rates['fp32 minilm'] * 1e9 / per_token:,.0f} tokens/s, "
        f"bf16 {rates['bf16 minilm'] * 1e9 / per_token:,.0f} tokens/s",
        flush=True,
    )
    for label, (vocab, embd, layers) in {
        "gpt2 6x512, vocab 50257": (50257, 512, 6),
        "gpt2-zh 4x256, vocab 21128": (21128, 256, 4),
    }.items():
        for name, nbytes in (("fp32", 4), ("bf16", 2)):
            step = gpt2_bytes_per_step(vocab, embd, layers, nbytes)
            print(
                f"ceiling, {label} batch-1 greedy decoding, {name} weights ({step / 1e6:.0f} MB per step): "
                f"{bw[name] * 1e9 / step:,.0f} tokens/s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
