"""``CrossEncoderTrainer``: sentence-transformers' v4+ cross-encoder training call, run by bertkit's one Trainer.

A script written for sentence-transformers 4 to 6 runs with its import lines changed::

    from bertkit import CrossEncoder
    from bertkit.sentence.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments, losses

    model = CrossEncoder(folder)                       # a 1-label head (or a plain BERT: a new head)
    train = {"query": [...], "passage": [...], "label": [...]}   # or a datasets.Dataset, or row dicts
    args = CrossEncoderTrainingArguments(output_dir="out", num_train_epochs=1, per_device_train_batch_size=16,
        learning_rate=2e-5, warmup_ratio=0.1, eval_strategy="steps", eval_steps=100)
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train,
        loss=losses.BinaryCrossEntropyLoss(model), evaluator=dev_evaluator)
    trainer.train()
    model.save_pretrained("out/final")

Everything but the model and the losses is :class:`~bertkit.sentence.trainer.SentenceTransformerTrainer`'s:
the datasets and their label column rule, the batch samplers drawn as sentence-transformers' draw,
transformers' AdamW, schedule and clipping, ``eval_loss`` and the evaluator's metrics under ``eval_``,
checkpoints that resume exactly. As in sentence-transformers, a batch reaches the loss as raw texts,
one list per text column (the loss pairs and tokenizes them), with the label tensor. The default loss
is sentence-transformers': ``BinaryCrossEntropyLoss`` for a 1-label head, ``CrossEntropyLoss`` for a
wider one. Before training, every dataset is checked against its loss: the number of text columns,
a label column when the loss needs one, and each label (a 0..1 number for BCE, a class id of the head
for cross-entropy, a finite number for MSE).

Listwise rows, as sentence-transformers' learning-to-rank losses read them (``ListNetLoss``, ``LambdaLoss``,
``RankNetLoss``, ``ListMLELoss``, ``PListMLELoss``, ``ADRMSELoss``), are a query, a list of documents and
a list of labels, one per document; the lists may differ in length. The loss then gets
``[queries, docs_lists]`` and one label tensor per row. A dataset whose rows the loss cannot read (a
documents entry that is not a non-empty list of texts, labels whose count differs from the documents',
a list given to a pairwise loss) is refused before training, naming the loss, the column, the row and
the value. The no-duplicates sampler compares a list as sentence-transformers does, by its ``str()``.

The weights trained are the CrossEncoder's fp32 training model; ``predict``, ``rank`` and ``save`` use
them after ``train()``, and every checkpoint is a folder sentence-transformers' CrossEncoder loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.sentence.cross_encoder.losses.base import _short
from bertkit.sentence.trainer import LABEL_COLUMNS, SentenceTransformerTrainer, _Collate, _is_list, _Table
from bertkit.sentence.training_args import SentenceTransformerTrainingArguments, _refuse_arg, _STArgumentsType

__all__ = ["CrossEncoderTrainer", "CrossEncoderTrainingArguments"]


@dataclasses.dataclass(kw_only=True)
class CrossEncoderTrainingArguments(SentenceTransformerTrainingArguments, metaclass=_STArgumentsType):
    """sentence-transformers' cross-encoder training arguments: transformers' (every name and default
    of :class:`~bertkit.training.training_args.TrainingArguments` in transformers' names) and the same
    ``batch_sampler`` / ``multi_dataset_batch_sampler`` and ``learning_rate_mapping`` as the
    sentence-transformer's; ``prompts`` and ``router_mapping`` are refused by name."""

    def __post_init__(self) -> None:
        if self.prompts:
            raise _refuse_arg(
                "prompts",
                self.prompts,
                "a cross-encoder's training texts take no prompts here; add them to the texts",
                type(self).__name__,
            )
        super().__post_init__()


class _TextCollate(_Collate):
    """sentence-transformers' CrossEncoderDataCollator: each text column's raw texts (a listwise row's
    documents as a list; the loss tokenizes the pairs), and the labels: a tensor of one value per row,
    or one tensor per row when each row's label is a list."""

    def __call__(self, items: list[tuple[int, int]]) -> dict[str, Any]:
        k = items[0][0]
        table = self.tables[k]
        rows = [i for _, i in items]
        labels: Any = None
        if table.labels is not None:
            values = [table.labels[i] for i in rows]
            if isinstance(values[0], Tensor):
                labels = torch.stack(values)
            elif _is_list(values[0]):
                labels = [torch.tensor(v) for v in values]
            else:
                labels = torch.tensor(values)
        return {"table": k, "features": self.features(table, rows), "labels": labels}

    def features(self, table: _Table, rows: list[int]) -> list[Any]:
        return [[column[i] for i in rows] for column in table.texts]


class CrossEncoderTrainer(SentenceTransformerTrainer):
    """sentence-transformers' ``CrossEncoderTrainer`` on bertkit's Trainer (module docs). ``trainer.model``
    is the CrossEncoder; ``train()``, ``evaluate()``, ``state``, ``save_model`` and the rest are the
    sentence-transformer trainer's."""

    _model_name = "CrossEncoder"
    _args_type = CrossEncoderTrainingArguments
    _collate_type = _TextCollate
    _listwise_rows = True

    def _model_type(self) -> type:
        from bertkit.sentence.cross_encoder.cross_encoder import CrossEncoder

        return CrossEncoder

    def _loss_type(self) -> tuple[type, str]:
        from bertkit.sentence.cross_encoder.losses.base import CrossEncoderLoss

        return CrossEncoderLoss, "bertkit.cross_encoder.losses"

    def _default_loss(self, model: Any) -> nn.Module:
        from bertkit.sentence.cross_encoder.losses import BinaryCrossEntropyLoss, CrossEntropyLoss

        # sentence-transformers' default: BCE for one label, cross-entropy over a wider head
        return BinaryCrossEntropyLoss(model) if model.num_labels == 1 else CrossEntropyLoss(model)

    def _check_table(self, fn: Any, table: _Table, where: str) -> None:
        """Refuse a dataset ``fn`` cannot read: its text columns (a text, or a listwise row's list of
        documents), a missing label column, a bad label."""
        # not the sentence-transformer trainer's check, which stacks the labels (a listwise row has its own count)
        name = type(fn).__name__
        try:
            fn.check_columns(len(table.text_columns))
        except ValueError:
            raise self._refuse(
                where, f"has {len(table.text_columns)} text columns {table.text_columns}, which {name} cannot take"
            ) from None
        if fn.needs_labels and table.labels is None:
            raise self._refuse(where, f"has no label column ({', '.join(LABEL_COLUMNS)}), which {name} needs")
        texts = table.texts
        labels = None if table.labels is None or not fn.needs_labels else table.labels
        bad = fn.find_problem(texts, labels)
        if bad is None:
            return
        column, row, why = bad
        if column is None:
            assert labels is not None
            what, value = f"label column {table.label_column!r}", labels[row]
        else:
            what, value = f"column {table.text_columns[column]!r}", texts[column][row]
        raise self._refuse(where, f"{what} row {row} is {_short(value)}: {why} ({name})")
