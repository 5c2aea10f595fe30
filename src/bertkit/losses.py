"""sentence-transformers' losses under their own names, for ``SentenceTransformer.fit``.

A sentence-transformers training script switches with its import line::

    from bertkit import InputExample, SentenceTransformer, losses

    model = SentenceTransformer(folder)
    loss = losses.CoSENTLoss(model)
    model.fit(train_objectives=[(DataLoader(examples, shuffle=True, batch_size=16), loss)], epochs=1)

Each loss is an ``nn.Module`` whose ``forward(sentence_features, labels)`` embeds every column with
``model(features)["sentence_embedding"]`` (with gradients) and returns the loss sentence-transformers
returns. The formulas live in :mod:`bertkit.training.embedding_losses`; this module maps the
constructor arguments onto them and refuses, by name, settings bertkit does not compute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from bertkit import util
from bertkit.training import embedding_losses as E

__all__ = [
    "CachedMultipleNegativesRankingLoss",
    "CoSENTLoss",
    "CosineSimilarityLoss",
    "MatryoshkaLoss",
    "MultipleNegativesRankingLoss",
    "MultipleNegativesSymmetricRankingLoss",
    "SoftmaxLoss",
    "TripletDistanceMetric",
    "TripletLoss",
]


def _refuse(loss: str, name: str, value: Any, why: str) -> None:
    raise ValueError(f"{loss}: {name}={value!r} is not supported: {why}")


def _check_model(loss: str, model: Any) -> None:
    if not callable(getattr(model, "forward", None)) or not hasattr(model, "get_embedding_dimension"):
        raise TypeError(f"{loss}: model must be a bertkit SentenceTransformer, got {type(model).__name__}")


class _Loss(nn.Module):
    """A loss over ``model``'s sentence vectors: ``inner`` (an
    :class:`~bertkit.training.embedding_losses.EmbeddingLoss`) computes it from the columns' vectors.
    ``columns`` is how many text columns an example must have (None: two or more)."""

    columns: int | None = None

    def __init__(self, model: Any, inner: E.EmbeddingLoss) -> None:
        super().__init__()
        _check_model(type(self).__name__, model)
        self.model = model
        self.inner = inner

    def _embed(self, features: dict[str, Tensor]) -> Tensor:
        return self.model(features)["sentence_embedding"]

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """The loss of one batch: one tokenized batch per text column, ``labels`` one value per row."""
        return self.inner(self._embed, list(sentence_features), labels)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return self.inner.from_embeddings(list(embeddings), labels)

    def check_columns(self, n: int) -> None:
        """Refuse examples with a number of texts this loss cannot read."""
        need = self.columns
        if (need is not None and n != need) or (need is None and n < 2):
            want = f"{need}" if need is not None else "at least 2"
            raise ValueError(f"{type(self).__name__} takes {want} texts per InputExample, got {n}")


def _mnrl(
    loss: str,
    scale: float,
    similarity_fct: Callable[[Tensor, Tensor], Tensor],
    gather_across_devices: bool,
    directions: tuple[str, ...],
    partition_mode: str,
    hardness_mode: str | None,
) -> E.MNRLoss:
    """The MNRL of sentence-transformers' arguments: the default direction, or the symmetric pair
    averaged per direction."""
    if gather_across_devices:
        _refuse(loss, "gather_across_devices", True, "fit trains in one process")
    if hardness_mode is not None:
        _refuse(loss, "hardness_mode", hardness_mode, "bertkit computes no hardness weighting")
    directions = tuple(directions)
    if directions == ("query_to_doc",):
        symmetric = False
    elif (
        set(directions) == {"query_to_doc", "doc_to_query"}
        and len(directions) == 2
        and partition_mode == "per_direction"
    ):
        symmetric = True
    else:
        _refuse(
            loss,
            "directions",
            directions,
            "bertkit computes ('query_to_doc',), and ('query_to_doc', 'doc_to_query') "
            "with partition_mode='per_direction'",
        )
    return E.MNRLoss(scale, symmetric=symmetric, similarity=similarity_fct)


class MultipleNegativesRankingLoss(_Loss):
    """In-batch negatives: (anchor, positive[, negative...]) texts; each anchor must score its own
    positive above every other positive and negative of the batch."""

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.cos_sim,
        gather_across_devices: bool = False,
        directions: tuple[str, ...] = ("query_to_doc",),
        partition_mode: str = "joint",
        hardness_mode: str | None = None,
        hardness_strength: float = 0.0,
    ) -> None:
        name = type(self).__name__
        super().__init__(
            model, _mnrl(name, scale, similarity_fct, gather_across_devices, directions, partition_mode, hardness_mode)
        )
        self.scale, self.similarity_fct = float(scale), similarity_fct


class MultipleNegativesSymmetricRankingLoss(MultipleNegativesRankingLoss):
    """MNRL in both directions (anchor -> positive and positive -> anchor), the two averaged."""

    def __init__(
        self, model: Any, scale: float = 20.0, similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.cos_sim
    ) -> None:
        super().__init__(
            model, scale, similarity_fct, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
        )


class CachedMultipleNegativesRankingLoss(_Loss):
    """MNRL by GradCache: the whole batch's loss and gradients at ``mini_batch_size`` rows' activation memory."""

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.cos_sim,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        gather_across_devices: bool = False,
        directions: tuple[str, ...] = ("query_to_doc",),
        partition_mode: str = "joint",
        show_progress_bar: bool = False,
        hardness_mode: str | None = None,
        hardness_strength: float = 0.0,
    ) -> None:
        name = type(self).__name__
        if mini_batch_num_tokens is not None:
            _refuse(name, "mini_batch_num_tokens", mini_batch_num_tokens, "mini-batches are counted in rows")
        inner = _mnrl(name, scale, similarity_fct, gather_across_devices, directions, partition_mode, hardness_mode)
        super().__init__(model, E.CachedLoss(inner, mini_batch_size))
        self.scale, self.similarity_fct, self.mini_batch_size = float(scale), similarity_fct, int(mini_batch_size)


class CoSENTLoss(_Loss):
    """Scored pairs: every pair with a lower score must have a lower (scaled) similarity."""

    columns = 2

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.pairwise_cos_sim,
    ) -> None:
        super().__init__(model, E.CoSENTLoss(scale, similarity=similarity_fct))
        self.scale, self.similarity_fct = float(scale), similarity_fct


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
        super().__init__(model, E.CosineSimilarityLoss(loss_fct, transform))
        self.loss_fct, self.cos_score_transformation = loss_fct, transform


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
        super().__init__(model, E.TripletLoss(triplet_margin, distance_metric))
        self.distance_metric, self.triplet_margin = distance_metric, float(triplet_margin)


class MatryoshkaLoss(_Loss):
    """``sum_d weight_d * loss(first d dimensions of each vector, renormalised)`` over ``matryoshka_dims``,
    so truncated vectors stay useful. ``loss`` is one of this module's losses (cached ones stay cached)."""

    def __init__(
        self,
        model: Any,
        loss: _Loss,
        matryoshka_dims: Sequence[int],
        matryoshka_weights: Sequence[float] | None = None,
        n_dims_per_step: int = -1,
    ) -> None:
        name = type(self).__name__
        if not isinstance(loss, _Loss) or isinstance(loss, (MatryoshkaLoss, SoftmaxLoss)):
            raise TypeError(f"{name}: loss must be one of bertkit.losses' embedding losses, got {type(loss).__name__}")
        if loss.model is not model:
            raise ValueError(f"{name}: the inner {type(loss).__name__} trains another model object than this loss")
        if 0 < n_dims_per_step < len(matryoshka_dims or []):
            _refuse(name, "n_dims_per_step", n_dims_per_step, "every dimension is trained at every step")
        dims = list(matryoshka_dims or [])
        full = model.get_embedding_dimension()
        if any(int(d) > full for d in dims):
            raise ValueError(f"{name}: matryoshka_dims {dims} go above the model's embedding dimension {full}")
        super().__init__(model, E.MatryoshkaLoss(loss.inner, dims, matryoshka_weights))
        self.loss, self.columns = loss, loss.columns
        self.matryoshka_dims, self.matryoshka_weights = tuple(self.inner.dims), tuple(self.inner.weights)


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
        super().__init__(model, E.EmbeddingLoss())
        self.num_labels = int(num_labels)
        self.concatenation_sent_rep = concatenation_sent_rep
        self.concatenation_sent_difference = concatenation_sent_difference
        self.concatenation_sent_multiplication = concatenation_sent_multiplication
        self.classifier = nn.Linear(parts * int(dim), self.num_labels, device=model.device)
        self.loss_fct = loss_fct if loss_fct is not None else nn.CrossEntropyLoss()

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
