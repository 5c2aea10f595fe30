"""``SentenceTransformer.fit``: sentence-transformers' pre-v3 training call, run by bertkit's one Trainer.

A script written for sentence-transformers' ``fit`` runs unchanged::

    from torch.utils.data import DataLoader
    from bertkit import InputExample, SentenceTransformer, losses

    model = SentenceTransformer(folder)
    examples = [InputExample(texts=[a, b], label=score) for a, b, score in rows]
    loss = losses.CoSENTLoss(model)
    model.fit(train_objectives=[(DataLoader(examples, shuffle=True, batch_size=16), loss)],
              evaluator=evaluator, epochs=1, warmup_steps=100, output_path="out")

What sentence-transformers does, done the same way: each batch of InputExamples becomes one
tokenized batch per text column and a label tensor (``smart_batching_collate``; a label is a number, or
a list / NumPy array / tensor such as a teacher's vector, which the loss checks before training); several objectives
take turns batch by batch, for as many rounds as the smallest DataLoader has batches; AdamW over the
model's and the losses' parameters with ``weight_decay`` except on biases and LayerNorm weights; the
learning-rate schedule over ``floor(examples / batch_size) x epochs x objectives`` steps (the last
batch of an epoch may run past it, at a rate of 0); gradients clipped to ``max_grad_norm``; the
evaluator called at the end of every epoch and every ``evaluation_steps``, with
``output_path/eval`` for its CSV files; with an evaluator and ``save_best_model`` each better score
saves the model into ``output_path``, without an evaluator the model is saved there at the end.
Every folder is written atomically and loads in sentence-transformers with the same vectors.

A :class:`bertkit.sentence.datasets.NoDuplicatesDataLoader` in place of a DataLoader gets batches with no text
twice, drawn as sentence-transformers 6's ``fit`` draws them for it (its no-duplicates batch sampler,
seeded by the training seed and the epoch: :func:`bertkit.sentence.datasets.no_duplicate_batches`). The
evaluator runs inside a fork of the RNGs (torch's, Python's, NumPy's): what it draws does not change the
dropout masks of the steps after it, so a fit takes the same steps whatever ``evaluation_steps`` is, and
a resumed one the same as the run it continues.

The loop is :class:`~bertkit.training.trainer.Trainer`'s (progress bar, gradient clipping, AMP,
checkpoints, resume). Its run folder is ``checkpoint_path`` (``metrics.jsonl``, ``metrics.png``,
``checkpoints/step-N``), or a temporary folder removed at the end when there is none.
:func:`run_fit` is that loop with the optimizer, schedule and evaluator rules, shared with
``CrossEncoder.fit`` (:mod:`bertkit.sentence.cross_encoder.fit`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import random
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "InputExample",
    "LoggingHandler",
    "check_fit_args",
    "fit",
    "loader_examples",
    "run_fit",
    "smart_batching_collate",
    "stack_labels",
]

SCHEDULERS = ("constantlr", "warmupconstant", "warmuplinear", "warmupcosine")


@dataclass
class InputExample:
    """One training example: its ``texts`` (one per column the loss reads) and its ``label``."""

    guid: str = ""
    texts: list[str] = field(default_factory=list)
    label: int | float | Any = 0

    def __post_init__(self) -> None:
        if isinstance(self.texts, str) or not isinstance(self.texts, (list, tuple)):
            raise TypeError(f"InputExample(guid={self.guid!r}): texts must be a list of strings, got {self.texts!r}")
        self.texts = list(self.texts)
        for i, t in enumerate(self.texts):
            if not isinstance(t, str):
                raise TypeError(f"InputExample(guid={self.guid!r}): texts[{i}] is {type(t).__name__}, not a string")

    def __str__(self) -> str:
        return f"<InputExample> label: {self.label}, texts: {'; '.join(self.texts)}"


class LoggingHandler(logging.Handler):
    """sentence-transformers' ``LoggingHandler``: log records written through ``tqdm.write``, so that
    they print above a progress bar instead of breaking it."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record))
            self.flush()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception:
            self.handleError(record)


def smart_batching_collate(model: Any, batch: Sequence[Any]) -> tuple[list[dict[str, Tensor]], Tensor]:
    """InputExamples -> (one tokenized batch per text column, the labels as one tensor)."""
    texts = [ex.texts for ex in batch]
    features = [model.tokenize(list(column)) for column in zip(*texts)]
    return features, stack_labels([ex.label for ex in batch])


def _label_shape(value: Any) -> tuple[int, ...] | None:
    """A label's shape (``()`` for a number), or None when it is not numbers (the trainer's check of a
    label, which fit shares for the same message)."""
    if isinstance(value, Tensor):
        return tuple(value.shape)
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        return () if isinstance(value, bool) else None
    if isinstance(value, numbers.Real):
        return ()
    if isinstance(value, (Sequence, np.ndarray)):
        try:
            array = np.asarray(value)
        except ValueError:  # ragged
            return None
        numeric = np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_
        return tuple(array.shape) if numeric and array.size else None
    return None


def stack_labels(labels: Sequence[Any]) -> Tensor:
    """Rows' labels as one tensor: numbers -> (N,); vectors (lists, NumPy arrays or tensors, such as a
    teacher's embeddings) -> (N, ...), as sentence-transformers stacks them."""
    if labels and isinstance(labels[0], Tensor):
        return torch.stack([torch.as_tensor(x) for x in labels])
    if labels and isinstance(labels[0], np.ndarray):
        return torch.from_numpy(np.stack(labels))
    return torch.tensor(labels)


class _Collate:
    """The Trainer's collate_fn: a batch of (objective, example) items, all of one objective."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, items: list[tuple[int, Any]]) -> dict[str, Any]:
        features, labels = smart_batching_collate(self.model, [ex for _, ex in items])
        return {"objective": items[0][0], "features": features, "labels": labels}


class _NoDuplicatesSampler:
    """A NoDuplicatesDataLoader's batches in fit: indices into its examples, a function of (seed, epoch)
    so that a resumed run draws the same ones."""

    def __init__(self, examples: Sequence[Any], batch_size: int, seed: int) -> None:
        self.examples, self.batch_size, self.seed, self.epoch = examples, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        from bertkit.sentence.datasets import no_duplicate_batches

        # sentence-transformers' sampler seeds its generator with seed + epoch at each epoch
        yield from no_duplicate_batches(self.examples, self.batch_size, self.seed + self.epoch)

    def __len__(self) -> int:
        return len(self.examples) // self.batch_size


class _RoundRobin:
    """Batches of the objectives in turn (objective 0, 1, ..., 0, 1, ...) until one runs out; each
    objective's own batches are seeded by (seed, epoch), so a resumed run sees the same order.
    ``custom[k]``, where given, is objective k's own batch sampler (indices into its examples)."""

    def __init__(
        self,
        sizes: Sequence[int],
        batch_sizes: Sequence[int],
        shuffle: Sequence[bool],
        drop_last: Sequence[bool],
        seed: int,
        custom: Sequence[Any | None] | None = None,
    ) -> None:
        from bertkit.training.trainer import RandomBatchSampler

        self.offsets = [0, *np.cumsum(sizes)[:-1].tolist()]
        self.samplers = [
            RandomBatchSampler(n, b, seed=seed, shuffle=s, drop_last=d, torch_order=True) if c is None else c
            for n, b, s, d, c in zip(sizes, batch_sizes, shuffle, drop_last, custom or [None] * len(sizes))
        ]

    def set_epoch(self, epoch: int) -> None:
        for s in self.samplers:
            s.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        for batches in zip(*self.samplers):
            for offset, batch in zip(self.offsets, batches):
                yield [offset + i for i in batch]

    def __len__(self) -> int:
        return min(len(s) for s in self.samplers) * len(self.samplers)


def _schedule(name: str, warmup: int, total: int) -> Callable[[int], float]:
    """The learning-rate factor at each step, as transformers' schedules of these names compute it."""
    from bertkit.training.trainer import _linear_schedule

    def warm(step: int) -> float:
        return step / max(1, warmup)

    if name == "constantlr":
        return lambda step: 1.0
    if name == "warmupconstant":
        return lambda step: warm(step) if step < warmup else 1.0
    if name == "warmuplinear":
        return _linear_schedule(warmup, total, from_zero=True)

    def cosine(step: int) -> float:
        if step < warmup:
            return warm(step)
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    return cosine


def _param_groups(modules: Sequence[nn.Module], weight_decay: float) -> list[dict[str, Any]]:
    """sentence-transformers' two AdamW groups: no weight decay on biases and LayerNorm weights."""
    no_decay = ("bias", "LayerNorm.bias", "LayerNorm.weight")
    decay, plain, seen = [], [], set()
    for module in modules:
        for name, p in module.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            (plain if any(nd in name for nd in no_decay) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def loader_examples(loader: Any, where: str) -> list[Any]:
    """The examples of a DataLoader over InputExamples, read once and checked: a dataset with a length,
    not empty, and every item with ``texts``. ``where`` names the loader in the refusals."""
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise TypeError(
            f"fit: {where} streams its examples ({type(dataset).__name__}); fit needs a DataLoader over a "
            "list of InputExamples or a NoDuplicatesDataLoader (for the batch triplet losses, give the "
            "labelled InputExamples to a shuffled DataLoader, or SentenceTransformerTrainer with "
            "batch_sampler='group_by_label')"
        )
    if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise TypeError(f"fit: {where} must be a DataLoader over a list of InputExamples, got {loader!r}")
    if len(dataset) == 0:
        raise ValueError(f"fit: {where} holds no examples")
    examples = [dataset[j] for j in range(len(dataset))]
    for j, ex in enumerate(examples):
        if not isinstance(getattr(ex, "texts", None), (list, tuple)):
            raise TypeError(f"fit: {where} example {j} is {type(ex).__name__}, not an InputExample")
    return examples


def _objectives(model: Any, train_objectives: Any) -> tuple[list[Any], list[list[Any]], list[nn.Module]]:
    """(DataLoaders, their examples, losses), each checked: examples there, the loss trains ``model``,
    and every example has as many texts as its loss reads."""
    from bertkit.sentence.losses.base import _Loss

    if (
        isinstance(train_objectives, tuple)
        and len(train_objectives) == 2
        and not isinstance(train_objectives[0], tuple)
    ):
        train_objectives = [train_objectives]  # one (DataLoader, loss) pair given bare
    objectives = list(train_objectives) if isinstance(train_objectives, Iterable) else None
    if not objectives:
        raise ValueError(
            f"fit: train_objectives must be a non-empty list of (DataLoader, loss) pairs, got {train_objectives!r}"
        )
    loaders, examples, losses = [], [], []
    for i, pair in enumerate(objectives):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"fit: train_objectives[{i}] must be a (DataLoader, loss) pair, got {pair!r}")
        loader, loss = pair
        if not isinstance(loss, _Loss):
            raise TypeError(
                f"fit: train_objectives[{i}]'s loss is {type(loss).__name__}, not one of bertkit.sentence.losses"
            )
        if loss.model is not model:
            raise ValueError(
                f"fit: train_objectives[{i}]'s {type(loss).__name__} was built on another model object "
                f"({loss.model!r}) than the one fit() is called on"
            )
        items = loader_examples(loader, f"train_objectives[{i}]'s DataLoader")
        width = len(items[0].texts)
        loss.check_columns(width)

        bad = next((j for j, ex in enumerate(items) if _label_shape(ex.label) is None), None)
        if bad is not None:  # every batch stacks its labels, whether or not the loss reads them
            raise ValueError(
                f"fit: train_objectives[{i}] example {bad}'s label is {items[bad].label!r}, not a number: "
                f"{type(loss).__name__} takes a number per example (or numbers of one shape)"
            )
        if loss.reads_labels:  # all of the labels, checked now rather than at the batch that holds a bad one
            try:
                labels = stack_labels([ex.label for ex in items])
            except (TypeError, ValueError, RuntimeError) as e:
                raise ValueError(
                    f"fit: train_objectives[{i}]'s labels do not stack into one tensor for "
                    f"{type(loss).__name__} (each example's label must have the same shape): {e}"
                ) from None
            loss.check_labels(labels, width)
        for j, ex in enumerate(items):
            if len(ex.texts) != width:
                raise ValueError(
                    f"fit: train_objectives[{i}] example {j} has {len(ex.texts)} texts, example 0 has {width}: "
                    "every example of an objective needs the same columns"
                )
        loaders.append(loader)
        examples.append(items)
        losses.append(loss)
    return loaders, examples, losses


def check_fit_args(
    epochs: Any, warmup_steps: Any, evaluation_steps: Any, max_grad_norm: Any, scheduler: Any, evaluator: Any
) -> None:
    """The checks every sentence-transformers ``fit`` makes of the settings it shares, one line each."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"fit: epochs must be an integer of at least 1, got {epochs!r}")
    if not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"fit: warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    if not isinstance(evaluation_steps, int) or evaluation_steps < 0:
        raise ValueError(f"fit: evaluation_steps must be a non-negative integer, got {evaluation_steps!r}")
    if not max_grad_norm or max_grad_norm <= 0:
        raise ValueError(f"fit: max_grad_norm must be positive, got {max_grad_norm!r}")
    if str(scheduler).lower() not in SCHEDULERS:
        raise ValueError(f"fit: scheduler {scheduler!r} is not one of {', '.join(SCHEDULERS)}")
    if evaluation_steps and evaluator is None:
        raise ValueError(f"fit: evaluation_steps={evaluation_steps} needs an evaluator to run")


def _batch_size(loader: Any) -> int:
    size = getattr(loader, "batch_size", None)
    if size is None:  # a DataLoader built on a batch_sampler: its batches' size
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"fit: the DataLoader's batch_size must be a positive integer, got {size!r}")
    return size


def fit(
    model: Any,
    train_objectives: Iterable[tuple[Any, nn.Module]],
    evaluator: Any = None,
    epochs: int = 1,
    steps_per_epoch: int | None = None,
    scheduler: str = "WarmupLinear",
    warmup_steps: int = 10000,
    optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
    optimizer_params: dict[str, Any] | None = None,
    weight_decay: float = 0.01,
    evaluation_steps: int = 0,
    output_path: str | None = None,
    save_best_model: bool = True,
    max_grad_norm: float = 1,
    use_amp: bool = False,
    callback: Callable[[float, int, int], None] | None = None,
    show_progress_bar: bool = True,
    checkpoint_path: str | None = None,
    checkpoint_save_steps: int = 500,
    checkpoint_save_total_limit: int = 0,
    resume_from_checkpoint: bool = False,
) -> None:
    """Train ``model`` (a bertkit SentenceTransformer) as sentence-transformers' ``fit`` does (module docs)."""
    check_fit_args(epochs, warmup_steps, evaluation_steps, max_grad_norm, scheduler, evaluator)
    if steps_per_epoch is not None and (not isinstance(steps_per_epoch, int) or steps_per_epoch < 0):
        raise ValueError(f"fit: steps_per_epoch must be a non-negative integer or None, got {steps_per_epoch!r}")
    if checkpoint_path is None and resume_from_checkpoint:
        raise ValueError("fit: resume_from_checkpoint=True needs the checkpoint_path of the run to resume")
    if model.dtype != "fp32":
        raise ValueError(f"fit: this model computes in {model.dtype}; load it with dtype='fp32' to train it")
    optimizer_params = dict(optimizer_params if optimizer_params is not None else {"lr": 2e-5})
    loaders, examples, losses = _objectives(model, train_objectives)
    if resume_from_checkpoint and any(any(True for _ in loss.parameters()) for loss in losses):
        raise ValueError("fit: resume_from_checkpoint with a loss that has weights (SoftmaxLoss) is not supported")

    encoder = model.training_model
    batch_sizes = [_batch_size(loader) for loader in loaders]
    sizes = [len(items) for items in examples]
    # steps_per_epoch bounds a one-epoch run only, as in sentence-transformers
    max_steps = steps_per_epoch if steps_per_epoch and epochs == 1 else None
    per_epoch = steps_per_epoch or min(n // b for n, b in zip(sizes, batch_sizes))
    total = max_steps if max_steps else per_epoch * epochs * len(losses)

    from bertkit.sentence.datasets import NoDuplicatesDataLoader

    seed = 42  # sentence-transformers' training seed
    dataset = [(k, ex) for k, items in enumerate(examples) for ex in items]
    sampler = _RoundRobin(
        sizes,
        batch_sizes,
        [isinstance(getattr(loader, "sampler", None), torch.utils.data.RandomSampler) for loader in loaders],
        [bool(getattr(loader, "drop_last", False)) for loader in loaders],
        seed=seed,
        custom=[
            _NoDuplicatesSampler(items, b, seed) if isinstance(loader, NoDuplicatesDataLoader) else None
            for loader, items, b in zip(loaders, examples, batch_sizes)
        ],
    )

    def loss_fn(_: nn.Module, batch: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        return losses[batch["objective"]](batch["features"], batch["labels"]), {}

    for loss in losses:
        loss.to(model.device)
    run_fit(
        model,
        encoder,
        [encoder, *losses],
        dataset,
        _Collate(model),
        sampler,
        loss_fn,
        total_steps=total,
        max_steps=max_steps,
        batch_size=batch_sizes[0],
        epochs=epochs,
        evaluator=evaluator,
        scheduler=scheduler,
        warmup_steps=warmup_steps,
        optimizer_class=optimizer_class,
        optimizer_params=optimizer_params,
        weight_decay=weight_decay,
        evaluation_steps=evaluation_steps,
        output_path=output_path,
        save_best_model=save_best_model,
        max_grad_norm=max_grad_norm,
        use_amp=use_amp,
        callback=callback,
        show_progress_bar=show_progress_bar,
        checkpoint_path=checkpoint_path,
        checkpoint_save_steps=checkpoint_save_steps,
        checkpoint_save_total_limit=checkpoint_save_total_limit,
        resume_from_checkpoint=resume_from_checkpoint,
        losses=losses,
    )
    if evaluator is None and output_path is not None:
        model.save(output_path)


@contextlib.contextmanager
def _rng_fence(device: torch.device) -> Iterator[None]:
    """Torch's (CPU, and the training GPU's), Python's and NumPy's RNG states as they were before, whatever
    the body draws: an evaluation does not shift the dropout masks or draws of the training after it."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices: list[int] = []
    if device.type == "cuda":
        devices = [device.index if device.index is not None else torch.cuda.current_device()]
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def run_fit(
    model: Any,
    module: nn.Module,
    optimized: Sequence[nn.Module],
    dataset: Sequence[Any],
    collate_fn: Callable[[list[Any]], dict[str, Any]],
    batch_sampler: Any,
    loss_fn: Callable[[nn.Module, dict[str, Any]], tuple[Tensor, dict[str, Any]]],
    *,
    total_steps: int,
    max_steps: int | None,
    batch_size: int,
    epochs: int,
    evaluator: Any,
    scheduler: str,
    warmup_steps: int,
    optimizer_class: type[torch.optim.Optimizer],
    optimizer_params: dict[str, Any],
    weight_decay: float,
    evaluation_steps: int,
    output_path: str | None,
    save_best_model: bool,
    max_grad_norm: float,
    use_amp: bool,
    callback: Callable[[float, int, int], None] | None,
    show_progress_bar: bool,
    checkpoint_path: str | None = None,
    checkpoint_save_steps: int = 500,
    checkpoint_save_total_limit: int = 0,
    resume_from_checkpoint: bool = False,
    losses: Sequence[Any] = (),
) -> None:
    """The training every sentence-transformers ``fit`` shares, on bertkit's Trainer: AdamW groups over
    ``optimized``, the named schedule over ``total_steps``, the evaluator after every epoch and every
    ``evaluation_steps`` (``callback`` with its primary score, each better score saved into
    ``output_path`` with ``save_best_model``). ``model`` (a SentenceTransformer or CrossEncoder) gives
    ``device``, ``save`` and ``_sync_inference``, which hands ``module``'s trained weights to its
    inference path; ``loss_fn(module, batch)`` computes the loss of one collated batch."""
    from bertkit.training.trainer import Trainer

    optimizer = optimizer_class(_param_groups(optimized, weight_decay), **optimizer_params)
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, _schedule(str(scheduler).lower(), warmup_steps, total_steps)
    )
    held: list[Trainer] = []  # the evaluation reads the Trainer it runs in
    evaluate = _fit_evaluation(model, evaluator, output_path, callback, save_best_model, held)

    def save_checkpoint_model(_: nn.Module, directory: Path) -> None:
        model._sync_inference()
        model.save(directory)

    device = model.device
    precision = ("fp16" if device.type == "cuda" else "bf16") if use_amp else "fp32"
    with tempfile.TemporaryDirectory(prefix="bertkit-fit-") as tmp:
        config = _fit_arguments(
            output=str(checkpoint_path) if checkpoint_path is not None else tmp,
            checkpointing=checkpoint_path is not None,
            resume=bool(resume_from_checkpoint),
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            lr=float(optimizer_params.get("lr", 1e-3)),
            max_grad_norm=max_grad_norm,
            precision=precision,
            evaluation_steps=evaluation_steps,
            evaluates=evaluator is not None,
            save_steps=checkpoint_save_steps,
            keep=checkpoint_save_total_limit,
            progress=show_progress_bar,
            device=device,
        )
        trainer = Trainer(
            module,
            config,
            dataset,
            collate_fn=collate_fn,
            batch_sampler=batch_sampler,
            evaluate=evaluate if evaluator is not None else None,
            loss_fn=loss_fn,
            save_model=save_checkpoint_model,
            optimizers=(optimizer, lr_schedule),
        )
        held.append(trainer)
        from bertkit.sentence.model_card import keep_logs, record_training

        changed = _changed_fit_settings(
            epochs, batch_size, scheduler, warmup_steps, optimizer_params, weight_decay, max_grad_norm, device, use_amp
        )
        record_training(model, [{"name": None, "size": len(dataset), "columns": []}], list(losses), changed, trainer)
        try:
            trainer.train()
        finally:
            keep_logs(model)  # the run's folder may be a temporary one
            model._sync_inference()


def _fit_evaluation(
    model: Any,
    evaluator: Any,
    output_path: str | None,
    callback: Callable[[float, int, int], None] | None,
    save_best_model: bool,
    held: list[Any],
) -> Callable[[nn.Module], dict[str, float]]:
    """The Trainer's ``evaluate`` of a fit: the evaluator (its CSV files in ``output_path/eval``) inside a
    fork of the RNGs, ``callback`` with its primary score, each better score saved into ``output_path``
    with ``save_best_model``. ``held[0]`` is the Trainer it runs in."""
    eval_dir = None
    if output_path is not None and evaluator is not None:
        eval_dir = Path(output_path) / "eval"
        eval_dir.mkdir(parents=True, exist_ok=True)

    def evaluate(module: nn.Module) -> dict[str, float]:
        with _rng_fence(model.device):
            return _evaluate(module)

    def _evaluate(_: nn.Module) -> dict[str, float]:
        trainer = held[0]
        model._sync_inference()
        epoch, steps = trainer.step / trainer.steps_per_epoch, trainer.step
        result = evaluator(model, output_path=None if eval_dir is None else str(eval_dir), epoch=epoch, steps=steps)
        metrics = result if isinstance(result, dict) else {"evaluator": result}
        key = getattr(evaluator, "primary_metric", None) or "evaluator"
        score = next((float(v) for k, v in metrics.items() if str(k).endswith(key)), None)
        if score is not None:
            if callback is not None:
                callback(score, epoch, steps)
            higher = getattr(evaluator, "greater_is_better", True)
            # the best score lives in the Trainer's checkpointed state (fit sets no best_metric, so the
            # Trainer leaves it to us): a resumed run does not save a score worse than one before the kill
            best = trainer.best_metric
            if best is None or (score > best if higher else score < best):
                trainer.best_metric, trainer.best_step = score, steps
                if save_best_model and output_path is not None:
                    model.save(output_path)
        return {str(k): float(v) for k, v in metrics.items() if isinstance(v, (int, float, np.number))}

    return evaluate


def _fit_arguments(
    *,
    output: str,
    checkpointing: bool,
    resume: bool,
    epochs: int,
    max_steps: int | None,
    batch_size: int,
    lr: float,
    max_grad_norm: float,
    precision: str,
    evaluation_steps: int,
    evaluates: bool,
    save_steps: int,
    keep: int,
    progress: bool,
    device: torch.device,
) -> Any:
    """The Trainer's arguments for a fit: checkpoints (and plots) only into a ``checkpoint_path``."""
    from bertkit.training.training_args import TrainingArguments

    return TrainingArguments(
        output=output,
        resume=resume,
        epochs=float(epochs),
        max_steps=max_steps,
        batch_size=batch_size,
        lr=lr,
        max_grad_norm=float(max_grad_norm),
        precision=precision,
        seed=42,
        eval_every=evaluation_steps,
        eval_each_epoch=evaluates,
        save_every=save_steps if checkpointing else 0,
        keep_last=keep if keep > 0 else 1 << 30,
        save_final=False,
        plot=checkpointing,
        progress=bool(progress),
        device=str(device),
        run_name="fit",
    )


def _changed_fit_settings(
    epochs: int,
    batch_size: int,
    scheduler: str,
    warmup_steps: int,
    optimizer_params: dict[str, Any],
    weight_decay: float,
    max_grad_norm: float,
    device: torch.device,
    use_amp: bool,
) -> dict[str, Any]:
    """The fit settings a model card records: those that differ from fit's defaults."""
    settings = {
        "num_train_epochs": epochs,
        "per_device_train_batch_size": batch_size,
        "scheduler": str(scheduler),
        "warmup_steps": warmup_steps,
        "learning_rate": optimizer_params.get("lr", 2e-5),
        "weight_decay": weight_decay,
        "max_grad_norm": max_grad_norm,
        "fp16" if device.type == "cuda" else "bf16": use_amp,
    }
    defaults = {
        "num_train_epochs": 1,
        "scheduler": "WarmupLinear",
        "warmup_steps": 10000,
        "learning_rate": 2e-5,
        "weight_decay": 0.01,
        "max_grad_norm": 1,
        "fp16": False,
        "bf16": False,
    }
    return {k: v for k, v in settings.items() if defaults.get(k, object()) != v}
