"""sentence-transformers' training arguments: transformers' own
(:class:`~bertkit.training.training_args.TrainingArguments` in transformers' names) and the batch
samplers, prompts and per-parameter learning rates."""

from __future__ import annotations

import dataclasses
import enum
import json
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from bertkit._args import setting
from bertkit.training.training_args import TrainingArguments, _ArgumentsType

__all__ = ["BatchSamplers", "MultiDatasetBatchSamplers", "SentenceTransformerTrainingArguments"]


class _Choice(str, enum.Enum):
    """A setting's choices: the enum members or their string values, refused by name otherwise."""

    @classmethod
    def parse(cls, name: str, value: Any, owner: str = "SentenceTransformerTrainingArguments") -> Any:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for member in cls:
                if member.value == value:
                    return member
        if isinstance(value, type) or callable(value):
            raise ValueError(
                f"{owner}: {name}={value!r} is not supported: bertkit draws the "
                f"batches itself; give one of {', '.join(repr(m.value) for m in cls)}"
            )
        raise ValueError(f"{owner}: {name}={value!r} is not one of {', '.join(repr(m.value) for m in cls)}")

    def __str__(self) -> str:
        return str(self.value)


class BatchSamplers(_Choice):
    """How one dataset's rows become batches (sentence-transformers' names and values)."""

    BATCH_SAMPLER = "batch_sampler"
    NO_DUPLICATES = "no_duplicates"
    NO_DUPLICATES_HASHED = "no_duplicates_hashed"  # the same batches; sentence-transformers hashes to save time
    GROUP_BY_LABEL = "group_by_label"


class MultiDatasetBatchSamplers(_Choice):
    """In which order the batches of several datasets come (sentence-transformers' names and values)."""

    ROUND_ROBIN = "round_robin"
    PROPORTIONAL = "proportional"


class _STArgumentsType(_ArgumentsType):
    """Always transformers' names and defaults, as sentence-transformers' arguments are transformers':
    without an output folder the run goes to transformers' ``trainer_output``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "output" not in kwargs and "output_dir" not in kwargs:
            kwargs["output_dir"] = "trainer_output"
        return super().__call__(*args, **kwargs)


def _refuse_arg(name: str, value: Any, why: str, owner: str = "SentenceTransformerTrainingArguments") -> ValueError:
    return ValueError(f"{owner}: {name}={value!r} is not supported: {why}")


def _check_prompts(prompts: Any, owner: str) -> Any:
    """``prompts`` as sentence-transformers takes them: None, a string (a JSON object given as a
    string is read as one), a dict of strings (column or dataset names to prompts), or a dict of such
    dicts (dataset names to column names to prompts)."""
    if isinstance(prompts, str):
        try:
            prompts = json.loads(prompts)
        except json.JSONDecodeError:
            return prompts  # one prompt for every column
        if not isinstance(prompts, dict):
            raise _refuse_arg("prompts", prompts, "a JSON string must hold an object of prompts", owner)
    if prompts is None or prompts == {}:
        return None
    if not isinstance(prompts, Mapping) or not all(isinstance(k, str) for k in prompts):
        raise _refuse_arg("prompts", prompts, "give a string, or a dict of strings (or of dicts of strings)", owner)
    for key, value in prompts.items():
        inner = value.values() if isinstance(value, Mapping) else [value]
        if not all(isinstance(v, str) for v in inner):
            raise _refuse_arg(
                f"prompts[{key!r}]", value, "must be a string or a dict of column names to strings", owner
            )
    return dict(prompts)


def _check_rate_mapping(mapping: Any, owner: str) -> dict[str, float]:
    """``learning_rate_mapping``: regular expressions over parameter names to learning rates (a JSON
    string of one is read)."""
    if isinstance(mapping, str):
        try:
            mapping = json.loads(mapping)
        except json.JSONDecodeError:
            raise _refuse_arg("learning_rate_mapping", mapping, "a string must be a JSON object", owner) from None
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise _refuse_arg("learning_rate_mapping", mapping, "give a dict of name patterns to learning rates", owner)
    out = {}
    for pattern, lr in mapping.items():
        try:
            re.compile(pattern)
        except (re.error, TypeError) as e:
            raise _refuse_arg(
                f"learning_rate_mapping[{pattern!r}]", lr, f"the pattern is no regex ({e})", owner
            ) from None
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 <= lr < float("inf"):
            raise _refuse_arg(f"learning_rate_mapping[{pattern!r}]", lr, "must be a learning rate >= 0", owner)
        out[pattern] = lr
    return out


def _mapped_rates(
    mapping: dict[str, float], loss: Any, model: Any, refuse: Callable[..., Exception]
) -> dict[int, float]:
    """Each parameter (by id) a pattern of ``mapping`` matches, with its rate: the names are those of
    sentence-transformers' loss module (``model.0.model.encoder...``, a loss's own ``classifier.weight``;
    with a dict of losses each under its key, the shared model under the first), a later pattern
    winning over an earlier one, as there."""
    if not mapping:
        return {}
    parts = loss.items() if isinstance(loss, dict) else [(None, loss)]
    named: list[tuple[str, nn.Parameter]] = []
    seen: set[int] = set()
    for key, fn in parts:
        prefix = "" if key is None else f"{key}."
        own = [(f"{prefix}{n}", p) for n, p in fn.named_parameters()]
        for name, p in [*((f"{prefix}model.{n}", p) for n, p in model.named_parameters()), *own]:
            if id(p) not in seen:
                seen.add(id(p))
                named.append((name, p))
    rates: dict[int, float] = {}
    for pattern, lr in mapping.items():
        matched = [p for n, p in named if re.search(pattern, n)]
        if not matched:
            raise refuse(
                f"args.learning_rate_mapping[{pattern!r}]",
                f"matches no parameter; the names look like {named[0][0]!r} and {named[-1][0]!r}",
            )
        rates.update((id(p), float(lr)) for p in matched)
    return rates


def _prompt_for(prompts: Any, dataset: str | None, column: str) -> str | None:
    """The prompt of one text column of one dataset, as sentence-transformers' data collator picks it."""
    if not isinstance(prompts, dict):
        return prompts
    if dataset is not None and dataset in prompts:
        prompts = prompts[dataset]
        return prompts if isinstance(prompts, str) else prompts.get(column)
    if isinstance(next(iter(prompts.values())), dict):
        return None  # prompts for other datasets only
    return prompts.get(column)


@dataclasses.dataclass(kw_only=True)
class SentenceTransformerTrainingArguments(TrainingArguments, metaclass=_STArgumentsType):
    """sentence-transformers' training arguments: transformers' (every name and default of
    :class:`~bertkit.training.training_args.TrainingArguments` called in transformers' names) and the
    batch samplers."""

    batch_sampler: Any = setting(BatchSamplers.BATCH_SAMPLER, cli=False, help="how one dataset's rows are batched")
    multi_dataset_batch_sampler: Any = setting(
        MultiDatasetBatchSamplers.PROPORTIONAL, cli=False, help="in which order several datasets' batches come"
    )
    prompts: Any = setting(
        None,
        cli=False,
        help="texts put before each text: one string, per column, per dataset, or per dataset and column",
    )
    router_mapping: Any = setting(default_factory=dict, cli=False, help="Router routes per column (refused)")
    learning_rate_mapping: Any = setting(
        default_factory=dict, cli=False, help="learning rates of the parameters whose names match each regex"
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__  # the cross-encoder's arguments share these checks
        self.batch_sampler = BatchSamplers.parse("batch_sampler", self.batch_sampler, owner)
        self.multi_dataset_batch_sampler = MultiDatasetBatchSamplers.parse(
            "multi_dataset_batch_sampler", self.multi_dataset_batch_sampler, owner
        )
        self.prompts = _check_prompts(self.prompts, owner)
        if self.router_mapping:
            raise _refuse_arg("router_mapping", self.router_mapping, "bertkit's models have no Router", owner)
        self.learning_rate_mapping = _check_rate_mapping(self.learning_rate_mapping, owner)
        super().__post_init__()
