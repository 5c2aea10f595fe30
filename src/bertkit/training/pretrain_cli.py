"""`bertkit pretrain`: MLM (+ NSP) pretraining from raw text or prepared shards.

Example::

    bertkit pretrain --corpus austen.txt wiki.txt bbc.jsonl --vocab vocab.txt --config mini \\
        --seq-len 128 --batch-size 32 --max-steps 2000 --lr 1e-3 --warmup-steps 200 \\
        --eval-every 200 --save-every 500 --output runs/mini

Under ``torchrun --nproc_per_node=N -m bertkit pretrain ...`` it runs DistributedDataParallel.
The recipe itself is :func:`bertkit.training.pretraining.pretrain`.
"""

from __future__ import annotations

import argparse
import sys

from bertkit import _args as A

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("data")
    src.add_argument("--corpus", nargs="+", metavar="FILE",
                     help="raw .txt / .jsonl files, prepared on the fly into a cache")
    src.add_argument("--data", metavar="DIR", help="a folder written by `bertkit prepare-data`")
    src.add_argument("--format", choices=["prose", "bert"], default="prose",
                     help="raw text layout (see `bertkit prepare-data --help`)")
    src.add_argument("--cache-dir", help="where --corpus is prepared (default: ~/.cache/bertkit/prepared/HASH)")
    src.add_argument("--no-lower-case", dest="lower_case", action="store_false")
    src.add_argument("--eval-fraction", type=A.fraction_0_1_right_open, default=0.02,
                     help="fraction of tokens held out (whole documents) for evaluation (default 0.02)")
    src.add_argument("--eval-instances", type=A.nonnegative_int, default=512, help="held-out instances per evaluation")
    src.add_argument("--short-seq-prob", type=A.fraction_0_1, default=0.1)
    src.add_argument("--no-nsp", action="store_true", help="MLM only, full-length single segments")
    src.add_argument("--whole-word-masking", action="store_true",
                     help="mask all pieces of a word together; with --corpus, Chinese words come from jieba "
                          "(pip install 'bertkit[zh]'); --data must be prepared with --whole-word-masking")
    src.add_argument("--mask-prob", "--mask-rate", dest="mask_prob", type=A.fraction_0_1_left_open, default=0.15,
                     help="fraction of tokens masked (default 0.15)")
    src.add_argument("--objective", choices=["mlm+nsp", "mlm", "electra"], default="mlm+nsp",
                     help="mlm+nsp: BERT (BertForPreTraining); mlm: masked LM on contiguous full-length "
                          "sequences, no NSP (BertForMaskedLM); electra: a generator masked LM and a "
                          "discriminator of replaced tokens (ElectraForPreTraining in OUTPUT, the generator "
                          "in OUTPUT/generator)")
    src.add_argument("--generator-size", type=A.fraction_0_1_left_open, default=0.25,
                     help="electra: the generator's hidden size (and heads) as a fraction of the "
                          "discriminator's (default 0.25)")

    mod = p.add_argument_group("model")
    mod.add_argument("--vocab", help="vocab.txt for a new model")
    mod.add_argument("--model", metavar="DIR", help="continue pretraining from a saved model folder")
    mod.add_argument("--config", default="mini", choices=["tiny", "mini", "small", "medium", "base", "large"])
    mod.add_argument("--dropout", type=A.fraction_0_1_right_open, default=None,
                     help="hidden and attention dropout (default: the config's, 0.1)")

    tr = p.add_argument_group("training")
    tr.add_argument("--recipe", choices=["cpu-hour"], default=None,
                    help="cpu-hour: choose the phases (seq 32 MLM, then seq 128 MLM + NSP), batch sizes, lrs, "
                         "warmups and steps from --max-minutes (default 60) and run them as one job that "
                         "--resume continues in the phase where it stopped; OUTPUT is the final model")
    tr.add_argument("--seq-len", type=A.SEQ_LEN, default=128)
    tr.add_argument("--batch-size", type=A.positive_int, default=32, help="per process and micro-step")
    tr.add_argument("--grad-accum", type=A.positive_int, default=1)
    tr.add_argument("--max-steps", type=A.positive_int, default=1000, help="optimizer steps (sets the lr schedule)")
    tr.add_argument("--max-minutes", type=A.positive_float, default=None,
                    help="also stop after this many minutes of training (evaluation excluded)")
    tr.add_argument("--schedule", choices=A.SCHEDULES, default="steps",
                    help="steps: warmup, then the lr decays linearly to 0 at --max-steps; time: to 0 at "
                         "--max-minutes of training, so the whole time budget is used whatever the speed "
                         "(--max-steps then only caps the run)")
    tr.add_argument("--lr", type=A.positive_float, default=1e-4)
    tr.add_argument("--warmup-steps", type=A.nonnegative_int, default=0)
    tr.add_argument("--warmup-ratio", type=A.fraction_0_1, default=0.0)
    tr.add_argument("--weight-decay", type=A.nonnegative_float, default=0.01)
    tr.add_argument("--max-grad-norm", type=A.nonnegative_float, default=1.0)
    tr.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto")
    tr.add_argument("--seed", type=A.seed, default=42)
    tr.add_argument("--log-every", type=A.positive_int, default=1)
    tr.add_argument("--eval-every", type=A.nonnegative_int, default=0, help="0: only at the end")
    tr.add_argument("--save-every", type=A.nonnegative_int, default=0, help="0: no intermediate checkpoints")
    tr.add_argument("--keep-last", type=A.positive_int, default=2)
    tr.add_argument("--output", required=True)
    tr.add_argument("--resume", action="store_true",
                    help="continue the run in --output from its newest complete checkpoint (same settings)")
    tr.add_argument("--overwrite", action="store_true",
                    help="replace an earlier `bertkit pretrain` output in --output (only the files it wrote)")
    tr.add_argument("--no-progress", dest="progress", action="store_false")
    tr.add_argument("--threads", type=A.threads, default=0, help="torch intra-op threads (0: torch's default)")


def run(args: argparse.Namespace) -> int:
    from bertkit.training.pretraining import PretrainingArguments, pretrain
    from bertkit.training.trainer import NonFiniteLossError

    try:
        pretrain(PretrainingArguments.from_namespace(args))
    except NonFiniteLossError as e:
        print(f"bertkit pretrain: error: {e}", file=sys.stderr)
        return 3
    return 0
