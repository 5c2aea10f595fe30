"""One int8 projection against the bf16 one, at MiniLM's shapes: where the int8 path's time goes.

For each encoder projection of all-MiniLM-L6-v2 (fused q/k/v 384->1152, attention output 384->384,
feed-forward up 384->1536 and down 1536->384) and a token count T (a batch of 32 polarity sentences
unpadded is about 1,200 tokens), times, on one thread:

- ``bf16``: the prepared bf16 Linear (oneDNN on the weight reordered once, bf16 input as in a bf16 model);
- ``int8 onednn``: the whole :class:`Int8Linear` (fp32 input, per-token quantization, oneDNN's u8 x s8
  product, rescaling and bias), as prepare_for_inference(dtype="int8") runs it where torch has the kernel;
- ``int8 int_mm``: the same module on its ``torch._int_mm`` fallback.

Medians of process CPU time (not wall time: a shared, busy CPU preempts us), passes interleaved.

    python benchmarks/int8_linear.py [--tokens 1200 4096] [--repeats 7]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

from bertkit.inference import describe_cpu
from bertkit.inference.fused import prepack_linears
from bertkit.inference.int8 import Int8Linear, onednn_int8_available

SHAPES = (("qkv", 384, 1152), ("attn-out", 384, 384), ("ffn-up", 384, 1536), ("ffn-down", 1536, 384))


def cpu_ms(fn, repeats: int, number: int = 5) -> list[float]:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(number):
            fn()
        out.append((time.process_time() - t0) / number * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1200, 4096])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"CPU flags: {describe_cpu()}; oneDNN u8 x s8 kernel: {onednn_int8_available()}; 1 thread")
    for tokens in args.tokens:
        for name, n_in, n_out in SHAPES:
            lin = nn.Linear(n_in, n_out)
            x = torch.randn(tokens, n_in) * torch.linspace(0.2, 3, n_in)
            q = Int8Linear(lin, torch.rand(n_in) + 0.5)
            fallback = copy.copy(q)  # shares the buffers; only the kernel differs
            object.__setattr__(fallback, "kernel", "int_mm")
            bf16 = nn.Sequential(copy.deepcopy(lin).bfloat16()).eval()
            prepack_linears(bf16)
            xb = x.bfloat16()
            paths = {"bf16": lambda: bf16(xb), "int8 onednn": lambda: q(x), "int8 int_mm": lambda: fallback(x)}
            runs: dict[str, list[float]] = {k: [] for k in paths}
            with torch.inference_mode():
                for _ in range(args.repeats):
                    for k, fn in paths.items():
                        runs[k] += cpu_ms(fn, 1)
            med = {k: statistics.median(v) for k, v in runs.items()}
            cells = "  ".join(f"{k} {v:6.2f} ms" for k, v in med.items())
            onednn, int_mm = med["int8 onednn"] / med["bf16"], med["int8 int_mm"] / med["bf16"]
            ratios = f"onednn/bf16 {onednn:.2f}x  int_mm/bf16 {int_mm:.2f}x"
            print(f"T={tokens:5d} {name:8s} {n_in:4d}->{n_out:<4d}  {cells}  {ratios}", flush=True)


if __name__ == "__main__":
    main()
