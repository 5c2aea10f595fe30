"""The Trainer's run state: checkpoints written and resumed, the best model, and ``trainer.state``.

A checkpoint (:mod:`bertkit.training.checkpoint_folders`) holds the model, optimizer, scheduler, scaler, every
rank's RNG state and the data position; ``resume`` loads the newest one that loads, and a run that had
already finished is left as it is. :class:`TrainerState` is the run's state under transformers' names.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bertkit.training.checkpoint_folders as ckpt_io
from bertkit._io import atomic_write_json
from bertkit._text import read_jsonl
from bertkit.training.checkpoint_folders import latest_checkpoint
from bertkit.training.plots import plot_metrics


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


class CheckpointState:
    """The Trainer's checkpoints, best model, final save and state (a mixin of
    :class:`~bertkit.training.trainer.Trainer`)."""

    def _write_model(self, directory: Path) -> None:
        ckpt_io.save_model(self.raw_model, directory, self.tokenizer, self.save_model_fn)

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

    def _end_run(self) -> TrainResult:
        """After the last step: the last checkpoint, the best model back when asked, the final save and the
        plot; the run's result."""
        cfg = self.config
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
                warnings.warn(f"could not draw metrics.png: {e}", stacklevel=3)
        self._barrier()
        return TrainResult(
            self.step, self.epoch, self.best_metric, self.best_step, self._stop, self.last_metrics, str(self.output_dir)
        )

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

    def save_model(self, output_dir: str | os.PathLike | None = None) -> None:
        """Write the model (and tokenizer) into ``output_dir`` (default the run's output), as
        ``save_pretrained`` does, each file replaced atomically."""
        if self.is_main:
            ckpt_io.write_final(output_dir if output_dir is not None else self.output_dir, self._write_model)

    def save_final(self) -> None:
        """Write the trained model into ``output`` itself (atomically, file by file)."""
        ckpt_io.write_final(self.output_dir, self._write_model)

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

    def save_state(self) -> None:
        """Write :attr:`state` to ``OUTPUT/trainer_state.json``, as transformers does."""
        if self.is_main:
            atomic_write_json(
                self.output_dir / "trainer_state.json", dataclasses.asdict(self.state), indent=2, sort_keys=True
            )
