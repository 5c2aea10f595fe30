"""`bertkit fill-mask --model DIR "text with [MASK]" [--top-k 5]`."""

from __future__ import annotations

import argparse

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, help="masked-LM checkpoint folder (config, weights, vocab.txt) or cached model id"
    )
    p.add_argument("text", nargs="+", help="text(s) containing [MASK]")
    p.add_argument("--top-k", type=A.positive_int, default=5, help="candidates per [MASK] (default: 5)")
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=("auto", "fp32", "bf16", "int8"),
        help="inference precision (auto = bf16 where the CPU has AMX/AVX-512 BF16)",
    )
    A.add_device_flag(p)


def run(args: argparse.Namespace) -> int:
    from bertkit.hub import resolve_model_arg

    from .pipelines import pipeline

    # The pipeline checks that the vocabulary fits the model.
    fill = pipeline("fill-mask", model=resolve_model_arg(args.model), dtype=args.dtype, device=args.device)
    for text in args.text:
        print(text)
        res = fill(text, top_k=args.top_k)
        groups = res if res and isinstance(res[0], list) else [res]
        for m, rows in enumerate(groups):
            if len(groups) > 1:
                print(f"  mask {m + 1}:")
            for r in rows:
                print(f"  {r['score']:.4f}  {r['token_str']:<15s} {r['sequence']}")
    return 0
