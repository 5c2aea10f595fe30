"""Pairs and triplets: scored pairs (CoSENT, AnglE, cosine similarity), labelled pairs (contrastive,
softmax), triplets, and the triplets mined in a batch of one labelled column."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.sentence import util
from bertkit.sentence.losses import functional as E
from bertkit.sentence.losses.base import _distance, _fullname, _Loss, _metric_name, _one_label_per_row
from bertkit.sentence.losses.citations import (
    _HADSELL2006,
    _HERMANS2017,
    _HUANG2024_COSENT,
    _LI2024_ANGLE,
    _REIMERS2019_SBERT,
)


class CoSENTLoss(_Loss):
    """Scored pairs: every pair with a lower score must have a lower (scaled) similarity."""

    columns = 2

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.pairwise_cos_sim,
    ) -> None:
        super().__init__(model)
        self.scale, self.similarity_fct = scale, similarity_fct

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.cosent(list(embeddings), labels, float(self.scale), self.similarity_fct)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"scale": self.scale, "similarity_fct": self.similarity_fct.__name__}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _HUANG2024_COSENT


class CosineSimilarityLoss(_Loss):
    """Scored pairs: ``loss_fct(cos_score_transformation(cos(a, b)), score)``, the mean squared error by default."""

    columns = 2

    def __init__(
        self,
        model: Any,
        loss_fct: Callable[[Tensor, Tensor], Tensor] | None = None,
        cos_score_transformation: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        loss_fct = loss_fct if loss_fct is not None else nn.MSELoss()
        transform = cos_score_transformation if cos_score_transformation is not None else nn.Identity()
        super().__init__(model)
        self.loss_fct, self.cos_score_transformation = loss_fct, transform

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.cosine_similarity_loss(list(embeddings), labels, self.loss_fct, self.cos_score_transformation)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "loss_fct": _fullname(self.loss_fct),
            "cos_score_transformation": _fullname(self.cos_score_transformation),
        }


class TripletDistanceMetric:
    """The distances :class:`TripletLoss` takes, under sentence-transformers' names."""

    COSINE = staticmethod(E.cosine_distance)
    EUCLIDEAN = staticmethod(E.euclidean_distance)
    MANHATTAN = staticmethod(E.manhattan_distance)


class TripletLoss(_Loss):
    """(anchor, positive, negative) texts: ``relu(d(a, p) - d(a, n) + triplet_margin)``, averaged."""

    columns = 3

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor, Tensor], Tensor] = TripletDistanceMetric.EUCLIDEAN,
        triplet_margin: float = 5,
    ) -> None:
        if not callable(distance_metric):
            raise TypeError(
                f"TripletLoss: distance_metric must be a function (x, y) -> distances, e.g. "
                f"TripletDistanceMetric.EUCLIDEAN; got {distance_metric!r}"
            )
        super().__init__(model)
        self.distance_metric, self.triplet_margin = distance_metric, triplet_margin

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.triplet(list(embeddings), float(self.triplet_margin), self.distance_metric)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "distance_metric": _metric_name(self.distance_metric, TripletDistanceMetric),
            "triplet_margin": self.triplet_margin,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _HERMANS2017


class SoftmaxLoss(_Loss):
    """Labelled pairs (e.g. NLI): a linear classifier over ``(u, v, |u - v|[, u * v])`` trained with
    cross-entropy together with the encoder."""

    columns = 2

    def __init__(
        self,
        model: Any,
        embedding_dimension: int | None = None,
        num_labels: int | None = None,
        concatenation_sent_rep: bool = True,
        concatenation_sent_difference: bool = True,
        concatenation_sent_multiplication: bool = False,
        loss_fct: Callable[[Tensor, Tensor], Tensor] | None = None,
        sentence_embedding_dimension: int | None = None,
    ) -> None:
        name = type(self).__name__
        dim = embedding_dimension if embedding_dimension is not None else sentence_embedding_dimension
        if dim is None or num_labels is None:
            raise TypeError(f"{name} needs embedding_dimension and num_labels")
        parts = (2 if concatenation_sent_rep else 0) + int(concatenation_sent_difference)
        parts += int(concatenation_sent_multiplication)
        if parts == 0:
            raise ValueError(f"{name}: at least one of concatenation_sent_rep/difference/multiplication must be True")
        super().__init__(model)
        self.num_labels = int(num_labels)
        self.concatenation_sent_rep = concatenation_sent_rep
        self.concatenation_sent_difference = concatenation_sent_difference
        self.concatenation_sent_multiplication = concatenation_sent_multiplication
        self.classifier = nn.Linear(parts * int(dim), self.num_labels, device=model.device)
        self.loss_fct = loss_fct if loss_fct is not None else nn.CrossEntropyLoss()

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "num_labels": self.num_labels,
            "concatenation_sent_rep": self.concatenation_sent_rep,
            "concatenation_sent_difference": self.concatenation_sent_difference,
            "concatenation_sent_multiplication": self.concatenation_sent_multiplication,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _REIMERS2019_SBERT

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> Tensor | tuple[list[Tensor], Tensor]:
        """The cross-entropy of the pairs' labels; without labels, (vectors, logits)."""
        reps = [self._embed(f) for f in sentence_features]
        self.check_columns(len(reps))
        a, b = reps
        parts = [a, b] if self.concatenation_sent_rep else []
        if self.concatenation_sent_difference:
            parts.append(torch.abs(a - b))
        if self.concatenation_sent_multiplication:
            parts.append(a * b)
        output = self.classifier(torch.cat(parts, 1).to(self.classifier.weight.dtype))
        if labels is None:
            return reps, output
        if self.num_labels == 1 or labels.shape != output.shape:
            labels = labels.view(-1)
        return self.loss_fct(output, labels)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        raise NotImplementedError("SoftmaxLoss computes its loss in forward (it has a classifier to run)")


class SiameseDistanceMetric:
    """The distances :class:`ContrastiveLoss` and :class:`OnlineContrastiveLoss` take, per pair."""

    EUCLIDEAN = staticmethod(lambda x, y: F.pairwise_distance(x, y, p=2))
    MANHATTAN = staticmethod(lambda x, y: F.pairwise_distance(x, y, p=1))
    COSINE_DISTANCE = staticmethod(lambda x, y: 1 - F.cosine_similarity(x, y))


_SIAMESE = "SiameseDistanceMetric.EUCLIDEAN, MANHATTAN, COSINE_DISTANCE, or a function (x, y) -> distances"


class _LabelledPairs(_Loss):
    """(text, text) pairs, each labelled 1 (similar) or 0."""

    columns = 2

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        _one_label_per_row(type(self).__name__, labels, "1 for a similar pair, 0 otherwise")


class ContrastiveLoss(_LabelledPairs):
    """(text, text) pairs labelled 1 (similar) or 0: similar pairs pulled together, dissimilar ones pushed
    to at least ``margin`` apart (``distance_metric``, the cosine distance by default)."""

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor, Tensor], Tensor] = SiameseDistanceMetric.COSINE_DISTANCE,
        margin: float = 0.5,
        size_average: bool = True,
    ) -> None:
        _distance(type(self).__name__, distance_metric, _SIAMESE)
        super().__init__(model)
        self.distance_metric, self.margin, self.size_average = distance_metric, margin, size_average
        self._warned = False  # labels other than 0 and 1 are warned of once

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        warn, self._warned = not self._warned, True
        return E.contrastive(
            list(embeddings), labels, self.distance_metric, float(self.margin), self.size_average, warn=warn
        )

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "distance_metric": _metric_name(self.distance_metric, SiameseDistanceMetric),
            "margin": self.margin,
            "size_average": self.size_average,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _HADSELL2006


class OnlineContrastiveLoss(_LabelledPairs):
    """:class:`ContrastiveLoss` on the batch's hard pairs only (similar pairs farther apart than the
    closest dissimilar one, dissimilar pairs closer than the farthest similar one), summed."""

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor, Tensor], Tensor] = SiameseDistanceMetric.COSINE_DISTANCE,
        margin: float = 0.5,
    ) -> None:
        _distance(type(self).__name__, distance_metric, _SIAMESE)
        super().__init__(model)
        self.distance_metric, self.margin = distance_metric, margin
        self._warned = False  # labels other than 0 and 1 are warned of once

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        warn, self._warned = not self._warned, True
        return E.online_contrastive(list(embeddings), labels, self.distance_metric, float(self.margin), warn=warn)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"distance_metric": _metric_name(self.distance_metric, SiameseDistanceMetric), "margin": self.margin}


# -- one labelled column: triplets mined in the batch ---------------------------------------------------


class BatchHardTripletLossDistanceFunction:
    """The distance matrices the batch triplet losses take: ``f(embeddings) -> (B, B)``."""

    cosine_distance = staticmethod(E.batch_cosine_distance)
    euclidean_distance = staticmethod(E.batch_euclidean_distance)
    eucledian_distance = euclidean_distance  # sentence-transformers' older spelling


_MATRIX = (
    "BatchHardTripletLossDistanceFunction.euclidean_distance, cosine_distance, "
    "or a function (embeddings) -> (batch, batch) distances"
)


class _BatchTriplet(_Loss):
    """One text column with a class label per row; triplets mined within each batch."""

    columns = 1
    kind = ""

    def __init__(self, model: Any, distance_metric: Callable[[Tensor], Tensor], margin: float) -> None:
        name = type(self).__name__
        _distance(name, distance_metric, _MATRIX)
        super().__init__(model)
        self.sentence_embedder, self.distance_metric = model, distance_metric
        self._margin = float(margin)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed: one (B, H) tensor, one column."""
        name = type(self).__name__
        return E.batch_triplet(list(embeddings), labels, self.kind, self.distance_metric, self._margin, name)

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        _one_label_per_row(type(self).__name__, labels, "its class")

    def _distance_name(self) -> str:
        """The distance's name: a :class:`BatchHardTripletLossDistanceFunction` member by its attribute
        name (sentence-transformers' functions carry those names)."""
        fn = self.distance_metric
        for key, value in vars(BatchHardTripletLossDistanceFunction).items():
            if isinstance(value, staticmethod) and value.__func__ is fn:
                return key
        return getattr(fn, "__name__", str(fn))

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"distance_metric": self._distance_name(), "margin": self.triplet_margin}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _HERMANS2017


class BatchHardTripletLoss(_BatchTriplet):
    """Per row: its farthest same-class row and its closest other-class row, ``relu(d_pos - d_neg +
    margin)``, averaged. Batches should hold several rows of each class."""

    kind = "hard"

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor], Tensor] = BatchHardTripletLossDistanceFunction.euclidean_distance,
        margin: float = 5,
    ) -> None:
        super().__init__(model, distance_metric, margin)
        self.triplet_margin = margin


class BatchHardSoftMarginTripletLoss(BatchHardTripletLoss):
    """:class:`BatchHardTripletLoss` with ``softplus(d_pos - d_neg)`` in place of the margin."""

    kind = "soft_margin"

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor], Tensor] = BatchHardTripletLossDistanceFunction.euclidean_distance,
    ) -> None:
        super().__init__(model, distance_metric)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"distance_metric": self._distance_name()}


class BatchAllTripletLoss(_BatchTriplet):
    """Every (anchor, positive, negative) of the batch: ``relu(d_ap - d_an + margin)`` summed over the
    number of those above 0."""

    kind = "all"

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor], Tensor] = BatchHardTripletLossDistanceFunction.euclidean_distance,
        margin: float = 5,
    ) -> None:
        super().__init__(model, distance_metric, margin)
        self.triplet_margin = margin


class BatchSemiHardTripletLoss(_BatchTriplet):
    """Per (anchor, positive): the closest negative farther than the positive (the farthest negative
    when none is), ``relu(d_ap - d_an + margin)``, averaged over the (anchor, positive) pairs."""

    kind = "semi_hard"

    def __init__(
        self,
        model: Any,
        distance_metric: Callable[[Tensor], Tensor] = BatchHardTripletLossDistanceFunction.euclidean_distance,
        margin: float = 5,
    ) -> None:
        super().__init__(model, distance_metric, margin)
        self.margin = margin

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {"distance_metric": self._distance_name(), "margin": self.margin}


# -- more pair losses -----------------------------------------------------------------------------------


class AnglELoss(CoSENTLoss):
    """CoSENT over the AnglE similarity (cosine and the complex angle between the halves of the
    vectors). Pairs take a score; with more columns the anchor is scored against each other column (its
    label, 1 without one, for the first; the complement for the rest)."""

    columns = None

    def __init__(self, model: Any, scale: float = 20.0) -> None:
        _Loss.__init__(self, model)
        self.scale, self.similarity_fct = scale, E.pairwise_angle_sim

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.angle(list(embeddings), labels, float(self.scale))

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _LI2024_ANGLE
