"""One Trainer for pretraining and fine-tuning: this module holds the loop (one optimizer step is
:meth:`Trainer._step`); its parts live beside it: checkpoints and state in :mod:`bertkit.training.state`,
torchrun in :mod:`bertkit.training.distributed`, logs and callbacks in :mod:`bertkit.training.trainer_logging`,
transformers' API in :mod:`bertkit.training.hf_compat`, the optimizer, schedule and precision in
:mod:`bertkit.training.optim`.

API (kept stable; fine-tuning builds on it)::

    from bertkit.training import Trainer, TrainingArguments

    cfg = TrainingArguments(output="runs/x", max_steps=1000, batch_size=32, lr=1e-4,
                            warmup_ratio=0.1, eval_every=200, save_every=200,
                            best_metric="accuracy", greater_is_better=True, patience=3)
    trainer = Trainer(model, cfg, train_dataset=ds, collate_fn=collate,
                      evaluate=lambda model: {"accuracy": ...},   # called under no_grad, eval mode
                      tokenizer=tok)                              # saved next to the model
    result = trainer.train()        # -> TrainResult(step, best_metric, best_step, stopped_early, ...)

Data: ``train_dataset`` (``len`` + ``__getitem__``) and ``collate_fn(list_of_items) -> dict``.
Batches come from ``batch_sampler`` when given (any object whose ``__iter__`` yields lists of
dataset indices; ``set_epoch(epoch)`` is called when it exists, e.g. length-grouped batching),
else from a seeded shuffled :class:`RandomBatchSampler`. The batch list of an epoch must be a
deterministic function of (seed, epoch): resuming skips the batches already consumed. Under DDP
batch ``i`` goes to rank ``i % world_size``, so each rank reads its own part of the data and the
global batch is ``world_size x batch_size x grad_accum_steps``. ``set_epoch`` is also called on the
dataset and on the collate_fn when they define it (dynamic masking uses it).

Loss: the Trainer never knows what it optimises. ``loss_fn(model, batch) -> (loss, logs)`` is
called on every micro-batch, under autocast, with the (DDP-wrapped) model; ``loss`` is a scalar
tensor to minimise and ``logs`` a ``{name: scalar tensor or float}`` dict whose entries are
averaged over the log interval and written next to ``loss`` (e.g. ``mlm_loss``, ``nsp_loss``).
The default, :func:`model_loss`, returns ``model(**batch).loss`` and no logs. Pretraining passes
:func:`bertkit.training.mlm.mlm_nsp_loss`; a distillation or causal-LM recipe passes its
own function (a teacher model can live in its closure) without any change here.

Length: ``max_steps`` (optimizer steps) wins over ``epochs``; ``max_minutes`` also stops
the run after that much training wall time (evaluation and checkpointing excluded; counted across
resumes). With ``schedule="time"`` the learning rate decays to 0 over ``max_minutes`` of
training time instead of over ``max_steps`` (which then only caps the run), so a run sized by a
time budget uses all of it and ends with a decayed learning rate however fast the machine turns
out to be (``schedule_minutes`` and ``schedule_offset_minutes`` make the run one part of a longer
such decay, as a recipe's phases under one schedule). Evaluation every ``eval_every``
steps and/or at the end of every epoch (``eval_each_epoch``); the returned dict is logged with an
``eval_`` prefix; the final weights are always evaluated once at the end. With ``best_metric`` the
best model is kept in ``OUTPUT/best`` and ``patience`` evaluations without improvement stop the run.

Optimisation: AdamW (fused/foreach when available) without weight decay on biases and LayerNorm
weights, linear warmup (``warmup_steps`` or ``warmup_ratio``) then linear decay to 0, gradient
clipping (``max_grad_norm``), gradient accumulation. ``precision``: ``"auto"`` (bf16 autocast where
supported, else fp16 + GradScaler on CUDA, else fp32), ``"bf16"``, ``"fp16"``, ``"fp32"``.

Outputs in ``output``: ``metrics.jsonl`` (one JSON object per logged step: step, epoch, loss,
extra loss terms, lr, tokens_per_sec = tokens of the padded batches per second of wall time,
data loading included, of all ranks together; losses are averaged over ranks under DDP;
train_seconds; eval rows carry ``eval_*`` keys), ``metrics.png`` (curves, drawn at the
end, :mod:`bertkit.training.plots`), ``checkpoints/step-NNNNNNN/`` every ``save_every`` steps
(:mod:`bertkit.training.checkpoint_folders`: each published in one rename; the last ``keep_last`` kept)
and, at the end, the model itself via
``model.save_pretrained(output)`` (plus ``tokenizer.save_pretrained``) or ``save_model(model,
dir)``. ``resume=True`` restores model, optimizer, scheduler, scaler, RNG states and the data
position from the newest complete checkpoint. A NaN/inf loss raises :class:`NonFiniteLossError`
before anything is saved, so the last good checkpoint stays intact.

transformers' calls: ``Trainer(model_init=fn)`` builds a new model at every ``train()``, right after seeding
with ``seed``; ``state.total_flos`` and train()'s ``total_flos`` count 6 x main-input tokens x non-embedding
parameters per micro-batch (:meth:`Trainer.floating_point_ops`); ``include_num_input_tokens_seen`` counts the
input tokens into ``state.num_input_tokens_seen`` and the logged rows; both totals survive a resume.

DDP: launched under ``torchrun`` (``WORLD_SIZE`` > 1) the Trainer initialises the process group
(NCCL on CUDA, gloo on CPU) and wraps the model (``ddp_find_unused_parameters`` for heads that
skip parameters); only rank 0 logs, shows the bar and saves; each rank keeps its own RNG state in
the checkpoint, and resuming needs the same world size. ``train()`` ends by letting go of the DDP
wrapper and, if the Trainer started the process group, ending it (:meth:`Trainer.close`): a group
started by the caller (the cpu-hour recipe's phases share one) stays up for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

import bertkit.training.checkpoint_folders as ckpt_io
from bertkit import _args as A
from bertkit._memory import keep_freed_buffers
from bertkit.modeling.inspect import set_dropout
from bertkit.training.callbacks import CallbackHandler, TrainerCallback, TrainerControl
from bertkit.training.checkpoint_folders import latest_checkpoint

# (noqa F401: _to_device, the process-group functions, _param_groups and layer_depths are imported from
# here by other modules and the tests; they lived here before the Trainer was split)
from bertkit.training.distributed import (  # noqa: F401
    DistributedRun,
    _to_device,
    end_process_group,
    start_process_group,
    training_device,
)
from bertkit.training.hf_compat import (
    EvalPrediction,
    PredictionOutput,
    TransformersAPI,
    _ignore_keys,
    _KnownColumns,
    _one_of,
    _transformers_loss,
)
from bertkit.training.optim import _adamw, _linear_schedule, _param_groups, layer_depths, resolve_precision  # noqa: F401
from bertkit.training.plots import plot_metrics
from bertkit.training.state import CheckpointState, TrainerState, TrainResult
from bertkit.training.trainer_logging import CallbacksAndLogging, EarlyStoppingCallback, _with_callbacks
from bertkit.training.training_args import TrainingArguments

__all__ = [
    "TrainingArguments",
    "TrainingConfig",
    "Trainer",
    "TrainResult",
    "EarlyStoppingCallback",
    "TrainerCallback",
    "TrainerControl",
    "EvalPrediction",
    "PredictionOutput",
    "TrainerState",
    "default_collate",
    "RandomBatchSampler",
    "NonFiniteLossError",
    "set_seed",
    "model_loss",
    "latest_checkpoint",
    "plot_metrics",
    "resolve_precision",
]


LossFn = Callable[[nn.Module, Any], "tuple[torch.Tensor, dict[str, Any]]"]


def _checkpointing_owners(model: nn.Module) -> list[nn.Module]:
    """The outermost modules of ``model`` that switch activation checkpointing on: the model itself,
    or the models a training objective holds (ELECTRA's generator and discriminator)."""
    if hasattr(model, "activation_checkpointing_enable"):
        return [model]
    return [owner for child in model.children() for owner in _checkpointing_owners(child)]


def _pad_id(tokenizer: Any) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else 0


def default_collate(items: list[Any], pad_token_id: int = 0) -> Any:
    """The collate_fn when none is given: tokenized examples (dicts of token lists, as a tokenizer
    returns them) are padded to the batch's longest with ``pad_token_id`` and their token labels with
    -100, as transformers' ``DataCollatorWithPadding`` does; anything else goes to torch's
    ``default_collate``."""
    first = items[0] if items else None
    if isinstance(first, dict) and isinstance(first.get("input_ids"), list):
        from bertkit.data.batching import collate_features

        return collate_features(items, pad_token_id)
    return torch.utils.data.default_collate(items)


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf; the run stopped without saving."""


# The names an older TrainingConfig used, still accepted (and readable) for callers written against it.
_RENAMED = {"output_dir": "output", "num_epochs": "epochs", "max_time_minutes": "max_minutes"}


class TrainingConfig(TrainingArguments):
    """:class:`TrainingArguments` under its former name; also takes ``output_dir``, ``num_epochs`` and
    ``max_time_minutes`` (now ``output``, ``epochs``, ``max_minutes``), and None for ``eval_every``,
    ``save_every``, ``max_grad_norm`` (now 0: off). Deprecated: use TrainingArguments."""

    _transformers_names = False  # its own former names come first (output_dir, num_epochs, ...)

    def __init__(self, **kwargs: Any) -> None:
        for old, new in _RENAMED.items():
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"give {new} or its former name {old}, not both")
                kwargs[new] = kwargs.pop(old)
        for name in ("eval_every", "save_every", "max_grad_norm"):  # None meant "off": now 0
            if name in kwargs and kwargs[name] is None:
                kwargs[name] = 0
        super().__init__(**kwargs)

    num_epochs = property(lambda self: self.epochs)
    max_time_minutes = property(lambda self: self.max_minutes)


class RandomBatchSampler:
    """Seeded batches of indices: a fresh permutation per epoch (or in order without shuffle). With
    ``torch_order`` the permutation is ``torch.randperm`` seeded with seed + epoch, the order
    transformers' Trainer draws (through accelerate's seedable sampler) for the same seed."""

    def __init__(
        self,
        n: int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        torch_order: bool = False,
    ) -> None:
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.shuffle, self.drop_last, self.epoch = shuffle, drop_last, 0
        self.torch_order = torch_order

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle and self.torch_order:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).numpy()
        elif self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        stop = (self.n // self.batch_size) * self.batch_size if self.drop_last else self.n
        for i in range(0, stop, self.batch_size):
            yield order[i : i + self.batch_size].tolist()

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _batch_tokens(batch: Any) -> int:
    if isinstance(batch, (list, tuple)):  # e.g. one tokenized batch per text column
        return sum(_batch_tokens(v) for v in batch if isinstance(v, dict))
    if isinstance(batch, dict):
        for key in ("input_ids", "inputs_embeds", "pixel_values"):
            if key in batch and isinstance(batch[key], torch.Tensor):
                return int(batch[key].shape[0] * (batch[key].shape[1] if batch[key].ndim > 1 else 1))
        nested = sum(_batch_tokens(v) for v in batch.values() if isinstance(v, (list, tuple)))
        if nested:
            return nested
        for v in batch.values():
            if isinstance(v, torch.Tensor):
                return int(v.numel())
    return 0


def model_loss(model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """The default ``loss_fn``: the ``.loss`` (or ``["loss"]``) of ``model(**batch)``, no extra logs."""
    out = model(**batch) if isinstance(batch, dict) else model(*batch)
    loss = out["loss"] if isinstance(out, dict) else getattr(out, "loss", None)
    if loss is None:
        raise ValueError("model output has no .loss; pass labels in the batch or give a loss_fn")
    return loss, {}


class Trainer(CallbacksAndLogging, CheckpointState, DistributedRun, TransformersAPI):
    """Train ``model`` on ``train_dataset`` with the settings in ``config`` (see module docs). The loop is
    here; its parts are mixins: :class:`~bertkit.training.trainer_logging.CallbacksAndLogging`,
    :class:`~bertkit.training.state.CheckpointState`, :class:`~bertkit.training.distributed.DistributedRun`
    and :class:`~bertkit.training.hf_compat.TransformersAPI`."""

    def __init__(
        self,
        model: nn.Module | None = None,
        config: TrainingArguments | None = None,
        train_dataset: Any = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        batch_sampler: Iterable[list[int]] | None = None,
        evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        loss_fn: LossFn | None = None,
        tokenizer: Any = None,
        save_model: Callable[[nn.Module, Path], None] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        args: TrainingArguments | None = None,
        data_collator: Callable[[list[Any]], Any] | None = None,
        eval_dataset: Any = None,
        compute_metrics: Callable[[EvalPrediction], dict[str, float]] | None = None,
        processing_class: Any = None,
        callbacks: Sequence[Any] | None = None,
        compute_loss_func: Callable[..., torch.Tensor] | None = None,
        optimizers: tuple[torch.optim.Optimizer | None, Any] = (None, None),
        preprocess_logits_for_metrics: Callable[[Any, Any], Any] | None = None,
        model_init: Callable[..., nn.Module] | None = None,
    ) -> None:
        # transformers' keywords (args, data_collator, processing_class) name the same things
        config = _one_of("config", config, "args", args)
        others: list[Any] = []
        if callbacks and config is not None:
            config, others = _with_callbacks(config, callbacks)
        self.callback_handler = CallbackHandler(others)
        collate_fn = _one_of("collate_fn", collate_fn, "data_collator", data_collator)
        tokenizer = _one_of("tokenizer", tokenizer, "processing_class", processing_class)
        optimizer = _one_of("optimizer", optimizer, "optimizers[0]", optimizers[0])
        if compute_loss_func is not None:
            if loss_fn is not None:
                raise TypeError("give loss_fn= or transformers' compute_loss_func=, not both")
            loss_fn = functools.partial(_transformers_loss, compute_loss_func)
        if config is None:
            raise TypeError("Trainer needs its arguments (config= or args=)")
        self._take_model_init(model, model_init, optimizer is not None or optimizers[1] is not None)
        if model is None:
            set_seed(config.seed)
            model = self.call_model_init()
        self._check_evaluation(config, evaluate, eval_dataset, compute_metrics)
        self.config = config
        # the dataloaders callbacks are handed, as transformers' are: the training one from train(),
        # the last evaluation's from then on
        self._loaders: dict[str, torch.utils.data.DataLoader] = {}
        self.dataset = train_dataset
        self.collate_fn = collate_fn or functools.partial(default_collate, pad_token_id=_pad_id(tokenizer))
        if config.extra.get("remove_unused_columns"):  # a call in transformers' names, as its Trainer does
            self.collate_fn = _KnownColumns(self.collate_fn, model, config.extra.get("label_names") or ())
        self.eval_dataset, self.compute_metrics = eval_dataset, compute_metrics
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        if evaluate is None and eval_dataset is not None:
            evaluate = self._evaluate_during_training
        self.evaluate_fn = evaluate
        self.loss_fn: LossFn = loss_fn or model_loss
        self.tokenizer = tokenizer
        self.save_model_fn = save_model
        self.output_dir = Path(config.output)

        self._setup_distributed(config)

        if config.threads:
            torch.set_num_threads(config.threads)
        set_seed(config.seed)
        self.batch_sampler = batch_sampler if batch_sampler is not None else self._default_sampler()
        self._size_run()
        self._attach_model(model, optimizer, optimizers[1])
        self._history: list[dict[str, Any]] | None = None  # log_history for callbacks, kept in memory
        self._fire("on_init_end")

    def _default_sampler(self) -> RandomBatchSampler:
        """Seeded shuffled batches of the training data (in transformers' order for a call in its names)."""
        config = self.config
        return RandomBatchSampler(
            # no train_dataset: a Trainer built to evaluate or predict only, as transformers allows
            len(self.dataset) if self.dataset is not None else 0,
            config.batch_size,
            seed=config.seed,
            shuffle=config.shuffle,
            drop_last=config.drop_last,
            torch_order=config.api == "transformers",
        )

    def _size_run(self) -> None:
        """The precision, and the run's length in optimizer steps: per epoch, in all, and of warmup."""
        config = self.config
        prec = resolve_precision(config.precision, self.device)
        self.precision = prec
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
        self.steps_per_epoch = max(1, self._num_batches() // (self.world_size * config.grad_accum_steps))
        if config.max_steps is not None:
            self.total_steps = config.max_steps
        else:
            self.total_steps = max(1, int(math.ceil(config.epochs * self.steps_per_epoch)))
        share = config.warmup_ratio * self.total_steps
        # transformers rounds its warmup share up; bertkit's own runs have always rounded it down
        self.warmup_steps = config.warmup_steps or (math.ceil(share) if config.api == "transformers" else int(share))

    def _attach_model(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None
    ) -> None:
        """Train ``model`` from step 0: it goes to the device (and into DDP), with a new optimizer and
        schedule unless given, and the run's progress counted afresh."""
        config = self.config
        if config.dropout is not None:
            # A setting of this run, not of the model: the config keeps its own rates, so a model
            # pretrained without dropout is saved with the rates it is fine-tuned with.
            set_dropout(model, config.dropout)
        prepared = getattr(model, "_bertkit_inference_dtype", None)
        if prepared is not None or not any(p.requires_grad for p in model.parameters()):
            why = (
                f"it was prepared for inference at {prepared} (from_pretrained(dtype='{prepared}'), a pipeline "
                "or prepare_for_inference), which freezes its weights: load it without an inference dtype to train"
                if prepared is not None
                else "every parameter has requires_grad=False"
            )
            raise ValueError(f"Trainer: {type(model).__name__} has nothing to train: {why}")
        if config.activation_checkpointing:
            owners = _checkpointing_owners(model)
            if not owners:
                raise ValueError(
                    f"activation checkpointing: {type(model).__name__} holds no model with "
                    "activation_checkpointing_enable(); bertkit's models have it"
                )
            for owner in owners:
                owner.activation_checkpointing_enable(config.extra.get("activation_checkpointing_kwargs"))
        self.model = model.to(self.device)
        self.raw_model = model
        if self.distributed:
            self.model = nn.parallel.DistributedDataParallel(
                model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=config.ddp_find_unused_parameters,
            )

        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None

        self.optimizer = optimizer if optimizer is not None else _adamw(self.raw_model, config)

        if config.schedule == "time":
            budget = 60.0 * config.schedule_span_minutes  # type: ignore[operator]
            offset = 60.0 * config.schedule_offset_minutes  # a later part of a longer schedule starts there
            by_steps = _linear_schedule(self.warmup_steps, 1 << 62, config.warmup_from_zero)  # the warmup part only
            # min(): warmup by steps, then the linear decay by training time; no state beyond the
            # elapsed time, which resume restores. The time is the clock read at the top of the
            # step, which under DDP is one value for all ranks: each rank's own clock would give
            # each its own learning rate, and the replicas' weights would drift apart.
            lr_lambda = lambda step: min(by_steps(step), max(0.0, 1.0 - (offset + self._clock) / budget))  # noqa: E731
        else:
            lr_lambda = _linear_schedule(self.warmup_steps, self.total_steps, config.warmup_from_zero)
        self.train_seconds = 0.0  # training wall time of earlier (resumed) runs
        self._elapsed: Callable[[], float] = lambda: self.train_seconds
        self._clock = 0.0  # training seconds at the top of the current step, the same on every rank
        # transformers' optimizers=(optimizer, scheduler): the caller's schedule, and no LambdaLR built over
        # its optimizer (building one sets the optimizer's rate to the warmup's first step)
        self.scheduler = (
            scheduler if scheduler is not None else torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)
        )

        # Progress state, all restored on resume.
        self.step = 0
        self.epoch = 0
        self.batches_done_in_epoch = 0  # micro-batches (global, across ranks) of the current epoch
        self.best_metric: float | None = None
        self.best_step: int | None = None
        self.bad_evals = 0
        self.last_metrics: dict[str, float] = {}
        self._resumed = False  # a checkpoint was loaded (see _finished)
        self._resume_from: Path | None = None  # train(resume_from_checkpoint=path)
        # transformers' counters: every rank's floating-point operations and input tokens so far, and this
        # rank's since they were last added up (see _store_counts)
        self.total_flos = 0.0
        self.num_input_tokens_seen = 0
        self.current_flos = 0.0
        self._tokens_unstored = 0
        self._non_embedding_parameters: int | None = None
        self._warned_tokens = False
        self._grad_norm: torch.Tensor | None = None  # the last step's gradient norm before clipping
        self._call_start = (0, 0.0)  # step and training seconds where this train() call began

    def _num_batches(self) -> int:
        try:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        except TypeError:
            return sum(1 for _ in self.batch_sampler)

    def _set_epoch(self, epoch: int) -> None:
        for obj in (self.batch_sampler, self.dataset, self.collate_fn):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def run_evaluation(self) -> dict[str, float]:
        """Run the evaluate callback (rank 0), log it, track the best model and patience."""
        stop = False
        metrics: dict[str, float] = {}
        elapsed = self._elapsed()
        self._last_eval_step = self.step
        self._store_counts()
        tokens = {"num_input_tokens_seen": self.num_input_tokens_seen} if self._counts_tokens else {}
        if self.evaluate_fn is not None and self.is_main:
            evaluate = self.evaluate_fn
            metrics = self._in_eval_mode(lambda model: {k: float(v) for k, v in evaluate(model).items()})
            self.last_metrics = metrics
            self._log(
                {
                    "step": self.step,
                    "epoch": self.epoch,
                    "train_seconds": round(elapsed, 3),
                    **{f"eval_{k}": v for k, v in metrics.items()},
                    **tokens,
                }
            )
            name = self.config.best_metric
            if name is not None:
                if name not in metrics:
                    raise ValueError(f"best_metric {name!r} is not among the evaluation metrics {sorted(metrics)}")
                value = metrics[name]
                better = self.best_metric is None or (
                    value > self.best_metric if self.config.greater_is_better else value < self.best_metric
                )
                if better:
                    self.best_metric, self.best_step, self.bad_evals = value, self.step, 0
                    self._save_best()
                else:
                    self.bad_evals += 1
                    if self.config.patience is not None and self.bad_evals >= self.config.patience:
                        stop = True
        if self.distributed:
            import torch.distributed as dist

            flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
            dist.broadcast(flag, src=0)
            stop = bool(flag.item())
        self._stop = self._stop or stop
        if self.evaluate_fn is not None:
            done = {f"eval_{k}": v for k, v in metrics.items()}
            self._fire("on_evaluate", metrics={**done, "epoch": self.step / self.steps_per_epoch})
        return metrics

    def _epoch_batches(self) -> list[list[int]]:
        self._set_epoch(self.epoch)
        return [list(b) for b in self.batch_sampler]

    def _usable_batches(self, n: int) -> int:
        """How many of an epoch's ``n`` batches are trained: whole optimizer steps of every process."""
        per_step = self.world_size * self.config.grad_accum_steps
        return (n // per_step) * per_step

    def _micro_batches(self) -> Iterator[tuple[Any, bool]]:
        """(batch, ends_epoch) for this rank, forever, starting at the saved data position."""
        while True:
            batches = self._epoch_batches()
            n_use = self._usable_batches(len(batches))
            if n_use == 0:
                size = len(self.dataset) if hasattr(self.dataset, "__len__") else None
                why = (
                    f": its {size} example(s) fill no whole batch of {self.config.batch_size} (lower the batch size)"
                    if not batches and size is not None
                    else ""
                )
                raise ValueError(
                    f"the training data gives {len(batches)} batches{why}, fewer than one optimizer step "
                    f"needs ({self.world_size} processes x {self.config.grad_accum_steps} accumulation)"
                )
            start = self.batches_done_in_epoch
            self._epoch_batches_used = n_use
            cut = False
            for i in range(start + self.rank, n_use, self.world_size):
                if self._epoch_cut:  # the epoch was ended early; _cut_epoch moved the position on
                    self._epoch_cut, cut = False, True
                    break
                items = [self.dataset[j] for j in batches[i]]
                batch = self.collate_fn(items)
                self.batches_done_in_epoch = i - self.rank + self.world_size
                yield batch, self.batches_done_in_epoch >= n_use
            if not cut:
                self.epoch += 1
                self.batches_done_in_epoch = 0

    @property
    def elapsed_seconds(self) -> float:
        """Training wall time so far, the runs this one resumed included (what metrics.jsonl records
        as train_seconds; evaluation pauses are not counted)."""
        return float(self._elapsed())

    def train(
        self,
        resume_from_checkpoint: bool | str | os.PathLike | None = None,
        trial: Any = None,
        ignore_keys_for_eval: Sequence[str] | None = None,
    ) -> TrainResult:
        """Run until max_steps / num_epochs or early stopping; returns a :class:`TrainResult`.

        ``resume_from_checkpoint`` is transformers' way to ask for ``resume``: True continues from the
        newest complete checkpoint in the output folder, a path from that checkpoint folder.
        ``ignore_keys_for_eval``: model outputs the evaluations while training leave out of the
        predictions (as :meth:`evaluate`'s ``ignore_keys``). A hyperparameter-search ``trial`` is refused.
        Under torchrun a Trainer trains once: it lets go of its DDP wrapper at the end (:meth:`close`)."""
        if trial is not None:
            raise ValueError(
                "Trainer.train(trial=...) is not supported: bertkit has no hyperparameter search; "
                "run one train() per setting instead"
            )
        self._ignore_keys_for_eval = _ignore_keys("ignore_keys_for_eval", ignore_keys_for_eval)
        if self.dataset is None:
            raise ValueError("Trainer.train needs a train_dataset, given when the Trainer is built")
        keep_freed_buffers()  # every step frees the activation buffers the next one allocates again
        if self.distributed and self.model is self.raw_model:
            raise RuntimeError("this Trainer has already trained under torchrun (close()); build a new one")
        if self.model_init is not None:  # as transformers: every run trains a new model, built under the seed
            set_seed(self.config.seed)
            self._attach_model(self.call_model_init())
        if resume_from_checkpoint:
            if resume_from_checkpoint is not True:
                path = Path(resume_from_checkpoint)
                if not (path / ckpt_io.STATE_FILE).is_file():
                    raise ValueError(
                        f"resume_from_checkpoint {path}: not a checkpoint of bertkit's Trainer (no "
                        f"{ckpt_io.STATE_FILE}); a run's checkpoints are {self.output_dir / 'checkpoints'}/step-N"
                    )
                self._resume_from = path
            self.config = dataclasses.replace(self.config, resume=True, overwrite=False)
        try:
            result = self._train()
        finally:
            self.close()
        result.training_loss, result.metrics = self._train_summary()
        if self.callback_handler.callbacks:
            # transformers logs the run's summary last, then ends the training
            self._fire("on_log", logs=dict(result.metrics))
            self._fire("on_train_end")
        return result

    def _train(self) -> TrainResult:
        cfg = self.config
        self._prepare_output()
        self._call_start = (self.step, self.train_seconds)
        if self._finished():
            return self._already_finished()
        self._stop = False
        self._last_eval_step = self._last_save_step = -1
        self._history = None  # the run's log rows as _prepare_output left them
        self._epoch_cut, self._steps_cut = False, 0
        control = self.callback_handler.control
        control._new_training()
        self.model.train()
        if self.step == 0 and self.world_size > 1:
            # Different dropout per rank, same weights (DDP broadcasts them); a resumed run has its
            # per-rank RNG from the checkpoint instead.
            set_seed(cfg.seed + self.rank)

        bar = self._progress_bar()
        stream = self._micro_batches()
        self._loaders["train"] = self.get_train_dataloader()
        self._window: dict[str, Any] = {"sums": {}, "steps": 0, "tokens": 0, "t0": time.perf_counter()}
        t_start = time.perf_counter()
        self._t_paused = 0.0  # evaluation and checkpoint time does not count against max_minutes
        self._elapsed = lambda: self.train_seconds + time.perf_counter() - t_start - self._t_paused
        self._fire("on_train_begin")
        epoch_begun = False
        try:
            while self.step + self._steps_cut < self.total_steps and not self._stop:
                if cfg.max_minutes is not None and self._out_of_time():
                    if self.is_main:
                        print(f"stopping at step {self.step}: max_minutes={cfg.max_minutes} reached", file=sys.stderr)
                    break
                if not epoch_begun:
                    control._new_epoch()
                    self._fire("on_epoch_begin")
                    epoch_begun = True
                control._new_step()
                self._fire("on_step_begin")
                lr, epoch_ended = self._step(stream)
                self._fire("on_step_end")
                if (control.should_epoch_stop or control.should_training_stop) and not epoch_ended:
                    if control.should_epoch_stop:
                        self._cut_epoch()
                    epoch_ended = True  # as transformers: a stopped run still ends its epoch
                self._maybe_log(lr, bar, forced=control.should_log)
                if bar is not None:
                    bar.update(1 if cfg.schedule == "steps" else max(0, min(bar.total, round(self._elapsed())) - bar.n))
                # what this step's schedule (or a callback) asks for, then the epoch's end and what that asks
                # for: transformers' order of events
                self._maybe_eval_or_save(False, control.should_evaluate, control.should_save)
                if epoch_ended:
                    self._fire("on_epoch_end")
                    epoch_begun = False
                    self._maybe_eval_or_save(True, control.should_evaluate, control.should_save)
                self._stop = self._stop or control.should_training_stop
            # bertkit's own runs end with an evaluation of the final weights; a call in transformers'
            # names evaluates on its schedule only, as transformers does
            final_eval = cfg.api != "transformers"
            if final_eval and self.evaluate_fn is not None and self._last_eval_step != self.step and not self._stop:
                self.run_evaluation()
        finally:
            if bar is not None:
                bar.close()
            # the clock stops with the training: train_runtime and elapsed_seconds read later (after a
            # save, or from a notebook minutes on) are the run's time, not the time since it started
            stopped = self._elapsed()
            self._elapsed = lambda: stopped
        return self._end_run()

    def _cut_epoch(self) -> None:
        """End the epoch after this step (a callback's ``should_epoch_stop``): the next batch is the next
        epoch's first, and a checkpoint written now records that position."""
        self._epoch_cut = True
        left = self._epoch_batches_used - self.batches_done_in_epoch
        if self.config.max_steps is None:  # a run of whole epochs loses the epoch's remaining steps
            self._steps_cut += left // (self.world_size * self.config.grad_accum_steps)
        self.epoch += 1
        self.batches_done_in_epoch = 0

    def _step(self, stream: Iterator[tuple[Any, bool]]) -> tuple[float, bool]:
        """One optimizer step over ``grad_accum_steps`` micro-batches; returns (lr used, epoch ended)."""
        cfg = self.config
        accum = cfg.grad_accum_steps
        sums = self._window["sums"]
        epoch_ended = False
        step_tokens = 0
        for micro in range(accum):
            batch, ends = next(stream)
            epoch_ended = epoch_ended or ends
            step_tokens += _batch_tokens(batch)
            self.current_flos += float(self.floating_point_ops(batch))
            self._tokens_unstored += self._input_tokens(batch)
            batch = _to_device(batch, self.device)
            sync = (micro == accum - 1) or not self.distributed
            ctx = contextlib.nullcontext() if sync else self.model.no_sync()
            with ctx:
                with self._autocast():
                    loss, extra = self.loss_fn(self.model, batch)
                if not torch.isfinite(loss.detach()).all():
                    raise NonFiniteLossError(
                        f"loss is {loss.item()} at step {self.step + 1} (epoch {self.epoch}); "
                        f"stopping without saving. Last good checkpoint: "
                        f"{latest_checkpoint(self.output_dir) or 'none'}. Lower "
                        f"{A.flag('learning_rate', '--lr')}, raise the warmup, or check the data."
                    )
                scaled = loss.float() / accum
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            for k, v in (("loss", loss), *extra.items()):
                v = v.detach().float() if isinstance(v, torch.Tensor) else torch.tensor(float(v))
                sums[k] = sums.get(k, 0) + v / accum
            if micro < accum - 1:
                self._fire("on_substep_end")
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if cfg.max_grad_norm:
            self._grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm, foreach=True)
        elif cfg.api == "transformers":  # its Trainer logs the norm even when it does not clip
            self._grad_norm = torch.nn.utils.get_total_norm(
                [p.grad for p in self.model.parameters() if p.grad is not None], foreach=True
            )
        self._fire("on_pre_optimizer_step")
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self._fire("on_optimizer_step")
        lr = max(self.scheduler.get_last_lr())  # the peak group's: the top of a layer-wise decay
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self._window["steps"] += 1
        self._window["tokens"] += step_tokens * self.world_size
        return lr, epoch_ended

    def _maybe_eval_or_save(self, epoch_end: bool, eval_asked: bool = False, save_asked: bool = False) -> None:
        """Evaluate and/or write a checkpoint when the step schedule (``epoch_end``: the epoch schedule)
        or a callback asks, at most once a step; their time is not training time."""
        cfg = self.config
        every_eval, every_save = (
            (cfg.eval_each_epoch, cfg.save_each_epoch)
            if epoch_end
            else (
                bool(cfg.eval_every and self.step % cfg.eval_every == 0),
                bool(cfg.save_every and self.step % cfg.save_every == 0),
            )
        )
        due_eval = (every_eval or (eval_asked and self.evaluate_fn is not None)) and self._last_eval_step != self.step
        due_save = (every_save or save_asked) and self._last_save_step != self.step
        if self.step >= self.total_steps and cfg.api != "transformers":
            # bertkit's own runs write the last checkpoint after their final evaluation, so it holds it
            due_save = False
        if not (due_eval or due_save):
            return
        t0 = time.perf_counter()
        if due_eval:
            self.run_evaluation()
        if due_save:
            self.save_checkpoint()
        t1 = time.perf_counter()
        self._t_paused += t1 - t0
        self._window["t0"] += t1 - t0  # throughput counts training time only
