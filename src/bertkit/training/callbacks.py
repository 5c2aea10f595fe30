"""transformers' callback protocol for bertkit's Trainer: ``Trainer(callbacks=[...])`` runs a
``TrainerCallback`` (bertkit's, or transformers' own subclass: the methods are called by name) at the
same events and with the same arguments as transformers' Trainer calls it.

Each event method gets ``(args, state, control, **kwargs)``: the run's arguments (answering
transformers' names), :class:`~bertkit.training.trainer.TrainerState`, a :class:`TrainerControl` whose
flags a callback may set, and ``model``, ``processing_class``, ``optimizer``, ``lr_scheduler`` (plus
``logs`` for ``on_log``, ``metrics`` for ``on_evaluate`` and ``on_predict``). Setting
``control.should_training_stop`` ends the run after the step; ``should_evaluate``, ``should_save`` and
``should_log`` ask for an evaluation, a checkpoint or a log row at the end of the step;
``should_epoch_stop`` ends the epoch there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EVENTS", "CallbackHandler", "TrainerCallback", "TrainerControl"]

# transformers' event names, in the order its Trainer can call them
EVENTS = (
    "on_init_end",
    "on_train_begin",
    "on_epoch_begin",
    "on_step_begin",
    "on_pre_optimizer_step",
    "on_optimizer_step",
    "on_substep_end",
    "on_step_end",
    "on_log",
    "on_prediction_step",
    "on_evaluate",
    "on_predict",
    "on_save",
    "on_epoch_end",
    "on_train_end",
)


@dataclass
class TrainerControl:
    """The flags a callback sets to steer the run, under transformers' names."""

    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False

    def _new_training(self) -> None:
        self.should_training_stop = False

    def _new_epoch(self) -> None:
        self.should_epoch_stop = False

    def _new_step(self) -> None:
        self.should_save = self.should_evaluate = self.should_log = False


class TrainerCallback:
    """A callback's events, each doing nothing unless overridden (transformers' ``TrainerCallback``)."""

    def on_init_end(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """At the end of the Trainer's construction."""

    def on_train_begin(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """Before the first step of ``train()``."""

    def on_train_end(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After the last step of ``train()`` and its final save."""

    def on_epoch_begin(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """At the start of an epoch."""

    def on_epoch_end(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """At the end of an epoch."""

    def on_step_begin(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """Before an optimizer step's first micro-batch."""

    def on_pre_optimizer_step(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After gradient clipping, before the optimizer steps."""

    def on_optimizer_step(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After the optimizer steps, before the gradients are zeroed."""

    def on_substep_end(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After each gradient-accumulation micro-batch but the last."""

    def on_step_end(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After an optimizer step."""

    def on_prediction_step(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After each batch of an evaluation or prediction."""

    def on_evaluate(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After an evaluation (``metrics`` in kwargs)."""

    def on_predict(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After ``predict()`` (``metrics`` in kwargs)."""

    def on_save(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After a checkpoint is written."""

    def on_log(self, args: Any, state: Any, control: TrainerControl, **kwargs: Any) -> None:
        """After a row is logged (``logs`` in kwargs)."""


class CallbackHandler:
    """The Trainer's callbacks and the one :class:`TrainerControl` they share; ``call`` runs one event
    on each, in order. A callback's failure names the callback and the event."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks: list[Any] = []
        self.control = TrainerControl()
        for cb in callbacks:
            self.add(cb)

    def add(self, callback: Any) -> None:
        """Add a callback (an instance, or a class built with no arguments)."""
        cb = callback() if isinstance(callback, type) else callback
        if not any(callable(getattr(cb, event, None)) for event in EVENTS):
            raise TypeError(
                f"Trainer callback {type(cb).__name__} has none of a TrainerCallback's events "
                f"({', '.join(EVENTS[:4])}, ...): subclass TrainerCallback"
            )
        self.callbacks.append(cb)

    def _match(self, callback: Any) -> Any:
        for cb in self.callbacks:
            if cb is callback or (isinstance(callback, type) and type(cb) is callback):
                return cb
        return None

    def pop(self, callback: Any) -> Any:
        """Remove a callback (an instance, or the first one of a class) and return it; None if absent."""
        cb = self._match(callback)
        if cb is not None:
            self.callbacks.remove(cb)
        return cb

    def call(self, event: str, args: Any, state: Any, **kwargs: Any) -> TrainerControl:
        """Run ``event`` on every callback that has it; a callback may return a new TrainerControl."""
        for cb in self.callbacks:
            method = getattr(cb, event, None)
            if method is None:
                continue
            try:
                result = method(args, state, self.control, **kwargs)
            except AttributeError as e:
                raise RuntimeError(
                    f"Trainer callback {type(cb).__name__}.{event} failed: {e}. bertkit's Trainer passes "
                    "transformers' arguments, TrainerState and TrainerControl by their common names; a "
                    "callback that needs another attribute cannot run here"
                ) from e
            if isinstance(result, TrainerControl) or (result is not None and hasattr(result, "should_training_stop")):
                self.control = result  # type: ignore[assignment]
        # a request is answered by its event, as transformers' handler clears it
        flag = {"on_log": "should_log", "on_evaluate": "should_evaluate", "on_save": "should_save"}.get(event)
        if flag is not None:
            setattr(self.control, flag, False)
        return self.control
