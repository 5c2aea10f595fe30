"""``SentenceTransformerTrainer``: sentence-transformers' v3+ training call, run by bertkit's one Trainer.

A script written for sentence-transformers 3 to 6 runs with its import lines changed::

    from bertkit import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
    from bertkit.training_args import BatchSamplers

    model = SentenceTransformer(folder)
    train = {"anchor": [...], "positive": [...]}       # or a datasets.Dataset, or a list of row dicts
    args = SentenceTransformerTrainingArguments(output_dir="out", num_train_epochs=1, per_device_train_batch_size=16,
        learning_rate=2e-5, warmup_ratio=0.1, batch_sampler=BatchSamplers.NO_DUPLICATES,
        eval_strategy="steps", eval_steps=100, save_strategy="steps", save_steps=100, logging_steps=100)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, eval_dataset=dev,
        loss=losses.MultipleNegativesRankingLoss(model), evaluator=dev_evaluator)
    trainer.train()
    model.save_pretrained("out/final")

What sentence-transformers does, done the same way. A dataset is a ``datasets.Dataset`` (read through
its ``column_names`` and columns; the ``datasets`` library itself is not needed), a dict of equal-length
columns, or a list of row dicts; a dict of such datasets trains on several, each with the loss of its
name when ``loss`` is a dict. The label column is the first of ``label``, ``labels``, ``score``,
``scores``; every other column is a text column, in column order, tokenized with ``model.preprocess``. A
label is a number or, for the distillation losses, a list or array of them (a teacher's vector), the
same shape on every row; the loss checks the labels before training.
The batches are those of sentence-transformers' samplers for the same seed: a shuffle seeded by the
seed plus the epoch (accelerate's seedable sampler), ``NO_DUPLICATES`` batches with no value twice,
``GROUP_BY_LABEL`` batches of label pairs, and over several datasets ``PROPORTIONAL`` (every batch of
every dataset, in a seeded random order) or ``ROUND_ROBIN`` (one batch of each in turn until one runs
out), drawn from one generator exactly as theirs draw. The optimizer and schedule are transformers'
(AdamW over the encoder's and the losses' weights, no weight decay on biases and LayerNorm, linear
warmup from 0 over ``ceil(steps x warmup_ratio)`` steps, then linear decay), with gradient clipping
to ``max_grad_norm``. An evaluation logs the eval dataset's loss (``eval_loss``, ``eval_{name}_loss``
for several) and the evaluator's metrics under ``eval_`` (``eval_sts-dev_spearman_cosine``), the
evaluator writing its CSV files into ``output_dir/eval``; ``metric_for_best_model`` and
``load_best_model_at_end`` keep the best model as the Trainer does.

The loop is :class:`~bertkit.training.trainer.Trainer`'s (progress bar, ``metrics.jsonl``, checkpoints
that sentence-transformers loads, exact resume with ``train(resume_from_checkpoint=True)``). An
evaluation runs inside a fork of the RNGs, so the dropout masks of the steps after it are those of a run
without it. ``prompts``, ``router_mapping`` and ``learning_rate_mapping`` are refused by name, as are a
batch sampler given as a class or function and the Trainer arguments that have no meaning here.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.sentence.fit import _label_shape, stack_labels
from bertkit.sentence.training_args import (
    BatchSamplers,
    MultiDatasetBatchSamplers,
    SentenceTransformerTrainingArguments,
    _mapped_rates,
    _prompt_for,
)

__all__ = [
    "BatchSamplers",
    "MultiDatasetBatchSamplers",
    "SentenceTransformerTrainer",
    "SentenceTransformerTrainingArguments",
]

# sentence-transformers' label column names, the first one present being the labels
LABEL_COLUMNS = ("label", "labels", "score", "scores")
_RESERVED_COLUMNS = ("return_loss", "dataset_name")
_LOSS_WEIGHTS = "trainer_losses.safetensors"  # a checkpoint's loss weights (SoftmaxLoss's classifier)
_MAX_RESAMPLE_PASSES = 2  # extra shuffled passes a no-duplicates epoch may take, as sentence-transformers'


# -- datasets -----------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Table:
    """One dataset, checked: its text columns (names and values, in order) and its labels."""

    name: str | None
    text_columns: list[str]
    texts: list[list[Any]]  # one list per text column: texts (a listwise row: its list of documents)
    label_column: str | None
    labels: list[Any] | None

    def __len__(self) -> int:
        return len(self.texts[0])

    def row_values(self, i: int) -> frozenset[str]:
        """The row's values as sentence-transformers' no-duplicates sampler compares them (labels aside)."""
        # a list of documents as its str(), which is what sentence-transformers compares
        return frozenset(v if isinstance(v, str) else str(v) for v in (column[i] for column in self.texts))


def _where(kind: str, name: str | None) -> str:
    return f"{kind}_dataset" if name is None else f"{kind}_dataset[{name!r}]"


def _columns_of(data: Any, where: str) -> dict[str, list[Any]]:
    """The columns of a dataset given as a datasets.Dataset, a dict of columns or a list of row dicts."""
    if isinstance(data, Mapping):
        columns = {str(k): v for k, v in data.items()}
        for name, values in columns.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise ValueError(f"{where}: column {name!r} is {type(values).__name__}, not a list of values")
        return {k: list(v) for k, v in columns.items()}
    names = getattr(data, "column_names", None)
    if names is not None and not isinstance(data, (list, tuple)):
        if isinstance(names, Mapping):
            raise ValueError(f"{where}: a DatasetDict inside a DatasetDict cannot be trained on")
        return {str(name): list(data[name]) for name in names}
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError(f"{where} holds no rows")
        if not all(isinstance(row, Mapping) for row in data):
            bad = next(i for i, row in enumerate(data) if not isinstance(row, Mapping))
            raise ValueError(f"{where}: row {bad} is {type(data[bad]).__name__}, not a dict of column values")
        keys = list(data[0])
        for i, row in enumerate(data):
            if list(row) != keys:
                raise ValueError(f"{where}: row {i} has the columns {list(row)}, row 0 has {keys}")
        return {str(k): [row[k] for row in data] for k in keys}
    raise ValueError(
        f"{where} is {type(data).__name__}: give a datasets.Dataset, a dict of columns or a list of row dicts"
    )


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _table(data: Any, kind: str, name: str | None, lists: bool = False) -> _Table:
    """``data`` read and checked as sentence-transformers reads a dataset (see the module docs).
    ``lists``: a text column may hold a list per row (a listwise row's documents) and a label column a
    list per row of any length (their labels); the trainer's loss checks them."""
    where = _where(kind, name)
    columns = _columns_of(data, where)
    if not columns:
        raise ValueError(f"{where} has no columns")
    if reserved := [c for c in columns if c in _RESERVED_COLUMNS]:
        raise ValueError(f"{where}: the column name(s) {reserved} are reserved by sentence-transformers; rename them")
    lengths = {c: len(v) for c, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{where}: the columns have different lengths {lengths}")
    if not next(iter(lengths.values())):
        raise ValueError(f"{where} holds no rows")
    label_columns = [c for c in LABEL_COLUMNS if c in columns]
    if len(label_columns) > 1:
        raise ValueError(
            f"{where} has the label columns {label_columns}: sentence-transformers takes the first as the labels "
            "and would read the others as text; keep one"
        )
    label = label_columns[0] if label_columns else None
    text_columns = [c for c in columns if c != label]
    if not text_columns:
        raise ValueError(f"{where} has no text column beside its label column {label!r}")
    for c in text_columns:
        for i, value in enumerate(columns[c]):
            if not isinstance(value, str) and not (lists and _is_list(value)):
                raise ValueError(f"{where}: column {c!r} row {i} is {type(value).__name__} ({value!r}), not a text")
    labels = None
    if label is not None:
        labels = columns[label]
        shape = None
        for i, value in enumerate(labels):
            if lists and _is_list(value):
                continue
            # a number, or a vector / matrix of numbers (a teacher's embeddings or scores), one shape for all rows
            row_shape = _label_shape(value)
            if row_shape is None:
                raise ValueError(f"{where}: label column {label!r} row {i} is {value!r}, not a number")
            if shape is None:
                shape = row_shape
            elif row_shape != shape:
                raise ValueError(
                    f"{where}: label column {label!r} row {i} has the shape {row_shape}, row 0 {shape}: "
                    "every row's label needs the same shape"
                )
    return _Table(name, text_columns, [columns[c] for c in text_columns], label, labels)


def _is_dataset(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        or hasattr(value, "column_names")
        or (isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], Mapping))
    )


def _tables(data: Any, kind: str, lists: bool = False) -> list[_Table] | None:
    """A dataset, or a dict (DatasetDict) of named datasets, as tables; None for None."""
    if data is None:
        return None
    named = getattr(data, "column_names", None)
    several = isinstance(data, Mapping) and (
        isinstance(named, Mapping) or (bool(data) and all(_is_dataset(v) for v in data.values()))
    )
    if not several:
        return [_table(data, kind, None, lists)]
    if not data:
        raise ValueError(f"{kind}_dataset is an empty dict of datasets")
    return [_table(part, kind, str(name), lists) for name, part in data.items()]


# -- batches --------------------------------------------------------------------------------------------


def _batch_count(n: int, batch_size: int, drop_last: bool) -> int:
    return n // batch_size if drop_last else -(-n // batch_size)


def _plain_batches(n: int, batch_size: int, drop_last: bool, generator: torch.Generator) -> Iterator[list[int]]:
    """torch's BatchSampler over a RandomSampler drawing from ``generator`` (lazily, as theirs do)."""
    sampler = torch.utils.data.RandomSampler(range(n), generator=generator)
    return iter(torch.utils.data.BatchSampler(sampler, batch_size, drop_last))


def _no_duplicate_batches(
    table: _Table, batch_size: int, drop_last: bool, generator: torch.Generator, seed: int
) -> Iterator[list[int]]:
    """sentence-transformers' NoDuplicatesBatchSampler: the generator reseeded with ``seed`` (the
    training seed plus the epoch), batches with no value twice from a shuffled pass (a row that clashes
    waits for a later batch), up to two more passes when the first falls short of the epoch's batches."""
    from bertkit.sentence.datasets import _one_pass

    generator.manual_seed(seed)
    keys = [table.row_values(i) for i in range(len(table))]
    want = _batch_count(len(keys), batch_size, drop_last)

    def one_pass() -> Iterator[list[int]]:
        order = torch.randperm(len(keys), generator=generator, dtype=torch.int32).tolist()
        return _one_pass(keys, order, batch_size, drop_last=drop_last)

    yielded = 0
    for batch in one_pass():
        yield batch
        yielded += 1
    if yielded == 0 or yielded >= want:
        return
    for _ in range(_MAX_RESAMPLE_PASSES):
        for batch in one_pass():
            yield batch
            yielded += 1
            if yielded >= want:
                return
    warnings.warn(
        f"no-duplicates batches: only {yielded} of {want} batches without a repeated value; the texts hold too "
        "few distinct values for this batch size",
        stacklevel=2,
    )


class _GroupByLabel:
    """sentence-transformers' GroupByLabelBatchSampler: labels with 2 or more rows take turns giving 2
    rows each, in a shuffled order per round, cut into batches of ``batch_size``."""

    def __init__(self, table: _Table, batch_size: int, drop_last: bool, where: str) -> None:
        if table.labels is None:
            raise ValueError(
                f"{where}: batch_sampler 'group_by_label' needs a label column ({', '.join(LABEL_COLUMNS)})"
            )
        if batch_size < 4 or batch_size % 2:
            raise ValueError(
                f"{where}: batch_sampler 'group_by_label' needs an even batch size of 4 or more, got {batch_size}"
            )
        groups: dict[Any, list[int]] = {}
        for i, label in enumerate(table.labels):
            groups.setdefault(label.item() if isinstance(label, Tensor) else label, []).append(i)
        self.groups = {k: v for k, v in groups.items() if len(v) >= 2}
        if len(self.groups) < 2:
            raise ValueError(
                f"{where}: batch_sampler 'group_by_label' needs 2 labels with 2 rows or more, {len(self.groups)} have"
            )
        pairs = sorted((len(v) // 2 for v in self.groups.values()), reverse=True)
        self.stream = 2 * sum(min(p, pairs[1]) for p in pairs)
        self.batch_size, self.drop_last = batch_size, drop_last

    def __len__(self) -> int:
        n = self.stream // self.batch_size
        return n + int(not self.drop_last and self.stream % self.batch_size >= 4)

    def batches(self, generator: torch.Generator, seed: int) -> Iterator[list[int]]:
        from collections import deque

        generator.manual_seed(seed)
        queues = {}
        for label, rows in self.groups.items():
            perm = torch.randperm(len(rows), generator=generator)[: len(rows) // 2 * 2]
            queues[label] = deque(rows[i] for i in perm)
        remaining = list(queues)
        batch: list[int] = []
        last = None
        while len(remaining) >= 2:
            remaining = [remaining[i] for i in torch.randperm(len(remaining), generator=generator)]
            if batch and remaining[0] == last:
                remaining[0], remaining[1] = remaining[1], remaining[0]
            for label in remaining:
                batch.extend((queues[label].popleft(), queues[label].popleft()))
                if len(batch) >= self.batch_size:
                    yield batch[: self.batch_size]
                    batch = batch[self.batch_size :]
            last = remaining[-1]
            remaining = [label for label in remaining if queues[label]]
        if not self.drop_last and len(batch) >= 4:
            yield batch


class _Batches:
    """The Trainer's batch sampler: indices into the tables' rows laid end to end, drawn as
    sentence-transformers' samplers draw them for (seed, epoch), so that a resumed run sees the same."""

    def __init__(
        self,
        tables: list[_Table],
        kind: BatchSamplers,
        multi: MultiDatasetBatchSamplers | None,
        batch_size: int,
        drop_last: bool,
        seed: int,
        where: str,
    ) -> None:
        self.tables, self.kind, self.multi = tables, kind, multi
        self.batch_size, self.drop_last, self.seed, self.epoch = batch_size, drop_last, seed, 0
        self.offsets = [0, *accumulate(len(t) for t in tables)][:-1]
        self.grouped = (
            [_GroupByLabel(t, batch_size, drop_last, _where(where, t.name)) for t in tables]
            if kind == BatchSamplers.GROUP_BY_LABEL
            else None
        )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _length(self, k: int) -> int:
        if self.grouped is not None:
            return len(self.grouped[k])
        return _batch_count(len(self.tables[k]), self.batch_size, self.drop_last)

    def _one(self, k: int, generator: torch.Generator, single: bool) -> Iterator[list[int]]:
        """Dataset k's batches. Alone, the plain shuffle is accelerate's seedable sampler (seed + epoch);
        beside others it draws from the shared generator where it stands, as sentence-transformers'."""
        seed = self.seed + self.epoch
        if self.grouped is not None:
            return self.grouped[k].batches(generator, seed)
        if self.kind in (BatchSamplers.NO_DUPLICATES, BatchSamplers.NO_DUPLICATES_HASHED):
            return _no_duplicate_batches(self.tables[k], self.batch_size, self.drop_last, generator, seed)
        if single:
            generator.manual_seed(seed)
        return _plain_batches(len(self.tables[k]), self.batch_size, self.drop_last, generator)

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        if len(self.tables) == 1:
            yield from self._one(0, generator, single=True)
            return
        generator.manual_seed(self.seed + self.epoch)
        streams = [self._one(k, generator, single=False) for k in range(len(self.tables))]
        if self.multi == MultiDatasetBatchSamplers.ROUND_ROBIN:
            for batches in zip(*streams):
                for offset, batch in zip(self.offsets, batches):
                    yield [offset + i for i in batch]
            return
        turns = [k for k in range(len(self.tables)) for _ in range(self._length(k))]
        for k in torch.utils.data.SubsetRandomSampler(turns, generator=generator):
            batch = next(streams[k], None)
            if batch is not None:
                yield [self.offsets[k] + i for i in batch]

    def __len__(self) -> int:
        lengths = [self._length(k) for k in range(len(self.tables))]
        if len(lengths) > 1 and self.multi == MultiDatasetBatchSamplers.ROUND_ROBIN:
            return min(lengths) * len(lengths)
        return sum(lengths)


class _Rows:
    """The rows of all tables end to end: the Trainer's dataset, each item (table, row)."""

    def __init__(self, tables: list[_Table]) -> None:
        self.index = [(k, i) for k, t in enumerate(tables) for i in range(len(t))]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[int, int]:
        return self.index[i]


class _Collate:
    """A batch of (table, row) items of one table -> one tokenized batch per text column and the labels
    (None without a label column), as sentence-transformers' data collator gives them to the loss."""

    def __init__(self, model: Any, tables: list[_Table], prompts: Any = None) -> None:
        self.model, self.tables, self.prompts = model, tables, prompts

    def __call__(self, items: list[tuple[int, int]]) -> dict[str, Any]:
        k = items[0][0]
        table = self.tables[k]
        rows = [i for _, i in items]
        features = self.features(table, rows)
        labels = None
        if table.labels is not None:
            labels = stack_labels([table.labels[i] for i in rows])
        return {"table": k, "features": features, "labels": labels}

    def features(self, table: _Table, rows: list[int]) -> list[Any]:
        """What the loss gets of each text column: here its texts, after the column's prompt, tokenized."""
        out = []
        for name, column in zip(table.text_columns, table.texts):
            prompt = _prompt_for(self.prompts, table.name, name) if self.prompts else None
            out.append(self.model.preprocess([(prompt or "") + column[i] for i in rows]))
        return out


# -- the trained module -------------------------------------------------------------------------------


class _Trained(nn.Module):
    """What the Trainer optimizes, clips and checkpoints: the model's training encoder (with its Dense
    modules) and the losses' own weights. A checkpoint is the model's folder, which sentence-transformers
    loads, and the loss weights beside it."""

    def __init__(self, model: Any, losses: list[nn.Module], rates: dict[int, float] | None = None) -> None:
        super().__init__()
        self.st = [model]  # in a list: not a submodule (it is not an nn.Module)
        self.encoder = model.training_model
        self.losses = nn.ModuleList(losses)
        self._rates = rates or {}

    def parameter_learning_rates(self) -> dict[int, float]:
        """The parameters (by id) that ``learning_rate_mapping`` gives rates of their own."""
        return self._rates

    def has_loss_weights(self) -> bool:
        return any(True for _ in self.losses.parameters())

    def save_folder(self, directory: Path) -> None:
        model = self.st[0]
        model._sync_inference()
        model.save(directory)
        if self.has_loss_weights():
            from safetensors.torch import save_file

            from bertkit._io import atomic_path

            state = {k: v.detach().cpu().contiguous() for k, v in self.losses.state_dict().items()}
            with atomic_path(Path(directory) / _LOSS_WEIGHTS) as tmp:
                save_file(state, str(tmp), metadata={"format": "pt"})

    def load_folder_weights(self, directory: Path) -> None:
        """The weights of a folder :meth:`save_folder` wrote, read as bertkit reads a model folder."""
        # the model's own class (SentenceTransformer or CrossEncoder) reads the folder it wrote
        saved = type(self.st[0])(str(directory), device="cpu").training_model.state_dict()
        self.encoder.load_state_dict(saved)
        if self.has_loss_weights():
            from bertkit.checkpoint import load_state_dict

            self.losses.load_state_dict(load_state_dict(Path(directory) / _LOSS_WEIGHTS))
        self.st[0]._sync_inference()


# -- the trainer --------------------------------------------------------------------------------------


def _refuse(name: str, why: str, owner: str = "SentenceTransformerTrainer") -> ValueError:
    return ValueError(f"{owner}: {name} {why}")


class SentenceTransformerTrainer:
    """sentence-transformers' ``SentenceTransformerTrainer`` on bertkit's Trainer (module docs).
    ``trainer.model`` is the SentenceTransformer; what the Trainer offers besides (``state``,
    ``log_metrics``, ``save_metrics``, ``save_state``...) is reached through this object."""

    # what the cross-encoder trainer changes (see CrossEncoderTrainer)
    _model_name = "SentenceTransformer"
    _args_type: type = SentenceTransformerTrainingArguments
    _collate_type: type = _Collate
    _listwise_rows = False  # a text column may hold lists of documents, a label column lists of labels

    def _model_type(self) -> type:
        from bertkit.sentence.sentence_transformer import SentenceTransformer

        return SentenceTransformer

    def _loss_type(self) -> tuple[type, str]:
        """The losses this trainer takes, and where they live (for the message refusing others)."""
        from bertkit.sentence.losses.base import _Loss

        return _Loss, "bertkit.losses"

    def _default_loss(self, model: Any) -> nn.Module:
        from bertkit.sentence.losses import CoSENTLoss

        return CoSENTLoss(model)

    def _check_table(self, fn: Any, table: _Table, where: str) -> None:
        """Refuse a dataset ``fn`` cannot read: here, a number of text columns it does not take."""
        try:
            fn.check_columns(len(table.text_columns))
        except ValueError:
            raise self._refuse(
                where,
                f"has {len(table.text_columns)} text columns {table.text_columns}, which "
                f"{type(fn).__name__} cannot take",
            ) from None
        if getattr(fn, "reads_labels", False):
            labels = None if table.labels is None else stack_labels(table.labels)
            try:
                fn.check_labels(labels, len(table.text_columns))
            except ValueError as e:
                label = f"label column {table.label_column!r}" if table.labels is not None else "no label column"
                raise self._refuse(where, f"({label}): {e}") from None

    def _refuse(self, name: str, why: str) -> ValueError:
        return _refuse(name, why, type(self).__name__)

    def _check_prompts(self, prompts: Any) -> None:
        """Refuse prompts this run cannot apply as sentence-transformers would."""
        if not prompts:
            return
        if not getattr(self.model, "_includes_prompt", True):
            raise self._refuse(
                "args.prompts", "with a Pooling that leaves the prompt out (include_prompt=False) is not supported"
            )
        nested = isinstance(prompts, dict) and isinstance(next(iter(prompts.values())), dict)
        for kind, tables in (("train", self.train_tables), ("eval", self.eval_tables)):
            if nested and tables and tables[0].name is None:
                raise self._refuse(
                    "args.prompts",
                    f"is a dict of dicts (dataset names to column names to prompts), but {kind}_dataset is one "
                    f"dataset without a name; its keys are {list(prompts)}",
                )

    def __init__(
        self,
        model: Any = None,
        args: SentenceTransformerTrainingArguments | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        loss: Any = None,
        evaluator: Any = None,
        data_collator: Any = None,
        processing_class: Any = None,
        model_init: Callable[[], Any] | None = None,
        compute_metrics: Callable[..., dict] | None = None,
        callbacks: list[Any] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        optimizer_cls_and_kwargs: tuple[type, dict[str, Any]] | None = None,
        preprocess_logits_for_metrics: Callable[..., Any] | None = None,
    ) -> None:
        from bertkit.training.trainer import Trainer

        self._refuse_unsupported(
            model_init,
            data_collator,
            processing_class,
            compute_metrics,
            optimizers,
            optimizer_cls_and_kwargs,
            preprocess_logits_for_metrics,
        )
        if not isinstance(model, self._model_type()):
            raise self._refuse("model=", f"must be a bertkit {self._model_name}, got {type(model).__name__}")
        if model.dtype != "fp32":
            raise self._refuse("model=", f"computes in {model.dtype}; load it with dtype='fp32' to train it")
        if args is None:
            args = self._args_type(output_dir="tmp_trainer")
        if not isinstance(args, self._args_type):
            raise self._refuse("args=", f"must be {self._args_type.__name__}, got {type(args).__name__}")
        evaluates = bool(args.eval_every or args.eval_each_epoch)
        if evaluates and eval_dataset is None and evaluator is None:
            raise self._refuse(
                "eval_strategy",
                "asks for evaluations, but there is no eval_dataset and no evaluator: pass one, or eval_strategy='no'",
            )
        if train_dataset is None and eval_dataset is None and evaluator is None:
            raise self._refuse(
                "train_dataset=", "is needed to train, and an eval_dataset= or evaluator= to evaluate only"
            )
        if isinstance(evaluator, (list, tuple)):
            from bertkit.sentence.evaluation import SequentialEvaluator

            evaluator = SequentialEvaluator(list(evaluator))

        self.model, self.args, self.evaluator = model, args, evaluator
        self.train_tables = _tables(train_dataset, "train", self._listwise_rows)
        self.eval_tables = _tables(eval_dataset, "eval", self._listwise_rows)
        # no train_dataset: a trainer built to evaluate only, as sentence-transformers allows
        multi = self.train_tables is not None and self.train_tables[0].name is not None
        if loss is None:
            loss = self._default_loss(model)
        self.loss = self._build_losses(loss, model)
        for kind, tables in (("train", self.train_tables), ("eval", self.eval_tables)):
            for table in tables or []:
                self._check_table(self._loss_for(table), table, _where(kind, table.name))
        self._check_prompts(args.prompts)

        losses = list(self.loss.values()) if isinstance(self.loss, dict) else [self.loss]
        rates = _mapped_rates(args.learning_rate_mapping, self.loss, model, self._refuse)
        self._module = _Trained(model, list({id(x): x for x in losses}.values()), rates)
        trains = self.train_tables is not None
        self._sampler = (
            _Batches(
                self.train_tables,  # type: ignore[arg-type]
                args.batch_sampler,
                args.multi_dataset_batch_sampler if multi else None,
                args.batch_size,
                args.drop_last,
                args.seed,
                "train",
            )
            if trains
            else None
        )
        self._trainer = Trainer(
            self._module,
            args,
            _Rows(self.train_tables) if trains else None,  # type: ignore[arg-type]
            collate_fn=self._collate_type(model, self.train_tables, args.prompts) if trains else None,
            batch_sampler=self._sampler,
            evaluate=self._evaluate_while_training if evaluates else None,
            loss_fn=self._loss_fn,
            save_model=lambda module, directory: module.save_folder(directory),
            callbacks=callbacks,
        )
        if trains:
            self._record_training(model, args, losses)

    def _refuse_unsupported(
        self,
        model_init: Any,
        data_collator: Any,
        processing_class: Any,
        compute_metrics: Any,
        optimizers: tuple[Any, Any],
        optimizer_cls_and_kwargs: Any,
        preprocess_logits_for_metrics: Any,
    ) -> None:
        """Refuse, by name, the constructor arguments that have no meaning here."""
        for name, value, why in (
            ("model_init", model_init, "is not supported: pass model="),
            ("data_collator", data_collator, "is not supported: texts are tokenized with model.preprocess"),
            ("processing_class", processing_class, "is not supported: the model's own tokenizer is used"),
            ("compute_metrics", compute_metrics, "is not supported: pass an evaluator= for metrics"),
            ("optimizer_cls_and_kwargs", optimizer_cls_and_kwargs, "is not supported: bertkit trains with AdamW"),
            ("preprocess_logits_for_metrics", preprocess_logits_for_metrics, "is not supported (no logits here)"),
        ):
            if value is not None:
                raise self._refuse(f"{name}={value!r}", why)
        if optimizers != (None, None):
            raise self._refuse("optimizers=", "is not supported: the optimizer is AdamW as the arguments set it")

    def _build_losses(self, loss: Any, model: Any) -> Any:
        """``loss`` (a loss, a function of the model, or a dict of them by dataset name) checked and on
        the model's device."""
        loss_type, loss_home = self._loss_type()

        def build(value: Any, where: str) -> nn.Module:
            if not isinstance(value, nn.Module) and callable(value):
                value = value(model)  # sentence-transformers also takes a function of the model
            if not isinstance(value, loss_type):
                raise self._refuse(f"{where}", f"is {type(value).__name__}, not one of {loss_home}")
            if value.model is not model:
                raise self._refuse(
                    f"{where}", f"({type(value).__name__}) was built on another model object than model="
                )
            return value.to(model.device)

        if isinstance(loss, Mapping):
            built = {str(k): build(v, f"loss[{k!r}]") for k, v in loss.items()}
            for kind, tables in (("train", self.train_tables), ("eval", self.eval_tables)):
                if tables is None:
                    continue
                if tables[0].name is None:
                    raise self._refuse("loss", f"is a dict, so {kind}_dataset must be a dict of named datasets too")
                if missing := sorted({t.name for t in tables} - set(built)):  # type: ignore[misc]
                    raise self._refuse(
                        "loss", f"has no entry for {missing}, which {kind}_dataset holds (it has {sorted(built)})"
                    )
            return built
        return build(loss, "loss")

    def _record_training(self, model: Any, args: Any, losses: list[Any]) -> None:
        """What the model card says of this training: the datasets, the losses, the changed arguments."""
        from bertkit.sentence.model_card import changed_arguments, record_training

        sizes = [
            {
                "name": t.name,
                "size": len(t),
                "columns": [*t.text_columns, *([t.label_column] if t.labels is not None else [])],
                "data": {  # the card describes the first rows of these
                    **dict(zip(t.text_columns, t.texts)),
                    **({t.label_column: t.labels} if t.labels is not None else {}),
                },
            }
            for t in self.train_tables
        ]
        record_training(model, sizes, losses, changed_arguments(args), self._trainer)

    # the Trainer's own attributes (state, log_metrics, save_metrics, save_state, output_dir...)
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_trainer":
            raise AttributeError(name)
        return getattr(self._trainer, name)

    def _loss_for(self, table: _Table) -> Any:
        return self.loss[table.name] if isinstance(self.loss, dict) else self.loss

    def _loss_fn(self, _: nn.Module, batch: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        table = self.train_tables[batch["table"]]
        return self._loss_for(table)(batch["features"], batch["labels"]), {}

    def _eval_loss(self, table: _Table) -> float:
        """The loss on one eval dataset as transformers' evaluation loop gives it: the mean over rows
        of each batch's loss, the batches drawn as the training batches are at epoch 0 (eval batch size)."""
        from bertkit.training.trainer import _to_device

        sampler = _Batches(
            [table],
            self.args.batch_sampler,
            None,
            self.args.per_device_eval_batch_size,
            self.args.drop_last,
            self.args.seed,
            "eval",
        )
        collate, fn = self._collate_type(self.model, [table], self.args.prompts), self._loss_for(table)
        total, count = 0.0, 0
        for rows in sampler:
            batch = _to_device(collate([(0, i) for i in rows]), self.model.device)
            total += float(fn(batch["features"], batch["labels"])) * len(rows)
            count += len(rows)
            self._trainer._fire("on_prediction_step")  # after each evaluation batch, as transformers' loop does
        return total / max(1, count)

    def _metrics(self, tables: list[_Table] | None, run_evaluator: bool) -> dict[str, float]:
        """Eval losses and the evaluator's metrics, keys without the ``eval_`` prefix (the Trainer adds it)."""
        from bertkit.sentence.fit import _rng_fence

        trainer = self._trainer
        out: dict[str, float] = {}
        with _rng_fence(self.model.device):
            for table in tables or []:
                out["loss" if table.name is None else f"{table.name}_loss"] = self._eval_loss(table)
            if run_evaluator and self.evaluator is not None:
                self.model._sync_inference()
                path = Path(self.args.output) / "eval"
                path.mkdir(parents=True, exist_ok=True)
                result = self.evaluator(
                    self.model, output_path=str(path), epoch=trainer.step / trainer.steps_per_epoch, steps=trainer.step
                )
                result = result if isinstance(result, dict) else {"evaluator": result}
                for key, value in result.items():
                    if isinstance(value, (int, float)) or (hasattr(value, "item") and getattr(value, "size", 1) == 1):
                        out[str(key).removeprefix("eval_")] = float(value)
        return out

    def _evaluate_while_training(self, _: nn.Module) -> dict[str, float]:
        return self._metrics(self.eval_tables, True)

    def train(self, resume_from_checkpoint: bool | str | None = None, **kwargs: Any) -> Any:
        """Train (or, with ``resume_from_checkpoint``, continue the run in ``output_dir``); the model's
        :meth:`encode` and :meth:`save` then use the trained weights."""
        from bertkit.sentence.model_card import keep_logs

        if self.train_tables is None:
            raise self._refuse("train()", "needs a train_dataset=, given when the trainer is built")
        card = getattr(self.model, "model_card_data", None)
        if card is not None and hasattr(card, "trainer"):
            card.trainer = self._trainer  # the card reads the run's logs while it trains
        try:
            return self._trainer.train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            keep_logs(self.model)  # then keeps them, not the Trainer (and its optimizer's state)
            self.model._sync_inference()

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """The eval loss(es) and the evaluator's metrics, under ``{metric_key_prefix}_``, with the
        runtime and the epoch reached, as sentence-transformers' ``evaluate``."""
        del ignore_keys  # no model outputs to leave out: the losses return a number
        tables = _tables(eval_dataset, "eval", self._listwise_rows) if eval_dataset is not None else self.eval_tables
        if tables is None and self.evaluator is None:
            raise self._refuse("evaluate()", "needs an eval_dataset or an evaluator")
        for table in tables or []:
            if isinstance(self.loss, dict) and table.name not in self.loss:
                raise self._refuse("evaluate()", f"has no loss for eval dataset {table.name!r}")
            self._check_table(self._loss_for(table), table, _where("eval", table.name))
        start = time.perf_counter()
        metrics = self._trainer._in_eval_mode(lambda _: self._metrics(tables, True))
        out = {f"{metric_key_prefix}_{k}": v for k, v in metrics.items()}
        out[f"{metric_key_prefix}_runtime"] = round(time.perf_counter() - start, 4)
        if self.train_tables is not None:  # as transformers: no epoch where nothing trains
            out["epoch"] = self._trainer.step / self._trainer.steps_per_epoch
        return out

    def create_model_card(
        self,
        language: str | None = None,
        license: str | None = None,
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Write the model's card (README.md) into ``output_dir``, as sentence-transformers' trainer
        does: ``language``, ``license`` and ``tags`` are set on ``model.model_card_data`` first.
        transformers' other arguments (``finetuned_from``, ``dataset``...) are accepted and not read."""
        from bertkit.sentence.model_card import write_card

        del kwargs
        data = self.model.model_card_data
        if language:
            data.set_language(language)
        if license:
            data.set_license(license)
        if tags:
            data.add_tags(tags)
        out = Path(self.args.output)
        out.mkdir(parents=True, exist_ok=True)
        write_card(self.model, out, out, model_name=model_name)

    def save_model(self, output_dir: str | None = None) -> None:
        """Write the model into ``output_dir`` (default the run's), a folder sentence-transformers loads."""
        self.model.save(output_dir if output_dir is not None else self.args.output)
