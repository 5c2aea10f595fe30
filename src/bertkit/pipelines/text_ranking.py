"""``pipeline("text-ranking", model=DIR)``: score (query, passage) pairs with a cross-encoder.

::

    rank = pipeline("text-ranking", model="runs/reranker")
    rank("who wrote it?", ["passage a", "passage b"], top_k=1)
    # [{'index': 1, 'score': 3.71, 'text': 'passage b'}]

A cross-encoder is a sequence-classification folder with ``num_labels=1`` (the layout
sentence-transformers' ``CrossEncoder`` loads); ``score`` is its logit for the pair, the sigmoid of
it with ``sigmoid=True``. Results are best first. A pair over the limit is an error by default;
``truncation="cut"`` cuts it, ``"chunk"`` scores the passage's best overlapping window.
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

    model_task = "sequence-classification"

    def __init__(
        self, model: Any, tokenizer: Any = None, device: str | None = None, max_length: int = 512, **kwargs: Any
    ) -> None:
        super().__init__(model, tokenizer, device, **kwargs)
        check_cross_encoder(self.model, str(self.folder or "the model"))
        self.max_length = int(max_length)

    def _check_loaded(self, model: Any, missing: list[str], path: Any) -> None:
        check_cross_encoder(model, str(path))  # the reranker's own words first: it names train-reranker
        super()._check_loaded(model, missing, path)

    def score_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        max_length: int | None = None,
        truncation: str = "cut",
        keep_query: bool = False,
        truncation_side: str = "right",
    ) -> np.ndarray:
        """The logit of every (query, passage) pair, in input order. A pair over ``max_length`` tokens
        is an error, cut (``"cut"``: from the longer text first, as sentence-transformers does, or from
        the passage only with ``keep_query``; ``truncation_side="left"`` drops a text's first tokens
        rather than its last), or scored by its passage's best overlapping window (``"chunk"``)."""
        import copy

        from .long_text import check_truncation, pool_windows

        check_truncation(truncation)
        if truncation_side not in ("right", "left"):
            raise ValueError(f"truncation_side must be 'right' or 'left', got {truncation_side!r}")
        limit = max_length or self.max_length
        pairs = list(pairs)
        feats, owner = [], []
        tok = self.tokenizer
        if truncation_side != getattr(tok, "truncation_side", "right"):
            tok = copy.copy(tok)  # a shallow copy cuts the other way; the shared tokenizer is left alone
            tok.truncation_side = truncation_side
        for i, (q, p) in enumerate(pairs):
            enc = tok([q], [p], verbose=False)
            n = len(enc["input_ids"][0])
            if n <= limit or truncation == "cut":
                cut = "only_second" if keep_query else True
                feats.append(self._features(tok([q], [p], truncation=cut, max_length=limit), 1)[0])
                owner.append(i)
                continue
            if truncation == "error":
                raise ValueError(
                    f"pair {i} has {n} tokens, over the model's limit of {limit}; pass "
                    "truncation='cut' to drop the rest or truncation='chunk' to score the best window"
                )
            q_ids = tok([q], add_special_tokens=False, verbose=False)["input_ids"][0][: limit // 2]
            p_ids = tok([p], add_special_tokens=False, verbose=False)["input_ids"][0]
            room = limit - len(q_ids) - 3
            overlap = room // 4
            starts = list(range(0, max(len(p_ids) - overlap, 1), max(1, room - overlap)))
            for s in starts:
                w = p_ids[s : s + room]
                ids = [tok.cls_token_id, *q_ids, tok.sep_token_id, *w, tok.sep_token_id]
                types = [0] * (len(q_ids) + 2) + [1] * (len(w) + 1)
                feats.append({"input_ids": ids, "token_type_ids": types, "attention_mask": [1] * len(ids)})
                owner.append(i)
        logits = np.array([float(r["logits"].reshape(-1)[0]) for r in self._run(feats)], dtype=np.float32)
        if len(feats) == len(pairs):
            return logits
        from .long_text import WindowPlan

        plan = WindowPlan(owner=owner, weight=[1] * len(owner))
        return pool_windows(logits[:, None], plan, len(pairs), how="max")[:, 0]

    def __call__(
        self,
        query: str,
        passages: Sequence[str],
        top_k: int | None = None,
        sigmoid: bool = False,
        return_text: bool = True,
        max_length: int | None = None,
        truncation: str | None = None,
    ) -> list[dict[str, Any]]:
        A.positive_int.check("top_k", top_k, allow_none=True)
        _check_texts([query], "query")
        passages = list(passages)
        _check_texts(passages, "passages")
        mode = truncation or self.kwargs.get("truncation", "error")
        scores = self.score_pairs([(query, p) for p in passages], max_length, mode)
        if sigmoid:
            scores = 1.0 / (1.0 + np.exp(-scores))
        order = np.argsort(-scores, kind="stable")[: top_k or len(passages)]
        return [
            {"index": int(i), "score": float(scores[i]), **({"text": passages[i]} if return_text else {})}
            for i in order
        ]
