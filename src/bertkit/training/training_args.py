"""The one set of training arguments every trainer and training command shares.

:class:`TrainingArguments` holds what the :class:`~bertkit.training.Trainer` needs besides the model
and the data: output, length (epochs / steps / minutes), schedule, optimiser, dropout, precision, seed,
evaluation and checkpoint cadence, resume. Each recipe's arguments inherit it and add only their own
fields (``PretrainingArguments``, ``CLMArguments``, ``DistillArguments``, ``FinetuneArguments``),
redeclaring a shared field only to change its default (:func:`bertkit._args.redefault`). Every field
carries its help text and range (:func:`bertkit._args.setting`): the commands' flags are generated
from them (:func:`bertkit._args.add_dataclass_arguments`), and ``__post_init__`` applies the same
ranges to Python callers, so a setting has one name, one help text and one range everywhere.

A call written for transformers' ``TrainingArguments`` runs unchanged: ``output_dir``,
``num_train_epochs``, ``learning_rate``, ``per_device_train_batch_size``, ``eval_strategy`` and the
other names it shares with bertkit are translated (:data:`TRANSFORMERS_NAMES`), and a call that uses
any of them takes transformers' defaults for what it leaves out (3 epochs, batch 8, no weight decay,
epsilon 1e-8, fp32 unless ``bf16=True``, a checkpoint every 500 steps, a warmup whose first step runs at
learning rate 0, an earlier run in the folder replaced, columns the model does not take dropped), so
the same call trains the same way. A transformers setting bertkit has no equivalent for is refused by
name, never ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from bertkit import _args as A
from bertkit._args import setting

__all__ = [
    "APIS",
    "PRECISIONS",
    "TRAINING_GROUP",
    "TRANSFORMERS_NAMES",
    "TrainingArguments",
    "check_step_length",
    "with_step_length",
]

PRECISIONS = ("auto", "bf16", "fp16", "fp32")

# Whose conventions a run follows: bertkit's own, or transformers' (a call written in its names).
APIS = ("bertkit", "transformers")

TRAINING_GROUP = "training"  # the --help section of the shared settings (a recipe may add to it)


# transformers' name -> bertkit's field, for the settings that mean the same thing.
TRANSFORMERS_NAMES = {
    "output_dir": "output",
    "overwrite_output_dir": "overwrite",
    "num_train_epochs": "epochs",
    "per_device_train_batch_size": "batch_size",
    "gradient_accumulation_steps": "grad_accum_steps",
    "learning_rate": "lr",
    "adam_epsilon": "adam_eps",
    "logging_steps": "log_every",
    "save_total_limit": "keep_last",
    "metric_for_best_model": "best_metric",
    "dataloader_drop_last": "drop_last",
    "load_best_model_at_end": "load_best_at_end",
}
# Settings only transformers' class has: each is translated in _from_transformers (or refused there).
_TRANSFORMERS_ONLY = {
    *TRANSFORMERS_NAMES,
    "adam_beta1",
    "adam_beta2",
    "bf16",
    "fp16",
    "use_cpu",
    "eval_strategy",
    "evaluation_strategy",
    "eval_steps",
    "save_strategy",
    "save_steps",
    "logging_strategy",
    "lr_scheduler_type",
    "optim",
    "report_to",
    "disable_tqdm",
    "dataloader_num_workers",
    "per_device_eval_batch_size",
    "load_best_model_at_end",
    "do_train",
    "do_eval",
    "do_predict",
    "push_to_hub",
    "label_smoothing_factor",
    "torch_compile",
    "gradient_checkpointing",
    "data_seed",
    "remove_unused_columns",
    "label_names",
    "logging_dir",
    "gradient_checkpointing_kwargs",
    "activation_checkpointing_kwargs",
    "include_for_metrics",
    "eval_accumulation_steps",
    "include_num_input_tokens_seen",
    "restore_callback_states_from_checkpoint",
}
# What transformers' TrainingArguments defaults to where bertkit's differ (epochs, batch, decay, epsilon,
# precision, drop_last, and a checkpoint every 500 steps with every one kept).
_TRANSFORMERS_DEFAULTS: dict[str, Any] = {
    "epochs": 3.0,
    "batch_size": 8,
    "weight_decay": 0.0,
    "adam_eps": 1e-8,
    "precision": "fp32",
    "drop_last": False,
    "log_every": 500,
    "save_every": 500,
    "keep_last": 1 << 30,
    "warmup_from_zero": True,
    # transformers' Trainer writes over an earlier run in output_dir; bertkit then replaces only that
    # run's own files (its checkpoints, best model, metrics), never anything else in the folder
    "overwrite": True,
}


def _refuse(name: str, value: Any, why: str) -> ValueError:
    return ValueError(f"TrainingArguments: transformers' {name}={value!r} {why}")


def _option(value: Any) -> str:
    """A transformers choice given as a string or as one of its enums (``IntervalStrategy.EPOCH``)."""
    return str(getattr(value, "value", value))


def _renamed(hf: dict[str, Any]) -> dict[str, Any]:
    """bertkit's fields for the settings transformers names otherwise (popped from ``hf``), with the best
    model's metric as transformers reads it."""
    out: dict[str, Any] = {}
    for name, field in TRANSFORMERS_NAMES.items():
        if name in hf:
            if field in hf:
                raise TypeError(f"TrainingArguments: give {field} or transformers' name {name} for it, not both")
            out[field] = hf.pop(name)
    if out.get("load_best_at_end") and not out.get("best_metric"):  # transformers then keeps the lowest loss
        out["best_metric"] = "loss"
    if out.get("keep_last", 0) is None:  # transformers' None keeps every checkpoint
        out["keep_last"] = _TRANSFORMERS_DEFAULTS["keep_last"]
    if out.get("best_metric"):  # transformers names it with or without the eval_ prefix
        out["best_metric"] = str(out["best_metric"]).removeprefix("eval_")
        if hf.get("greater_is_better") is None:
            hf["greater_is_better"] = not out["best_metric"].endswith("loss")
    if "greater_is_better" in hf and hf["greater_is_better"] is None:
        del hf["greater_is_better"]
    return out


def _translate_optimizer_and_device(hf: dict[str, Any], out: dict[str, Any]) -> None:
    """Betas, precision, device, step count, warmup and progress bar, from transformers' settings for them."""
    if "adam_beta1" in hf or "adam_beta2" in hf:
        out["adam_betas"] = (float(hf.pop("adam_beta1", 0.9)), float(hf.pop("adam_beta2", 0.999)))
    bf16, fp16 = bool(hf.pop("bf16", False)), bool(hf.pop("fp16", False))
    if bf16 and fp16:
        raise _refuse("bf16", True, "and fp16=True ask for two precisions: give one")
    if bf16 or fp16:
        out["precision"] = "bf16" if bf16 else "fp16"
    if hf.pop("use_cpu", False):
        out["device"] = "cpu"
    if hf.get("max_steps") == -1:  # transformers' "not set"
        hf["max_steps"] = None
    warmup = hf.get("warmup_steps")
    if isinstance(warmup, float) and 0 < warmup < 1:  # transformers reads a fraction as a share of the steps
        hf["warmup_ratio"], hf["warmup_steps"] = warmup, 0
    if hf.pop("disable_tqdm", False):
        out["progress"] = False


def _translate_strategies(hf: dict[str, Any], out: dict[str, Any]) -> None:
    """The logging, evaluation and checkpoint cadence from transformers' strategies and step counts."""
    logging = _option(hf.pop("logging_strategy", "steps"))
    if logging not in ("steps", "no"):
        raise _refuse("logging_strategy", logging, "is not supported: bertkit logs every logging_steps steps")
    evaluation = _option(hf.pop("eval_strategy", hf.pop("evaluation_strategy", "no")))
    eval_steps = hf.pop("eval_steps", None)
    if evaluation == "steps":
        out["eval_every"] = int(eval_steps or out.get("log_every", _TRANSFORMERS_DEFAULTS["log_every"]))
    elif evaluation == "epoch":
        out["eval_each_epoch"] = True
    elif evaluation != "no":
        raise _refuse("eval_strategy", evaluation, "is not one of 'no', 'steps', 'epoch'")
    saving = _option(hf.pop("save_strategy", "steps"))
    save_steps = hf.pop("save_steps", 500)
    if saving == "steps":
        out["save_every"] = int(save_steps)
    elif saving == "epoch":
        out["save_every"], out["save_each_epoch"] = 0, True
    elif saving == "no":
        out["save_every"] = 0
    else:
        raise _refuse(
            "save_strategy",
            saving,
            "is not supported: bertkit writes checkpoints every save_steps steps ('steps'), after every epoch "
            "('epoch') or none ('no'), and keeps the best model by metric_for_best_model in OUTPUT/best",
        )


def _refuse_unsupported(hf: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Refuse by name the transformers settings bertkit has no equivalent for, unless left at their no-op."""
    scheduler = _option(hf.pop("lr_scheduler_type", "linear"))
    if scheduler != "linear":
        raise _refuse("lr_scheduler_type", scheduler, "is not supported: bertkit's schedule is warmup, then linear")
    optim = _option(hf.pop("optim", "adamw_torch"))
    if optim not in ("adamw_torch", "adamw_torch_fused"):
        raise _refuse("optim", optim, "is not supported: bertkit trains with torch's AdamW ('adamw_torch')")
    report = hf.pop("report_to", "none")
    if report not in (None, "none", [], ["none"]):
        raise _refuse("report_to", report, "is not supported: bertkit writes metrics.jsonl and metrics.png")
    for name, allowed in (
        ("dataloader_num_workers", 0),
        ("push_to_hub", False),
        ("label_smoothing_factor", 0.0),
        ("torch_compile", False),
        ("data_seed", None),
        ("logging_dir", None),
    ):
        if name in hf and hf.pop(name) not in (allowed,):
            raise _refuse(name, kwargs[name], f"is not supported: leave it at {allowed!r}")


def _translate_extra(hf: dict[str, Any], out: dict[str, Any]) -> None:
    """The settings the Trainer reads from ``extra``: activation checkpointing's keyword arguments, label
    names, what compute_metrics also gets, input tokens counted, callbacks restored, the evaluation batch
    size and whether unused columns are dropped."""
    # transformers' former name; the keyword arguments go to the model's activation_checkpointing_enable
    if hf.pop("gradient_checkpointing", None):
        out["activation_checkpointing"] = True
    checkpoint_kwargs = [hf.pop(n, None) for n in ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs")]
    checkpoint_kwargs = checkpoint_kwargs[0] or checkpoint_kwargs[1]
    label_names = hf.pop("label_names", None)
    if label_names is not None and (
        isinstance(label_names, str) or not all(isinstance(n, str) for n in label_names) or not label_names
    ):
        raise _refuse("label_names", label_names, "must be a non-empty list of the batch's label keys")
    include = hf.pop("include_for_metrics", None) or []
    if isinstance(include, str) or any(i not in ("inputs", "loss") for i in include):
        raise _refuse("include_for_metrics", include, "must be a list of 'inputs' and/or 'loss'")
    tokens_seen = hf.pop("include_num_input_tokens_seen", "no")
    if isinstance(tokens_seen, bool):  # transformers reads True as "all", False as "no"
        tokens_seen = "all" if tokens_seen else "no"
    if tokens_seen not in ("all", "non_padding", "no"):
        raise _refuse("include_num_input_tokens_seen", tokens_seen, "must be True, False, 'all', 'non_padding' or 'no'")
    restore = hf.pop("restore_callback_states_from_checkpoint", False)
    if not isinstance(restore, bool):
        raise _refuse("restore_callback_states_from_checkpoint", restore, "must be True or False")
    # eval_accumulation_steps only bounds accelerator memory: bertkit moves every evaluation batch's
    # outputs to the CPU as it goes, so the results are the same with any value.
    hf.pop("eval_accumulation_steps", None)
    out["extra"] = {
        **hf.pop("extra", {}),
        **({"label_names": list(label_names)} if label_names is not None else {}),
        **({"include_for_metrics": list(include)} if include else {}),
        **({"activation_checkpointing_kwargs": dict(checkpoint_kwargs)} if checkpoint_kwargs else {}),
        **({"include_num_input_tokens_seen": tokens_seen} if tokens_seen != "no" else {}),
        # a resume rebuilds each callback from the state its checkpoint holds (transformers' default: not)
        **({"restore_callback_states_from_checkpoint": True} if restore else {}),
        "per_device_eval_batch_size": hf.pop("per_device_eval_batch_size", 8),
        "remove_unused_columns": bool(hf.pop("remove_unused_columns", True)),
    }


def _from_transformers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """bertkit's fields for a call that uses transformers' names (see the module docs); a call without
    any of them is returned as it is."""
    if not _TRANSFORMERS_ONLY.intersection(kwargs):
        return kwargs
    hf = dict(kwargs)
    out = _renamed(hf)
    _translate_optimizer_and_device(hf, out)
    _translate_strategies(hf, out)
    _refuse_unsupported(hf, kwargs)
    _translate_extra(hf, out)
    out["api"] = "transformers"  # the Trainer then also checks and runs the call as transformers' does
    for name in ("do_train", "do_eval", "do_predict"):
        hf.pop(name, None)  # read by transformers' example scripts and dataset handling, not by the training
    for field, default in _TRANSFORMERS_DEFAULTS.items():
        if field == "overwrite" and hf.get("resume"):  # continuing the earlier run, not replacing it
            continue
        if field not in out and field not in hf:
            out[field] = default
    return {**hf, **out}


class _ArgumentsType(type):
    """Translates transformers' names in a call (:func:`_from_transformers`) before the dataclass's own
    ``__init__`` runs, for this class and every recipe's subclass of it."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not getattr(cls, "_transformers_names", True):
            return super().__call__(*args, **kwargs)
        given = {TRANSFORMERS_NAMES[n]: n for n in kwargs if n in TRANSFORMERS_NAMES}
        kwargs = _from_transformers(kwargs)
        try:
            return super().__call__(*args, **kwargs)
        except ValueError as e:  # a range error names bertkit's field: name the one the caller wrote
            field = str(e).split(" ", 1)[0]
            if field in given:
                raise ValueError(f"{given[field]} ({field}){str(e)[len(field) :]}") from None
            raise


@dataclass(kw_only=True)
class TrainingArguments(metaclass=_ArgumentsType):
    """Everything the Trainer needs besides the model and the data (every field has a default)."""

    output: str = setting(
        "runs/out",
        metavar="DIR",
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="output folder: new or empty, or this command's earlier output with --resume or --overwrite",
    )
    overwrite: bool = setting(
        False,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="replace this command's earlier output in --output (only the files it wrote)",
    )
    resume: bool = setting(
        False,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="continue the run in --output from its newest complete checkpoint (the same "
        "command, settings and data; what differs is listed)",
    )
    epochs: float = setting(
        1.0,
        type=A.positive_float,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="passes over the training data (--max-steps wins when given)",
    )
    max_steps: int | None = setting(
        None,
        type=A.positive_int,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="optimizer steps; wins over --epochs and sets the lr schedule",
    )
    max_minutes: float | None = setting(
        None,
        type=A.positive_float,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="also stop after this many minutes of training (evaluation and "
        "checkpoints excluded; counted across --resume)",
    )
    schedule: str = setting(
        "steps",
        choices=A.SCHEDULES,
        group=TRAINING_GROUP,
        help="steps: warmup, then the lr decays linearly to 0 at the last step; time: to 0 "
        "at --max-minutes of training, so the whole time budget is used whatever the "
        "speed (--max-steps then only caps the run)",
    )
    # A time schedule may be one part of a longer one (a recipe's phases under one decay): the
    # decay then reaches 0 at schedule_minutes and this run starts schedule_offset_minutes into it.
    schedule_minutes: float | None = setting(
        None,
        type=A.positive_float,
        cli=False,
        same_on_resume=False,
        help="schedule 'time': the lr reaches 0 after this many minutes of the schedule (default max_minutes)",
    )
    schedule_offset_minutes: float = setting(
        0.0,
        type=A.nonnegative_float,
        cli=False,
        same_on_resume=False,
        help="schedule 'time': minutes of the schedule spent before this run, which starts there",
    )
    batch_size: int = setting(32, type=A.positive_int, group=TRAINING_GROUP, help="examples per process and micro-step")
    grad_accum_steps: int = setting(
        1, type=A.positive_int, group=TRAINING_GROUP, help="micro-batches per optimizer step (gradient accumulation)"
    )
    lr: float = setting(5e-5, type=A.positive_float, group=TRAINING_GROUP, help="peak learning rate (AdamW)")
    warmup_steps: int = setting(
        0, type=A.nonnegative_int, group=TRAINING_GROUP, help="linear warmup steps (wins over --warmup-ratio)"
    )
    warmup_ratio: float = setting(
        0.0,
        type=A.fraction_0_1_right_open,
        group=TRAINING_GROUP,
        help="linear warmup over this fraction of the steps, when --warmup-steps is 0",
    )
    warmup_from_zero: bool = setting(
        False,
        cli=False,
        help="the warmup's first step at learning rate 0, as transformers' linear schedule has it (a call in "
        "transformers' names); else at lr / warmup steps",
    )
    weight_decay: float = setting(
        0.01,
        type=A.nonnegative_float,
        group=TRAINING_GROUP,
        help="AdamW weight decay (none on biases and LayerNorm weights)",
    )
    layer_lr_decay: float = setting(
        1.0,
        type=A.fraction_0_1_left_open,
        group=TRAINING_GROUP,
        help="layer-wise learning-rate decay: the heads train at --lr, each transformer layer below at this "
        "times the rate of the one above, the embeddings least (e.g. 0.8; 1: one rate for all)",
    )
    dropout: float | None = setting(
        None,
        type=A.fraction_0_1_right_open,
        group=TRAINING_GROUP,
        help="rate of every dropout layer while training, in place of the model config's rates (which "
        "the saved config keeps)",
    )
    max_grad_norm: float = setting(
        1.0, type=A.nonnegative_float, group=TRAINING_GROUP, help="clip the gradient norm to this (0: no clipping)"
    )
    adam_betas: tuple[float, float] = setting((0.9, 0.999), cli=False, help="AdamW betas")
    adam_eps: float = setting(1e-6, type=A.positive_float, cli=False, help="AdamW epsilon")
    precision: str = setting(
        "auto",
        choices=PRECISIONS,
        group=TRAINING_GROUP,
        help="auto: bf16 autocast on a CPU with AMX or AVX-512 BF16 and on a GPU with bf16 (fp16 with loss "
        "scaling on a GPU without it), else fp32: other CPUs emulate bf16, many times slower",
    )
    seed: int = setting(
        42, type=A.seed, group=TRAINING_GROUP, help="seeds new weights, the data order, masking and dropout"
    )
    log_every: int = setting(
        1, type=A.positive_int, group=TRAINING_GROUP, same_on_resume=False, help="log the training loss every N steps"
    )
    eval_every: int = setting(
        0,
        type=A.nonnegative_int,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="evaluate every N steps (0: only at the end)",
    )
    eval_each_epoch: bool = setting(False, cli=False, same_on_resume=False, help="evaluate after every epoch")
    save_each_epoch: bool = setting(
        False, cli=False, same_on_resume=False, help="write a checkpoint after every epoch, for --resume"
    )
    save_every: int = setting(
        0,
        type=A.nonnegative_int,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="write a checkpoint every N steps, for --resume (0: no intermediate checkpoints)",
    )
    keep_last: int = setting(
        2,
        type=A.positive_int,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="checkpoints kept; older ones are removed",
    )
    best_metric: str | None = setting(
        None, cli=False, help="evaluation metric (without eval_) whose best model is kept in OUTPUT/best"
    )
    greater_is_better: bool = setting(True, cli=False, help="a larger best_metric is better")
    load_best_at_end: bool = setting(
        False,
        cli=False,
        same_on_resume=False,
        help="end with the best model by best_metric (kept in OUTPUT/best) in place of the last one, and save that",
    )
    patience: int | None = setting(
        None,
        type=A.positive_int,
        cli=False,
        same_on_resume=False,
        help="stop after this many evaluations without improvement",
    )
    activation_checkpointing: bool = setting(
        False,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="keep only each layer's input and recompute its activations in the backward pass: "
        "less memory for about a third more compute, the same gradients",
    )
    shuffle: bool = setting(True, cli=False, help="shuffle the training data every epoch")
    drop_last: bool = setting(True, cli=False, help="drop the last incomplete batch of an epoch")
    save_final: bool = setting(True, cli=False, same_on_resume=False, help="save the model into OUTPUT at the end")
    plot: bool = setting(True, cli=False, same_on_resume=False, help="draw metrics.png at the end")
    progress: bool = setting(True, group=TRAINING_GROUP, same_on_resume=False, help="no progress bar")
    device: str | None = setting(
        None,
        type=A.device,
        check=A.check_device,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="cpu, cuda, cuda:N or mps (default: cuda when available)",
    )
    threads: int = setting(
        0,
        type=A.threads,
        check=A.check_threads,
        group=TRAINING_GROUP,
        same_on_resume=False,
        help="torch intra-op threads (0: torch's default)",
    )
    run_name: str | None = setting(None, cli=False, same_on_resume=False, help="shown in the progress bar")
    ddp_find_unused_parameters: bool = setting(False, cli=False, help="DDP: for heads that skip parameters")
    api: Literal["bertkit", "transformers"] = setting(
        "bertkit",
        choices=APIS,
        cli=False,
        same_on_resume=False,
        help="whose conventions the Trainer follows; 'transformers' for a call in transformers' names (set by "
        "their translation): its data order, warmup rounded up, the gradient norm logged unclipped too, logs, "
        "evaluations and checkpoints on its schedule only, and an evaluation schedule needs an eval_dataset",
    )
    extra: dict[str, Any] = setting(
        default_factory=dict, cli=False, same_on_resume=False, help="stored in checkpoints, for the caller"
    )

    def __post_init__(self) -> None:
        A.check_fields(self)
        if self.resume and self.overwrite:
            raise ValueError(
                f"{A.flag('resume')} continues the run in {A.flag('output')} and {A.flag('overwrite')} replaces it: "
                "give one of them"
            )
        if self.load_best_at_end and not self.best_metric:
            raise ValueError("load_best_at_end keeps the best model by best_metric: give best_metric too")
        if self.schedule == "time" and self.max_minutes is None:
            raise ValueError(
                f"schedule 'time' decays the learning rate over max_minutes ({A.flag('max_minutes')}); give max_minutes"
            )
        span = self.schedule_span_minutes
        if self.schedule_offset_minutes and (
            self.schedule != "time" or span is None or self.schedule_offset_minutes >= span
        ):
            raise ValueError(
                f"schedule_offset_minutes={self.schedule_offset_minutes:g} must fall inside a time schedule "
                f"(schedule 'time', schedule_minutes or max_minutes above it; got {span})"
            )
        self.adam_betas = tuple(self.adam_betas)  # type: ignore[assignment]

    # transformers' names, readable as well (code written for its Trainer reads them)
    output_dir = property(lambda self: self.output)
    num_train_epochs = property(lambda self: self.epochs)
    learning_rate = property(lambda self: self.lr)
    per_device_train_batch_size = property(lambda self: self.batch_size)
    gradient_accumulation_steps = property(lambda self: self.grad_accum_steps)
    per_device_eval_batch_size = property(
        lambda self: int(self.extra.get("per_device_eval_batch_size", self.batch_size))
    )
    include_num_input_tokens_seen = property(lambda self: self.extra.get("include_num_input_tokens_seen", "no"))

    @property
    def schedule_span_minutes(self) -> float | None:
        """Minutes after which a time schedule's learning rate reaches 0: ``schedule_minutes``, else
        ``max_minutes``."""
        return self.schedule_minutes if self.schedule_minutes is not None else self.max_minutes

    def resume_settings(self) -> dict[str, Any]:
        """The settings a resumed run must share with the run it continues (see ``same_on_resume``)."""
        return A.resume_settings(self)


_Args = TypeVar("_Args", bound=TrainingArguments)

# The length of a pretraining run (pretrain, pretrain-clm) when neither --max-steps nor a time schedule sets it.
DEFAULT_STEPS = 1000
# A cap no run reaches: a pretraining run on a time schedule without --max-steps ends on the clock.
UNCAPPED_STEPS = 1 << 40


def step_length_help() -> str:
    """The ``--max-steps`` help of a command whose run length is a step count (:data:`DEFAULT_STEPS`),
    with no ``--epochs`` to win over."""
    return (
        f"optimizer steps; sets the lr schedule (default {DEFAULT_STEPS}; under --schedule time no cap unless "
        "given: --max-minutes ends the run)"
    )


def check_step_length(args: TrainingArguments) -> None:
    """Refuse what a run without a step count cannot honour: ``warmup_ratio`` is a share of ``max_steps``."""
    if args.max_steps is None and args.schedule == "time" and args.warmup_ratio and not args.warmup_steps:
        raise ValueError(
            f"{A.given('warmup_ratio', f'{args.warmup_ratio:g}')} is a share of {A.flag('max_steps')}, and a "
            f"{A.flag('schedule')} time run without "
            f"{A.flag('max_steps')} has no step count; give {A.flag('warmup_steps')} or {A.flag('max_steps')}"
        )


def with_step_length(args: _Args) -> _Args:
    """``args`` with ``max_steps`` set where a pretraining command left it None: :data:`DEFAULT_STEPS` under a step
    schedule; under ``schedule="time"`` no cap, so ``max_minutes`` ends the run on its decayed rate
    (a default step count there would stop a fast run early, its time budget unspent)."""
    if args.max_steps is not None:
        return args
    return dataclasses.replace(args, max_steps=DEFAULT_STEPS if args.schedule == "steps" else UNCAPPED_STEPS)
