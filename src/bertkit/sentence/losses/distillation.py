"""Distillation: a teacher's vectors (EmbedDistillLoss, MSELoss), margins (MarginMSELoss) or scores
(DistillKLDivLoss) as the labels."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch import Tensor, nn

from bertkit.sentence import util
from bertkit.sentence.losses import functional as E
from bertkit.sentence.losses.base import _check_model, _Loss, _similarity_name
from bertkit.sentence.losses.citations import (
    _HOFSTATTER2021,
    _KIM2023_EMBEDDISTILL,
    _LIN2020_DISTILL,
    _REIMERS2020_MULTILINGUAL,
)


class EmbedDistillLoss(_Loss):
    """The student's vectors against a teacher's, given as each row's label: one vector per row
    ``(batch, H)`` for every column, or one per column ``(batch, columns, H)``. ``distance_metric``:
    ``mse``, ``l2`` or ``cosine``; ``projection_dim`` adds a trained linear map from the student's width
    to the teacher's."""

    min_columns = 1

    def __init__(self, model: Any, distance_metric: str = "cosine", projection_dim: int | None = None) -> None:
        name = type(self).__name__
        _check_model(name, model)
        if distance_metric not in E.EMBED_DISTILL_METRICS:
            raise ValueError(
                f"{name}: distance_metric={distance_metric!r} is not one of {', '.join(E.EMBED_DISTILL_METRICS)}"
            )
        projection = None
        if projection_dim is not None:
            if isinstance(projection_dim, bool) or not isinstance(projection_dim, int) or projection_dim < 1:
                raise ValueError(f"{name}: projection_dim={projection_dim!r} must be a positive integer or None")
            projection = nn.Linear(model.get_embedding_dimension(), projection_dim, device=model.device)
        super().__init__(model)
        self.projection, self.projection_dim, self.distance_metric = projection, projection_dim, distance_metric

    def _width(self) -> int:
        return self.projection_dim if self.projection_dim is not None else int(self.model.get_embedding_dimension())

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """The distance to the teacher's vectors ``labels`` (checked before any text is embedded)."""
        features = list(sentence_features)
        self._teacher(labels, len(features))
        return self._run(features, labels, self.compute_loss_from_embeddings)

    def _teacher(self, labels: Tensor | None, columns: int) -> list[Tensor]:
        """The teacher's vectors per column, or a ValueError naming the shape that does not fit."""
        return E.embed_distill_teacher(type(self).__name__, labels, columns, self._width(), self.projection is not None)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.embed_distill(list(embeddings), labels, self.distance_metric, self.projection, type(self).__name__)

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        self._teacher(labels, columns)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"distance_metric": self.distance_metric, "projection_dim": self.projection_dim}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _KIM2023_EMBEDDISTILL


class MSELoss(EmbedDistillLoss):
    """The mean squared error of the student's vectors against the teacher's (each row's label), e.g.
    to make a model multilingual: (English text, translation) columns, label the English vector."""

    def __init__(self, model: Any, projection_dim: int | None = None) -> None:
        super().__init__(model, distance_metric="mse", projection_dim=projection_dim)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"projection_dim": self.projection_dim}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _REIMERS2020_MULTILINGUAL


class MarginMSELoss(_Loss):
    """(query, positive, negative...) texts, labelled with a teacher's margins ``score(q, pos) -
    score(q, neg)`` (one number, or one per negative) or its scores (positive first): the mean squared
    error of the student's margins (``similarity_fct`` per pair, the dot product by default)."""

    min_columns = 3

    def __init__(
        self, model: Any, similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.pairwise_dot_score
    ) -> None:
        super().__init__(model)
        self.similarity_fct, self.loss_fct = similarity_fct, nn.MSELoss()

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.margin_mse(list(embeddings), labels, self.similarity_fct, type(self).__name__)

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        E.margin_mse_targets(type(self).__name__, labels, 0 if labels is None else labels.shape[0], columns - 2)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"similarity_fct": _similarity_name(self.similarity_fct)}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _HOFSTATTER2021


class DistillKLDivLoss(_Loss):
    """(query, candidate, candidate...) texts labelled with a teacher's score per candidate: the KL
    divergence of the student's softmax over the candidates (``similarity_fct``, over
    ``student_temperature``) from the teacher's (over ``teacher_temperature``), times
    ``student_temperature ** 2``; both temperatures default to ``temperature``."""

    min_columns = 3

    def __init__(
        self,
        model: Any,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.pairwise_dot_score,
        temperature: float = 1.0,
        student_temperature: float | None = None,
        teacher_temperature: float | None = None,
    ) -> None:
        name = type(self).__name__
        student = temperature if student_temperature is None else student_temperature
        teacher = temperature if teacher_temperature is None else teacher_temperature
        for label, value in (
            ("temperature", temperature),
            ("student_temperature", student),
            ("teacher_temperature", teacher),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name}: {label}={value!r} must be a positive finite number")
        super().__init__(model)
        self.similarity_fct, self.temperature = similarity_fct, temperature
        self.student_temperature, self.teacher_temperature = student, teacher
        self.loss_fct = nn.KLDivLoss(reduction="batchmean")

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        student, teacher = float(self.student_temperature), float(self.teacher_temperature)
        return E.distill_kl_div(list(embeddings), labels, self.similarity_fct, student, teacher, type(self).__name__)

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        E.distill_kl_scores(type(self).__name__, labels, 0 if labels is None else labels.shape[0], columns - 1)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        config: dict[str, Any] = {
            "similarity_fct": _similarity_name(self.similarity_fct),
            "temperature": self.temperature,
        }
        # a temperature the loss overrides is recorded only when it differs
        if self.student_temperature != self.temperature:
            config["student_temperature"] = self.student_temperature
        if self.teacher_temperature != self.temperature:
            config["teacher_temperature"] = self.teacher_temperature
        return config

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _LIN2020_DISTILL
