"""sentence-transformers' losses under their own names, for ``SentenceTransformer.fit``.

A sentence-transformers training script switches with its import line::

    from bertkit import InputExample, SentenceTransformer, losses

    model = SentenceTransformer(folder)
    loss = losses.CoSENTLoss(model)
    model.fit(train_objectives=[(DataLoader(examples, shuffle=True, batch_size=16), loss)], epochs=1)

Each loss is an ``nn.Module`` whose ``forward(sentence_features, labels)`` embeds every column with
``model(features)["sentence_embedding"]`` (with gradients) and returns the loss sentence-transformers
returns. The formulas live in :mod:`bertkit.sentence.losses.functional`; this module maps the
constructor arguments onto them and refuses, by name, settings bertkit does not compute.

Labels are what each loss reads: scores (CoSENT, AnglE), 1/0 (the contrastive losses), class ids (the
batch triplet losses, over one text column), a teacher's vectors (MSELoss, EmbedDistillLoss: one per
row, or one per column) or scores (MarginMSELoss, DistillKLDivLoss). ``fit`` and
``SentenceTransformerTrainer`` check a dataset's labels against the loss (:meth:`_Loss.check_labels`)
before the first step. The losses bertkit does not compute (DenoisingAutoEncoderLoss, the
ContrastiveTension losses, AdaptiveLayerLoss, Matryoshka2dLoss) keep their names here, and constructing
one raises NotImplementedError saying why.

Each loss's ``get_config_dict()`` and ``citation`` are what sentence-transformers' loss of the same name
gives for the same arguments (a model card records them): names as it writes them (``"cos_sim"``,
``"TripletDistanceMetric.EUCLIDEAN"``, an inner loss's class name, torch class paths) and its BibTeX text.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit.sentence import util
from bertkit.sentence.losses import functional as E

__all__ = [
    "AdaptiveLayerLoss",
    "AnglELoss",
    "BatchAllTripletLoss",
    "BatchHardSoftMarginTripletLoss",
    "BatchHardTripletLoss",
    "BatchHardTripletLossDistanceFunction",
    "BatchSemiHardTripletLoss",
    "CachedGISTEmbedLoss",
    "CachedMultipleNegativesRankingLoss",
    "CachedMultipleNegativesSymmetricRankingLoss",
    "CoSENTLoss",
    "ContrastiveLoss",
    "ContrastiveTensionDataLoader",
    "ContrastiveTensionLoss",
    "ContrastiveTensionLossInBatchNegatives",
    "CosineSimilarityLoss",
    "DenoisingAutoEncoderLoss",
    "DistillKLDivLoss",
    "EmbedDistillLoss",
    "GISTEmbedLoss",
    "GlobalOrthogonalRegularizationLoss",
    "MSELoss",
    "MarginMSELoss",
    "Matryoshka2dLoss",
    "MatryoshkaLoss",
    "MegaBatchMarginLoss",
    "MultipleNegativesRankingLoss",
    "MultipleNegativesSymmetricRankingLoss",
    "OnlineContrastiveLoss",
    "SiameseDistanceMetric",
    "SoftmaxLoss",
    "TripletDistanceMetric",
    "TripletLoss",
]


def _refuse(loss: str, name: str, value: Any, why: str) -> None:
    raise ValueError(f"{loss}: {name}={value!r} is not supported: {why}")


def _check_model(loss: str, model: Any) -> None:
    if not callable(getattr(model, "forward", None)) or not hasattr(model, "get_embedding_dimension"):
        raise TypeError(f"{loss}: model must be a bertkit SentenceTransformer, got {type(model).__name__}")


def _fullname(obj: Any) -> str:
    """The dotted class name of ``obj`` (of its class), as sentence-transformers writes it in a model card
    and in an activation function's config."""
    module = type(obj).__module__
    if module is None or module == str.__module__:
        return type(obj).__name__
    return f"{module}.{type(obj).__name__}"


def _similarity_name(fct: Any) -> str:
    """A similarity function as sentence-transformers' model card names it: its name, a partial with its
    keywords, a model's ``similarity`` / ``similarity_pairwise`` method as the function it computes."""
    if isinstance(fct, functools.partial):
        name = getattr(fct.func, "__name__", type(fct.func).__name__)
        args = ", ".join(f"{key}={value!r}" for key, value in fct.keywords.items())
        return f"{name}({args})" if args else name
    owner = getattr(fct, "__self__", None)
    name = getattr(fct, "__name__", type(fct).__name__)
    if name in ("similarity", "similarity_pairwise") and hasattr(owner, "similarity_fn_name"):
        kind = owner.similarity_fn_name
        pair = util.SIMILARITY_FUNCTIONS.get(getattr(kind, "value", kind))
        if pair is not None:
            return pair[name == "similarity_pairwise"].__name__
    settings = getattr(fct, "get_config_dict", None)
    if settings is not None:
        args = ", ".join(f"{key}={value!r}" for key, value in settings().items())
        return f"{name}({args})"
    return name


def _metric_name(fn: Any, holder: type) -> str:
    """``Holder.NAME`` for a distance of ``holder`` (bertkit's class, or sentence-transformers' of the
    same name, whose members are the functions themselves), else the function's name."""
    for key, value in vars(holder).items():
        if isinstance(value, staticmethod) and value.__func__ is fn:
            return f"{holder.__name__}.{key}"
    if getattr(fn, "__qualname__", "").startswith(f"{holder.__name__}."):
        # sentence-transformers' own distance: its module is loaded already, as the function exists
        theirs = getattr(sys.modules.get(getattr(fn, "__module__", "")), holder.__name__, None)
        for key, value in vars(theirs).items() if theirs is not None else ():
            if value is fn:
                return f"{holder.__name__}.{key}"
    return getattr(fn, "__name__", str(fn))


class _Loss(nn.Module):
    """A loss over ``model``'s sentence vectors: ``inner`` (an
    :class:`~bertkit.sentence.losses.functional.EmbeddingLoss`) computes it from the columns' vectors.
    ``columns`` is how many text columns an example must have (None: two or more)."""

    columns: int | None = None
    min_columns: int = 2  # without ``columns``: the fewest and most texts an example may have
    max_columns: int | None = None

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
        need, low, high = self.columns, self.min_columns, self.max_columns
        if need is not None:
            ok, want = n == need, f"{need}"
        else:
            ok = n >= low and (high is None or n <= high)
            want = f"at least {low}" if high is None else f"{low} to {high}"
        if not ok:
            noun = "text" if want == "1" else "texts"
            raise ValueError(f"{type(self).__name__} takes {want} {noun} per InputExample, got {n}")

    @property
    def reads_labels(self) -> bool:
        """Whether :meth:`check_labels` has anything to check (this loss reads its labels)."""
        return type(self).check_labels is not _Loss.check_labels

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        """Refuse, before training, labels this loss cannot read: ``labels`` are a whole dataset's
        (one row per example), ``columns`` its number of text columns. Here: anything goes."""


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


def _mnrl_config(loss: Any, **cached: Any) -> dict[str, Any]:
    """An MNRL's settings in sentence-transformers' order (a cached one's mini-batch settings after the
    similarity)."""
    return {
        "scale": loss.scale,
        "similarity_fct": _similarity_name(loss.similarity_fct),
        **cached,
        "gather_across_devices": loss.gather_across_devices,
        "directions": loss.directions,
        "partition_mode": loss.partition_mode,
        "hardness_mode": loss.hardness_mode,
        "hardness_strength": loss.hardness_strength,
    }


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
        self.scale, self.similarity_fct, self.gather_across_devices = scale, similarity_fct, gather_across_devices
        self.directions, self.partition_mode = tuple(directions), partition_mode
        self.hardness_mode, self.hardness_strength = hardness_mode, hardness_strength

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return _mnrl_config(self)

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for these directions."""
        every = {"query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"}
        if set(self.directions) == every and self.partition_mode == "joint":
            return _LI2023_GTE
        if set(self.directions) == {"query_to_doc", "doc_to_query"} and self.partition_mode == "per_direction":
            return _GUNTHER2024_JINA
        return _OORD2019_CPC


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
        self.scale, self.similarity_fct, self.mini_batch_size = scale, similarity_fct, mini_batch_size
        self.mini_batch_num_tokens, self.gather_across_devices = mini_batch_num_tokens, gather_across_devices
        self.directions, self.partition_mode = tuple(directions), partition_mode
        self.hardness_mode, self.hardness_strength = hardness_mode, hardness_strength

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return _mnrl_config(
            self, mini_batch_size=self.mini_batch_size, mini_batch_num_tokens=self.mini_batch_num_tokens
        )

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _GAO2021_GRADCACHE


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
        self.scale, self.similarity_fct = scale, similarity_fct

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
        super().__init__(model, E.CosineSimilarityLoss(loss_fct, transform))
        self.loss_fct, self.cos_score_transformation = loss_fct, transform

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
        super().__init__(model, E.TripletLoss(triplet_margin, distance_metric))
        self.distance_metric, self.triplet_margin = distance_metric, triplet_margin

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
        if isinstance(loss, (GISTEmbedLoss, CachedGISTEmbedLoss)):
            _refuse(name, "loss", type(loss).__name__, "bertkit truncates no guide model's vectors")
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
        self.min_columns, self.max_columns = loss.min_columns, loss.max_columns
        # as sentence-transformers keeps them: sorted by dimension (a stable sort), weights 1 by default
        weights = [1] * len(dims) if matryoshka_weights is None else matryoshka_weights
        pairs = sorted(zip(matryoshka_dims, weights), key=lambda pair: pair[0], reverse=True)
        self.matryoshka_dims, self.matryoshka_weights = (tuple(column) for column in zip(*pairs))
        self.n_dims_per_step = n_dims_per_step

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "loss": type(self.loss).__name__,
            "matryoshka_dims": self.matryoshka_dims,
            "matryoshka_weights": self.matryoshka_weights,
            "n_dims_per_step": self.n_dims_per_step,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _KUSUPATI2024_MATRYOSHKA

    @property
    def reads_labels(self) -> bool:
        return self.loss.reads_labels

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        self.loss.check_labels(labels, columns)


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


# -- distillation ---------------------------------------------------------------------------------------


class EmbedDistillLoss(_Loss):
    """The student's vectors against a teacher's, given as each row's label: one vector per row
    ``(batch, H)`` for every column, or one per column ``(batch, columns, H)``. ``distance_metric``:
    ``mse``, ``l2`` or ``cosine``; ``projection_dim`` adds a trained linear map from the student's width
    to the teacher's."""

    min_columns = 1

    def __init__(self, model: Any, distance_metric: str = "cosine", projection_dim: int | None = None) -> None:
        name = type(self).__name__
        _check_model(name, model)
        if distance_metric not in E.EmbedDistillLoss.METRICS:
            raise ValueError(
                f"{name}: distance_metric={distance_metric!r} is not one of {', '.join(E.EmbedDistillLoss.METRICS)}"
            )
        projection = None
        if projection_dim is not None:
            if isinstance(projection_dim, bool) or not isinstance(projection_dim, int) or projection_dim < 1:
                raise ValueError(f"{name}: projection_dim={projection_dim!r} must be a positive integer or None")
            projection = nn.Linear(model.get_embedding_dimension(), projection_dim, device=model.device)
        super().__init__(model, E.EmbedDistillLoss(distance_metric, projection, name))
        self.projection, self.projection_dim, self.distance_metric = projection, projection_dim, distance_metric

    def _width(self) -> int:
        return self.projection_dim if self.projection_dim is not None else int(self.model.get_embedding_dimension())

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """The distance to the teacher's vectors ``labels`` (checked before any text is embedded)."""
        features = list(sentence_features)
        self.inner.teacher(labels, len(features), self._width())
        return self.inner(self._embed, features, labels)

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        self.inner.teacher(labels, columns, self._width())

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
        super().__init__(model, E.MarginMSELoss(similarity_fct, type(self).__name__))
        self.similarity_fct, self.loss_fct = similarity_fct, nn.MSELoss()

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        self.inner.margins(labels, 0 if labels is None else labels.shape[0], columns - 2)

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
        super().__init__(model, E.DistillKLDivLoss(similarity_fct, student, teacher, name))
        self.similarity_fct, self.temperature = similarity_fct, temperature
        self.student_temperature, self.teacher_temperature = student, teacher
        self.loss_fct = nn.KLDivLoss(reduction="batchmean")

    def check_labels(self, labels: Tensor | None, columns: int) -> None:
        self.inner.scores(labels, 0 if labels is None else labels.shape[0], columns - 1)

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


# -- labelled pairs -------------------------------------------------------------------------------------


def _one_label_per_row(loss: str, labels: Tensor | None, what: str) -> None:
    """Refuse a dataset's labels unless each row has one number (``what`` names it)."""
    if labels is None:
        raise ValueError(f"{loss} needs a label per row ({what}), got none")
    if labels.dim() > 1 and labels[0].numel() != 1:
        raise ValueError(
            f"{loss}: each row's label must be one number ({what}), got labels of shape {tuple(labels.shape)}"
        )


def _distance(loss: str, value: Any, names: str) -> Callable[..., Tensor]:
    if not callable(value):
        raise ValueError(f"{loss}: distance_metric={value!r} is not a distance function: give one of {names}")
    return value


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
        distance = _distance(type(self).__name__, distance_metric, _SIAMESE)
        super().__init__(model, E.ContrastiveLoss(distance, margin, size_average))
        self.distance_metric, self.margin, self.size_average = distance_metric, margin, size_average

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
        distance = _distance(type(self).__name__, distance_metric, _SIAMESE)
        super().__init__(model, E.OnlineContrastiveLoss(distance, margin))
        self.distance_metric, self.margin = distance_metric, margin

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
        distance = _distance(name, distance_metric, _MATRIX)
        super().__init__(model, E.BatchTripletLoss(self.kind, distance, margin, name))
        self.sentence_embedder, self.distance_metric = model, distance_metric

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
        _Loss.__init__(self, model, E.AnglELoss(scale))
        self.scale, self.similarity_fct = scale, E.pairwise_angle_sim

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _LI2024_ANGLE


class CachedMultipleNegativesSymmetricRankingLoss(CachedMultipleNegativesRankingLoss):
    """:class:`MultipleNegativesSymmetricRankingLoss` by GradCache, ``mini_batch_size`` rows at a time."""

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.cos_sim,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        gather_across_devices: bool = False,
        show_progress_bar: bool = False,
    ) -> None:
        super().__init__(
            model,
            scale,
            similarity_fct,
            mini_batch_size,
            mini_batch_num_tokens,
            gather_across_devices,
            directions=("query_to_doc", "doc_to_query"),
            partition_mode="per_direction",
            show_progress_bar=show_progress_bar,
        )


class MegaBatchMarginLoss(_Loss):
    """(anchor, positive) texts: each positive's cosine above ``positive_margin``, each anchor's closest
    other positive below ``negative_margin``. ``use_mini_batched_version`` computes it by GradCache,
    ``mini_batch_size`` rows at a time (the same loss and gradients)."""

    columns = 2

    def __init__(
        self,
        model: Any,
        positive_margin: float = 0.8,
        negative_margin: float = 0.3,
        use_mini_batched_version: bool = True,
        mini_batch_size: int = 50,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
    ) -> None:
        name = type(self).__name__
        if mini_batch_num_tokens is not None:
            _refuse(name, "mini_batch_num_tokens", mini_batch_num_tokens, "mini-batches are counted in rows")
        inner: E.EmbeddingLoss = E.MegaBatchMarginLoss(positive_margin, negative_margin)
        if use_mini_batched_version:
            inner = E.CachedLoss(inner, mini_batch_size)
        super().__init__(model, inner)
        self.positive_margin, self.negative_margin = positive_margin, negative_margin
        self.mini_batch_size, self.mini_batch_num_tokens = mini_batch_size, mini_batch_num_tokens

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "positive_margin": self.positive_margin,
            "negative_margin": self.negative_margin,
            "mini_batch_size": self.mini_batch_size,
            "mini_batch_num_tokens": self.mini_batch_num_tokens,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _WIETING2018_PARANMT


class GlobalOrthogonalRegularizationLoss(_Loss):
    """A regularizer for any columns: the squared mean and the excess second moment (above ``1 / H``) of
    each column's off-diagonal similarities, weighted and averaged (or summed) over the columns. It
    returns their sum, one tensor (sentence-transformers returns them as a dict its trainer sums);
    :meth:`terms` gives them by name."""

    min_columns = 1

    def __init__(
        self,
        model: Any,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = util.cos_sim,
        mean_weight: float | None = 1.0,
        second_moment_weight: float | None = 1.0,
        aggregation: str = "mean",
    ) -> None:
        name = type(self).__name__
        if not mean_weight and not second_moment_weight:
            raise ValueError(f"{name}: at least one of mean_weight or second_moment_weight must be non-zero")
        if aggregation not in ("mean", "sum"):
            raise ValueError(f"{name}: aggregation={aggregation!r} is not 'mean' or 'sum'")
        super().__init__(
            model, E.GlobalOrthogonalRegularizationLoss(similarity_fct, mean_weight, second_moment_weight, aggregation)
        )
        self.similarity_fct, self.mean_weight = similarity_fct, mean_weight
        self.second_moment_weight, self.aggregation = second_moment_weight, aggregation

    def terms(self, sentence_features: Iterable[dict[str, Tensor]]) -> dict[str, Tensor]:
        """The weighted terms by sentence-transformers' names (``gor_mean``, ``gor_second_moment``)."""
        return self.inner.terms([self._embed(f) for f in sentence_features])

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return {
            "similarity_fct": self.similarity_fct.__name__,
            "mean_weight": self.mean_weight,
            "second_moment_weight": self.second_moment_weight,
            "aggregation": self.aggregation,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _ZHANG2017_GOR


# -- guided in-batch negatives --------------------------------------------------------------------------


class GISTEmbedLoss(_Loss):
    """In-batch negatives (anchor, positive[, negative]) at ``1 / temperature``, where the ``guide``
    model (a bertkit or sentence-transformers SentenceTransformer, not trained) drops likely false
    negatives: every candidate it scores above the row's own pair (less ``margin``, ``absolute`` or
    ``relative``). The guide re-tokenizes the texts when its vocabulary or max_seq_length differ."""

    min_columns, max_columns = 2, 3

    def __init__(
        self,
        model: Any,
        guide: Any,
        temperature: float = 0.01,
        margin_strategy: str = "absolute",
        margin: float = 0.0,
        contrast_anchors: bool = True,
        contrast_positives: bool = True,
        gather_across_devices: bool = False,
    ) -> None:
        self._init_guided(model, guide, temperature, margin_strategy, margin, contrast_anchors, contrast_positives)
        if gather_across_devices:
            _refuse(type(self).__name__, "gather_across_devices", True, "fit trains in one process")
        super().__init__(model, self._formula)
        self.gather_across_devices = gather_across_devices

    def _init_guided(
        self,
        model: Any,
        guide: Any,
        temperature: float,
        margin_strategy: str,
        margin: float,
        contrast_anchors: bool,
        contrast_positives: bool,
    ) -> None:
        name = type(self).__name__
        _check_model(name, model)
        if not callable(guide) or not callable(getattr(guide, "preprocess", None)) or not hasattr(guide, "tokenizer"):
            raise ValueError(
                f"{name}: guide must be a SentenceTransformer (bertkit's or sentence-transformers'), got {guide!r}"
            )
        if margin_strategy not in ("absolute", "relative"):
            raise ValueError(f"{name}: margin_strategy={margin_strategy!r} is not 'absolute' or 'relative'")
        if not temperature > 0:
            raise ValueError(f"{name}: temperature={temperature!r} must be positive")
        self._formula = E.GISTEmbedLoss(temperature, margin_strategy, margin, contrast_anchors, contrast_positives)
        self.temperature, self.margin_strategy, self.margin = temperature, margin_strategy, margin
        self.contrast_anchors, self.contrast_positives = contrast_anchors, contrast_positives
        self._guide = [guide]  # in a list: the guide's weights are not the loss's (nothing trains them)
        self.must_retokenize = (
            model.tokenizer.get_vocab() != guide.tokenizer.get_vocab() or guide.max_seq_length < model.max_seq_length
        )

    @property
    def guide(self) -> Any:
        """The guide model."""
        return self._guide[0]

    def guide_embeddings(self, sentence_features: Sequence[dict[str, Tensor]]) -> list[Tensor]:
        """The guide's vectors of each column, without gradients, on the model's device."""
        guide, out = self.guide, []
        device = getattr(guide, "device", None)
        with torch.no_grad():
            for features in sentence_features:
                if self.must_retokenize:
                    texts = self.model.tokenizer.batch_decode(features["input_ids"].tolist(), skip_special_tokens=True)
                    features = guide.preprocess(texts)
                if device is not None:
                    features = {k: v.to(device) if torch.is_tensor(v) else v for k, v in features.items()}
                out.append(guide(features)["sentence_embedding"].detach().to(features["input_ids"].device))
        return [o.to(self.model.device) for o in out]

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """The loss of one batch (``labels`` are not read)."""
        features = list(sentence_features)
        self.check_columns(len(features))
        return self.inner(self._embed, features, self.guide_embeddings(features))

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} computes its loss in forward (it runs the guide model)")

    def get_config_dict(self, **cached: Any) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss (a cached one's
        mini-batch settings after the temperature)."""
        return {
            "guide": self.guide,
            "temperature": self.temperature,
            **cached,
            "margin_strategy": self.margin_strategy,
            "margin": self.margin,
            "contrast_anchors": self.contrast_anchors,
            "contrast_positives": self.contrast_positives,
            "gather_across_devices": self.gather_across_devices,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _SOLATORIO2024_GIST


class CachedGISTEmbedLoss(GISTEmbedLoss):
    """:class:`GISTEmbedLoss` by GradCache: the whole batch's loss and gradients at ``mini_batch_size``
    rows' activation memory (the guide runs on the whole batch without gradients)."""

    def __init__(
        self,
        model: Any,
        guide: Any,
        temperature: float = 0.01,
        mini_batch_size: int = 32,
        mini_batch_num_tokens: int | None = None,
        show_progress_bar: bool = False,
        margin_strategy: str = "absolute",
        margin: float = 0.0,
        contrast_anchors: bool = True,
        contrast_positives: bool = True,
        gather_across_devices: bool = False,
    ) -> None:
        name = type(self).__name__
        self._init_guided(model, guide, temperature, margin_strategy, margin, contrast_anchors, contrast_positives)
        if gather_across_devices:
            _refuse(name, "gather_across_devices", True, "fit trains in one process")
        if mini_batch_num_tokens is not None:
            _refuse(name, "mini_batch_num_tokens", mini_batch_num_tokens, "mini-batches are counted in rows")
        _Loss.__init__(self, model, E.CachedLoss(self._formula, mini_batch_size))
        self.gather_across_devices, self.mini_batch_size = gather_across_devices, mini_batch_size
        self.mini_batch_num_tokens = mini_batch_num_tokens

    def get_config_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """The settings sentence-transformers' model card records for this loss."""
        return super().get_config_dict(
            mini_batch_size=self.mini_batch_size, mini_batch_num_tokens=self.mini_batch_num_tokens
        )

    @property
    def citation(self) -> str | None:
        """None: sentence-transformers' model card cites no paper for the cached GISTEmbed loss."""
        return None


# -- losses bertkit does not compute --------------------------------------------------------------------


def _not_computed(loss: str, why: str) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"bertkit.losses.{loss} is not supported: {why}")

    doc = f"sentence-transformers' {loss}, which bertkit does not compute: {why}. Constructing it raises."
    return type(loss, (), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


_DECODER = "it trains a decoder to rebuild the text from the vector, and bertkit has no text decoder"
DenoisingAutoEncoderLoss = _not_computed("DenoisingAutoEncoderLoss", _DECODER)
ContrastiveTensionLoss = _not_computed(
    "ContrastiveTensionLoss", "it trains a second copy of the encoder against the first, which bertkit does not keep"
)
ContrastiveTensionLossInBatchNegatives = _not_computed(
    "ContrastiveTensionLossInBatchNegatives",
    "it trains a second copy of the encoder against the first, which bertkit does not keep",
)
ContrastiveTensionDataLoader = _not_computed(
    "ContrastiveTensionDataLoader", "it feeds ContrastiveTensionLoss, which bertkit does not compute"
)
AdaptiveLayerLoss = _not_computed(
    "AdaptiveLayerLoss", "it trains on the vectors of every layer, and bertkit's losses see the last layer only"
)
Matryoshka2dLoss = _not_computed(
    "Matryoshka2dLoss", "it trains on the vectors of every layer, and bertkit's losses see the last layer only"
)


# -- citations: the BibTeX entries sentence-transformers' model card lists, character for character -------

_GAO2021_GRADCACHE = """
@misc{gao2021scaling,
    title={Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup},
    author={Luyu Gao and Yunyi Zhang and Jiawei Han and Jamie Callan},
    year={2021},
    eprint={2101.06983},
    archivePrefix={arXiv},
    primaryClass={cs.LG}
}
"""
_GUNTHER2024_JINA = """
@misc{günther2024jinaembeddings28192token,
      title={Jina Embeddings 2: 8192-Token General-Purpose Text Embeddings for Long Documents},
      author={Michael Günther and Jackmin Ong and Isabelle Mohr and Alaeddine Abdessalem and Tanguy Abel and Mohammad Kalim Akram and Susana Guzman and Georgios Mastrapas and Saba Sturua and Bo Wang and Maximilian Werk and Nan Wang and Han Xiao},
      year={2024},
      eprint={2310.19923},
      archivePrefix={arXiv},
      primaryClass={cs.CL},
      url={https://arxiv.org/abs/2310.19923},
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_HADSELL2006 = """
@inproceedings{hadsell2006dimensionality,
    author={Hadsell, R. and Chopra, S. and LeCun, Y.},
    booktitle={2006 IEEE Computer Society Conference on Computer Vision and Pattern Recognition (CVPR'06)},
    title={Dimensionality Reduction by Learning an Invariant Mapping},
    year={2006},
    volume={2},
    number={},
    pages={1735-1742},
    doi={10.1109/CVPR.2006.100}
}
"""
_HERMANS2017 = """
@misc{hermans2017defense,
    title={In Defense of the Triplet Loss for Person Re-Identification},
    author={Alexander Hermans and Lucas Beyer and Bastian Leibe},
    year={2017},
    eprint={1703.07737},
    archivePrefix={arXiv},
    primaryClass={cs.CV}
}
"""
_HOFSTATTER2021 = """
@misc{hofstätter2021improving,
    title={Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation},
    author={Sebastian Hofstätter and Sophia Althammer and Michael Schröder and Mete Sertkan and Allan Hanbury},
    year={2021},
    eprint={2010.02666},
    archivePrefix={arXiv},
    primaryClass={cs.IR}
}
"""
_HUANG2024_COSENT = """
@article{10531646,
    author={Huang, Xiang and Peng, Hao and Zou, Dongcheng and Liu, Zhiwei and Li, Jianxin and Liu, Kay and Wu, Jia and Su, Jianlin and Yu, Philip S.},
    journal={IEEE/ACM Transactions on Audio, Speech, and Language Processing},
    title={CoSENT: Consistent Sentence Embedding via Similarity Ranking},
    year={2024},
    doi={10.1109/TASLP.2024.3402087}
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_KIM2023_EMBEDDISTILL = """
@article{kim2023embeddistill,
    title={EmbedDistill: A Geometric Knowledge Distillation for Information Retrieval},
    author={Kim, Seungyeon and Rawat, Ankit Singh and Zaheer, Manzil and Jayasumana, Sadeep and Sadhanala, Veeranjaneyulu and Jitkrittum, Wittawat and Menon, Aditya Krishna and Fergus, Rob and Kumar, Sanjiv},
    year={2023},
    eprint={2301.12005},
    archivePrefix={arXiv},
    primaryClass={cs.IR}
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_KUSUPATI2024_MATRYOSHKA = """
@misc{kusupati2024matryoshka,
    title={Matryoshka Representation Learning},
    author={Aditya Kusupati and Gantavya Bhatt and Aniket Rege and Matthew Wallingford and Aditya Sinha and Vivek Ramanujan and William Howard-Snyder and Kaifeng Chen and Sham Kakade and Prateek Jain and Ali Farhadi},
    year={2024},
    eprint={2205.13147},
    archivePrefix={arXiv},
    primaryClass={cs.LG}
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_LI2023_GTE = """
@misc{li2023generaltextembeddingsmultistage,
      title={Towards General Text Embeddings with Multi-stage Contrastive Learning},
      author={Zehan Li and Xin Zhang and Yanzhao Zhang and Dingkun Long and Pengjun Xie and Meishan Zhang},
      year={2023},
      eprint={2308.03281},
      archivePrefix={arXiv},
      primaryClass={cs.CL},
      url={https://arxiv.org/abs/2308.03281},
}
"""
_LI2024_ANGLE = """
@inproceedings{li-li-2024-aoe,
    title = "{A}o{E}: Angle-optimized Embeddings for Semantic Textual Similarity",
    author = "Li, Xianming and Li, Jing",
    year = "2024",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/2024.acl-long.101/",
    doi = "10.18653/v1/2024.acl-long.101"
}
"""
_LIN2020_DISTILL = """
@misc{lin2020distillingdenserepresentationsranking,
      title={Distilling Dense Representations for Ranking using Tightly-Coupled Teachers},
      author={Sheng-Chieh Lin and Jheng-Hong Yang and Jimmy Lin},
      year={2020},
      eprint={2010.11386},
      archivePrefix={arXiv},
      primaryClass={cs.IR},
      url={https://arxiv.org/abs/2010.11386},
}
"""
_OORD2019_CPC = """
@misc{oord2019representationlearningcontrastivepredictive,
      title={Representation Learning with Contrastive Predictive Coding},
      author={Aaron van den Oord and Yazhe Li and Oriol Vinyals},
      year={2019},
      eprint={1807.03748},
      archivePrefix={arXiv},
      primaryClass={cs.LG},
      url={https://arxiv.org/abs/1807.03748},
}
"""
_REIMERS2019_SBERT = """
@inproceedings{reimers-2019-sentence-bert,
    title = "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
    author = "Reimers, Nils and Gurevych, Iryna",
    booktitle = "Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing",
    month = "11",
    year = "2019",
    publisher = "Association for Computational Linguistics",
    url = "https://arxiv.org/abs/1908.10084",
}
"""
_REIMERS2020_MULTILINGUAL = """
@inproceedings{reimers-2020-multilingual-sentence-bert,
    title = "Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation",
    author = "Reimers, Nils and Gurevych, Iryna",
    booktitle = "Proceedings of the 2020 Conference on Empirical Methods in Natural Language Processing",
    month = "11",
    year = "2020",
    publisher = "Association for Computational Linguistics",
    url = "https://arxiv.org/abs/2004.09813",
}
"""
_SOLATORIO2024_GIST = """
@misc{solatorio2024gistembed,
    title={GISTEmbed: Guided In-sample Selection of Training Negatives for Text Embedding Fine-tuning},
    author={Aivin V. Solatorio},
    year={2024},
    eprint={2402.16829},
    archivePrefix={arXiv},
    primaryClass={cs.LG}
}
"""
_WIETING2018_PARANMT = """
@inproceedings{wieting-gimpel-2018-paranmt,
    title = "{P}ara{NMT}-50{M}: Pushing the Limits of Paraphrastic Sentence Embeddings with Millions of Machine Translations",
    author = "Wieting, John and Gimpel, Kevin",
    editor = "Gurevych, Iryna and Miyao, Yusuke",
    booktitle = "Proceedings of the 56th Annual Meeting of the Association for Computational Linguistics (Volume 1: Long Papers)",
    month = jul,
    year = "2018",
    address = "Melbourne, Australia",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/P18-1042",
    doi = "10.18653/v1/P18-1042",
    pages = "451--462",
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_ZHANG2017_GOR = """
@misc{zhang2017learningspreadoutlocalfeature,
      title={Learning Spread-out Local Feature Descriptors},
      author={Xu Zhang and Felix X. Yu and Sanjiv Kumar and Shih-Fu Chang},
      year={2017},
      eprint={1708.06320},
      archivePrefix={arXiv},
      primaryClass={cs.CV},
      url={https://arxiv.org/abs/1708.06320},
}
"""
