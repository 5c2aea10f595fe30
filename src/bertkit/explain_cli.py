"""`bertkit explain --model DIR "text" --output report.html [--json F] [--png DIR] [--verify]`."""

from __future__ import annotations

import argparse
import sys

from bertkit._args import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model folder (config.json, weights, vocab.txt) or cached model id")
    p.add_argument("text", nargs="?", default=None, help="the text to explain (not with --projector)")
    p.add_argument("--pair", default=None, help="a second text (token type 1), as for sentence-pair tasks")
    p.add_argument("--output", "-o", default=None, help="write the self-contained HTML report here")
    p.add_argument("--json", dest="json_path", default=None, help="write the raw numbers (full precision) here")
    p.add_argument("--png", dest="png_dir", default=None, help="write matplotlib figures into this folder")
    p.add_argument("--layers", default=None, help="layers whose attention to keep, e.g. 0-5 or 0,3,11 (default all)")
    p.add_argument(
        "--heads", default=None, help="heads whose attention and queries/keys to keep, e.g. 0-3 or 0,7 (default all)"
    )
    p.add_argument("--top-k", type=positive_int, default=5, help="masked-LM predictions per position (default 5)")
    p.add_argument(
        "--all-positions", action="store_true", help="masked-LM predictions at every position, not only [MASK]"
    )
    p.add_argument(
        "--lang",
        default="en",
        help="the language of the report's headings, explanations, labels and figures: en (default) or zh",
    )
    p.add_argument(
        "--lens",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the logit lens: each layer read through the masked-LM head at every [MASK] (default: shown "
        "where the model has such a head and the text a [MASK]; --lens insists, --no-lens leaves it out)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing --output/--json files and the figures of an earlier --png run",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="rebuild every step from the raw weights with plain tensor code and compare; "
        "exit 1 if any max |diff| exceeds 1e-5",
    )
    p.add_argument(
        "--attributions",
        action="append",
        type=_methods,
        default=None,
        metavar="METHOD[,METHOD]",
        help="per-token attributions for the prediction: integrated-gradients, gradient-x-input, "
        "attention-rollout (comma-separated or repeated)",
    )
    p.add_argument(
        "--projector",
        default=None,
        metavar="FILE",
        help="instead of one text: a labelled CSV/TSV/JSONL data set, projected to 2-D (PCA and "
        "UMAP-like) in an offline scatter plot (--output) and its coordinates (--json)",
    )
    p.add_argument("--label-column", default="label", help="--projector: the label column (default label)")
    p.add_argument("--text-column", default="text", help="--projector: the text column (default text)")
    p.add_argument(
        "--vectors",
        default="cls",
        choices=["cls", "pooler", "mean"],
        help="--projector: the sentence vector: final [CLS], pooler output or mean of tokens (default cls)",
    )
    p.add_argument("--max-rows", type=positive_int, default=2000, help="--projector: read at most this many rows")
    p.add_argument(
        "--target",
        default=None,
        help="the label, tag, start/end, [MASK] word, GPT-2 next token or (ELECTRA discriminator) token "
        "of the text the attributions explain (default: the prediction)",
    )


def _methods(value: str) -> list[str]:
    from bertkit.explain.attributions import METHODS

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in METHODS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{bad[0] if bad else value!r}: choose from {', '.join(METHODS)}")
    return names


def run(args: argparse.Namespace) -> int:
    from bertkit.explain import explain

    if (
        args.projector is None
        and args.output is None
        and args.json_path is None
        and args.png_dir is None
        and not args.verify
    ):
        raise ValueError("nothing to write: give --output report.html, --json FILE, --png DIR or --verify")
    if args.projector is not None:
        from bertkit._folders import within_claim
        from bertkit.explain.api import check_outputs
        from bertkit.explain.projector import run_cli

        claim = check_outputs(args.model, args.output, args.json_path, args.png_dir, args.overwrite)
        return within_claim(claim, lambda: run_cli(args))
    res = explain(
        args.model,
        args.text,
        pair=args.pair,
        output=args.output,
        json_path=args.json_path,
        png_dir=args.png_dir,
        layers=args.layers,
        top_k=args.top_k,
        all_positions=args.all_positions,
        verify_weights=args.verify,
        attributions=[m for ms in args.attributions or [] for m in ms] or None,
        target=args.target,
        heads=args.heads,
        overwrite=args.overwrite,
        lens=args.lens,
        lang=args.lang,
    )
    for path in [res.html, res.json, *res.pngs]:
        if path is not None:
            print(f"wrote {path}")
    if res.explanation is not None:
        from bertkit.explain.report import prediction_lines

        for note in res.explanation.notes:
            print(f"note: {note}", file=sys.stderr)
        for line in prediction_lines(res.explanation):
            print(line)
        if res.explanation.lens is not None:
            from bertkit.explain.lens import lens_lines

            for line in lens_lines(res.explanation.lens):
                print(line)
    if res.checks:
        for c in res.checks:
            print(c.line())
        bad = [c for c in res.checks if not c.ok]
        print(
            f"{len(res.checks) - len(bad)} of {len(res.checks)} checks within {res.checks[0].tolerance:g}"
            + (f"; FAILED: {', '.join(c.name for c in bad[:5])}" if bad else "")
        )
        return 1 if bad else 0
    return 0
