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


def check_cross_encoder(model: Any, where: str = "the model", num_labels: int | None = 1) -> None:
    """A reranker scores a pair with one logit; anything else cannot rank. ``num_labels=None`` accepts a
    head of any width (sentence-transformers' ``CrossEncoder`` also scores 3-way NLI heads)."""
    n = int(getattr(model.config, "num_labels", 0) or 0)
    if not hasattr(model, "classifier") or n < 1 or (num_labels is not None and n != num_labels):
        raise ValueError(
            f"{where} is not a cross-encoder: it has {n} output label(s), a reranker has 1 "
            "(train one with `bertkit train-reranker`)"
        )


class TextRankingPipeline(Pipeline):
    """``rank(query, passages, top_k=None, sigmoid=False)`` -> ``[{'index', 'score', 'text'}]`` best first."""

    model_task = "sequence-classification"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        device: str | None = None,
        max_length: int = 512,
        num_labels: int | None = 1,
        **kwargs: Any,
    ) -> None:
        # the head width this pipeline accepts (None: any), set before the folder loads: its check reads it
        self._head_labels = num_labels
        super().__init__(model, tokenizer, device, **kwargs)
        check_cross_encoder(self.model, str(self.folder or "the model"), num_labels)
        self.max_length = int(max_length)

    def _check_loaded(self, model: Any, missing: list[str], path: Any) -> None:
        archs = [str(a) for a in getattr(model.config, "architectures", None) or []]
        if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
            # a bi-encoder or a pretrained encoder: its head here is new and random, whatever its label count
            raise ValueError(
                f"{path} is not a cross-encoder: it has no scoring head (its config.json names {archs[0]}), so it "
                "embeds texts but cannot score a pair; give a reranker (train one with `bertkit train-reranker`)"
            )
        check_cross_encoder(model, str(path), self._head_labels)  # the reranker's own words first
        try:
            super()._check_loaded(model, missing, path)
        except ValueError as e:  # a bare encoder's folder: its head would score from random weights
            raise ValueError(f"{path} is not a cross-encoder: {e}") from None

    def score_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        max_length: int | None = None,
        truncation: str = "cut",
        keep_query: bool = False,
        truncation_side: str = "right",
        batch_size: int | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        """The logit of every (query, passage) pair, in input order: shape (pairs,) for a one-label head,
        (pairs, labels) for a wider one. A pair over ``max_length`` tokens is an error, cut (``"cut"``:
        from the longer text first, as sentence-transformers does, or from the passage only with
        ``keep_query``; ``truncation_side="left"`` drops a text's first tokens rather than its last), or
        scored by its passage's best overlapping window (``"chunk"``). ``batch_size`` overrides the
        pipeline's for this call; ``progress`` shows a bar over the batches."""
        import copy

        from bertkit.inference import run_batched

        from .long_text import check_truncation, pool_windows

        check_truncation(truncation)
        if truncation_side not in ("right", "left"):
            raise ValueError(f"truncation_side must be 'right' or 'left', got {truncation_side!r}")
        batch_size = A.positive_int.check("batch_size", batch_size, allow_none=True) or self.batch_size
        limit = max_length or self.max_length
        pairs = list(pairs)
        width = int(self.model.config.num_labels)
        if not pairs:
            return np.zeros((0,) if width == 1 else (0, width), np.float32)
        tok = self.tokenizer
        if truncation_side != getattr(tok, "truncation_side", "right"):
            tok = copy.copy(tok)  # a shallow copy cuts the other way; the shared tokenizer is left alone
            tok.truncation_side = truncation_side
        queries, passages = [q for q, _ in pairs], [p for _, p in pairs]
        if truncation == "cut":  # nothing to measure first: one tokenizer call cuts every pair
            cut = "only_second" if keep_query else True
            feats = self._features(tok(queries, passages, truncation=cut, max_length=limit), len(pairs))
            owner = list(range(len(pairs)))
        else:
            whole = self._features(tok(queries, passages, verbose=False), len(pairs))
            feats, owner = [], []
            for i, (q, p) in enumerate(pairs):
                n = len(whole[i]["input_ids"])
                if n <= limit:
                    feats.append(whole[i])
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
        rows = run_batched(
            self.model,
            feats,
            batch_size,
            max_batch_tokens=self.max_batch_tokens,
            progress=progress,
            desc="Batches",
        )
        logits = np.stack([r["logits"] for r in rows]).astype(np.float32)
        if len(feats) > len(pairs):
            from .long_text import WindowPlan

            logits = pool_windows(logits, WindowPlan(owner=owner, weight=[1] * len(owner)), len(pairs), how="max")
        return logits[:, 0] if width == 1 else logits

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
