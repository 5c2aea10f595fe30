"""`bertkit train-embedder`: fine-tune a sentence-embedding model (see bertkit.training.embedder)."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit import _args as A


def _dims(text: str) -> list[int]:
    try:
        dims = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, e.g. 384,256,128,64; got {text!r}")
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"must be positive integers, got {text!r}")
    return dims


def _score_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be LOW,HIGH, e.g. 0,5; got {text!r}")
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"LOW must be below HIGH, got {text!r}")
    return lo, hi


def add_training_flags(p: argparse.ArgumentParser, command: str = "train-embedder") -> None:
    """The settings every training command shares, named as `bertkit finetune` names them."""
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=A.positive_float, default=1.0)
    g.add_argument("--max-steps", type=A.positive_int, default=None, help="optimizer steps; wins over --epochs")
    g.add_argument("--max-minutes", type=A.positive_float, default=None, help="stop after this much training time")
    g.add_argument(
        "--batch-size",
        type=A.positive_int,
        default=32,
        help="rows per step (for MNRL every other row of the batch is a negative)",
    )
    g.add_argument("--grad-accum", type=A.positive_int, default=1, help="gradient accumulation steps")
    g.add_argument("--lr", type=A.positive_float, default=2e-5)
    g.add_argument("--warmup-ratio", type=A.fraction_0_1, default=0.1)
    g.add_argument("--weight-decay", type=A.nonnegative_float, default=0.01)
    g.add_argument("--seed", type=A.seed, default=0)
    g.add_argument("--bf16", action="store_true", help="train under bf16 autocast")
    g.add_argument("--eval-every", type=A.nonnegative_int, default=0, help="steps; 0: after every epoch")
    g.add_argument("--save-every", type=A.nonnegative_int, default=0, help="checkpoint every N steps (0: none)")
    g.add_argument("--keep-last", type=A.positive_int, default=2)
    g.add_argument("--resume", action="store_true", help="continue the run in --output from its newest checkpoint")
    g.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace an earlier `bertkit {command}` output in --output (only the files it wrote)",
    )
    g.add_argument("--device", type=A.device, default=None, help="cpu, cuda, ... (default: cuda when available)")
    g.add_argument("--no-progress", dest="progress", action="store_false")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="sentence-embedding model folder to start from")
    p.add_argument(
        "--train",
        required=True,
        help="JSONL/CSV/TSV: anchor,positive[,negative] rows; for --loss cosent sentence1,sentence2,score",
    )
    p.add_argument("--validation", default=None, help="a file like --train, evaluated at every evaluation")
    p.add_argument("--output", required=True, help="new or empty folder for the trained model")
    p.add_argument("--loss", choices=["mnrl", "cached-mnrl", "cosent", "triplet"], default="mnrl")
    p.add_argument("--symmetric", action="store_true", help="MNRL: also rank anchors for each positive")
    p.add_argument("--scale", type=A.positive_float, default=20.0, help="MNRL/CoSENT: cosine scale (default 20)")
    p.add_argument(
        "--mini-batch-size",
        type=A.positive_int,
        default=32,
        help="cached-mnrl: rows per forward (memory), the loss still sees the whole batch",
    )
    p.add_argument("--matryoshka-dims", type=_dims, default=None, help="e.g. 384,256,128,64")
    p.add_argument("--hard-negatives", type=A.nonnegative_int, default=0, help="mine K negatives per row")
    p.add_argument(
        "--mine-from",
        default=None,
        help="corpus to mine from (.txt/.jsonl/.csv, as `bertkit index`), or an index folder built with --model",
    )
    p.add_argument(
        "--mining-margin",
        type=A.nonnegative_float,
        default=0.05,
        help="skip candidates scoring within this of the positive (probable false negatives)",
    )
    p.add_argument(
        "--score-range",
        type=_score_range,
        default=(0.0, 1.0),
        help="cosent: the range of the scores, LOW,HIGH (default 0,1)",
    )
    p.add_argument(
        "--max-length",
        type=A.SEQ_LEN,
        default=None,
        help="tokens per text (default: the folder's max_seq_length, else 256)",
    )
    p.add_argument(
        "--pooling", choices=["mean", "cls", "max"], default=None, help="default: the folder's pooling, else mean"
    )
    add_training_flags(p)


def run(args: argparse.Namespace) -> int:
    from bertkit.training.embedder import EmbedderArguments, train_embedder
    from bertkit.training.trainer import NonFiniteLossError

    try:
        result = train_embedder(EmbedderArguments.from_namespace(args))
    except NonFiniteLossError as e:
        print(f"bertkit train-embedder: error: {e}", file=sys.stderr)
        return 3
    print(
        json.dumps(
            {
                "output": result.output_dir,
                "step": result.step,
                **{f"eval_{k}": v for k, v in result.last_metrics.items()},
            }
        )
    )
    return 0
