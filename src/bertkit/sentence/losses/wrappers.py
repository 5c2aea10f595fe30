"""The loss around another loss: MatryoshkaLoss."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from bertkit.sentence.losses import functional as E
from bertkit.sentence.losses.base import _Loss, _refuse
from bertkit.sentence.losses.citations import _KUSUPATI2024_MATRYOSHKA
from bertkit.sentence.losses.in_batch import CachedGISTEmbedLoss, GISTEmbedLoss
from bertkit.sentence.losses.pairs import SoftmaxLoss


class MatryoshkaLoss(_Loss):
    """``sum_d weight_d * loss(first d dimensions of each vector, renormalised)`` over ``matryoshka_dims``,
    so truncated vectors stay useful. ``loss`` is one of bertkit.losses' losses (cached ones stay cached)."""

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
        plan = E.matryoshka_plan(dims, matryoshka_weights)  # the order of the sum
        super().__init__(model)
        self._dims, self._weights = plan
        self._cache_rows = loss._cache_rows  # a cached loss stays cached: the prefixes are cut in its step
        self.loss, self.columns = loss, loss.columns
        self.min_columns, self.max_columns = loss.min_columns, loss.max_columns
        # as sentence-transformers keeps them: sorted by dimension (a stable sort), weights 1 by default
        weights = [1] * len(dims) if matryoshka_weights is None else matryoshka_weights
        pairs = sorted(zip(matryoshka_dims, weights), key=lambda pair: pair[0], reverse=True)
        self.matryoshka_dims, self.matryoshka_weights = (tuple(column) for column in zip(*pairs))
        self.n_dims_per_step = n_dims_per_step

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.matryoshka(list(embeddings), labels, self._dims, self._weights, self.loss.compute_loss_from_embeddings)

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
