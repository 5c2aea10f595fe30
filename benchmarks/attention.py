"""bf16 inference attention on this CPU: bertkit's two batched GEMMs against SDPA's flash kernel, by length.

MiniLM's shape (12 heads of 32), a padding mask on half the sequences, and about 900 tokens per batch
at every length (a batch of 32 sentences of 28 tokens, as the polarity benchmark's). Both kernels run
in this process, their repeats interleaved; each line is the median over repeats. The last line says where this
CPU's limit (``bertkit._cpu.gemm_attention_max_len``, picked from its flags) puts the switch,
so a new kind of CPU shows whether the limit fits it.

    python benchmarks/attention.py [--threads 1] [--repeats 7] [--lengths 16 28 40 48 56 64 96 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from bertkit._cpu import cpu_flags, describe_cpu, gemm_attention_max_len
from bertkit.modeling.layers import _batched_gemm_attention


def sdpa_attention(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA on the same (B, N, 3, h, d) input, to the same (B * N, h * d) output."""
    B, N, _, h, d = x.shape
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B * N, h * d)


def interleaved_medians(fns: list, repeats: int, inner: int = 5) -> list[float]:
    """Median ms per call of each function, their repeats alternating so that drift hits all alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, t in zip(fns, times):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            t.append((time.perf_counter() - t0) / inner * 1e3)
    return [statistics.median(t) for t in times]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 28, 40, 48, 56, 64, 96, 128])
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    flags = cpu_flags()
    limit = gemm_attention_max_len(flags)
    print(f"CPU flags: {describe_cpu(flags)}; {args.threads} threads; load average before: {os.getloadavg()[0]:.2f}")
    print(f"  {'length':>6s} {'batch':>5s} {'GEMMs ms':>9s} {'SDPA ms':>8s} {'SDPA / GEMMs':>13s}  max |diff|")
    faster_sdpa = []
    torch.manual_seed(0)
    with torch.no_grad():
        for n in args.lengths:
            b = max(1, 900 // n)
            x = torch.randn(b, n, 3, 12, 32).bfloat16()
            mask = torch.ones(b, 1, 1, n, dtype=torch.bool)
            mask[: b // 2, ..., n - n // 4 :] = False  # half the batch padded by a quarter
            diff = (_batched_gemm_attention(x, mask).float() - sdpa_attention(x, mask).float()).abs().max()
            gemm_ms, sdpa_ms = interleaved_medians(
                [lambda: _batched_gemm_attention(x, mask), lambda: sdpa_attention(x, mask)], args.repeats
            )
            if sdpa_ms < gemm_ms:
                faster_sdpa.append(n)
            print(f"  {n:>6d} {b:>5d} {gemm_ms:>9.2f} {sdpa_ms:>8.2f} {sdpa_ms / gemm_ms:>12.2f}x  {diff:.4f}")
    print(
        f"this CPU's limit: the GEMMs up to {limit} keys, SDPA above; SDPA was faster here at "
        f"{', '.join(map(str, faster_sdpa)) or 'no length'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
