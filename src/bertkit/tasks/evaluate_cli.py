"""`bertkit evaluate`: metrics of a fine-tuned model on a labelled file."""

from __future__ import annotations

import argparse

from bertkit import _args as A

from .finetune_cli import add_data_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, help="a `bertkit finetune` output folder, or a fine-tuned model id in the cache"
    )
    p.add_argument("--data", required=True, help="labelled file in the task's format")
    p.add_argument("--batch-size", type=A.positive_int, default=64)
    p.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    p.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=("auto", "fp32", "bf16", "int8"),
        help="inference precision (auto = bf16 where the CPU has AMX/AVX-512 BF16)",
    )
    A.add_device_flag(p)
    add_data_options(p, defaults=False)


def _overrides(args: argparse.Namespace) -> dict:
    keys = (
        "text_column",
        "text_pair_column",
        "label_column",
        "label_separator",
        "max_length",
        "doc_stride",
        "max_answer_length",
        "n_best_size",
    )
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def run(args: argparse.Namespace) -> int:
    from bertkit._folders import check_output_file, refuse_inside_input
    from bertkit.hub import resolve_model_arg

    from .api import evaluate

    model = resolve_model_arg(args.model)  # a model id: its cache snapshot
    if args.output:
        refuse_inside_input(args.output, model, args.data)
        check_output_file(args.output, args.overwrite)  # before the evaluation, not after it
    metrics = evaluate(
        model,
        args.data,
        batch_size=args.batch_size,
        dtype=args.dtype,
        device=args.device,
        progress=not args.no_progress,
        **_overrides(args),
    )
    for k, v in metrics.items():
        print(f"{k}\t{v:.4f}")
    if args.output:
        from bertkit._io import atomic_write_json

        atomic_write_json(args.output, metrics)
    return 0
