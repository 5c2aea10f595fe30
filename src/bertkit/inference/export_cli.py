"""`bertkit export onnx --model DIR --output model.onnx`."""

from __future__ import annotations

import argparse

from bertkit import _args as A


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=("onnx",), help="export format")
    p.add_argument("--model", required=True, help="model folder or cached model id")
    p.add_argument("--output", required=True, help="file to write (e.g. model.onnx); never inside --model")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument(
        "--opset",
        type=A.int_range(7, note="ONNX opset versions start at 7 in torch's exporter"),
        default=None,
        help="ONNX opset (default: the exporter's)",
    )


def run(args: argparse.Namespace) -> int:
    from .export import export_onnx

    out = export_onnx(args.model, args.output, opset=args.opset, overwrite=args.overwrite)
    print(f"wrote {out} (inputs input_ids, attention_mask, token_type_ids; dynamic batch and sequence axes)")
    return 0
