"""`bertkit predict`: predictions with label names and scores, as JSONL."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit import _args as A

from .evaluate_cli import _overrides
from .finetune_cli import add_data_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, help="a `bertkit finetune` output folder, or a fine-tuned model id in the cache"
    )
    p.add_argument("--input", required=True, help="file in the task's format (labels optional)")
    p.add_argument("--output", default=None, help="JSONL file to write (default: stdout)")
    p.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    p.add_argument("--batch-size", type=A.positive_int, default=64)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=("auto", "fp32", "bf16", "int8"),
        help="inference precision (auto = bf16 where the CPU has AMX/AVX-512 BF16)",
    )
    A.add_device_flag(p)
    add_data_options(p, defaults=False)


def run(args: argparse.Namespace) -> int:
    from bertkit.hub import resolve_model_arg

    from .api import predict

    rows = predict(
        resolve_model_arg(args.model),
        args.input,
        output=args.output,
        batch_size=args.batch_size,
        dtype=args.dtype,
        device=args.device,
        progress=not args.no_progress,
        overwrite=args.overwrite,
        **_overrides(args),
    )
    if args.output is None:
        for r in rows:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
    else:
        print(f"wrote {len(rows)} predictions to {args.output}", file=sys.stderr)
    return 0
