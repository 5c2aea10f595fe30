"""``CrossEncoder.fit``: sentence-transformers' pre-v4 cross-encoder training call, run by bertkit's one Trainer.

A script written for sentence-transformers' ``CrossEncoder.fit`` runs unchanged::

    from torch.utils.data import DataLoader
    from bertkit import CrossEncoder, InputExample

    model = CrossEncoder(folder)  # a sequence-classification folder with a 1-label head
    examples = [InputExample(texts=[query, passage], label=relevance) for query, passage, relevance in rows]
    model.fit(DataLoader(examples, shuffle=True, batch_size=16), evaluator=evaluator, epochs=1,
              warmup_steps=100, output_path="out")

What sentence-transformers does, done the same way: each batch of (text, text) InputExamples is
tokenized as pairs (cut at the model's ``max_length``, the longer text first); the head's logits
(flattened for one label) go through ``activation_fct`` into ``loss_fct``, by default
``BCEWithLogitsLoss`` against float labels for one label, ``CrossEntropyLoss`` against class ids
for more. The optimizer, schedule, clipping, evaluator, ``callback`` and save-best rules are the
ones :func:`bertkit.sentence.fit.run_fit` runs for ``SentenceTransformer.fit``, over
``floor(examples / batch_size) x epochs`` steps. As in sentence-transformers, ``output_path``
receives the model only when an evaluator scores it better than before (with ``save_best_model``):
without an evaluator nothing is saved, so call ``save`` after ``fit``.

The weights trained are :attr:`CrossEncoder.training_model`'s, an fp32 copy with gradients; the
inference model that ``predict``, ``rank`` and ``save`` use takes them after every evaluation and
at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["fit", "pair_collate"]


def pair_collate(model: Any, batch: Sequence[Any]) -> tuple[dict[str, Tensor], Tensor]:
    """InputExamples -> (their (text, text) pairs tokenized together, the labels: float for a 1-label
    head, class ids for a wider one)."""
    features = model.preprocess([(ex.texts[0], ex.texts[1]) for ex in batch])
    dtype = torch.float if model.num_labels == 1 else torch.long
    return features, torch.tensor([ex.label for ex in batch], dtype=dtype)


class _Collate:
    """The Trainer's collate_fn: a batch of InputExamples -> {"features", "labels"}."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, items: list[Any]) -> dict[str, Any]:
        features, labels = pair_collate(self.model, items)
        return {"features": features, "labels": labels}


def _check_examples(loader: Any, num_labels: int, default_loss: bool) -> list[Any]:
    """The loader's InputExamples, each checked: two texts and a label the head's loss can take."""
    from bertkit.sentence.cross_encoder.losses.base import class_id_problem, is_score
    from bertkit.sentence.fit import loader_examples

    examples = loader_examples(loader, "train_dataloader")
    for j, ex in enumerate(examples):
        texts = ex.texts
        if len(texts) != 2:
            raise ValueError(
                f"fit: train_dataloader example {j} has {len(texts)} texts; "
                "a cross-encoder trains on (text, text) pairs"
            )
        label = ex.label
        if num_labels == 1:
            if not is_score(label):
                raise ValueError(f"fit: example {j}'s label {label!r} is not a number; a 1-label head takes a score")
            if default_loss and not 0.0 <= label <= 1.0:
                raise ValueError(
                    f"fit: example {j}'s label {label!r} is outside 0..1, which BCEWithLogitsLoss takes as a "
                    "probability; scale the scores or pass loss_fct"
                )
        elif (why := class_id_problem(label, num_labels)) is not None:
            raise ValueError(f"fit: example {j}'s label {label!r} is {why}")
    return examples


def _check_fit_call(
    model: Any, loss_fct: Any, activation_fct: Any, checkpoint_path: str | None, resume_from_checkpoint: bool
) -> None:
    """Refuse, before anything runs, a fit call that cannot train ``model``."""
    if loss_fct is not None and not callable(loss_fct):
        raise TypeError(f"fit: loss_fct must be callable (e.g. torch.nn.MSELoss()), got {loss_fct!r}")
    if not callable(activation_fct):
        raise TypeError(f"fit: activation_fct must be callable (e.g. torch.nn.Identity()), got {activation_fct!r}")
    if checkpoint_path is None and resume_from_checkpoint:
        raise ValueError("fit: resume_from_checkpoint=True needs the checkpoint_path of the run to resume")
    if model.dtype != "fp32":
        raise ValueError(f"fit: this model computes in {model.dtype}; load it with dtype='fp32' to train it")


def fit(
    model: Any,
    train_dataloader: Any,
    evaluator: Any = None,
    epochs: int = 1,
    loss_fct: Callable[[Tensor, Tensor], Tensor] | None = None,
    activation_fct: Callable[[Tensor], Tensor] = nn.Identity(),
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
    *,
    checkpoint_path: str | None = None,
    checkpoint_save_steps: int = 500,
    checkpoint_save_total_limit: int = 0,
    resume_from_checkpoint: bool = False,
) -> None:
    """Train ``model`` (a bertkit CrossEncoder) as sentence-transformers' ``CrossEncoder.fit`` does (module docs).

    ``checkpoint_path``, ``checkpoint_save_steps``, ``checkpoint_save_total_limit`` and
    ``resume_from_checkpoint`` are bertkit's keyword-only extras (sentence-transformers'
    ``CrossEncoder.fit`` has no checkpoints): they mean what they mean in ``SentenceTransformer.fit``,
    and a run killed after a checkpoint resumes to the weights of the uninterrupted run."""
    from bertkit.sentence.fit import _batch_size, _RoundRobin, check_fit_args, run_fit

    check_fit_args(epochs, warmup_steps, evaluation_steps, max_grad_norm, scheduler, evaluator)
    _check_fit_call(model, loss_fct, activation_fct, checkpoint_path, resume_from_checkpoint)
    examples = _check_examples(train_dataloader, model.num_labels, loss_fct is None)
    if not isinstance(train_dataloader, torch.utils.data.DataLoader):
        # a NoDuplicatesDataLoader batches a bi-encoder's in-batch negatives; a cross-encoder has none
        raise TypeError(
            f"fit: train_dataloader must be a DataLoader over a list of InputExamples, got "
            f"{type(train_dataloader).__name__} (no-duplicates batches are for a bi-encoder's in-batch negatives)"
        )
    optimizer_params = dict(optimizer_params if optimizer_params is not None else {"lr": 2e-5})
    num_labels = model.num_labels
    batch_size = _batch_size(train_dataloader)
    if loss_fct is None:
        loss_fct = nn.BCEWithLogitsLoss() if num_labels == 1 else nn.CrossEntropyLoss()
    if isinstance(loss_fct, nn.Module):
        loss_fct.to(model.device)

    network = model.training_model
    sampler = _RoundRobin(
        [len(examples)],
        [batch_size],
        [isinstance(train_dataloader.sampler, torch.utils.data.RandomSampler)],
        [bool(getattr(train_dataloader, "drop_last", False))],
        seed=42,  # sentence-transformers' training seed
    )

    def loss_fn(module: nn.Module, batch: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        logits = module(**batch["features"]).logits
        if num_labels == 1:
            logits = logits.view(-1)
        return loss_fct(activation_fct(logits), batch["labels"]), {}

    run_fit(
        model,
        network,
        [network],
        examples,
        _Collate(model),
        sampler,
        loss_fn,
        total_steps=len(examples) // batch_size * epochs,
        max_steps=None,
        batch_size=batch_size,
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
        losses=[loss_fct],
    )
