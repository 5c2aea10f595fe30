"""The base of the sentence-embedding losses, and the helpers that name their settings as
sentence-transformers' model card does."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch import Tensor, nn

from bertkit.sentence import util
from bertkit.sentence.losses import functional as E


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
    """A loss over ``model``'s sentence vectors: :meth:`compute_loss_from_embeddings` computes it from
    the columns' vectors (one (B, H) tensor per column); :meth:`forward` embeds the columns first, by
    GradCache when ``_cache_rows`` is set. ``columns`` is how many text columns an example must have
    (None: two or more)."""

    columns: int | None = None
    min_columns: int = 2  # without ``columns``: the fewest and most texts an example may have
    max_columns: int | None = None
    _cache_rows: int | None = None  # GradCache's rows per forward; None: each column in one forward

    def __init__(self, model: Any) -> None:
        super().__init__()
        _check_model(type(self).__name__, model)
        self.model = model

    def _embed(self, features: dict[str, Tensor]) -> Tensor:
        return self.model(features)["sentence_embedding"]

    def _run(self, features: list[dict[str, Tensor]], labels: Any, from_embeddings: E.FromEmbeddings) -> Tensor:
        """``from_embeddings(vectors of each column, labels)``, the columns embedded whole or by GradCache."""
        if self._cache_rows is not None:
            return E.cached(self._embed, features, labels, from_embeddings, self._cache_rows)
        return from_embeddings([self._embed(f) for f in features], labels)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """The loss of one batch: one tokenized batch per text column, ``labels`` one value per row."""
        return self._run(list(sentence_features), labels, self.compute_loss_from_embeddings)

    def compute_loss_from_embeddings(self, embeddings: Sequence[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss on vectors already computed, one (B, H) tensor per column."""
        raise NotImplementedError(f"{type(self).__name__} defines no formula")

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
