"""`bertkit finetune`: fine-tune a checkpoint on a downstream task (see bertkit.tasks.api)."""

from __future__ import annotations

import argparse

from bertkit import _args as A

from .tasks import TASKS


def add_data_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    """Column and decoding options shared by finetune, evaluate and predict.

    For evaluate/predict the defaults are None, meaning "as saved in the model's config".
    """
    d = (lambda v: v) if defaults else (lambda v: None)
    g = p.add_argument_group("data options")
    g.add_argument("--text-column", default=d("text"), help="text column of CSV/TSV/JSONL (default: text)")
    g.add_argument("--text-pair-column", default=None, help="second text column, for sentence pairs")
    g.add_argument("--label-column", default=d("label"), help="label column (default: label)")
    g.add_argument("--label-separator", default=None, help="split string labels on this for multi-label, e.g. '|'")
    g.add_argument("--max-length", type=A.SEQ_LEN, default=None,
                   help="max tokens per sequence/window (default: 384 for question-answering, else 128)")
    g.add_argument("--doc-stride", type=A.positive_int, default=d(128),
                   help="QA: overlap between context windows; token classification: overlap between the "
                        "windows of a sentence longer than --max-length, at most half a window (default: 128)")
    g.add_argument("--max-answer-length", type=A.positive_int, default=d(30),
                   help="QA: longest answer in tokens (default: 30)")
    g.add_argument("--n-best-size", type=A.positive_int, default=d(20),
                   help="QA: start/end candidates per window (default: 20)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, choices=sorted(TASKS), help="the downstream task")
    p.add_argument("--model", required=True, help="pretrained checkpoint folder (config.json, weights, vocab.txt)")
    p.add_argument("--train", required=True, help="training file (CSV/TSV/JSONL, CoNLL, SQuAD JSON or SWAG JSONL)")
    p.add_argument("--validation", default=None, help="validation file, evaluated after every epoch")
    p.add_argument("--output", required=True, help="output folder (a save_pretrained directory): new or empty")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier `bertkit finetune` output in --output (only the files it wrote)")
    p.add_argument("--epochs", type=A.positive_float, default=3.0)
    p.add_argument("--batch-size", type=A.positive_int, default=32)
    p.add_argument("--lr", type=A.positive_float, default=5e-5)
    p.add_argument("--warmup-ratio", type=A.fraction_0_1, default=0.1)
    p.add_argument("--weight-decay", type=A.nonnegative_float, default=0.01)
    p.add_argument("--seed", type=A.seed, default=0)
    p.add_argument("--grad-accum", type=A.positive_int, default=1, help="gradient accumulation steps")
    p.add_argument("--bf16", action="store_true", help="train under bf16 autocast")
    p.add_argument("--patience", type=A.positive_int, default=None,
                   help="stop after this many epochs without improvement")
    p.add_argument("--freeze", default=None,
                   help="comma-separated module patterns to freeze, e.g. embeddings,encoder.layer.0-3")
    p.add_argument("--no-group-by-length", action="store_true", help="random batches instead of length-grouped ones")
    p.add_argument("--eval-batch-size", type=A.positive_int, default=64)
    p.add_argument("--max-train-samples", type=A.positive_int, default=None)
    p.add_argument("--max-eval-samples", type=A.positive_int, default=None)
    p.add_argument("--problem-type", default=None,
                   choices=["single_label_classification", "multi_label_classification", "regression"],
                   help="text-classification: default single-label, multi-label when labels are lists")
    p.add_argument("--label-scheme", default=None, choices=["BIO", "BIOES", "BMES"],
                   help="token-classification tag scheme (default: detected from the tags)")
    p.add_argument("--version-2-with-negative", action="store_true", default=None,
                   help="QA: allow no-answer predictions "
                        "(default: on when the training data has unanswerable questions)")
    p.add_argument("--device", type=A.device, default=None, help="cpu, cuda, ... (default: cuda when available)")
    p.add_argument("--no-progress", action="store_true")
    add_data_options(p)


def run(args: argparse.Namespace) -> int:
    from bertkit._outputs import refuse_inside_input

    from .api import finetune

    refuse_inside_input(args.output, args.model)
    res = finetune(
        args.task, args.model, args.train, args.output, args.validation,
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, max_length=args.max_length,
        warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay, seed=args.seed,
        grad_accum_steps=args.grad_accum, bf16=args.bf16, patience=args.patience, freeze=args.freeze,
        group_by_length=not args.no_group_by_length, eval_batch_size=args.eval_batch_size,
        max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
        text_column=args.text_column, text_pair_column=args.text_pair_column, label_column=args.label_column,
        label_separator=args.label_separator, problem_type=args.problem_type, label_scheme=args.label_scheme,
        doc_stride=args.doc_stride, max_answer_length=args.max_answer_length, n_best_size=args.n_best_size,
        version_2_with_negative=args.version_2_with_negative, device=args.device,
        progress=not args.no_progress, overwrite=args.overwrite,
    )
    print(f"saved to {res.output_dir} (eval_results.json)")
    for k, v in res.metrics.items():
        print(f"{k}\t{v:.4f}")
    return 0
