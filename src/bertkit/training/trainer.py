"""One Trainer for pretraining and fine-tuning.

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
(:mod:`bertkit.training.checkpointing`: each published in one rename; the last ``keep_last`` kept)
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
import datetime
import functools
import gc
import inspect
import json
import math
import os
import random
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

import bertkit.training.checkpointing as ckpt_io
from bertkit import _args as A
from bertkit._cpu import has_fast_bf16
from bertkit._io import atomic_write_json
from bertkit._memory import keep_freed_buffers
from bertkit._text import read_jsonl
from bertkit.modeling.inspect import set_dropout
from bertkit.training.arguments import TrainingArguments
from bertkit.training.callbacks import CallbackHandler, TrainerCallback, TrainerControl
from bertkit.training.checkpointing import latest_checkpoint
from bertkit.training.plots import plot_metrics

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


@dataclass
class EarlyStoppingCallback:
    """transformers' early stopping, as bertkit's ``patience``: stop after ``early_stopping_patience``
    evaluations without a better ``metric_for_best_model`` (pass it in ``Trainer(callbacks=[...])``)."""

    early_stopping_patience: int = 1
    early_stopping_threshold: float = 0.0


def _is_early_stopping(cb: Any) -> bool:
    # transformers' own EarlyStoppingCallback (sentence-transformers scripts import it from there) has
    # the same two settings, read the same way
    theirs = type(cb).__name__ == "EarlyStoppingCallback" and type(cb).__module__.startswith("transformers.")
    return isinstance(cb, EarlyStoppingCallback) or theirs


def _with_callbacks(config: TrainingArguments, callbacks: Sequence[Any]) -> tuple[TrainingArguments, list[Any]]:
    """``config`` with the patience an EarlyStoppingCallback asks for, and the other callbacks (run
    at their events by the Trainer)."""
    others = []
    for cb in callbacks:
        cb = cb() if isinstance(cb, type) else cb
        if not _is_early_stopping(cb):
            others.append(cb)
            continue
        if cb.early_stopping_threshold:
            raise ValueError(
                f"EarlyStoppingCallback(early_stopping_threshold={cb.early_stopping_threshold}) is not supported: "
                "any improvement counts"
            )
        if not config.best_metric:
            raise ValueError("EarlyStoppingCallback needs metric_for_best_model (best_metric) to watch")
        config = dataclasses.replace(config, patience=int(cb.early_stopping_patience))
    return config, others


def _format_metric(key: str, value: Any) -> Any:
    """A metric as transformers' ``log_metrics`` shows it: runtimes as h:mm:ss.cc, floats to 4 places."""
    if "_runtime" in key:
        return f"{datetime.timedelta(seconds=int(value))}.{int(abs(value - int(value)) * 100):02d}"
    return round(value, 4) if isinstance(value, float) else value


def _transformers_loss(
    compute_loss_func: Callable[..., torch.Tensor], model: nn.Module, batch: dict[str, Any]
) -> tuple[torch.Tensor, dict[str, Any]]:
    """A loss_fn from transformers' ``compute_loss_func(outputs, labels, num_items_in_batch)``: the labels
    are taken out of the batch, the model runs on the rest, and the function gets its outputs."""
    inputs = dict(batch)
    labels = inputs.pop("labels", None)
    items = int(labels.ne(-100).sum()) if isinstance(labels, torch.Tensor) else None
    return compute_loss_func(model(**inputs), labels, num_items_in_batch=items), {}


# The batch keys that hold targets: a task's labels, or an extractive-QA span's two ends.
_LABEL_NAMES = ("labels", "start_positions", "end_positions")


def _one_or_tuple(arrays: list[np.ndarray]) -> Any:
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


def _checkpointing_owners(model: nn.Module) -> list[nn.Module]:
    """The outermost modules of ``model`` that switch activation checkpointing on: the model itself,
    or the models a training objective holds (ELECTRA's generator and discriminator)."""
    if hasattr(model, "activation_checkpointing_enable"):
        return [model]
    return [owner for child in model.children() for owner in _checkpointing_owners(child)]


class _KnownColumns:
    """A collate_fn that first drops the columns of dict examples that the model's forward does not take
    (a ``text`` column beside the tokenized ones), as transformers' ``remove_unused_columns`` does."""

    def __init__(
        self, collate_fn: Callable[[list[Any]], Any], model: nn.Module, label_names: Sequence[str] = ()
    ) -> None:
        self.collate_fn = collate_fn
        self.keep = {
            *inspect.signature(model.forward).parameters,
            "label",
            "label_ids",
            *_LABEL_NAMES,
            *label_names,
        }

    def __call__(self, items: list[Any]) -> Any:
        if items and isinstance(items[0], dict):
            items = [{k: v for k, v in item.items() if k in self.keep} for item in items]
        return self.collate_fn(items)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.collate_fn, "set_epoch"):
            self.collate_fn.set_epoch(epoch)


def _ignore_keys(name: str, keys: Any) -> list[str] | None:
    """``ignore_keys`` as a list of output names (None: the model config's default); one string, or
    anything but strings, is refused by name (a bare string would ignore its letters)."""
    if keys is None:
        return None
    if isinstance(keys, str) or not isinstance(keys, (list, tuple, set)) or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"{name} must be a list of output names (e.g. ['hidden_states']), got {keys!r}")
    return list(keys)


def _metric_key_prefix(prefix: Any) -> str:
    """A metric key prefix is a string (a list here is ``ignore_keys`` passed in its place)."""
    if not isinstance(prefix, str):
        raise TypeError(f"metric_key_prefix must be a string such as 'eval', got {prefix!r}")
    return prefix


@dataclass
class TrainerState:
    """``Trainer.state`` under transformers' names: the step and epoch reached, the best metric and
    where its model is, every logged row (metrics.jsonl) as ``log_history``, the floating-point operations
    trained so far (``total_flos``) and, with ``include_num_input_tokens_seen``, the input tokens seen."""

    global_step: int
    epoch: float
    max_steps: int
    best_metric: float | None
    best_global_step: int | None
    best_model_checkpoint: str | None
    log_history: list[dict[str, Any]]
    total_flos: float = 0.0
    num_input_tokens_seen: int = 0
    num_train_epochs: int = 0
    logging_steps: int = 500
    eval_steps: int = 0
    save_steps: int = 0
    train_batch_size: int | None = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: str | None = None
    # transformers' record of the callbacks with a state(): TrainerControl's flags, and each callback's
    # (a list where a class is given twice), so its TrainerState.load_from_json reads the file; filled
    # by Trainer.state (and so save_state), as transformers fills it at its checkpoints
    stateful_callbacks: dict[str, Any] = dataclasses.field(default_factory=dict)


def _one_of(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    if value is not None and alias_value is not None:
        raise TypeError(f"Trainer: give {name}= or transformers' {alias}= for it, not both")
    return value if value is not None else alias_value


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


@dataclass
class EvalPrediction:
    """What ``compute_metrics`` receives, as in transformers: the model's ``predictions`` (logits, or
    what ``preprocess_logits_for_metrics`` made of them) and the ``label_ids``, numpy arrays in the
    evaluation set's order; sequences of different lengths are padded with -100. With transformers'
    ``include_for_metrics``, also the ``inputs`` (input_ids) and per-example ``losses``. Unpacks as
    ``predictions, label_ids = eval_pred`` (then inputs and losses, when present)."""

    predictions: np.ndarray | tuple[np.ndarray, ...]
    label_ids: np.ndarray | tuple[np.ndarray, ...] | None
    inputs: np.ndarray | None = None
    losses: np.ndarray | None = None

    @property
    def elements(self) -> tuple[Any, ...]:
        extra = tuple(x for x in (self.inputs, self.losses) if x is not None)
        return (self.predictions, self.label_ids, *extra)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.elements)

    def __getitem__(self, i: int) -> Any:
        return self.elements[i]


@dataclass
class PredictionOutput:
    """:meth:`Trainer.predict`'s answer, as in transformers."""

    predictions: np.ndarray | tuple[np.ndarray, ...]
    label_ids: np.ndarray | tuple[np.ndarray, ...] | None
    metrics: dict[str, float]


def _concat_padded(parts: list[torch.Tensor]) -> np.ndarray:
    """Batches concatenated along the first axis, the second padded with -100 to the longest; half
    precision comes out as float32 (numpy has no bfloat16)."""
    parts = [p.float() if p.dtype in (torch.bfloat16, torch.float16) else p for p in parts]
    if len({p.shape[1:] for p in parts}) > 1:
        # every axis after the first to the longest: (B, N) logits, and (B, H, N, N) attentions too
        shape = [max(p.shape[d] for p in parts) for d in range(1, parts[0].ndim)]
        padded = []
        for p in parts:
            full = p.new_full((p.shape[0], *shape), -100)
            full[tuple(slice(0, n) for n in p.shape)] = p
            padded.append(full)
        parts = padded
    return torch.cat(parts).numpy()


def _nested(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """``fn`` on every tensor of a model output: a tensor, or tuples of them (hidden states, attentions)."""
    if isinstance(value, (tuple, list)):
        return tuple(_nested(fn, v) for v in value)
    return fn(value)


def _is_tensors(value: Any) -> bool:
    """A tensor or a non-empty tuple of them (nested): an output that goes into the predictions."""
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_is_tensors(v) for v in value)
    return isinstance(value, torch.Tensor)


def _concat_nested(parts: list[Any]) -> Any:
    """:func:`_concat_padded` of per-batch tensors, or element by element of per-batch tuples."""
    if isinstance(parts[0], (tuple, list)):
        return tuple(_concat_nested([p[i] for p in parts]) for i in range(len(parts[0])))
    return _concat_padded([torch.as_tensor(p).detach().cpu() for p in parts])


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


@dataclass
class TrainResult:
    """What :meth:`Trainer.train` ends with; also answers as transformers' ``TrainOutput``
    (``global_step``, ``training_loss``, ``metrics`` with ``train_runtime``, ``train_loss``, ``epoch``)."""

    step: int
    epoch: int
    best_metric: float | None
    best_step: int | None
    stopped_early: bool
    last_metrics: dict[str, float]
    output_dir: str
    training_loss: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def global_step(self) -> int:
        return self.step


class _ProcessBatches:
    """The batch sampler of :meth:`Trainer.get_train_dataloader`: this process's share of the
    current epoch's batches, as ``Trainer._micro_batches`` takes them."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def _batches(self) -> list[list[int]]:
        t = self.trainer
        batches = t._epoch_batches()
        return batches[t.rank : t._usable_batches(len(batches)) : t.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


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


# encoder.layer.N (BERT, ELECTRA), transformer.layer.N (DistilBERT), transformer.h.N (GPT-2)
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|h|layers)\.(\d+)\.")


def layer_depths(names: list[str]) -> dict[str, int]:
    """Each parameter's depth for layer-wise learning-rate decay: 0 for the embeddings (and ELECTRA's
    projection of them), N + 1 for the transformer layer N, and one above the top layer for the rest
    (pooler, heads, a final LayerNorm)."""
    found = [_LAYER_INDEX.search(n) for n in names]
    top = max((int(m.group(1)) for m in found if m), default=-1) + 2
    depths = {}
    for name, m in zip(names, found):
        parts = name.split(".")
        if m:
            depths[name] = int(m.group(1)) + 1
        elif any(p.startswith("embeddings") or p in ("wte", "wpe") for p in parts):
            depths[name] = 0
        else:
            depths[name] = top
    return depths


def _param_groups(
    model: nn.Module, weight_decay: float, layer_lr_decay: float = 1.0, rates: dict[int, float] | None = None
) -> list[dict[str, Any]]:
    """No weight decay on biases and LayerNorm (and other norm) weights, as in BERT. With
    ``layer_lr_decay`` < 1, each group also carries ``lr_scale = layer_lr_decay ** (top - depth)``
    (:func:`layer_depths`): the heads learn at the full rate, each layer below at a fraction of the one
    above, the embeddings least (ELECTRA's fine-tuning uses 0.8). ``rates`` (a parameter's id -> its
    own learning rate) puts those parameters in groups of their own, with an ``lr``, after the others."""
    rates = rates or {}
    norm_params = set()
    for module in model.modules():
        if isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.RMSNorm)):
            norm_params.update(id(p) for p in module.parameters(recurse=False))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    depths = layer_depths([n for n, _ in named]) if layer_lr_decay != 1.0 else {n: 0 for n, _ in named}
    top = max(depths.values(), default=0)
    # one group per (depth, no decay); without the decay, the two groups BERT has, even when empty
    groups: dict[tuple[int, bool], list[nn.Parameter]] = (
        {} if layer_lr_decay != 1.0 else {(0, False): [], (0, True): []}
    )
    own: dict[tuple[float, bool], list[nn.Parameter]] = {}
    for name, p in named:
        no_decay = name.endswith("bias") or id(p) in norm_params or "LayerNorm" in name or p.ndim < 2
        if id(p) in rates:
            own.setdefault((rates[id(p)], no_decay), []).append(p)
        else:
            groups.setdefault((depths[name], no_decay), []).append(p)
    out = []
    for depth, no_decay in sorted(groups, key=lambda k: (k[1], -k[0])):  # the first group runs at the peak rate
        group: dict[str, Any] = {"params": groups[depth, no_decay], "weight_decay": 0.0 if no_decay else weight_decay}
        if layer_lr_decay != 1.0:
            group["lr_scale"] = layer_lr_decay ** (top - depth)
        out.append(group)
    for (lr, no_decay), params in own.items():
        out.append({"params": params, "weight_decay": 0.0 if no_decay else weight_decay, "lr": lr})
    return out


def training_device(config: TrainingArguments) -> torch.device:
    """``config.device``, else this rank's GPU where there is one, else the CPU."""
    if config.device:
        return torch.device(config.device)
    if torch.cuda.is_available():
        world = int(os.environ.get("WORLD_SIZE", "1"))
        index = int(os.environ.get("LOCAL_RANK", "0")) if world > 1 else 0
        gpus = torch.cuda.device_count()
        if index >= gpus:
            # One GPU per process: a rank past the last GPU would fail inside CUDA with an invalid ordinal.
            raise ValueError(
                f"torchrun rank LOCAL_RANK={index} has no GPU of its own: this machine has {gpus}. Start at "
                f"most {gpus} process(es) per node (--nproc_per_node), or train on the CPU with --device cpu"
            )
        return torch.device("cuda", index)
    return torch.device("cpu")


def start_process_group(device: torch.device) -> bool:
    """Under torchrun (WORLD_SIZE > 1), start the process group for ``device`` (NCCL on CUDA, gloo on
    CPU) unless one is up; True when this call started it."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return True


def end_process_group() -> None:
    """Destroy the process group once nothing holds it any more (see :meth:`Trainer.close`)."""
    import torch.distributed as dist

    gc.collect()
    dist.destroy_process_group()


def _linear_schedule(warmup: int, total: int, from_zero: bool = False) -> Callable[[int], float]:
    """Warmup to 1 over ``warmup`` steps (the first step at 1/warmup, or at 0 ``from_zero`` as in
    transformers' schedule), then a linear decay to 0 at ``total``."""
    start = 0 if from_zero else 1

    def f(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + start) / warmup
        if total <= warmup:
            return 1.0
        return max(0.0, (total - step) / max(1, total - warmup))

    return f


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


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


_EMULATED_BF16_WARNED: list[bool] = []


def resolve_precision(precision: str, device: torch.device) -> str:
    """The precision a run trains in: ``auto`` is bf16 autocast on a CUDA GPU that supports it (else fp16
    with a GradScaler), on another accelerator, and on a CPU that multiplies bf16 natively (AMX or AVX-512
    BF16); fp32 on other CPUs.

    Elsewhere bf16 products are emulated: a step of the tiny preset at batch 64 x 32 took 62 s under bf16
    autocast against 1.3 s in fp32 with oneDNN held to AVX2.
    """
    prec = precision
    if prec == "auto":
        if device.type == "cuda":
            prec = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        elif device.type == "cpu":
            prec = "bf16" if has_fast_bf16() else "fp32"
        else:  # another accelerator (mps): its own bf16, whatever the host CPU's flags
            prec = "bf16"
    if prec == "fp16" and device.type != "cuda":
        warnings.warn("fp16 autocast needs CUDA; using bf16 on CPU", stacklevel=3)
        prec = "bf16"
    if prec == "bf16" and device.type == "cpu" and not has_fast_bf16() and not _EMULATED_BF16_WARNED:
        _EMULATED_BF16_WARNED.append(True)  # once a process: a recipe resolves it per phase and per timing
        warnings.warn(
            "precision bf16: this CPU has neither AMX nor AVX-512 BF16, so its bf16 products are emulated and "
            "training runs many times slower than in fp32 (precision auto picks fp32 here)",
            stacklevel=3,
        )
    return prec


def _adamw(model: nn.Module, config: TrainingArguments) -> torch.optim.Optimizer:
    kwargs: dict[str, Any] = dict(lr=config.lr, betas=config.adam_betas, eps=config.adam_eps)
    # a model may give some parameters rates of their own (sentence-transformers' learning_rate_mapping)
    rates = getattr(model, "parameter_learning_rates", None)
    groups = _param_groups(model, config.weight_decay, config.layer_lr_decay, rates() if callable(rates) else None)
    for g in groups:  # LambdaLR scales each group's own initial rate
        g.setdefault("lr", config.lr * g.pop("lr_scale", 1.0))
    try:  # one fused kernel over all parameters (CUDA and, in recent torch, CPU)
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs)


def model_loss(model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """The default ``loss_fn``: the ``.loss`` (or ``["loss"]``) of ``model(**batch)``, no extra logs."""
    out = model(**batch) if isinstance(batch, dict) else model(*batch)
    loss = out["loss"] if isinstance(out, dict) else getattr(out, "loss", None)
    if loss is None:
        raise ValueError("model output has no .loss; pass labels in the batch or give a loss_fn")
    return loss, {}


class Trainer:
    """Train ``model`` on ``train_dataset`` with the settings in ``config`` (see module docs)."""

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
        # transformers' model_init: one model built now (the Trainer needs its class and parameters) and a
        # fresh one at every train(), each call seeded with the run's seed first
        if model is None and model_init is None:
            raise RuntimeError("Trainer needs a model= or a model_init= that builds one")
        if model is not None and model_init is not None:
            raise ValueError("Trainer takes a model= or a model_init= that builds one, not both")
        if model_init is not None and (optimizer is not None or optimizers[1] is not None):
            raise RuntimeError(
                "Trainer(model_init=...) builds a new model at every train(), which an optimizer or scheduler "
                "given in optimizers= cannot follow: leave optimizers out"
            )
        self.model_init = model_init
        if model is None:
            set_seed(config.seed)
            model = self.call_model_init()
        if evaluate is not None and (eval_dataset is not None or compute_metrics is not None):
            raise TypeError("give evaluate= or transformers' eval_dataset= / compute_metrics=, not both")
        if compute_metrics is not None and eval_dataset is None:
            raise TypeError("compute_metrics needs an eval_dataset to compute them on")
        evaluates = config.eval_every or config.eval_each_epoch
        if config.extra.get("names") == "transformers" and evaluates and evaluate is None and eval_dataset is None:
            raise ValueError(
                "eval_strategy asks for evaluations and the Trainer has no eval_dataset to run them on: "
                "pass eval_dataset=, or eval_strategy='no'"
            )
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
        self.batch_sampler = (
            batch_sampler
            if batch_sampler is not None
            else RandomBatchSampler(
                # no train_dataset: a Trainer built to evaluate or predict only, as transformers allows
                len(train_dataset) if train_dataset is not None else 0,
                config.batch_size,
                seed=config.seed,
                shuffle=config.shuffle,
                drop_last=config.drop_last,
                torch_order=config.extra.get("names") == "transformers",
            )
        )

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
        self.warmup_steps = config.warmup_steps or (
            math.ceil(share) if config.extra.get("names") == "transformers" else int(share)
        )
        self._attach_model(model, optimizer, optimizers[1])
        self._history: list[dict[str, Any]] | None = None  # log_history for callbacks, kept in memory
        self._fire("on_init_end")

    # ------------------------------------------------------------------ callbacks
    def add_callback(self, callback: Any) -> None:
        """Add a TrainerCallback (an instance or a class), as transformers' ``add_callback``."""
        callback = callback() if isinstance(callback, type) else callback
        if _is_early_stopping(callback):
            raise ValueError(
                "add_callback(EarlyStoppingCallback): give it when the Trainer is built (callbacks=[...]), "
                "where it sets the run's patience"
            )
        self.callback_handler.add(callback)

    def pop_callback(self, callback: Any) -> Any:
        """Remove a callback (an instance, or the first of a class) and return it (None if absent)."""
        return self.callback_handler.pop(callback)

    def remove_callback(self, callback: Any) -> None:
        """Remove a callback (an instance, or the first of a class)."""
        self.callback_handler.pop(callback)

    def _fire(self, event: str, **kwargs: Any) -> TrainerControl:
        """Run ``event`` on the callbacks with transformers' arguments; nothing to do without callbacks."""
        handler = self.callback_handler
        if not handler.callbacks:
            return handler.control
        return handler.call(
            event,
            self.config,
            self._callback_state(),
            model=getattr(self, "raw_model", None),
            processing_class=self.tokenizer,
            optimizer=getattr(self, "optimizer", None),
            lr_scheduler=getattr(self, "scheduler", None),
            train_dataloader=self._loaders.get("train"),
            eval_dataloader=self._loaders.get("eval"),
            **kwargs,
        )

    def _callback_state(self) -> TrainerState:
        if self._history is None:
            path = self.output_dir / "metrics.jsonl"
            self._history = [self._as_transformers_row(r) for r in read_jsonl(path)] if path.exists() else []
        return self._make_state(self._history)

    def call_model_init(self, trial: Any = None) -> nn.Module:
        """A new model from ``model_init`` (called with no argument, or with ``trial`` when it takes one),
        as transformers' ``call_model_init``."""
        if self.model_init is None:
            raise RuntimeError("Trainer.call_model_init: this Trainer was given a model, not a model_init")
        try:
            count = len(inspect.signature(self.model_init).parameters)
        except (TypeError, ValueError):  # a builtin or C callable without a signature: call it bare
            count = 0
        if count > 1:
            raise RuntimeError(f"model_init takes {count} arguments; it must take none, or one (the trial)")
        model = self.model_init(trial) if count == 1 else self.model_init()
        if not isinstance(model, nn.Module):
            raise RuntimeError(f"model_init returned {type(model).__name__}, not a model (an nn.Module)")
        return model

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

    def floating_point_ops(self, inputs: Any) -> int:
        """transformers' estimate of the floating-point operations of one forward and backward pass on
        ``inputs``: 6 x the tokens of the model's main input x its parameters outside the embedding
        tables; 0 for a batch without that input or a model that cannot count its parameters."""
        model = self.raw_model
        name = getattr(model, "main_input_name", "input_ids")
        if not (isinstance(inputs, dict) and name in inputs and hasattr(model, "num_parameters")):
            return 0
        if self._non_embedding_parameters is None:  # the parameters do not change while training
            self._non_embedding_parameters = int(model.num_parameters(exclude_embeddings=True))
        return 6 * inputs[name].numel() * self._non_embedding_parameters

    def _input_tokens(self, inputs: Any) -> int:
        """The batch's input tokens under transformers' ``include_num_input_tokens_seen``: every position
        of the main input ("all"), or those the attention mask (else the tokenizer's pad id) marks as
        text ("non_padding"); 0 when it is "no"."""
        mode = self.config.extra.get("include_num_input_tokens_seen", "no")
        if mode == "no":
            return 0
        name = getattr(self.raw_model, "main_input_name", "input_ids")
        if not isinstance(inputs, dict) or name not in inputs:
            if not self._warned_tokens:
                self._warned_tokens = True
                warnings.warn(
                    f"include_num_input_tokens_seen: the batch has no {name!r} (the model's main_input_name) "
                    "to count; its tokens are not counted",
                    stacklevel=2,
                )
            return 0
        ids = inputs[name]
        if mode == "non_padding":
            if "attention_mask" in inputs:
                return int(inputs["attention_mask"].sum())
            pad = getattr(self.tokenizer, "pad_token_id", None)
            if pad is not None:
                return int((ids != pad).sum())
        return int(ids.numel())

    def _store_counts(self) -> None:
        """Add every rank's floating-point operations and input tokens since the last call to the totals
        (called on every rank at the same points: a logged row, an evaluation, a checkpoint, the end)."""
        flos, tokens = self.current_flos, self._tokens_unstored
        if self.distributed:
            import torch.distributed as dist

            both = torch.tensor([flos, float(tokens)], dtype=torch.float64, device=self.device)
            dist.all_reduce(both)
            flos, tokens = float(both[0]), int(both[1])
        self.total_flos += flos
        self.num_input_tokens_seen += tokens
        self.current_flos, self._tokens_unstored = 0.0, 0

    @property
    def _counts_tokens(self) -> bool:
        return self.config.extra.get("include_num_input_tokens_seen", "no") != "no"

    def _setup_distributed(self, config: TrainingArguments) -> None:
        """The device and, under torchrun (WORLD_SIZE / RANK / LOCAL_RANK), the process group."""
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = training_device(config)
        self.distributed = self.world_size > 1
        self._owns_group = start_process_group(self.device)
        self.is_main = self.rank == 0

    def is_world_process_zero(self) -> bool:
        """Whether this is the main process of the whole run (the one that logs and saves)."""
        return self.is_main

    def is_local_process_zero(self) -> bool:
        """Whether this is the main process on its machine (``LOCAL_RANK`` 0)."""
        return self.local_rank == 0

    # ------------------------------------------------------------------ data, as transformers hands it out
    def get_train_dataloader(self) -> torch.utils.data.DataLoader:
        """transformers' ``get_train_dataloader``: the current epoch's training batches of this process,
        collated, in the order :meth:`train` takes them (the whole epoch, from its first batch). Its
        ``len`` is this process's batches per epoch. Iterating it does not move the run's data order:
        an epoch's batches are a function of the seed and the epoch."""
        if self.dataset is None:
            raise ValueError("Trainer.get_train_dataloader needs a train_dataset, given when the Trainer is built")
        return torch.utils.data.DataLoader(
            self.dataset, batch_sampler=_ProcessBatches(self), collate_fn=self.collate_fn
        )

    def get_eval_dataloader(self, eval_dataset: Any = None) -> torch.utils.data.DataLoader:
        """transformers' ``get_eval_dataloader``: ``eval_dataset`` (default the Trainer's; a name picks one
        of a dict of them) in order, in batches of ``per_device_eval_batch_size``, collated as
        :meth:`evaluate` reads it."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(eval_dataset, str):
            if not isinstance(self.eval_dataset, dict) or eval_dataset not in self.eval_dataset:
                names = ", ".join(map(str, self.eval_dataset)) if isinstance(self.eval_dataset, dict) else "none"
                raise ValueError(
                    f"get_eval_dataloader({eval_dataset!r}): no eval_dataset of that name (names: {names})"
                )
            dataset = self.eval_dataset[eval_dataset]
        if dataset is None:
            raise ValueError("Trainer.get_eval_dataloader needs an eval_dataset (here or when the Trainer was built)")
        if isinstance(dataset, dict):
            raise ValueError(
                f"get_eval_dataloader: the eval_dataset is a dict of {len(dataset)}; name one "
                f"({', '.join(map(str, dataset))})"
            )
        return self._in_order(dataset)

    def get_test_dataloader(self, test_dataset: Any) -> torch.utils.data.DataLoader:
        """transformers' ``get_test_dataloader``: ``test_dataset`` in order, batched as :meth:`predict` reads it."""
        if test_dataset is None or isinstance(test_dataset, dict):
            raise ValueError("Trainer.get_test_dataloader needs one dataset (len + indexing)")
        return self._in_order(test_dataset)

    def _in_order(self, dataset: Any) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(
            dataset, batch_size=self.config.per_device_eval_batch_size, shuffle=False, collate_fn=self.collate_fn
        )

    # ------------------------------------------------------------------ helpers
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

    def _out_of_time(self) -> bool:
        """max_minutes reached. Reads the clock for the step into ``_clock``: under DDP the
        largest of the ranks' clocks, so that all ranks stop at the same step (else one would hang)
        and a time-based learning rate is the same on every rank."""
        now = self._elapsed()
        if self.distributed:
            import torch.distributed as dist

            t = torch.tensor([now], dtype=torch.float64, device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            now = float(t.item())
        self._clock = now
        return now > 60.0 * self.config.max_minutes

    def close(self) -> None:
        """Let go of the DistributedDataParallel wrapper, and end the process group if this Trainer
        started it; ``train()`` calls it on its way out. The trained weights stay in ``raw_model``.

        The wrapper's reducer holds the process group and the work its gloo threads still own. It
        sits in reference cycles, so left alone it is freed whenever the garbage collector runs,
        possibly during interpreter shutdown, where freeing that work aborts the process."""
        released = self.model is not self.raw_model
        self.model = self.raw_model
        if self._owns_group:
            self._owns_group = False
            end_process_group()  # collects the released wrapper first
        elif released:
            gc.collect()

    def _barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def _log(self, row: dict[str, Any]) -> None:
        if self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            with open(self.output_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        if self.callback_handler.callbacks:
            logs = self._as_transformers_row(row)
            self._callback_state()  # the history up to this row, read once
            assert self._history is not None
            self._history.append(logs)
            self._fire("on_log", logs={k: v for k, v in logs.items() if k != "step"})

    def log(self, logs: dict[str, float]) -> None:
        """transformers' ``log``: one row (with the step and epoch reached) in metrics.jsonl, and
        ``on_log`` on the callbacks."""
        self._log({"step": self.step, "epoch": self.epoch, **logs})

    # ------------------------------------------------------------------ checkpoints
    def _write_model(self, directory: Path) -> None:
        ckpt_io.save_model(self.raw_model, directory, self.tokenizer, self.save_model_fn)

    def _gather_rng(self) -> list[dict[str, Any]]:
        """Every rank's RNG state, on rank 0 (the other ranks get an empty list)."""
        state = ckpt_io.rng_state()
        if not self.distributed:
            return [state]
        import torch.distributed as dist

        states: list[Any] = [None] * self.world_size
        dist.all_gather_object(states, state)
        return states if self.is_main else []

    def save_checkpoint(self) -> Path | None:
        """Publish ``checkpoints/step-N`` (rank 0 writes every rank's RNG state); prune old ones."""
        self._last_save_step = self.step
        self._store_counts()
        rng_states = self._gather_rng()
        final = None
        if self.is_main:
            state = {
                "step": self.step,
                "epoch": self.epoch,
                "batches_done_in_epoch": self.batches_done_in_epoch,
                "best_metric": self.best_metric,
                "best_step": self.best_step,
                "bad_evals": self.bad_evals,
                "train_seconds": self._elapsed(),
                "total_flos": self.total_flos,
                "num_input_tokens_seen": self.num_input_tokens_seen,
                "world_size": self.world_size,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "config": dataclasses.asdict(self.config),
                "stateful_callbacks": self._stateful_callbacks(),
            }
            final = ckpt_io.write_checkpoint(
                self.output_dir, self.step, self._write_model, state, rng_states, self.config.keep_last
            )
        self._barrier()
        self._fire("on_save")
        return final

    def load_checkpoint(self, ckpt: Path) -> None:
        """Restore model, optimizer, scheduler, scaler, RNG and data position from ``ckpt``."""
        state, rng = ckpt_io.read_checkpoint(ckpt, self.rank)
        if state.get("world_size", 1) != self.world_size:
            raise ValueError(
                f"checkpoint {ckpt} was written with {state.get('world_size')} processes, "
                f"this run has {self.world_size}; resume with the same world size"
            )
        ckpt_io.load_model_weights(self.raw_model, ckpt)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.epoch = state["epoch"]
        self.batches_done_in_epoch = state["batches_done_in_epoch"]
        self.best_metric = state["best_metric"]
        self.best_step = state["best_step"]
        self.bad_evals = state["bad_evals"]
        self.train_seconds = float(state.get("train_seconds", 0.0))
        self._clock = self.train_seconds
        self.total_flos = float(state.get("total_flos", 0.0))
        self.num_input_tokens_seen = int(state.get("num_input_tokens_seen", 0))
        if rng is not None:
            ckpt_io.set_rng_state(rng)
        if self.config.extra.get("restore_callback_states_from_checkpoint"):
            self._restore_callbacks(state.get("stateful_callbacks") or {})

    def _restore_callbacks(self, stored: dict[str, Any]) -> None:
        """transformers' ``restore_callback_states_from_checkpoint``: each callback whose class name has a
        state in the checkpoint is rebuilt from it (``type(cb)(**args)``, then its ``attributes`` set) and
        moved to the end of the list; the control gets its saved flags. Names the run no longer has are
        named in a warning."""
        handler = self.callback_handler
        missing = []
        for name, data in stored.items():
            saved = data if isinstance(data, list) else [data]
            if name == "TrainerControl":
                for flag, value in saved[0].get("args", {}).items():
                    setattr(handler.control, flag, value)
                continue
            same = [cb for cb in handler.callbacks if type(cb).__name__ == name]
            if not same:
                missing.append(name)
            for cb, entry in zip(same, saved):
                rebuilt = type(cb)(**entry.get("args", {}))
                for attribute, value in entry.get("attributes", {}).items():
                    setattr(rebuilt, attribute, value)
                handler.pop(cb)
                handler.add(rebuilt)
        if missing and self.is_main:
            warnings.warn(
                f"resume: the checkpoint holds the state of callbacks this run does not have ({', '.join(missing)}); "
                "ignored",
                stacklevel=2,
            )

    def _prepare_output(self) -> None:
        """Resume from the newest checkpoint that loads, or start a fresh metrics log."""
        cfg = self.config
        metrics = self.output_dir / "metrics.jsonl"
        if self.is_main and not cfg.resume and not cfg.overwrite:
            # Starting afresh here would erase another run's metrics and let retention prune its
            # checkpoints (and a later resume would load them): refuse instead.
            theirs = [p.name for p in (metrics, self.output_dir / "checkpoints") if p.exists()]
            if latest_checkpoint(self.output_dir) is not None or metrics.exists():
                raise FileExistsError(
                    f"{self.output_dir} holds another run ({', '.join(theirs)}); pass "
                    f"resume=True (--resume) to continue it, overwrite=True (--overwrite) to "
                    f"replace it, or use another output folder"
                )
        if self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            ckpt_io.remove_leftovers(self.output_dir)
            if cfg.overwrite and not cfg.resume:
                ckpt_io.remove_run(self.output_dir)
        self._barrier()
        ckpt = None
        candidates = ckpt_io.checkpoints_newest_first(self.output_dir) if cfg.resume else []
        if cfg.resume and self._resume_from is not None:  # the one checkpoint the caller named
            candidates = [self._resume_from]
        if cfg.resume:
            for candidate in candidates:
                try:
                    self.load_checkpoint(candidate)
                except Exception as e:  # any damage (truncated file, bad pickle): try the older one
                    if isinstance(e, ValueError) and "world size" in str(e):
                        raise
                    print(
                        f"resume: checkpoint {candidate} is damaged ({type(e).__name__}: {str(e)[:200]}); "
                        f"falling back to the previous one",
                        file=sys.stderr,
                    )
                    continue
                ckpt = candidate
                break
        if ckpt is None and candidates:
            raise ValueError(
                f"resume: none of the {len(candidates)} checkpoint(s) in "
                f"{self.output_dir / 'checkpoints'} could be loaded (see above); nothing was changed"
            )
        if ckpt is None:
            if cfg.resume and self.is_main:
                print(
                    f"resume: no complete checkpoint in {self.output_dir / 'checkpoints'}; starting fresh",
                    file=sys.stderr,
                )
            if self.is_main and metrics.exists():
                metrics.unlink()
            return
        self._resumed = True
        if self.is_main and not self._finished():
            print(f"resumed from {ckpt} (step {self.step})", file=sys.stderr)
            ckpt_io.truncate_metrics(metrics, self.step)

    def _finished(self) -> bool:
        """The resumed run had already ended: all its steps, its patience or its time were spent."""
        cfg = self.config
        if not self._resumed:
            return False
        stopped = cfg.patience is not None and cfg.best_metric is not None and self.bad_evals >= cfg.patience
        # The checkpoint's training time, the same on every rank (no clock is read, nothing to agree on).
        timed_out = cfg.max_minutes is not None and self.train_seconds > 60.0 * cfg.max_minutes
        return self.step >= self.total_steps or stopped or timed_out

    def _already_finished(self) -> TrainResult:
        """Resuming a finished run changes nothing: no step, no evaluation, no second end row in the
        metrics; the result is the run's own, its last evaluation read back from metrics.jsonl."""
        if self.is_main:
            print(
                f"resume: the run in {self.output_dir} already finished at step {self.step}; nothing to do",
                file=sys.stderr,
            )
            metrics = self.output_dir / "metrics.jsonl"
            rows = read_jsonl(metrics) if metrics.exists() else []
            rows = [r for r in rows if any(k.startswith("eval_") for k in r)]
            if rows:
                self.last_metrics = {k[5:]: v for k, v in rows[-1].items() if k.startswith("eval_")}
        self._barrier()
        stopped = self.step < self.total_steps
        return TrainResult(
            self.step, self.epoch, self.best_metric, self.best_step, stopped, self.last_metrics, str(self.output_dir)
        )

    # ------------------------------------------------------------------ evaluation
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

    def _load_best(self) -> None:
        """Put the best model's weights (``OUTPUT/best``) in place of the last ones, on every rank."""
        self._barrier()  # rank 0 wrote it
        best = self.output_dir / "best"
        if self.best_step is None or self.best_step == self.step or not best.is_dir():
            return
        ckpt_io.load_model_weights(self.raw_model, best)
        if self.is_main:
            print(
                f"loaded the best model (step {self.best_step}, {self.config.best_metric} {self.best_metric:.6g})",
                file=sys.stderr,
            )

    def _save_best(self) -> None:
        ckpt_io.write_best(
            self.output_dir, self._write_model, {"step": self.step, self.config.best_metric: self.best_metric}
        )

    # ------------------------------------------------------------------ training
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

    def _train_summary(self) -> tuple[float | None, dict[str, float]]:
        """The run's mean training loss (each logged mean weighted by the steps it covers) and
        transformers' ``TrainOutput.metrics`` for it."""
        path = self.output_dir / "metrics.jsonl"
        rows = read_jsonl(path) if self.is_main and path.exists() else []
        total, steps, last = 0.0, 0, 0
        for row in rows:
            if "loss" in row and "step" in row:
                span = max(1, int(row["step"]) - last)
                total, steps, last = total + float(row["loss"]) * span, steps + span, int(row["step"])
        window = getattr(self, "_window", None)
        if window and window["steps"] and "loss" in window["sums"] and self.is_main:
            # the steps after the last logged row (transformers' schedule logs no final row)
            total, steps = total + float(window["sums"]["loss"]), steps + window["steps"]
        loss = total / steps if steps else None
        metrics: dict[str, float] = {"train_runtime": round(self.elapsed_seconds, 4)}
        # the rates are of this call's steps and time, as transformers' (a resumed run's earlier part not counted)
        steps_run = self.step - self._call_start[0]
        seconds = self.elapsed_seconds - self._call_start[1]
        if seconds > 0:
            samples = self._train_samples() * steps_run / max(self.total_steps, 1)
            metrics["train_samples_per_second"] = round(samples / seconds, 3)
            metrics["train_steps_per_second"] = round(steps_run / seconds, 3)
        metrics["total_flos"] = self.total_flos
        if loss is not None:
            metrics["train_loss"] = loss
        metrics["epoch"] = self.step / self.steps_per_epoch
        if self._counts_tokens:
            metrics["num_input_tokens_seen"] = self.num_input_tokens_seen
        return loss, metrics

    def _train_samples(self) -> float:
        """The examples the whole run is sized for, as transformers counts them: max_steps global batches
        when max_steps is given, else the dataset's length times the epochs."""
        cfg = self.config
        if cfg.max_steps is not None:
            return float(cfg.max_steps * cfg.batch_size * cfg.grad_accum_steps * self.world_size)
        return float(len(self.dataset) * cfg.epochs)

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

        bar = None
        if self.is_main and cfg.progress:
            from tqdm.auto import tqdm

            if cfg.schedule == "time":  # the budget is time, so the bar counts training seconds
                budget = round(60.0 * cfg.max_minutes)  # type: ignore[operator]
                bar = tqdm(
                    total=budget,
                    initial=min(budget, round(self.train_seconds)),
                    unit="s",
                    desc=cfg.run_name or "train",
                    dynamic_ncols=True,
                    file=sys.stderr,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} s [{elapsed}<{remaining}{postfix}]",
                )
            else:
                bar = tqdm(
                    total=self.total_steps,
                    initial=self.step,
                    desc=cfg.run_name or "train",
                    dynamic_ncols=True,
                    file=sys.stderr,
                )
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
            final_eval = cfg.extra.get("names") != "transformers"
            if final_eval and self.evaluate_fn is not None and self._last_eval_step != self.step and not self._stop:
                self.run_evaluation()
        finally:
            if bar is not None:
                bar.close()
            # the clock stops with the training: train_runtime and elapsed_seconds read later (after a
            # save, or from a notebook minutes on) are the run's time, not the time since it started
            stopped = self._elapsed()
            self._elapsed = lambda: stopped
        self._store_counts()

        if (cfg.save_every or cfg.save_each_epoch) and self._last_save_step != self.step:
            self.save_checkpoint()
        if cfg.load_best_at_end:
            self._load_best()
        if self.is_main and cfg.save_final:
            self.save_final()
        if self.is_main and cfg.plot and (self.output_dir / "metrics.jsonl").is_file():  # nothing logged: no plot
            try:
                plot_metrics(self.output_dir / "metrics.jsonl", self.output_dir / "metrics.png")
            except Exception as e:  # a plot must never cost the trained model
                warnings.warn(f"could not draw metrics.png: {e}", stacklevel=2)
        self._barrier()
        return TrainResult(
            self.step, self.epoch, self.best_metric, self.best_step, self._stop, self.last_metrics, str(self.output_dir)
        )

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
        elif cfg.extra.get("names") == "transformers":  # its Trainer logs the norm even when it does not clip
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

    def _maybe_log(self, lr: float, bar: Any, forced: bool = False) -> None:
        """Every ``log_every`` steps (and when a callback asks): the window's mean loss terms (over
        ranks), lr and throughput."""
        # transformers logs on its schedule only; bertkit's own runs also log the last step's window
        last = self.step == self.total_steps and self.config.extra.get("names") != "transformers"
        if not (forced or self.step % self.config.log_every == 0 or last):
            return
        w = self._window
        now = time.perf_counter()
        row: dict[str, Any] = {"step": self.step, "epoch": self.epoch}
        keys = sorted(w["sums"])
        vals = torch.stack([w["sums"][k].float().reshape(()) for k in keys]) / w["steps"]
        if self.distributed:  # log the mean over ranks, i.e. over the global batch
            import torch.distributed as dist

            vals = vals.to(self.device)
            dist.all_reduce(vals)
            vals = vals / self.world_size
        row.update(dict(zip(keys, vals.cpu().tolist())))
        row["lr"] = lr
        if self._grad_norm is not None:  # the last step's, before clipping, as transformers logs it
            row["grad_norm"] = float(self._grad_norm)
        row["tokens_per_sec"] = w["tokens"] / max(now - w["t0"], 1e-9)
        row["train_seconds"] = round(self._elapsed(), 3)
        self._store_counts()
        if self._counts_tokens:
            row["num_input_tokens_seen"] = self.num_input_tokens_seen
        self._log(row)
        if bar is not None:
            bar.set_postfix(
                step=self.step,
                loss=f"{row['loss']:.4f}",
                lr=f"{lr:.2e}",
                tok_s=f"{row['tokens_per_sec']:.0f}",
                refresh=False,
            )
        self._window = {"sums": {}, "steps": 0, "tokens": 0, "t0": time.perf_counter()}

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
        if self.step >= self.total_steps and cfg.extra.get("names") != "transformers":
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

    def _evaluate_dataset(
        self, model: nn.Module, dataset: Any, prefix: str = "", ignore_keys: Sequence[str] | None = None
    ) -> tuple[Any, Any, dict[str, float]]:
        """Predictions, labels and metrics of ``model`` on ``dataset`` as transformers' Trainer gives them:
        batches of ``per_device_eval_batch_size`` in order, each batch's outputs (but ``ignore_keys``,
        by default the config's ``keys_to_ignore_at_inference``) through ``preprocess_logits_for_metrics``
        when given, ``loss`` as the mean over examples, then ``compute_metrics``; keys get ``prefix``."""
        if ignore_keys is None:
            ignore_keys = getattr(getattr(model, "config", None), "keys_to_ignore_at_inference", None) or ()
        skip = {"loss", *ignore_keys}
        size = self.config.per_device_eval_batch_size
        self._loaders["eval"] = self._in_order(dataset)  # the batches below, for callbacks
        label_names = self.config.extra.get("label_names") or _LABEL_NAMES
        include = self.config.extra.get("include_for_metrics") or ()
        preds: list[Any] = []
        labels: dict[str, list[torch.Tensor]] = {}
        inputs: list[torch.Tensor] = []
        losses: list[torch.Tensor] = []
        loss_sum, count = 0.0, 0
        for start in range(0, len(dataset), size):
            batch = _to_device(
                self.collate_fn([dataset[i] for i in range(start, min(start + size, len(dataset)))]), self.device
            )
            with self._autocast():
                out = model(**batch)
            n = len(next(iter(batch.values())))
            if getattr(out, "loss", None) is not None:
                loss_sum, count = loss_sum + float(out.loss) * n, count + n
                losses.append(out.loss.detach().float().cpu().reshape(1).repeat(n))
            # every output but the loss (QA: start and end logits), as transformers' prediction_step takes them
            fields = out.items() if isinstance(out, dict) else enumerate(out if isinstance(out, tuple) else (out,))
            logits = _one_or_tuple(
                [_nested(torch.Tensor.detach, v) for k, v in fields if k not in skip and _is_tensors(v)]
            )
            batch_labels = [batch[k] for k in label_names if k in batch]
            for key in label_names:
                if key in batch:
                    labels.setdefault(key, []).append(batch[key].cpu())
            if self.preprocess_logits_for_metrics is not None:
                logits = self.preprocess_logits_for_metrics(
                    logits, _one_or_tuple(batch_labels) if batch_labels else None
                )
            else:
                logits = _nested(torch.Tensor.float, logits)
            preds.append(logits)
            if "inputs" in include:
                inputs.append(batch["input_ids"].cpu())
            self._fire("on_prediction_step")  # after each evaluation batch, as transformers' loop does
        predictions = _concat_nested(preds) if preds else None
        label_ids = _one_or_tuple([_concat_padded(parts) for parts in labels.values()]) if labels else None
        metrics: dict[str, float] = {"loss": loss_sum / count} if count else {}
        if self.compute_metrics is not None:
            given = EvalPrediction(
                predictions,
                label_ids,
                inputs=_concat_padded(inputs) if "inputs" in include else None,
                losses=torch.cat(losses).numpy() if "loss" in include and losses else None,
            )
            metrics.update({k: float(v) for k, v in self.compute_metrics(given).items()})
        return predictions, label_ids, {f"{prefix}{k}": v for k, v in metrics.items()}

    def _evaluate_during_training(self, model: nn.Module) -> dict[str, float]:
        """The metrics on ``eval_dataset`` an evaluation while training logs; of a dict of datasets, each
        one's under ``{name}_`` (logged as ``eval_{name}_...``, as transformers names them)."""
        ignore = getattr(self, "_ignore_keys_for_eval", None)

        def metrics(part: Any) -> dict[str, float]:
            start = time.perf_counter()
            out = self._evaluate_dataset(model, part, ignore_keys=ignore)[2]
            # transformers' runtime and speed beside them ("p_runtime" -> "runtime")
            out.update({k[2:]: v for k, v in self._speed_metrics("p", start, len(part)).items()})
            return out

        if isinstance(self.eval_dataset, dict):
            return {f"{name}_{k}": v for name, part in self.eval_dataset.items() for k, v in metrics(part).items()}
        return metrics(self.eval_dataset)

    def _in_eval_mode(self, work: Callable[[nn.Module], Any]) -> Any:
        """``work(model)`` in eval mode without gradients; the model's own mode comes back after."""
        model = self.raw_model  # on self.device since __init__
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return work(model)
        finally:
            model.train(was_training)

    def _speed_metrics(self, prefix: str, start: float, examples: int) -> dict[str, float]:
        """transformers' ``{prefix}_runtime`` (seconds since ``start``) and its examples and batches per second."""
        runtime = time.perf_counter() - start
        out = {f"{prefix}_runtime": round(runtime, 4)}
        if runtime > 0:
            batches = math.ceil(examples / self.config.per_device_eval_batch_size)
            out[f"{prefix}_samples_per_second"] = round(examples / runtime, 3)
            out[f"{prefix}_steps_per_second"] = round(batches / runtime, 3)
        return out

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: Sequence[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """transformers' ``evaluate``: the loss and ``compute_metrics`` on ``eval_dataset`` (default the
        Trainer's), keys prefixed ``eval_``, its runtime and speed, the ``epoch`` reached (and the input
        tokens seen, when counted). A dict of datasets is evaluated one by one, each under
        ``eval_{name}_``. ``ignore_keys``: model outputs left out of the predictions ``compute_metrics``
        sees (default: the config's ``keys_to_ignore_at_inference``)."""
        ignore_keys = _ignore_keys("ignore_keys", ignore_keys)
        metric_key_prefix = _metric_key_prefix(metric_key_prefix)
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("Trainer.evaluate needs an eval_dataset (here or when the Trainer was built)")
        if isinstance(dataset, dict):
            merged: dict[str, float] = {}
            for name, part in dataset.items():
                merged.update(self.evaluate(part, ignore_keys, metric_key_prefix=f"{metric_key_prefix}_{name}"))
            return merged
        start = time.perf_counter()
        _, _, metrics = self._in_eval_mode(
            lambda m: self._evaluate_dataset(m, dataset, f"{metric_key_prefix}_", ignore_keys)
        )
        metrics.update(self._speed_metrics(metric_key_prefix, start, len(dataset)))
        metrics["epoch"] = self.step / self.steps_per_epoch
        if self._counts_tokens:
            metrics["num_input_tokens_seen"] = self.num_input_tokens_seen
        if self.callback_handler.callbacks:
            self._fire("on_log", logs=dict(metrics))
            self._fire("on_evaluate", metrics=metrics)
        return metrics

    def predict(
        self, test_dataset: Any, ignore_keys: Sequence[str] | None = None, metric_key_prefix: str = "test"
    ) -> PredictionOutput:
        """transformers' ``predict``: predictions (logits; every output but ``ignore_keys``), labels and
        metrics (with runtime and speed) on ``test_dataset``."""
        ignore_keys = _ignore_keys("ignore_keys", ignore_keys)
        metric_key_prefix = _metric_key_prefix(metric_key_prefix)
        start = time.perf_counter()
        predictions, label_ids, metrics = self._in_eval_mode(
            lambda m: self._evaluate_dataset(m, test_dataset, f"{metric_key_prefix}_", ignore_keys)
        )
        metrics.update(self._speed_metrics(metric_key_prefix, start, len(test_dataset)))
        self._fire("on_predict", metrics=metrics)
        return PredictionOutput(predictions, label_ids, metrics)

    def save_model(self, output_dir: str | os.PathLike | None = None) -> None:
        """Write the model (and tokenizer) into ``output_dir`` (default the run's output), as
        ``save_pretrained`` does, each file replaced atomically."""
        if self.is_main:
            ckpt_io.write_final(output_dir if output_dir is not None else self.output_dir, self._write_model)

    def log_metrics(self, split: str, metrics: dict[str, float]) -> None:
        """Print ``metrics`` as transformers' ``log_metrics`` does (sorted, aligned, runtimes as h:mm:ss.cc)."""
        if not self.is_main:
            return
        print(f"***** {split} metrics *****")
        shown = {k: _format_metric(k, v) for k, v in metrics.items()}
        k_width = max((len(str(k)) for k in shown), default=0)
        v_width = max((len(str(v)) for v in shown.values()), default=0)
        for key in sorted(shown):
            print(f"  {key: <{k_width}} = {shown[key]:>{v_width}}")

    def save_metrics(self, split: str, metrics: dict[str, float], combined: bool = True) -> None:
        """Write ``metrics`` to ``OUTPUT/{split}_results.json`` and, with ``combined``, merge them into
        ``OUTPUT/all_results.json``, as transformers does (each file written atomically)."""
        if not self.is_main:
            return
        atomic_write_json(self.output_dir / f"{split}_results.json", metrics, indent=4, sort_keys=True)
        if combined:
            path = self.output_dir / "all_results.json"
            every = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            atomic_write_json(path, {**every, **metrics}, indent=4, sort_keys=True)

    @property
    def state(self) -> TrainerState:
        """Where the run stands, as transformers' ``trainer.state`` (``log_history`` read from metrics.jsonl)."""
        path = self.output_dir / "metrics.jsonl"
        state = self._make_state([self._as_transformers_row(r) for r in read_jsonl(path)] if path.exists() else [])
        # read here, not in every event's state: a callback's state() need not run at each step
        state.stateful_callbacks = self._stateful_callbacks()
        return state

    def _make_state(self, log_history: list[dict[str, Any]]) -> TrainerState:
        cfg = self.config
        return TrainerState(
            global_step=self.step,
            epoch=self.step / self.steps_per_epoch,
            max_steps=self.total_steps,
            best_metric=self.best_metric,
            best_global_step=self.best_step,
            best_model_checkpoint=str(self.output_dir / "best") if self.best_step is not None else None,
            log_history=log_history,
            total_flos=self.total_flos,
            num_input_tokens_seen=self.num_input_tokens_seen,
            num_train_epochs=math.ceil(self.total_steps / self.steps_per_epoch),
            logging_steps=cfg.log_every,
            eval_steps=cfg.eval_every or 0,
            save_steps=cfg.save_every or 0,
            train_batch_size=cfg.batch_size,
            is_local_process_zero=self.local_rank == 0,
            is_world_process_zero=self.is_main,
        )

    def _stateful_callbacks(self) -> dict[str, Any]:
        """transformers' ``stateful_callbacks``: the control's flags and every callback's ``state()``."""
        control = self.callback_handler.control
        flags = ("should_training_stop", "should_epoch_stop", "should_save", "should_evaluate", "should_log")
        out: dict[str, Any] = {"TrainerControl": {"args": {k: getattr(control, k) for k in flags}, "attributes": {}}}
        for cb in self.callback_handler.callbacks:
            state = getattr(cb, "state", None)
            if not callable(state):
                continue
            name, value = type(cb).__name__, state()
            if name in out:
                out[name] = [*(out[name] if isinstance(out[name], list) else [out[name]]), value]
            else:
                out[name] = value
        return out

    def _as_transformers_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A metrics.jsonl row with transformers' keys beside bertkit's: ``epoch`` as the fraction of epochs
        trained (the row's step over the steps an epoch), the learning rate as ``learning_rate``."""
        out = dict(row)
        if "step" in row:
            out["epoch"] = row["step"] / self.steps_per_epoch
        if "lr" in row:
            out["learning_rate"] = row["lr"]
        return out

    def save_state(self) -> None:
        """Write :attr:`state` to ``OUTPUT/trainer_state.json``, as transformers does."""
        if self.is_main:
            atomic_write_json(
                self.output_dir / "trainer_state.json", dataclasses.asdict(self.state), indent=2, sort_keys=True
            )

    def save_final(self) -> None:
        """Write the trained model into ``output`` itself (atomically, file by file)."""
        ckpt_io.write_final(self.output_dir, self._write_model)
