"""transformers' Trainer API on bertkit's Trainer: its keywords, ``model_init``, ``evaluate``,
``predict``, the dataloaders it hands out, ``compute_metrics`` with :class:`EvalPrediction`, and its
floating-point-operation and input-token counters.
"""

from __future__ import annotations

import inspect
import math
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from bertkit.training.distributed import _to_device
from bertkit.training.training_args import TrainingArguments

if TYPE_CHECKING:
    from bertkit.training.trainer import Trainer


def _one_of(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    if value is not None and alias_value is not None:
        raise TypeError(f"Trainer: give {name}= or transformers' {alias}= for it, not both")
    return value if value is not None else alias_value


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


class TransformersAPI:
    """transformers' Trainer methods (a mixin of :class:`~bertkit.training.trainer.Trainer`)."""

    def _take_model_init(
        self, model: nn.Module | None, model_init: Callable[..., nn.Module] | None, optimizers: bool
    ) -> None:
        """Keep transformers' ``model_init`` (refused beside a ``model``, or beside ``optimizers``: an optimizer
        or scheduler given). The Trainer builds one model with it now (it needs its class and parameters) and
        a fresh one at every train(), each call seeded with the run's seed first."""
        if model is None and model_init is None:
            raise RuntimeError("Trainer needs a model= or a model_init= that builds one")
        if model is not None and model_init is not None:
            raise ValueError("Trainer takes a model= or a model_init= that builds one, not both")
        if model_init is not None and optimizers:
            raise RuntimeError(
                "Trainer(model_init=...) builds a new model at every train(), which an optimizer or scheduler "
                "given in optimizers= cannot follow: leave optimizers out"
            )
        self.model_init = model_init

    @staticmethod
    def _check_evaluation(config: TrainingArguments, evaluate: Any, eval_dataset: Any, compute_metrics: Any) -> None:
        """Refuse an evaluation asked for in two ways, or one with nothing to run on."""
        if evaluate is not None and (eval_dataset is not None or compute_metrics is not None):
            raise TypeError("give evaluate= or transformers' eval_dataset= / compute_metrics=, not both")
        if compute_metrics is not None and eval_dataset is None:
            raise TypeError("compute_metrics needs an eval_dataset to compute them on")
        evaluates = config.eval_every or config.eval_each_epoch
        if config.api == "transformers" and evaluates and evaluate is None and eval_dataset is None:
            raise ValueError(
                "eval_strategy asks for evaluations and the Trainer has no eval_dataset to run them on: "
                "pass eval_dataset=, or eval_strategy='no'"
            )

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
