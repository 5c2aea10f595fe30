"""What the cross-encoder losses share: the base class, the checks of a model and of a dataset's labels."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn


def _check_model(name: str, model: Any) -> None:
    # by the kind the CrossEncoder class declares: it sits above its losses (its fit() uses them)
    if getattr(type(model), "_bertkit_kind", None) != "cross-encoder":
        raise ValueError(f"{name} expects a model of type CrossEncoder, but got a model of type {type(model)}.")


def _check_one_label(name: str, model: Any) -> None:
    if model.num_labels != 1:
        raise ValueError(
            f"{name} expects a model with 1 output label, but got a model with {model.num_labels} output labels."
        )


def _short(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value(label: Any) -> Any:
    return label.item() if isinstance(label, Tensor) and label.numel() == 1 else label


class CrossEncoderLoss(nn.Module):
    """What the cross-encoder losses share: the model, the scoring of (text, text) pairs, and the checks
    the trainer runs on a dataset before training (``columns`` text columns; None: two or more)."""

    columns: int | None = 2
    needs_labels = True
    listwise = False  # rows (query, [documents]) with a list of labels, rather than one text per column

    def __init__(self, model: Any) -> None:
        super().__init__()
        _check_model(type(self).__name__, model)
        self.model = model  # not a submodule: a CrossEncoder is no nn.Module

    def scores(self, first: Sequence[str], second: Sequence[str]) -> Tensor:
        """The head's logits (pairs, labels) of the pairs (first[i], second[i])."""
        model = self.model
        features = {k: v.to(model.device) for k, v in model.preprocess(list(zip(first, second))).items()}
        return model.training_model(**features).logits

    def check_columns(self, n: int) -> None:
        """Refuse rows with a number of texts this loss cannot read."""
        need = self.columns
        if (need is not None and n != need) or (need is None and n < 2):
            want = f"{need}" if need is not None else "at least 2"
            raise ValueError(f"{type(self).__name__} takes {want} text columns, got {n}")

    def check_label(self, label: Any) -> str | None:
        """Why one row's label is not one this loss takes (None when it is)."""
        return None

    def check_labels(self, labels: Sequence[Any] | None) -> tuple[int, str] | None:
        """The first row whose label this loss cannot take and why (None when all are fine)."""
        if labels is None:
            return None
        for i, label in enumerate(labels):
            why = self.check_label(_value(label))
            if why is not None:
                return i, why
        return None

    def find_problem(
        self, texts: Sequence[Sequence[Any]], labels: Sequence[Any] | None
    ) -> tuple[int | None, int, str] | None:
        """The first value of a dataset this loss cannot read, as (text column index, or None for the
        label column; row; why), None when all are fine. ``texts`` holds one list per text column (a
        listwise row's documents as a list); the number of columns was checked by ``check_columns``."""
        for c, column in enumerate(texts):
            for i, value in enumerate(column):
                if not isinstance(value, str):
                    return (
                        c,
                        i,
                        (
                            f"not a text: {type(self).__name__} reads one text per column (a list of documents "
                            "is for the listwise losses, ListNetLoss, LambdaLoss and the like)"
                        ),
                    )
        if not self.needs_labels:
            return None
        bad = self.check_labels(labels)
        return None if bad is None else (None, bad[0], bad[1])

    def _pair_inputs(self, inputs: Sequence[Sequence[str]], prompt: Any, task: Any) -> None:
        if prompt is not None or task is not None:
            raise ValueError(f"{type(self).__name__}: prompt= and task= are not supported by bertkit's CrossEncoder")
        if len(inputs) != 2:
            raise ValueError(
                f"{type(self).__name__} expects a dataset with two non-label columns, but got a dataset with "
                f"{len(inputs)} columns."
            )

    def _one_per_row(self, logits: Tensor, labels: Tensor | None) -> Tensor:
        if labels is None:
            raise ValueError(f"{type(self).__name__} needs labels: give the dataset a label or score column")
        if labels.numel() != logits.shape[0]:
            raise ValueError(
                f"{type(self).__name__} expects {logits.shape[0]} labels (one per example), "
                f"but got {labels.numel()} labels with shape {tuple(labels.shape)}."
            )
        return labels.view(-1)


def is_score(label: Any) -> bool:
    """A finite real number (not a bool): what a 1-label head's losses take as a label."""
    return isinstance(label, numbers.Real) and not isinstance(label, bool) and math.isfinite(label)


def class_id_problem(label: Any, num_labels: int) -> str | None:
    """Why ``label`` is not a class id of a ``num_labels``-label head (None when it is)."""
    if isinstance(label, bool) or not isinstance(label, numbers.Integral) or not 0 <= label < num_labels:
        return f"not a class id 0..{num_labels - 1} of this {num_labels}-label head"
    return None
