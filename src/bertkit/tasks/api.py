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

import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from bertkit._outputs import check_output_file, claim_output_dir
from bertkit._text import read_jsonl
from bertkit.modeling.config import check_vocab_fits

from .._io import atomic_write_json, atomic_write_text
from .batching import LengthGroupedBatchSampler, collate_features
from .tasks import Task, TaskOptions, get_task, task_from_config

__all__ = ["finetune", "evaluate", "predict", "load_finetuned", "FinetuneResult"]


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


def finetune(
    task: str,
    model: str | Path,
    train: str | Path,
    output: str | Path,
    validation: str | Path | None = None,
    *,
    epochs: float = 3.0,
    batch_size: int = 32,
    lr: float = 5e-5,
    max_length: int | None = None,
    warmup_ratio: float = 0.1,
    weight_decay: float = 0.01,
    seed: int = 0,
    grad_accum_steps: int = 1,
    bf16: bool = False,
    patience: int | None = None,
    freeze: Sequence[str] | str | None = None,
    group_by_length: bool = True,
    eval_batch_size: int = 64,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    label_separator: str | None = None,
    problem_type: str | None = None,
    label_scheme: str | None = None,
    doc_stride: int = 128,
    max_answer_length: int = 30,
    n_best_size: int = 20,
    version_2_with_negative: bool | None = None,
    tokenizer: Any = None,
    device: str | None = None,
    progress: bool = True,
    quiet: bool = False,
    overwrite: bool = False,
) -> FinetuneResult:
    """Fine-tune the checkpoint in ``model`` on ``train`` for ``task``; write OUTPUT and return the
    final validation metrics (the best epoch's, when a validation file is given).

    OUTPUT must be a new or empty folder, or (with ``overwrite``) an earlier finetune output, of
    which only the files that run wrote are replaced. ``max_length`` defaults to the task's (384 for
    question answering, as the reference SQuAD scripts, else 128). Out-of-range arguments raise
    ValueError naming the argument.
    """
    from bertkit import _args as A

    A.positive_float.check("epochs", epochs)
    A.positive_int.check("batch_size", batch_size)
    A.positive_float.check("lr", lr)
    A.fraction_0_1.check("warmup_ratio", warmup_ratio)
    A.nonnegative_float.check("weight_decay", weight_decay)
    A.seed.check("seed", seed)
    A.positive_int.check("grad_accum_steps", grad_accum_steps)
    A.positive_int.check("patience", patience, allow_none=True)
    A.positive_int.check("eval_batch_size", eval_batch_size)
    A.positive_int.check("max_train_samples", max_train_samples, allow_none=True)
    A.positive_int.check("max_eval_samples", max_eval_samples, allow_none=True)
    A.check_device("device", device)
    options = TaskOptions(
        max_length=max_length, text_column=text_column, text_pair_column=text_pair_column,
        label_column=label_column, label_separator=label_separator, problem_type=problem_type,
        doc_stride=doc_stride, max_answer_length=max_answer_length, n_best_size=n_best_size,
        version_2_with_negative=version_2_with_negative, label_scheme=label_scheme,
    )
    t: Task = get_task(task, options)
    output = Path(output)
    # Refuse a folder that is not ours before minutes of reading and tokenizing; claim it later.
    claim_output_dir(output, "finetune", overwrite=overwrite, owned=FINETUNE_OUTPUTS, dry_run=True)

    _say(f"[{t.name}] reading {train}", quiet)
    train_ex = t.read(train)
    if max_train_samples:
        train_ex = train_ex[:max_train_samples]
    t.setup_labels(train_ex)
    val_ex = None
    if validation is not None:
        val_ex = t.read(validation)
        if max_eval_samples:
            val_ex = val_ex[:max_eval_samples]
        t.check(validation, val_ex)

    tok = tokenizer if tokenizer is not None else _load_tokenizer(model)
    _say(f"[{t.name}] tokenizing {len(train_ex)} training examples (max_length {options.max_length})", quiet)
    train_enc = t.encode(tok, train_ex)
    val_enc = t.encode(tok, val_ex, with_labels=t.name != "question-answering") if val_ex is not None else None

    cls = t.model_class()
    # The new head is initialised from the global generator: seed it first, or the same seed gives
    # a different classifier (and a different fine-tuned model) from run to run.
    from bertkit.training.trainer import set_seed

    set_seed(seed)
    net = cls.from_pretrained(str(model), **t.model_kwargs())
    check_vocab_fits(tok, net.config, str(model))
    if options.max_length > net.config.max_position_embeddings:
        raise ValueError(f"max_length {options.max_length} exceeds the model's max_position_embeddings "
                         f"({net.config.max_position_embeddings}); use --max-length "
                         f"{net.config.max_position_embeddings} or less")
    net.config.finetuning_task = t.name
    net.config.bertkit_task_options = options.to_dict()
    if freeze:
        from bertkit.modeling import freeze as freeze_fn

        patterns = [p.strip() for p in freeze.split(",")] if isinstance(freeze, str) else list(freeze)
        freeze_fn(net, *[p for p in patterns if p])
    n_train = sum(p.numel() for p in net.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in net.parameters())
    if n_train == 0:
        raise ValueError(f"freeze={freeze!r} freezes every parameter of {type(net).__name__}: nothing is left to "
                         f"train; leave the classifier (and whatever should learn) out of it")
    _say(f"[{t.name}] {type(net).__name__}: {n_all:,} parameters, {n_train:,} trainable; "
         f"{len(train_enc.features)} training features", quiet)

    feats = train_enc.features
    lengths = [max(len(c) for c in f["input_ids"]) if isinstance(f["input_ids"][0], list) else len(f["input_ids"])
               for f in feats]
    sampler = LengthGroupedBatchSampler(lengths, batch_size, shuffle=True, seed=seed,
                                        bucket_batches=50 if group_by_length else 1)

    eval_fn = None
    if val_ex is not None:
        def eval_fn(m: torch.nn.Module) -> dict[str, float]:
            return t.evaluate(m, tok, val_ex, val_enc, batch_size=eval_batch_size, progress=progress)

    claim = claim_output_dir(output, "finetune", overwrite=overwrite, owned=FINETUNE_OUTPUTS,
                             run={"task": t.name, "model": str(model), "train": str(train)})
    try:
        res, train_seconds = _train_and_save(claim, t, net, tok, feats, sampler, eval_fn, cls, quiet, epochs=epochs,
                                             batch_size=batch_size, grad_accum_steps=grad_accum_steps, lr=lr,
                                             weight_decay=weight_decay, warmup_ratio=warmup_ratio, bf16=bf16,
                                             seed=seed, patience=patience, progress=progress, device=device)
        metrics: dict[str, float] = {}
        if val_ex is not None:
            metrics = t.evaluate(net, tok, val_ex, val_enc, batch_size=eval_batch_size, progress=progress)
        history = []
        mfile = output / "metrics.jsonl"
        if mfile.exists():
            history = [row for row in read_jsonl(mfile) if any(k.startswith("eval_") for k in row)]
        atomic_write_json(output / "eval_results.json", {
            "task": t.name, **metrics, "train_seconds": round(train_seconds, 2), "steps": res.step,
            "best_step": res.best_step, "stopped_early": res.stopped_early,
            "train_examples": len(train_ex), "eval_examples": len(val_ex) if val_ex is not None else 0,
        })
    except BaseException:
        claim.abandon()
        raise
    claim.finish()
    if metrics:
        _say(f"[{t.name}] " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()) +
             f"  ({train_seconds:.0f}s training)", quiet)
    return FinetuneResult(metrics, str(output), train_seconds, res.best_step, res.step, res.stopped_early, history)


# What `bertkit finetune` writes into its --output.
FINETUNE_OUTPUTS = ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
                    "special_tokens_map.json", "tokenizer.json", "metrics.jsonl", "metrics.png", "eval_results.json",
                    "best", "checkpoints")


def _train_and_save(claim: Any, t: Task, net: Any, tok: Any, feats: list, sampler: Any, eval_fn: Any, cls: type,
                    quiet: bool, **kw: Any) -> tuple[Any, float]:
    """The training part of :func:`finetune`: train, keep the best epoch's model in OUTPUT."""
    from bertkit.training import Trainer, TrainingConfig

    output = claim.path
    epochs, batch_size, grad_accum_steps, lr = kw["epochs"], kw["batch_size"], kw["grad_accum_steps"], kw["lr"]
    weight_decay, warmup_ratio, bf16, seed = kw["weight_decay"], kw["warmup_ratio"], kw["bf16"], kw["seed"]
    patience, progress, device = kw["patience"], kw["progress"], kw["device"]
    cfg = TrainingConfig(
        output_dir=str(output), num_epochs=epochs, batch_size=batch_size, grad_accum_steps=grad_accum_steps,
        lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, precision="bf16" if bf16 else "fp32",
        seed=seed, drop_last=False, log_every=10, eval_each_epoch=eval_fn is not None,
        best_metric=t.main_metric if eval_fn is not None else None, greater_is_better=t.greater_is_better,
        patience=patience, progress=progress, device=device, run_name=f"finetune {t.name}",
    )
    trainer = Trainer(net, cfg, _Features(feats), collate_fn=collate_features, batch_sampler=sampler,
                      evaluate=eval_fn, tokenizer=tok)
    t0 = time.perf_counter()
    res = trainer.train()
    train_seconds = time.perf_counter() - t0

    # OUTPUT is the best epoch's model, not the last one's
    best_dir = output / "best"
    if best_dir.is_dir() and res.best_step is not None and res.best_step != res.step:
        _say(f"[{t.name}] keeping the best model (step {res.best_step}, {t.main_metric} {res.best_metric:.4f})", quiet)
        best = cls.from_pretrained(str(best_dir))
        net.load_state_dict(best.state_dict())
        net.save_pretrained(str(output), tokenizer=tok)
    if best_dir.is_dir():
        shutil.rmtree(best_dir, ignore_errors=True)
    return res, train_seconds


def load_finetuned(model_dir: str | Path, device: str | None = None, dtype: str | None = None,
                   **overrides: Any) -> tuple[Task, Any, Any]:
    """(task, model, tokenizer) of a fine-tuned OUTPUT folder; ``dtype`` "auto"/"fp32"/"bf16"/"int8"
    prepares the model for inference at that precision (see :mod:`bertkit.inference`)."""
    from bertkit import _args as A
    from bertkit.modeling.auto import AutoConfig

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: no config.json; is this a `bertkit finetune` output folder?")
    config = AutoConfig.from_pretrained(str(model_dir))
    task = task_from_config(config, overrides)
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


def evaluate(model_dir: str | Path, data: str | Path, batch_size: int = 64, progress: bool = True,
             dtype: str | None = None, **overrides: Any) -> dict[str, float]:
    """Metrics of a fine-tuned model on a labelled file (at inference precision ``dtype``)."""
    from bertkit import _args as A

    A.positive_int.check("batch_size", batch_size)
    task, net, tok = load_finetuned(model_dir, dtype=dtype, **overrides)
    examples = task.read(data)
    task.check(data, examples)
    return task.evaluate(net, tok, examples, batch_size=batch_size, progress=progress)


def predict(model_dir: str | Path, data: str | Path, output: str | Path | None = None, batch_size: int = 64,
            progress: bool = True, overwrite: bool = False, dtype: str | None = None,
            **overrides: Any) -> list[dict]:
    """Predictions (label names and scores) for every example of ``data``; written as JSONL to
    ``output`` when given (an existing file only with ``overwrite``)."""
    from bertkit import _args as A

    A.positive_int.check("batch_size", batch_size)
    if output is not None:
        check_output_file(output, overwrite)
    task, net, tok = load_finetuned(model_dir, dtype=dtype, **overrides)
    examples = task.read(data, labelled=False)
    rows = task.predict(net, tok, examples, batch_size=batch_size, progress=progress)
    if output is not None:
        atomic_write_text(output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return rows
