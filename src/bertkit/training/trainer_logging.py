"""The Trainer's logs and callbacks: ``metrics.jsonl`` rows, the progress bar, the run's summary, and
transformers' callback events (:mod:`bertkit.training.callbacks`) fired with its arguments.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from bertkit._io import atomic_write_json
from bertkit._text import read_jsonl
from bertkit.training.callbacks import TrainerControl
from bertkit.training.state import TrainerState
from bertkit.training.training_args import TrainingArguments


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


class CallbacksAndLogging:
    """The Trainer's logging and callback events (a mixin of :class:`~bertkit.training.trainer.Trainer`)."""

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

    def _maybe_log(self, lr: float, bar: Any, forced: bool = False) -> None:
        """Every ``log_every`` steps (and when a callback asks): the window's mean loss terms (over
        ranks), lr and throughput."""
        # transformers logs on its schedule only; bertkit's own runs also log the last step's window
        last = self.step == self.total_steps and self.config.api != "transformers"
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

    def _progress_bar(self) -> Any:
        """The run's tqdm bar on rank 0 (None elsewhere, or without ``progress``): steps, or training seconds
        under a time schedule."""
        cfg = self.config
        if not (self.is_main and cfg.progress):
            return None
        from tqdm.auto import tqdm

        if cfg.schedule == "time":  # the budget is time, so the bar counts training seconds
            budget = round(60.0 * cfg.max_minutes)  # type: ignore[operator]
            return tqdm(
                total=budget,
                initial=min(budget, round(self.train_seconds)),
                unit="s",
                desc=cfg.run_name or "train",
                dynamic_ncols=True,
                file=sys.stderr,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} s [{elapsed}<{remaining}{postfix}]",
            )
        return tqdm(
            total=self.total_steps, initial=self.step, desc=cfg.run_name or "train", dynamic_ncols=True, file=sys.stderr
        )

    def _as_transformers_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A metrics.jsonl row with transformers' keys beside bertkit's: ``epoch`` as the fraction of epochs
        trained (the row's step over the steps an epoch), the learning rate as ``learning_rate``."""
        out = dict(row)
        if "step" in row:
            out["epoch"] = row["step"] / self.steps_per_epoch
        if "lr" in row:
            out["learning_rate"] = row["lr"]
        return out

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
