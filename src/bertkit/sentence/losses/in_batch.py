"""In-batch negatives: MultipleNegativesRankingLoss and its symmetric and cached kinds, the guided
(GISTEmbed) losses and MegaBatchMarginLoss."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from bertkit.sentence import util
from bertkit.sentence.losses import functional as E
from bertkit.sentence.losses.base import _check_model, _Loss, _refuse, _similarity_name
from bertkit.sentence.losses.citations import (
    _GAO2021_GRADCACHE,
    _GUNTHER2024_JINA,
    _LI2023_GTE,
    _OORD2019_CPC,
    _SOLATORIO2024_GIST,
    _WIETING2018_PARANMT,
)


def _mnrl(
    loss: str,
    scale: float,
    similarity_fct: Callable[[Tensor, Tensor], Tensor],
    gather_across_devices: bool,
    directions: tuple[str, ...],
    partition_mode: str,
    hardness_mode: str | None,
) -> tuple[float, bool]:
    """The (scale, symmetric) of :func:`~bertkit.sentence.losses.functional.mnrl` for
    sentence-transformers' arguments: the default direction, or the symmetric pair averaged per
    direction."""
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
    return E.check_scale(scale), symmetric


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
        math = _mnrl(name, scale, similarity_fct, gather_across_devices, directions, partition_mode, hardness_mode)
        super().__init__(model)
        self._scale, self._symmetric = math
        self.scale, self.similarity_fct, self.gather_across_devices = scale, similarity_fct, gather_across_devices
        self.directions, self.partition_mode = tuple(directions), partition_mode
        self.hardness_mode, self.hardness_strength = hardness_mode, hardness_strength

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.mnrl(list(embeddings), self._scale, self._symmetric, self.similarity_fct)

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
        math = _mnrl(name, scale, similarity_fct, gather_across_devices, directions, partition_mode, hardness_mode)
        rows = E.cache_rows(mini_batch_size)
        super().__init__(model)
        (self._scale, self._symmetric), self._cache_rows = math, rows
        self.scale, self.similarity_fct, self.mini_batch_size = scale, similarity_fct, mini_batch_size
        self.mini_batch_num_tokens, self.gather_across_devices = mini_batch_num_tokens, gather_across_devices
        self.directions, self.partition_mode = tuple(directions), partition_mode
        self.hardness_mode, self.hardness_strength = hardness_mode, hardness_strength

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.mnrl(list(embeddings), self._scale, self._symmetric, self.similarity_fct)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers' model card records for this loss."""
        return _mnrl_config(
            self, mini_batch_size=self.mini_batch_size, mini_batch_num_tokens=self.mini_batch_num_tokens
        )

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _GAO2021_GRADCACHE


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
        margins = float(positive_margin), float(negative_margin)
        rows = E.cache_rows(mini_batch_size) if use_mini_batched_version else None
        super().__init__(model)
        self._margins, self._cache_rows = margins, rows
        self.positive_margin, self.negative_margin = positive_margin, negative_margin
        self.mini_batch_size, self.mini_batch_num_tokens = mini_batch_size, mini_batch_num_tokens

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        return E.mega_batch_margin(list(embeddings), *self._margins)

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
        super().__init__(model)
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
        return self._run(features, self.guide_embeddings(features), self._guided)

    def _guided(self, reps: Sequence[Tensor], guide: Sequence[Tensor] | None) -> Tensor:
        """The loss of the model's vectors of each column, the guide's ``guide`` masking false negatives."""
        return E.gist(
            list(reps),
            guide,
            float(self.temperature),
            self.margin_strategy,
            float(self.margin),
            self.contrast_anchors,
            self.contrast_positives,
        )

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
        rows = E.cache_rows(mini_batch_size)
        _Loss.__init__(self, model)
        self._cache_rows = rows
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
