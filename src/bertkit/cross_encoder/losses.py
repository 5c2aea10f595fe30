"""sentence-transformers' cross-encoder losses (``sentence_transformers.cross_encoder.losses``) over a
bertkit :class:`~bertkit.CrossEncoder`, under the same names and constructor arguments.

Each is an ``nn.Module`` built on the model (``loss.model``) and called as sentence-transformers calls
its losses: ``loss(inputs, labels)`` with ``inputs`` one list of texts per dataset column (the
:class:`~bertkit.CrossEncoderTrainer` gives them so) and ``labels`` a tensor of one value per row. The
pairs are tokenized as the CrossEncoder cuts them (``max_length``, the longer text first) and scored
by its fp32 training model (``model.training_model``), the weights the trainer updates.

- :class:`BinaryCrossEntropyLoss`: (text, text) pairs and a 0..1 label each; BCE on the logits.
- :class:`CrossEntropyLoss`: (text, text) pairs and a class id each; cross-entropy over the head.
- :class:`MSELoss`: (text, text) pairs and a score each; squared error of the logits.
- :class:`MultipleNegativesRankingLoss`: (query, positive[, negative...]) columns, no labels needed;
  each query ranks its positive above ``num_negatives`` candidates drawn from the other rows'
  positives and negatives (torch's global RNG, as sentence-transformers draws) and its own hard negatives.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["BinaryCrossEntropyLoss", "CrossEntropyLoss", "MSELoss", "MultipleNegativesRankingLoss"]


def _check_model(name: str, model: Any) -> None:
    from bertkit.pipelines.cross_encoder import CrossEncoder

    if not isinstance(model, CrossEncoder):
        raise ValueError(f"{name} expects a model of type CrossEncoder, but got a model of type {type(model)}.")


def _check_one_label(name: str, model: Any) -> None:
    if model.num_labels != 1:
        raise ValueError(
            f"{name} expects a model with 1 output label, but got a model with {model.num_labels} output labels."
        )


def _value(label: Any) -> Any:
    return label.item() if isinstance(label, Tensor) and label.numel() == 1 else label


class CrossEncoderLoss(nn.Module):
    """What the cross-encoder losses share: the model, the scoring of (text, text) pairs, and the checks
    the trainer runs on a dataset before training (``columns`` text columns; None: two or more)."""

    columns: int | None = 2
    needs_labels = True

    def __init__(self, model: Any) -> None:
        super().__init__()
        _check_model(type(self).__name__, model)
        self.model = model  # not a submodule: a CrossEncoder is no nn.Module

    def scores(self, first: Sequence[str], second: Sequence[str]) -> Tensor:
        """The head's logits (pairs, labels) of the pairs (first[i], second[i])."""
        model = self.model
        enc = model.tokenizer(
            list(first),
            list(second),
            padding=True,
            truncation="longest_first",
            max_length=model.max_length,
            return_tensors="pt",
        )
        features = {k: enc[k].to(model.device) for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc}
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


class BinaryCrossEntropyLoss(CrossEncoderLoss):
    """sentence-transformers' ``BinaryCrossEntropyLoss``: BCE with logits of a 1-label head against
    0..1 labels; ``pos_weight`` weighs the positives, ``activation_fn`` is applied to the logits first,
    further keywords go to ``torch.nn.BCEWithLogitsLoss``."""

    def __init__(
        self,
        model: Any,
        activation_fn: nn.Module = nn.Identity(),
        pos_weight: Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model)
        self.activation_fn = activation_fn
        self.pos_weight = pos_weight
        self.bce_with_logits_loss = nn.BCEWithLogitsLoss(pos_weight=pos_weight, **kwargs)
        _check_one_label(type(self).__name__, model)

    def check_label(self, label: Any) -> str | None:
        if not is_score(label) or not 0.0 <= float(label) <= 1.0:
            return "not a number in 0..1, which binary cross-entropy takes as a probability"
        return None

    def forward(
        self, inputs: list[list[str]], labels: Tensor, prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The mean BCE of one batch: ``inputs`` two lists of texts, ``labels`` one per pair."""
        self._pair_inputs(inputs, prompt, task)
        logits = self.activation_fn(self.scores(inputs[0], inputs[1]).view(-1))
        labels = self._one_per_row(logits, labels)
        return self.bce_with_logits_loss(logits, labels.float().to(logits.device))

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        from bertkit.pipelines.cross_encoder import _fullname

        return {
            "activation_fn": _fullname(self.activation_fn),
            "pos_weight": self.pos_weight if self.pos_weight is None else self.pos_weight.item(),
        }


class CrossEntropyLoss(CrossEncoderLoss):
    """sentence-transformers' ``CrossEntropyLoss``: cross-entropy of the head's logits (after
    ``activation_fn``) against class ids; further keywords go to ``torch.nn.CrossEntropyLoss``."""

    def __init__(self, model: Any, activation_fn: nn.Module = nn.Identity(), **kwargs: Any) -> None:
        super().__init__(model)
        self.activation_fn = activation_fn
        self.ce_loss = nn.CrossEntropyLoss(**kwargs)

    def check_label(self, label: Any) -> str | None:
        return class_id_problem(label, self.model.num_labels)

    def forward(
        self, inputs: list[list[str]], labels: Tensor, prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The mean cross-entropy of one batch: ``inputs`` two lists of texts, ``labels`` class ids."""
        self._pair_inputs(inputs, prompt, task)
        logits = self.activation_fn(self.scores(inputs[0], inputs[1]))
        if labels is None:
            raise ValueError("CrossEntropyLoss needs labels: give the dataset a label column of class ids")
        labels = labels.to(logits.device)
        if not labels.is_floating_point() and labels.shape == (logits.shape[0], 1):
            labels = labels.view(-1)
        return self.ce_loss(logits, labels)


class MSELoss(CrossEncoderLoss):
    """sentence-transformers' ``MSELoss``: squared error of a 1-label head's logits (after
    ``activation_fn``) against float scores; further keywords go to ``torch.nn.MSELoss``."""

    def __init__(self, model: Any, activation_fn: nn.Module = nn.Identity(), **kwargs: Any) -> None:
        super().__init__(model)
        self.activation_fn = activation_fn
        self.loss_fct = nn.MSELoss(**kwargs)
        _check_one_label(type(self).__name__, model)

    def check_label(self, label: Any) -> str | None:
        return None if is_score(label) else "not a finite number"

    def forward(
        self, inputs: list[list[str]], labels: Tensor, prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The mean squared error of one batch: ``inputs`` two lists of texts, ``labels`` one score per pair."""
        self._pair_inputs(inputs, prompt, task)
        logits = self.activation_fn(self.scores(inputs[0], inputs[1]).view(-1))
        labels = self._one_per_row(logits, labels)
        return self.loss_fct(logits, labels.detach().float().to(logits.device))

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        from bertkit.pipelines.cross_encoder import _fullname

        return {"activation_fn": _fullname(self.activation_fn)}


class MultipleNegativesRankingLoss(CrossEncoderLoss):
    """sentence-transformers' cross-encoder ``MultipleNegativesRankingLoss``: columns (query, positive,
    negative 1, ...). Each query is scored against its positive, ``num_negatives`` candidates drawn at
    random from the other rows' positives and negatives (all of them when ``num_negatives`` is None or
    at least their count), and its own negatives; the scores, through ``activation_fn`` and times
    ``scale``, go into a cross-entropy whose target is the positive. Labels, if any, are not used."""

    columns = None
    needs_labels = False

    def __init__(
        self,
        model: Any,
        num_negatives: int | None = 4,
        scale: float = 10.0,
        activation_fn: nn.Module | None = nn.Sigmoid(),
    ) -> None:
        super().__init__(model)
        if num_negatives is not None and (
            isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 0
        ):
            raise ValueError(f"MultipleNegativesRankingLoss: num_negatives={num_negatives!r} is not a count (or None)")
        self.num_negatives = num_negatives
        self.scale = scale
        self.activation_fn = activation_fn
        self.cross_entropy_loss = nn.CrossEntropyLoss()
        _check_one_label(type(self).__name__, model)

    def get_in_batch_negatives(self, anchors: list[str], candidates: list[list[str]]) -> Iterator[list[str]]:
        """The in-batch negatives, one list (a text per query) per negative slot.

        Every candidate of the batch (positives and hard negatives of all rows, column after column)
        but the query's own row is valid; ``num_negatives`` of them per query are drawn without
        replacement by ``torch.multinomial`` on the global RNG, exactly as sentence-transformers draws."""
        batch_size, num_columns = len(anchors), len(candidates)
        flat = [text for column in candidates for text in column]
        mask = ~torch.eye(batch_size, dtype=torch.bool).repeat(1, num_columns)
        valid = len(flat) - num_columns
        if self.num_negatives is not None and self.num_negatives < valid:
            picked = torch.multinomial(mask.float(), self.num_negatives)
        else:
            picked = torch.arange(batch_size * num_columns).repeat(batch_size, 1)[mask].reshape(batch_size, -1)
        for column in picked.T:
            yield [flat[i] for i in column]

    def calculate_loss(self, logits: list[Tensor], batch_size: int) -> Tensor:
        """Cross-entropy with the positive (first score) as target over (queries, candidates) scores."""
        scores = torch.cat(logits, dim=0).reshape(-1, batch_size).T
        if self.activation_fn:
            scores = self.activation_fn(scores)
        if self.scale:
            scores = scores * self.scale
        target = torch.zeros(batch_size, device=scores.device, dtype=torch.long)
        return self.cross_entropy_loss(scores, target)

    def forward(
        self, inputs: list[list[str]], labels: Tensor | None = None, prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The loss of one batch: ``inputs`` the query column, the positive column and any negative columns."""
        if prompt is not None or task is not None:
            raise ValueError(
                "MultipleNegativesRankingLoss: prompt= and task= are not supported by bertkit's CrossEncoder"
            )
        self.check_columns(len(inputs))
        anchors, positives = list(inputs[0]), list(inputs[1])
        batch_size = len(anchors)
        # one forward per candidate slot, as sentence-transformers scores them (each padded on its own)
        scores = [self.scores(anchors, positives).squeeze(1)]
        for negatives in self.get_in_batch_negatives(anchors, [list(c) for c in inputs[1:]]):
            scores.append(self.scores(anchors, negatives).squeeze(1))
        for negatives in inputs[2:]:
            scores.append(self.scores(anchors, list(negatives)).squeeze(1))
        return self.calculate_loss(scores, batch_size)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        from bertkit.pipelines.cross_encoder import _fullname

        return {
            "scale": self.scale,
            "num_negatives": self.num_negatives,
            "activation_fn": _fullname(self.activation_fn),
        }
