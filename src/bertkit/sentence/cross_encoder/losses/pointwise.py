"""The pointwise and pairwise cross-encoder losses: binary and class cross-entropy, MSE, in-batch
negatives (plain and cached) and MarginMSE."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.sentence.cross_encoder.losses.base import (
    CrossEncoderLoss,
    _check_one_label,
    _value,
    class_id_problem,
    is_score,
)
from bertkit.sentence.losses.base import _fullname
from bertkit.sentence.losses.citations import _HOFSTATTER2021  # the paper the bi-encoder MarginMSELoss cites


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

    def get_config_dict(self) -> dict[str, Any]:
        """No settings: sentence-transformers' model card records none for this loss."""
        return {}


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
        return {
            "scale": self.scale,
            "num_negatives": self.num_negatives,
            "activation_fn": _fullname(self.activation_fn),
        }


class MarginMSELoss(CrossEncoderLoss):
    """sentence-transformers' cross-encoder ``MarginMSELoss``: columns (query, positive, negative 1, ...);
    the head's margins score(query, positive) - score(query, negative k) (after ``activation_fn``) are
    fitted by squared error to the labels: one margin per negative (a number for one negative), or the
    teacher's scores of the positive and then each negative, whose differences are taken. Further
    keywords go to ``torch.nn.MSELoss``."""

    columns = None

    def __init__(self, model: Any, activation_fn: nn.Module = nn.Identity(), **kwargs: Any) -> None:
        super().__init__(model)
        self.activation_fn = activation_fn
        self.loss_fct = nn.MSELoss(**kwargs)
        _check_one_label(type(self).__name__, model)

    def check_columns(self, n: int) -> None:
        if n < 3:
            raise ValueError(f"MarginMSELoss takes at least 3 text columns (query, positive, negative...), got {n}")

    def find_problem(
        self, texts: Sequence[Sequence[Any]], labels: Sequence[Any] | None
    ) -> tuple[int | None, int, str] | None:
        bad = super().find_problem(texts, None)
        if bad is not None:
            return bad
        negatives = len(texts) - 2
        for i, label in enumerate(labels or []):
            label = _value(label)
            label = label.tolist() if isinstance(label, Tensor) else label
            values = [label] if is_score(label) else label
            if isinstance(values, str) or not isinstance(values, Sequence) or not all(is_score(x) for x in values):
                return None, i, "not a finite number or a list of them"
            if len(values) not in (negatives, negatives + 1) or (len(values) == 1 and negatives != 1):
                return (
                    None,
                    i,
                    (
                        f"{len(values)} values for {negatives} negative column(s): give one margin per negative, "
                        "or the positive's score and then each negative's"
                    ),
                )
        return None

    def logits_from_pairs(self, first: Sequence[str], second: Sequence[str]) -> Tensor:
        """The head's scores of the pairs (first[i], second[i]), flat, through ``activation_fn``."""
        return self.activation_fn(self.scores(first, second).view(-1))

    def forward(
        self,
        inputs: list[list[str]],
        labels: Tensor | list[Tensor],
        prompt: str | None = None,
        task: str | None = None,
    ) -> Tensor:
        """The mean squared margin error of one batch: ``inputs`` the query, positive and negative columns."""
        if prompt is not None or task is not None:
            raise ValueError("MarginMSELoss: prompt= and task= are not supported by bertkit's CrossEncoder")
        if len(inputs) < 3:
            raise ValueError(f"MarginMSELoss expects (query, positive, negative...) columns, got {len(inputs)} columns")
        if labels is None:
            raise ValueError("MarginMSELoss needs labels: give the dataset a label column of margins")
        anchors, positives, negatives = list(inputs[0]), list(inputs[1]), [list(c) for c in inputs[2:]]
        batch_size = len(anchors)
        if isinstance(labels, (list, tuple)):
            labels = torch.stack([torch.as_tensor(x) for x in labels])
        if labels.shape == (batch_size, len(negatives) + 1):
            # the teacher's scores of the positive and each negative: the margins are their differences
            labels = labels[:, 0].unsqueeze(1) - labels[:, 1:]
        if labels.shape == (batch_size,):
            labels = labels.unsqueeze(1)
        if labels.shape != (batch_size, len(negatives)):
            raise ValueError(
                f"MarginMSELoss: labels of shape {tuple(labels.shape)} do not match {(batch_size, len(negatives))}: "
                "give one margin per negative, or the positive's score and then each negative's"
            )
        positive = self.logits_from_pairs(anchors, positives)
        negative = torch.stack([self.logits_from_pairs(anchors, column) for column in negatives], dim=1)
        margins = positive.unsqueeze(1) - negative
        return self.loss_fct(margins, labels.detach().float().to(margins.device))

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        return {"activation_fn": _fullname(self.activation_fn)}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _HOFSTATTER2021


class CachedMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """sentence-transformers' cross-encoder ``CachedMultipleNegativesRankingLoss``: the loss of
    :class:`MultipleNegativesRankingLoss` (same candidates, same random draws) with the memory of
    ``mini_batch_size`` pairs. All pairs are first scored without a graph, ``mini_batch_size`` at a
    time; the loss and its gradients with respect to those scores are computed; when the backward pass
    reaches the loss, each mini-batch is scored again with a graph (the same dropout, its RNG state
    replayed) and its cached score gradients pushed through the model. ``show_progress_bar`` is
    accepted and not drawn."""

    def __init__(
        self,
        model: Any,
        num_negatives: int | None = 4,
        scale: float = 10.0,
        activation_fn: nn.Module | None = nn.Sigmoid(),
        mini_batch_size: int = 32,
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__(model, num_negatives=num_negatives, scale=scale, activation_fn=activation_fn)
        if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int) or mini_batch_size <= 0:
            raise ValueError(
                f"CachedMultipleNegativesRankingLoss: mini_batch_size={mini_batch_size!r} is not a positive count"
            )
        self.mini_batch_size = mini_batch_size
        self.show_progress_bar = show_progress_bar

    def forward(
        self, inputs: list[list[str]], labels: Tensor | None = None, prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The loss of one batch, its backward pass run mini-batch by mini-batch (see the class docs)."""
        from bertkit.sentence.losses.functional import _RandState

        if prompt is not None or task is not None:
            raise ValueError(
                "CachedMultipleNegativesRankingLoss: prompt= and task= are not supported by bertkit's CrossEncoder"
            )
        self.check_columns(len(inputs))
        queries = list(inputs[0])
        batch_size = len(queries)
        # the pairs slot after slot, as the uncached loss scores them: positives, drawn negatives, hard negatives
        candidates = list(inputs[1])
        for negatives in self.get_in_batch_negatives(queries, [list(c) for c in inputs[1:]]):
            candidates.extend(negatives)
        for negatives in inputs[2:]:
            candidates.extend(negatives)
        anchors = queries * (len(candidates) // batch_size)
        size = self.mini_batch_size
        chunks = [(anchors[i : i + size], candidates[i : i + size]) for i in range(0, len(anchors), size)]
        device = self.model.device
        grad_enabled = torch.is_grad_enabled()
        logits, states = [], []
        for first, second in chunks:
            states.append(_RandState(torch.device(device)))
            with torch.no_grad():
                logits.append(self.scores(first, second).squeeze(1).detach().requires_grad_())
        if not grad_enabled:  # evaluation: no backward pass will come
            return self.calculate_loss(logits, batch_size)
        loss = self.calculate_loss(logits, batch_size)
        cache = torch.autograd.grad(loss, logits)
        out = loss.detach().requires_grad_()

        def backward_hook(grad_output: Tensor) -> None:
            # the outer backward pass reached the loss: each mini-batch's scores again, with a graph
            with torch.enable_grad():
                for (first, second), grad, state in zip(chunks, cache, states):
                    with state.replay():
                        scores = self.scores(first, second).squeeze(1)
                    (scores * grad).sum().mul(grad_output).backward()

        out.register_hook(backward_hook)
        return out

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        return {**super().get_config_dict(), "mini_batch_size": self.mini_batch_size}
