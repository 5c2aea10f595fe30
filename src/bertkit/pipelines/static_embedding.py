"""``pipeline("sentence-embedding")`` over a static embedding folder (model2vec's or sentence-transformers').

It answers the calls the search index, ``evaluate-embeddings`` and the server make of a sentence
embedding pipeline (``embed``, ``forward_features``, ``dim``, ``max_length``...), with no model
forward: tokenization, then one ``embedding_bag`` mean per batch (see :mod:`bertkit.modeling.static`).
A static model has no position limit, so no text is ever cut or split into windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from .pipelines import Pipeline, _batched, _check_texts

__all__ = ["NO_LIMIT", "StaticEmbeddingPipeline"]

NO_LIMIT = 1_000_000  # model2vec's "seq_length": a static model reads a text of any length whole


class StaticEmbeddingPipeline(Pipeline):
    """Sentence vectors of a static model: the mean of the text's token vectors, L2 when the folder
    normalises (``normalize`` overrides). ``dtype`` is always fp32: there is no matrix product to speed up."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 4096,
        normalize: bool | None = None,
        sentence: bool = True,
        **kwargs: Any,
    ) -> None:
        from bertkit import _args as A
        from bertkit.hub import resolve_model_path
        from bertkit.modeling.static import StaticEmbedder, load_static

        if not sentence:
            raise ValueError(f"{model}: a static embedding model gives sentence vectors only; use 'sentence-embedding'")
        if tokenizer is not None:
            raise ValueError("a static embedding folder brings its own tokenizer; do not pass tokenizer=")
        pooling = kwargs.pop("pooling", None)
        if pooling not in (None, "mean"):
            raise ValueError(f"{model}: a static embedding model takes the mean of its tokens, not pooling={pooling!r}")
        kwargs.pop("max_batch_tokens", None)
        kwargs.pop("truncation", None)
        kwargs.pop("max_length", None)
        self.folder = resolve_model_path(model) if isinstance(model, (str, Path)) else None
        self.model: StaticEmbedder = load_static(self.folder) if self.folder is not None else model
        if device:
            from bertkit._args import check_device

            self.model.to(check_device("device", device))
        # what the index and the server read off an encoder's config
        self.model.config = SimpleNamespace(
            model_type="static", hidden_size=self.model.dim, max_position_embeddings=NO_LIMIT
        )
        self.tokenizer = self.model.tokenizer
        self.device = self.model.weight.device
        self.batch_size = A.positive_int.check("batch_size", max(int(batch_size), 1024))
        self.max_batch_tokens = None
        self.normalize = self.model.normalize if normalize is None else bool(normalize)
        self.sentence = True
        self.pooling = "mean"
        self.max_length = NO_LIMIT
        self.truncation = "cut"
        self.dense: list[Any] = []
        self.dim = self.model.dim
        self.last_dropped_tokens: list[int] = []
        self.kwargs = kwargs

    @property
    def dtype(self) -> str:
        return "fp32"

    def encode_features(self, texts: Sequence[str], max_length: int | None = None) -> list[dict]:
        """Token ids of ``texts`` as features for :meth:`forward_features` (no [CLS]/[SEP])."""
        texts = list(texts)
        _check_texts(texts)
        return [{"input_ids": ids} for ids in self.model.token_ids(texts)]

    def forward_features(
        self, features: Sequence[dict], batch_size: int | None = None, normalize: bool | None = None
    ) -> np.ndarray:
        """Sentence vectors of tokenized features; a [CLS] first and a [SEP] last (an encoder's framing,
        as the server tokenizes) are not the text's and are left out."""
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        ids = []
        for f in features:
            x = list(f["input_ids"])
            if x and x[0] == cls:
                x = x[1:]
            if x and x[-1] == sep:
                x = x[:-1]
            ids.append(x)
        norm = self.normalize if normalize is None else normalize
        if not ids:
            return np.zeros((0, self.dim), np.float32)
        return self.model.bag(ids, norm).cpu().numpy()

    def embed(
        self,
        texts: Sequence[str],
        max_length: int | None = None,
        batch_size: int | None = None,
        truncation: str | None = None,
    ) -> np.ndarray:
        """Sentence vectors (len(texts), dim); a static model never cuts a text."""
        texts = list(texts)
        _check_texts(texts)
        self.last_dropped_tokens = [0] * len(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return self.model.embed(texts, batch_size or self.batch_size, self.normalize)

    def __call__(
        self,
        inputs: str | Sequence[str],
        max_length: int | None = None,
        batch_size: int | None = None,
        return_tensors: bool = False,
        truncation: str | None = None,
    ) -> Any:
        texts, batched = _batched(inputs)
        vecs = torch.from_numpy(self.embed(texts, batch_size=batch_size))
        if return_tensors:
            return vecs if batched else vecs[0]
        outs = vecs.tolist()
        return outs if batched else outs[0]

    def __repr__(self) -> str:
        return f"StaticEmbeddingPipeline({self.folder}, dim={self.dim}, normalize={self.normalize})"
