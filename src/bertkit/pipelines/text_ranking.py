"""``pipeline("text-ranking", model=DIR)``: score (query, passage) pairs with a cross-encoder.

::

    rank = pipeline("text-ranking", model="runs/reranker")
    rank("who wrote it?", ["passage a", "passage b"], top_k=1)
    # [{'index': 1, 'score': 3.71, 'text': 'passage b'}]

A cross-encoder is a sequence-classification folder with ``num_labels=1`` (the layout
sentence-transformers' ``CrossEncoder`` loads); ``score`` is its logit for the pair, the sigmoid of
it with ``sigmoid=True``. Results are best first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bertkit import _args as A

from .pipelines import Pipeline, _check_texts

__all__ = ["TextRankingPipeline", "check_cross_encoder"]


def check_cross_encoder(model: Any, where: str = "the model") -> None:
    """A cross-encoder scores a pair with one logit; anything else cannot rank."""
    n = int(getattr(model.config, "num_labels", 0) or 0)
    if n != 1 or not hasattr(model, "classifier"):
        raise ValueError(
            f"{where} is not a cross-encoder: it has {n} output label(s), a reranker has 1 "
            "(train one with `bertkit train-reranker`)"
        )


class TextRankingPipeline(Pipeline):
    """``rank(query, passages, top_k=None, sigmoid=False)`` -> ``[{'index', 'score', 'text'}]`` best first."""

    model_class_name = "BertForSequenceClassification"

    def __init__(
        self, model: Any, tokenizer: Any = None, device: str | None = None, max_length: int = 512, **kwargs: Any
    ) -> None:
        super().__init__(model, tokenizer, device, **kwargs)
        check_cross_encoder(self.model, str(self.folder or "the model"))
        self.max_length = int(max_length)

    def score_pairs(self, pairs: Sequence[tuple[str, str]], max_length: int | None = None) -> np.ndarray:
        """The logit of every (query, passage) pair, in input order."""
        pairs = list(pairs)
        enc = self.tokenizer(
            [q for q, _ in pairs], [p for _, p in pairs], truncation=True, max_length=max_length or self.max_length
        )
        feats = self._features(enc, len(pairs))
        res = self._run(feats)
        return np.array([float(r["logits"].reshape(-1)[0]) for r in res], dtype=np.float32)

    def __call__(
        self,
        query: str,
        passages: Sequence[str],
        top_k: int | None = None,
        sigmoid: bool = False,
        return_text: bool = True,
        max_length: int | None = None,
    ) -> list[dict[str, Any]]:
        A.positive_int.check("top_k", top_k, allow_none=True)
        _check_texts([query], "query")
        passages = list(passages)
        _check_texts(passages, "passages")
        scores = self.score_pairs([(query, p) for p in passages], max_length)
        if sigmoid:
            scores = 1.0 / (1.0 + np.exp(-scores))
        order = np.argsort(-scores, kind="stable")[: top_k or len(passages)]
        return [
            {"index": int(i), "score": float(scores[i]), **({"text": passages[i]} if return_text else {})}
            for i in order
        ]
