"""A regularizer for any columns: GlobalOrthogonalRegularizationLoss."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch import Tensor

from bertkit.sentence import util
from bertkit.sentence.losses import functional as E
from bertkit.sentence.losses.base import _Loss
from bertkit.sentence.losses.citations import _ZHANG2017_GOR


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
        super().__init__(model)
        self.similarity_fct, self.mean_weight = similarity_fct, mean_weight
        self.second_moment_weight, self.aggregation = second_moment_weight, aggregation

    def terms(self, sentence_features: Iterable[dict[str, Tensor]]) -> dict[str, Tensor]:
        """The weighted terms by sentence-transformers' names (``gor_mean``, ``gor_second_moment``)."""
        return self._terms([self._embed(f) for f in sentence_features])

    def _terms(self, reps: Sequence[Tensor]) -> dict[str, Tensor]:
        return E.gor_terms(reps, self.similarity_fct, self.mean_weight, self.second_moment_weight, self.aggregation)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column: the terms' sum."""
        return sum(self._terms(list(embeddings)).values())  # type: ignore[return-value]

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
