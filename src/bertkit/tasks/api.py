"""Fine-tune, evaluate and predict: the Python API behind `bertkit finetune / evaluate / predict`.

::

    from bertkit.tasks import finetune, evaluate, predict
    result = finetune("text-classification", model="minilm/", train="train.csv",
                      validation="test.csv", output="runs/polarity", epochs=3, max_length=128)
    result.metrics            # {"accuracy": ..., "macro_f1": ...}; also OUTPUT/eval_results.json
    evaluate("runs/polarity", "test.csv")
    predict("runs/polarity", "new.csv", output="preds.jsonl")

Training runs on the shared :class:`bertkit.training.Trainer`: length-grouped batches with dynamic
padding, AdamW with warmup and linear decay, gradient accumulation, optional bf16, evaluation after
every epoch, the best checkpoint kept by the task's main metric, optional early stopping.
``OUTPUT/`` ends up a ``save_pretrained`` folder (the best model, its tokenizer, the label maps and
the data options in config.json) that transformers' Auto classes load as they are.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertkit import _args as A
from bertkit._args import redefault, setting
from bertkit._folders import check_output_file, file_fingerprint, refuse_inside_input
from bertkit._text import read_jsonl
from bertkit.data.batching import LengthGroupedBatchSampler, collate_features
from bertkit.hub import resolve_model_arg, resolve_model_path
from bertkit.modeling.config import check_length_fits, check_vocab_fits
from bertkit.training.run_folders import TRAINER_OUTPUTS, claim_training_output, run_identity, within_claim
from bertkit.training.training_args import TrainingArguments

from .._io import atomic_write_json, atomic_write_text
from .tasks import TASKS, Task, TaskOptions, get_task, task_from_config

__all__ = ["finetune", "evaluate", "predict", "load_finetuned", "FinetuneArguments", "FinetuneResult"]

PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")

# What `bertkit finetune` writes into its --output.
FINETUNE_OUTPUTS = (*TRAINER_OUTPUTS, "eval_results.json")


@dataclass
class FinetuneResult:
    metrics: dict[str, float]
    output_dir: str
    train_seconds: float
    best_step: int | None
    steps: int
    stopped_early: bool
    history: list[dict] = field(default_factory=list)


class _Features(torch.utils.data.Dataset):
    def __init__(self, feats: list[dict]) -> None:
        self.feats = feats

    def __len__(self) -> int:
        return len(self.feats)

    def __getitem__(self, i: int) -> dict:
        return self.feats[i]


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _load_tokenizer(path: str | Path) -> Any:
    from bertkit.tokenization import BertTokenizer

    return BertTokenizer.from_pretrained(str(path))


_D = "data options"  # the --help section shared with evaluate and predict


@dataclass(kw_only=True)
class FinetuneArguments(TrainingArguments):
    """Every setting of `bertkit finetune`: the shared training arguments plus the task's own."""

    task: str = setting(choices=sorted(TASKS), help="the downstream task")
    model: str = setting(
        metavar="DIR",
        same_on_resume=False,
        help="pretrained checkpoint folder (config.json, weights, vocab.txt) or cached model id",
    )
    train: str = setting(
        metavar="FILE", same_on_resume=False, help="training file (CSV/TSV/JSONL, CoNLL, SQuAD JSON or SWAG JSONL)"
    )
    validation: str | None = setting(
        None,
        metavar="FILE",
        same_on_resume=False,
        help="validation file, evaluated after every epoch; OUTPUT keeps the best epoch",
    )
    output: str = redefault(TrainingArguments, "output")  # required
    text_column: str = setting("text", group=_D, help="text column of CSV/TSV/JSONL")
    text_pair_column: str | None = setting(None, group=_D, help="second text column, for sentence pairs")
    label_column: str = setting("label", group=_D, help="label column")
    label_separator: str | None = setting(None, group=_D, help="split string labels on this for multi-label, e.g. '|'")
    max_length: int | None = setting(
        None,
        type=A.SEQ_LEN,
        group=_D,
        help="max tokens per sequence/window (default: 384 for question-answering, else 128)",
    )
    doc_stride: int = setting(
        128,
        type=A.positive_int,
        group=_D,
        help="QA: overlap between context windows; token classification: overlap between the "
        "windows of a sentence longer than --max-length, at most half a window",
    )
    max_answer_length: int = setting(30, type=A.positive_int, group=_D, help="QA: longest answer in tokens")
    n_best_size: int = setting(20, type=A.positive_int, group=_D, help="QA: start/end candidates per window")
    problem_type: str | None = setting(
        None, choices=PROBLEM_TYPES, help="text-classification: default single-label, multi-label when labels are lists"
    )
    label_scheme: str | None = setting(
        None, choices=("BIO", "BIOES", "BMES"), help="token-classification tag scheme (default: detected from the tags)"
    )
    version_2_with_negative: bool | None = setting(
        None, help="QA: allow no-answer predictions (default: on when the training data has unanswerable questions)"
    )
    freeze: str | None = setting(
        None, help="comma-separated module patterns to freeze, e.g. embeddings,encoder.layer.0-3"
    )
    group_by_length: bool = setting(True, help="random batches instead of length-grouped ones")
    eval_batch_size: int = setting(64, type=A.positive_int, same_on_resume=False, help="batch size of evaluation")
    max_train_samples: int | None = setting(None, type=A.positive_int, help="first N training examples only")
    max_eval_samples: int | None = setting(None, type=A.positive_int, help="first N validation examples only")
    quiet: bool = setting(False, cli=False, same_on_resume=False, help="no progress messages on stderr")
    epochs: float = redefault(TrainingArguments, "epochs", 3.0)
    warmup_ratio: float = redefault(TrainingArguments, "warmup_ratio", 0.1)
    seed: int = redefault(TrainingArguments, "seed", 0)
    precision: str = redefault(TrainingArguments, "precision", "fp32")
    log_every: int = redefault(TrainingArguments, "log_every", 10)
    drop_last: bool = redefault(TrainingArguments, "drop_last", False)
    patience: int | None = redefault(
        TrainingArguments, "patience", None, cli=True, help="stop after this many epochs without improvement"
    )

    def __post_init__(self) -> None:
        for name in ("model", "train", "validation", "output"):  # paths may come as Path objects
            if getattr(self, name) is not None:
                setattr(self, name, str(getattr(self, name)))
        if isinstance(self.freeze, (list, tuple)):
            self.freeze = ",".join(self.freeze)
        super().__post_init__()

    def task_options(self) -> TaskOptions:
        """The data options the task reads and the model's config keeps."""
        names = {f.name for f in dataclasses.fields(TaskOptions)}
        return TaskOptions(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})


# The data options of finetune that evaluate and predict take too (None there: as saved in the model).
DATA_OPTIONS = (
    "text_column",
    "text_pair_column",
    "label_column",
    "label_separator",
    "max_length",
    "doc_stride",
    "max_answer_length",
    "n_best_size",
)


def finetune(
    task: str | FinetuneArguments,
    model: str | Path | None = None,
    train: str | Path | None = None,
    output: str | Path | None = None,
    validation: str | Path | None = None,
    *,
    tokenizer: Any = None,
    **settings: Any,
) -> FinetuneResult:
    """Fine-tune the checkpoint in ``model`` on ``train`` for ``task``; write OUTPUT and return the
    final validation metrics (the best epoch's, when a validation file is given).

    ``settings`` are :class:`FinetuneArguments` fields (``epochs``, ``lr``, ``max_length``, ...), or
    pass a whole ``FinetuneArguments`` as ``task``. OUTPUT must be a new or empty folder, or (with
    ``overwrite``) an earlier finetune output, of which only the files that run wrote are replaced.
    ``max_length`` defaults to the task's (384 for question answering, as the reference SQuAD
    scripts, else 128). Out-of-range arguments raise ValueError naming the argument.
    """
    if isinstance(task, FinetuneArguments):
        args = dataclasses.replace(task, **settings) if settings else task
    else:
        args = FinetuneArguments(task=task, model=model, train=train, output=output, validation=validation, **settings)
    if args.model is not None:
        # A model id resolves to its cache snapshot once: the weights, the vocabulary and the run's
        # fingerprint all come from that folder, and the output may not be inside it.
        args = dataclasses.replace(args, model=str(resolve_model_arg(args.model)))
    t: Task = get_task(args.task, args.task_options())
    output = Path(args.output)
    inputs = {"--model": args.model}
    # Refuse a folder that is not ours before minutes of reading and tokenizing; claim it later.
    claim_training_output(args, "finetune", {}, FINETUNE_OUTPUTS, inputs, dry_run=True)
    train_ex, val_ex = _read_examples(args, t)
    tok = tokenizer if tokenizer is not None else _load_tokenizer(args.model)
    _say(f"[{t.name}] tokenizing {len(train_ex)} training examples (max_length {t.options.max_length})", args.quiet)
    train_enc = t.encode(tok, train_ex)
    val_enc = t.encode(tok, val_ex, with_labels=t.name != "question-answering") if val_ex is not None else None
    net, cls = _model_for(args, t, tok)
    feats = train_enc.features
    lengths = [
        max(len(c) for c in f["input_ids"]) if isinstance(f["input_ids"][0], list) else len(f["input_ids"])
        for f in feats
    ]
    sampler = LengthGroupedBatchSampler(
        lengths, args.batch_size, shuffle=True, seed=args.seed, bucket_batches=50 if args.group_by_length else 1
    )
    eval_fn = None
    if val_ex is not None:

        def eval_fn(m: torch.nn.Module) -> dict[str, float]:
            return t.evaluate(m, tok, val_ex, val_enc, batch_size=args.eval_batch_size, progress=args.progress)

    identity = run_identity(
        args, model=_model_fingerprint(args.model), data=file_fingerprint(args.train, args.validation)
    )
    claim = claim_training_output(args, "finetune", identity, FINETUNE_OUTPUTS, inputs)

    def work() -> FinetuneResult:
        res, train_seconds = _train_and_save(args, t, net, tok, feats, sampler, eval_fn, cls)
        metrics: dict[str, float] = {}
        if val_ex is not None:
            metrics = t.evaluate(net, tok, val_ex, val_enc, batch_size=args.eval_batch_size, progress=args.progress)
        mfile = output / "metrics.jsonl"
        history = (
            [row for row in read_jsonl(mfile) if any(k.startswith("eval_") for k in row)] if mfile.exists() else []
        )
        atomic_write_json(
            output / "eval_results.json",
            {
                "task": t.name,
                **metrics,
                "train_seconds": round(train_seconds, 2),
                "steps": res.step,
                "best_step": res.best_step,
                "stopped_early": res.stopped_early,
                "train_examples": len(train_ex),
                "eval_examples": len(val_ex) if val_ex is not None else 0,
            },
        )
        return FinetuneResult(metrics, str(output), train_seconds, res.best_step, res.step, res.stopped_early, history)

    result = within_claim(claim, work)
    if result.metrics:
        _say(
            f"[{t.name}] "
            + ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
            + f"  ({result.train_seconds:.0f}s training)",
            args.quiet,
        )
    return result


def _read_examples(args: FinetuneArguments, t: Task) -> tuple[list, list | None]:
    """The training examples (their labels set up the task) and the validation ones, if any."""
    _say(f"[{t.name}] reading {args.train}", args.quiet)
    train_ex = t.read(args.train)
    if args.max_train_samples:
        train_ex = train_ex[: args.max_train_samples]
    t.setup_labels(train_ex)
    t.check(args.train, train_ex)  # regression: every training score a finite number, named by file and line
    val_ex = None
    if args.validation is not None:
        val_ex = t.read(args.validation)
        if args.max_eval_samples:
            val_ex = val_ex[: args.max_eval_samples]
        t.check(args.validation, val_ex)
    return train_ex, val_ex


def _model_for(args: FinetuneArguments, t: Task, tok: Any) -> tuple[Any, type]:
    """The pretrained model with the task's new head (seeded), checked against the tokenizer, frozen as asked."""
    cls = t.model_class()
    # The new head is initialised from the global generator: seed it first, or the same seed gives
    # a different classifier (and a different fine-tuned model) from run to run.
    from bertkit.training.trainer import set_seed

    set_seed(args.seed)
    net = cls.from_pretrained(args.model, **t.model_kwargs())
    check_vocab_fits(tok, net.config, args.model)
    check_length_fits(net, t.options.max_length)
    net.config.finetuning_task = t.name
    net.config.bertkit_task_options = t.options.to_dict()
    if args.freeze:
        from bertkit.modeling import freeze as freeze_fn

        freeze_fn(net, *[p.strip() for p in args.freeze.split(",") if p.strip()])
    n_train = sum(p.numel() for p in net.parameters() if p.requires_grad)
    if n_train == 0:
        raise ValueError(
            f"freeze={args.freeze!r} freezes every parameter of {type(net).__name__}: nothing is left "
            f"to train; leave the classifier (and whatever should learn) out of it"
        )
    _say(
        f"[{t.name}] {type(net).__name__}: {sum(p.numel() for p in net.parameters()):,} parameters, {n_train:,} "
        f"trainable",
        args.quiet,
    )
    return net, cls


def _model_fingerprint(model: str) -> str:
    """A content hash of a model folder's configuration and weights (the input of a fine-tuning run)."""
    folder = Path(model)
    files = [folder / n for n in ("config.json", "model.safetensors", "pytorch_model.bin")]
    return file_fingerprint(*[f for f in files if f.is_file()])


def _train_and_save(
    args: FinetuneArguments, t: Task, net: Any, tok: Any, feats: list, sampler: Any, eval_fn: Any, cls: type
) -> tuple[Any, float]:
    """The training part of :func:`finetune`: train, keep the best epoch's model in OUTPUT."""
    from bertkit.training import Trainer

    output = Path(args.output)
    cfg = dataclasses.replace(
        args,
        eval_each_epoch=eval_fn is not None,
        best_metric=t.main_metric if eval_fn is not None else None,
        greater_is_better=t.greater_is_better,
        run_name=f"finetune {t.name}",
    )
    trainer = Trainer(
        net, cfg, _Features(feats), collate_fn=collate_features, batch_sampler=sampler, evaluate=eval_fn, tokenizer=tok
    )
    res = trainer.train()
    train_seconds = trainer.elapsed_seconds  # a resumed run's earlier processes included

    # OUTPUT is the best epoch's model, not the last one's
    best_dir = output / "best"
    if best_dir.is_dir() and res.best_step is not None and res.best_step != res.step:
        _say(
            f"[{t.name}] keeping the best model (step {res.best_step}, {t.main_metric} {res.best_metric:.4f})",
            args.quiet,
        )
        best = cls.from_pretrained(str(best_dir))
        net.load_state_dict(best.state_dict())
        net.save_pretrained(str(output), tokenizer=tok)
    if best_dir.is_dir():
        shutil.rmtree(best_dir, ignore_errors=True)
    return res, train_seconds


def load_finetuned(
    model_dir: str | Path, device: str | None = None, dtype: str | None = None, **overrides: Any
) -> tuple[Task, Any, Any]:
    """(task, model, tokenizer) of a fine-tuned OUTPUT folder; ``dtype`` "auto"/"fp32"/"bf16"/"int8"
    prepares the model for inference at that precision (see :mod:`bertkit.inference`)."""
    from bertkit import _args as A
    from bertkit.modeling.auto import AutoConfig

    model_dir = resolve_model_path(model_dir)  # a folder, or a model id in the cache
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: no config.json; is this a `bertkit finetune` output folder?")
    config = AutoConfig.from_pretrained(str(model_dir))
    task = task_from_config(config, overrides, where=str(model_dir))
    # The Auto class loads the folder's family's class for the task (BERT, a DistilBERT student, ...).
    net = task.model_class().from_pretrained(str(model_dir))
    tok = _load_tokenizer(model_dir)
    check_vocab_fits(tok, net.config, str(model_dir))
    if device:
        net.to(A.check_device("device", device))
    net.eval()
    if dtype is not None:
        from bertkit.inference import prepare_for_inference

        prepare_for_inference(net, dtype)
    return task, net, tok


def evaluate(
    model_dir: str | Path,
    data: str | Path,
    batch_size: int = 64,
    progress: bool = True,
    dtype: str | None = None,
    device: str | None = None,
    **overrides: Any,
) -> dict[str, float]:
    """Metrics of a fine-tuned model on a labelled file (at inference precision ``dtype``, on ``device``)."""
    from bertkit import _args as A

    A.positive_int.check("batch_size", batch_size)
    task, net, tok = load_finetuned(model_dir, device=device, dtype=dtype, **overrides)
    examples = task.read(data)
    task.check(data, examples)
    return task.evaluate(net, tok, examples, batch_size=batch_size, progress=progress)


def predict(
    model_dir: str | Path,
    data: str | Path,
    output: str | Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
    overwrite: bool = False,
    dtype: str | None = None,
    device: str | None = None,
    **overrides: Any,
) -> list[dict]:
    """Predictions (label names and scores) for every example of ``data``; written as JSONL to
    ``output`` when given (an existing file only with ``overwrite``; never ``data`` itself or a file
    inside ``model_dir``)."""
    from bertkit import _args as A

    A.positive_int.check("batch_size", batch_size)
    if output is not None:  # an earlier file is refused before the model is even looked for
        check_output_file(output, overwrite)
    model_dir = resolve_model_path(model_dir)  # the output may not be inside a cached model either
    if output is not None:
        refuse_inside_input(output, model_dir, data)
    task, net, tok = load_finetuned(model_dir, device=device, dtype=dtype, **overrides)
    examples = task.read(data, labelled=False)
    rows = task.predict(net, tok, examples, batch_size=batch_size, progress=progress)
    if output is not None:
        atomic_write_text(output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return rows
